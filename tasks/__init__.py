"""Prefect tasks of the study flow: run one DVC stage (tasks.dvc), on an agent (tasks.agents),
in a workspace of its own (tasks.workspace); open and close the study's MLflow parent run
(tasks.tracking). A folder of the repository, loaded by the flows from its path; not installed."""
