"""The stage runner: the flow that agents run, one DVC stage of one study per flow run.

Deployed once per work pool (prefect.yaml: ``stage/cpu``, ``stage/gpu``); the
study flow submits each stage to the pool it needs. The worker's checkout is the
working directory (the deployment's ``set_working_directory`` pull step): its
DVC cache is shared by the stages this agent runs, and checkpoints stay there
(or under ``ALIGNTRAIN_CHECKPOINT_ROOT``, storage shared between agents) so a
retried stage resumes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Prefect loads this file by path; the Prefect layer's own modules live beside it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prefect import flow  # noqa: E402

from aligntrain.paths import CHECKPOINT_ROOT_ENV  # noqa: E402
from tasks.dvc import run_stage_in_clone  # noqa: E402
from tasks.workspace import WORKSPACES_ENV  # noqa: E402


@flow(name="stage", log_prints=True)
def stage_flow(
    stage: str, repo_url: str, commit: str, study_id: str, remote_url: str, env: dict[str, str] | None = None
) -> str:
    """Run ``stage`` of the study at ``commit``: inputs from and outputs to the DVC remote ``remote_url``.

    ``env`` carries the study's MLflow settings (``MLFLOW_TRACKING_URI``,
    ``ALIGNTRAIN_PARENT_RUN_ID``) to the stage command.
    """
    checkout = Path.cwd()
    workspaces = os.environ.get(WORKSPACES_ENV, str(checkout / "build" / "workspaces"))
    stage_env = dict(env or {})
    # Checkpoints outlive the workspace: a retry of this stage here resumes from them.
    stage_env.setdefault(CHECKPOINT_ROOT_ENV, os.environ.get(CHECKPOINT_ROOT_ENV, str(checkout / "checkpoints")))
    return run_stage_in_clone(
        stage, repo_url, commit, study_id, remote_url, stage_env, workspaces, str(checkout / ".dvc" / "cache")
    )
