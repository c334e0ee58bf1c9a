from prefect import task

from aligntrain.stages import diagnostics, report
from tasks import TASK_OPTIONS

diagnose_variant = task(diagnostics.diagnose_variant, name="diagnose-variant", **TASK_OPTIONS)
oracle_gradient = task(diagnostics.oracle_gradient, name="oracle-gradient", **TASK_OPTIONS)
synthetic_checks = task(diagnostics.synthetic_checks, name="synthetic-checks", **TASK_OPTIONS)
build_report = task(report.build_report, name="build-report", **TASK_OPTIONS)
