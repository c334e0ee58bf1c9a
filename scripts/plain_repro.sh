#!/usr/bin/env bash
# `dvc repro` alone (no Prefect), under a fresh MLflow parent run that ends with the study's status.
set -uo pipefail
run_id=$(aligntrain new-study-run) || exit $?
ALIGNTRAIN_PARENT_RUN_ID=$run_id dvc repro "$@"
rc=$?
if [ $rc -eq 0 ]; then status=FINISHED; elif [ $rc -ge 128 ]; then status=KILLED; else status=FAILED; fi
aligntrain end-study-run "$run_id" --status $status
exit $rc
