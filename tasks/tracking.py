"""Prefect tasks around the study's MLflow parent run: opened before the first stage, closed with the study's status.

Every stage, on any machine, logs a child run under this parent
(``ALIGNTRAIN_PARENT_RUN_ID``), so one study is one row to expand in the MLflow UI.
"""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from aligntrain import tracking
from aligntrain.config import load_params


@task(name="open-study-run", cache_policy=NO_CACHE)
def open_study_run(checkout: str, study: str = ".") -> str:
    """Check the tracking server answers, then create the parent run of the study in folder ``study``
    (in that folder's store, unless ``MLFLOW_TRACKING_URI`` names a server)."""
    folder = Path(checkout) / study
    tracking.check_tracking_server(folder)
    params = load_params(folder / "params.yaml")
    return tracking.start_study_run(params.study.name, params.study.experiment, folder)


@task(name="close-study-run", cache_policy=NO_CACHE)
def close_study_run(folder: str, run_id: str, status: str) -> None:
    """End the study's parent run in the store of the study in ``folder``."""
    tracking.end_study_run(run_id, status, Path(folder))
