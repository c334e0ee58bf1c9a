from prefect import task

from aligntrain.stages import evaluation
from tasks import TASK_OPTIONS

generate_pool = task(evaluation.generate_pool, name="generate-pool", **TASK_OPTIONS)
evaluate_pool = task(evaluation.evaluate_pool, name="evaluate-pool", **TASK_OPTIONS)
compare_variants = task(evaluation.compare_variants, name="compare-variants", **TASK_OPTIONS)
