"""MLflow tracking: the one module of aligntrain that imports mlflow.

Layout in the MLflow UI: experiment ``study.experiment``; one *parent* run per
study (tag ``aligntrain.role=study``) and one *child* run per stage and variant
(``train@pass_at_n``), tagged with the git commit, stage, variant and study, so
the compare view lines variants up.

The parent run is, in order: the run named by ``ALIGNTRAIN_PARENT_RUN_ID``
(set by the study flow, flows/study.py, and by scripts/plain_repro.sh, for one
fresh parent per reproduction, closed with the study's status), else the newest
parent of this study, else a new one.
The store is ``MLFLOW_TRACKING_URI`` or ``sqlite:///mlflow.db`` in the study
directory; the artifacts of a local SQLite store's experiment stay in that store's
folder (its ``mlruns/``) after the folder is copied (:func:`_study_experiment`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import subprocess
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from aligntrain.errors import StageError

logger = logging.getLogger(__name__)

PARENT_ENV = "ALIGNTRAIN_PARENT_RUN_ID"
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING_KIND = "custom_model_development"


def tracking_uri(root: Path = Path(".")) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(root / 'mlflow.db').resolve()}"


def _mlflow(experiment: str, root: Path):
    import logging

    import mlflow

    # Alembic's migration chatter on a fresh store is noise in stage logs.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    mlflow.set_tracking_uri(tracking_uri(root))
    exp = _study_experiment(mlflow, experiment, tracking_uri(root))
    if exp.tags.get(EXPERIMENT_KIND_TAG) != MODEL_TRAINING_KIND:
        # MLflow 3 opens an untagged experiment in its GenAI view; runs are compared in the training view.
        mlflow.MlflowClient().set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND)
    return mlflow


def runs_urls(experiment: str, variants: list[str], base_url: str, root: Path = Path(".")) -> dict[str, str]:
    """The MLflow UI's links to a study's runs: ``"runs"``, the experiment's runs table (MLflow 3 opens an
    experiment on its overview otherwise), and one per variant, that table filtered to the variant's stages.

    Reads the store of :func:`tracking_uri`; a study that has logged nothing yet is a ValueError naming it."""
    import mlflow

    logging.getLogger("alembic").setLevel(logging.WARNING)
    client = mlflow.MlflowClient(tracking_uri(root))
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise ValueError(
            f"the store {tracking_uri(root)} has no experiment {experiment!r} (study.experiment): run the study first"
        )
    table = f"{base_url.rstrip('/')}/#/experiments/{exp.experiment_id}/runs"
    urls = {"runs": table}
    for variant in variants:
        query = urllib.parse.quote(f"tags.`aligntrain.variant` = '{variant}'")
        urls[variant] = f"{table}?searchFilter={query}"
    return urls


def _sqlite_folder(uri: str) -> Path | None:
    """The folder of a local SQLite store (``sqlite:///path/mlflow.db``, ``sqlite:///file:path?mode=ro&uri=true``),
    else None (a server, in memory)."""
    path = uri.removeprefix("sqlite:///").split("?")[0].removeprefix("file:") if uri.startswith("sqlite:///") else ""
    return Path(path).resolve().parent if path and path != ":memory:" else None


def _local_path(location: str) -> Path | None:
    """The path of an artifact location on this machine (a plain path or ``file:``), else None (s3:, ...)."""
    parsed = urllib.parse.urlparse(location)
    if parsed.scheme == "file":
        return Path(urllib.parse.unquote(parsed.path)).resolve()
    return Path(location).resolve() if not parsed.scheme else None


def _study_experiment(mlflow, name: str, uri: str):
    """Set the experiment ``name``; with a local SQLite store, one whose artifacts lie in the store's folder.

    MLflow records an experiment's artifact location as an absolute path (it resolves
    relative ones, and ``mlflow-artifacts:`` needs a server), so the mlflow.db of a
    copied study folder still names the original's ``mlruns/``, and every new run of the
    copy would write its artifacts there. When the location lies outside the store's
    folder, that experiment is renamed aside (its runs and their artifacts stay as they
    are) and a new one of the same name gets the same layout in this folder's ``mlruns/``.
    A tracking server (http) owns its artifact locations: left as they are. (MLflow 3
    refuses file stores unless told otherwise; they are left as they are too.)
    """
    home = _sqlite_folder(uri)
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name(name)
    old = None if home is None or exp is None else _local_path(exp.artifact_location)
    if old is not None and exp.lifecycle_stage == "active" and not old.is_relative_to(home):
        from mlflow.exceptions import MlflowException

        aside = f"{name} (artifacts in {old})"
        logger.warning(
            "MLflow experiment %r of %s keeps its artifacts in %s, outside %s (a copied study "
            "folder?): renamed to %r; new runs log into %s",
            name,
            uri,
            old,
            home,
            aside,
            home,
        )
        # Stages started together in the copy race for this: the first one's rename and experiment stand.
        with contextlib.suppress(MlflowException):
            client.rename_experiment(exp.experiment_id, aside)
        with contextlib.suppress(MlflowException):  # named: MLflow's default is ./mlruns of the working directory
            client.create_experiment(name, artifact_location=str(home / "mlruns" / old.name))
    return mlflow.set_experiment(name)


def check_tracking_server(root: Path = Path("."), timeout_s: float = 5.0) -> None:
    """Fail fast, naming the URI, when an HTTP tracking server does not answer (before any work).

    MLflow's own client retries an unreachable server for minutes; a stage should not
    train for an hour and then lose its metrics, nor wait five minutes to say so.
    """
    check_tracking_server_uri(tracking_uri(root), timeout_s)


def check_tracking_server_uri(uri: str, timeout_s: float = 5.0) -> None:
    """:func:`check_tracking_server` for a given URI: ConnectionError when an HTTP server does not answer."""
    import urllib.error
    import urllib.request

    if not uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout_s) as reply:
            if reply.status == 200:
                return
            problem = f"HTTP {reply.status}"
    except (OSError, urllib.error.URLError) as err:
        problem = str(getattr(err, "reason", err))
    raise ConnectionError(f"MLflow tracking server {uri} (MLFLOW_TRACKING_URI) is not reachable: {problem}")


def end_study_run(run_id: str, status: str = "FINISHED", root: Path = Path(".")) -> None:
    """Close a study's parent run with the study's status (FINISHED, FAILED or KILLED)."""
    import mlflow

    if status not in ("FINISHED", "FAILED", "KILLED"):
        raise ValueError(f"status must be FINISHED, FAILED or KILLED, got {status!r}")
    mlflow.set_tracking_uri(tracking_uri(root))
    client = mlflow.MlflowClient()
    parent = client.get_run(run_id)
    _close_study(client, parent.info.experiment_id, run_id, status)


def git_commit(root: Path = Path(".")) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def checkout_of(root: Path) -> str:
    """``host:/path`` of a study folder: which parent runs a new reproduction of it supersedes."""
    import socket

    return f"{socket.gethostname()}:{root.resolve()}"


def start_study_run(study: str, experiment: str, root: Path = Path(".")) -> str:
    """Create a fresh parent run for a study and return its id.

    A parent of the same study and folder still RUNNING belongs to a reproduction that was
    killed (kill -9, a lost machine) before it could close its runs: it and its RUNNING stage
    runs are closed as KILLED first, so no run stays RUNNING forever. (One reproduction of a
    folder at a time: the study flow holds its lock.)
    """
    mlflow = _mlflow(experiment, root)
    client = mlflow.MlflowClient()
    exp = mlflow.get_experiment_by_name(experiment)
    checkout = checkout_of(root)
    stale = client.search_runs(
        [exp.experiment_id],
        filter_string=f"tags.`aligntrain.role` = 'study' and tags.`aligntrain.study` = '{study}' "
        f"and tags.`aligntrain.checkout` = '{checkout}' and attributes.status = 'RUNNING'",
    )
    for parent in stale:
        _close_study(client, exp.experiment_id, parent.info.run_id, "KILLED")
    run = client.create_run(
        exp.experiment_id,
        run_name=f"study:{study}",
        tags={
            "aligntrain.role": "study",
            "aligntrain.study": study,
            "aligntrain.checkout": checkout,
            "aligntrain.git_commit": git_commit(root),
        },
    )
    return run.info.run_id


def _close_study(client, experiment_id: str, run_id: str, status: str) -> None:
    """Close a study's parent run with ``status``; a stage run it left RUNNING (its machine lost,
    the study killed) is closed as KILLED first."""
    _close_killed(client, experiment_id, f"tags.`mlflow.parentRunId` = '{run_id}'")
    client.set_terminated(run_id, status=status)


def _close_killed(client, experiment_id: str, selection: str) -> None:
    """Close the RUNNING runs that ``selection`` (an MLflow filter) picks as KILLED."""
    for run in client.search_runs([experiment_id], filter_string=f"{selection} and attributes.status = 'RUNNING'"):
        client.set_terminated(run.info.run_id, status="KILLED")


def _parent_run_id(mlflow, study: str, experiment: str, root: Path) -> str:
    if os.environ.get(PARENT_ENV):
        return os.environ[PARENT_ENV]
    found = mlflow.search_runs(
        experiment_names=[experiment],
        filter_string=f"tags.`aligntrain.role` = 'study' and tags.`aligntrain.study` = '{study}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
        output_format="list",
    )
    return found[0].info.run_id if found else start_study_run(study, experiment, root)


def flatten(payload: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in payload.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def metric_key(key: str) -> str:
    """``key`` as MLflow accepts it: alphanumerics, ``_ - . : /`` and space; ``@`` reads ``_at_``, others ``_``.

    Keys come from libraries too (TRL names a reward metric after its function: a
    lambda gives ``rewards/<lambda>/mean``); one refused key would fail the whole batch.
    """
    return re.sub(r"[^\w\-.:/ ]", "_", key.replace("@", "_at_"), flags=re.ASCII)


def _numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in flatten(metrics).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        out[metric_key(key)] = float(value)
    return out


class StageRun:
    """Handle of an active child run: what stages log through.

    Logging never costs the stage its work. A failed call is followed by a look at the
    server (``/health``, 5 s): when it still answers, the failure was transient (a
    request timed out on a loaded server) and logging goes on; when it does not (the
    tracking server went away mid-training), one warning says so and from then on the
    run's metrics and artifacts are dropped while the stage goes on to save its
    outputs. ``end`` is tried whenever the server answers, so a stage that finished is
    never left RUNNING (the study's end would close it as KILLED). The run is driven
    through ``MlflowClient`` by id (no fluent "active run"), so nothing waits on a dead
    server at exit either.
    """

    def __init__(self, client, run_id: str):
        self._client = client
        self.run_id = run_id
        self.failed = False
        self.transient_failures = 0

    def _server_answers(self) -> bool:
        """Whether the tracking server answers its health check (a local store always does)."""
        try:
            check_tracking_server_uri(self._client.tracking_uri, timeout_s=5.0)
        except ConnectionError:
            return False
        return True

    def _safely(self, what: str, call, *args, **kwargs) -> None:
        if self.failed:
            return
        try:
            call(*args, **kwargs)
        except Exception as err:  # noqa: BLE001  (any client or server error: the stage goes on)
            if self._server_answers():
                self.transient_failures += 1
                if self.transient_failures > 3:  # counted, no longer reported one by one
                    return
                logger.warning(
                    "MLflow %s failed on %s (%s); the server answers: logging goes on",
                    what,
                    self._client.tracking_uri,
                    err,
                )
                return
            self.failed = True
            logger.warning(
                "MLflow %s failed on %s (%s); the stage goes on without logging to it",
                what,
                self._client.tracking_uri,
                err,
            )

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        flat = [Param(k, str(v)[:500]) for k, v in flatten(params).items()]
        if flat:
            self._safely("log_params", self._client.log_batch, self.run_id, params=flat)

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        numeric = [Metric(k, v, now, step or 0) for k, v in _numeric(metrics).items()]
        if numeric:
            self._safely("log_metrics", self._client.log_batch, self.run_id, metrics=numeric)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        """A file, or a directory's files (under ``artifact_path``/its name); nothing when it does not exist."""
        path = Path(path)
        if path.is_dir():
            inside = f"{artifact_path}/{path.name}" if artifact_path else path.name
            self._safely("log_artifacts", self._client.log_artifacts, self.run_id, str(path), inside)
        elif path.exists():
            self._safely("log_artifact", self._client.log_artifact, self.run_id, str(path), artifact_path)

    def end(self, status: str) -> None:
        if self.failed and not self._server_answers():
            return  # the server is gone: the study's end closes the run
        self.failed = False  # one more try: a run left RUNNING would be closed as KILLED
        self._safely("end_run", self._client.set_terminated, self.run_id, status)

    def trainer_callback(self):
        """A transformers ``TrainerCallback``: per-step training metrics (loss, lr, strategy weight) into this run."""
        from transformers import TrainerCallback  # imported here: stages that do not train skip transformers

        run = self

        class MlflowStepCallback(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs and state.is_world_process_zero:
                    run.log_metrics(logs, step=state.global_step)

        return MlflowStepCallback()


@contextlib.contextmanager
def stage_run(
    *,
    study: str,
    experiment: str,
    stage: str,
    variant: str | None,
    params: Mapping[str, Any],
    root: Path = Path("."),
) -> Iterator[StageRun]:
    """A child run of the study's parent run for one stage (and variant).

    A store that cannot be opened or written (a read-only ``mlflow.db``, a full disk) stops the
    stage before any work with :class:`TrackingStoreError`, one line naming the store.
    """
    # MLflow logs a store's SQL error with its whole traceback before raising it: the one line below says it.
    store_log = logging.getLogger("mlflow.store.db.utils")
    level = store_log.level
    store_log.setLevel(logging.CRITICAL)
    try:
        client, run = _open_stage_run(study, experiment, stage, variant, root)
    except Exception as err:  # noqa: BLE001 - whatever the store raised (SQLAlchemy, MLflow, OS): before any work
        raise TrackingStoreError(f"MLflow store {tracking_uri(root)} cannot be used: {_first_line(err)}") from err
    finally:
        store_log.setLevel(level)
    handle = StageRun(client, run.info.run_id)
    status = "FAILED"
    try:
        handle.log_params(params)
        yield handle
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        handle.end(status)


class _Untracked:
    """What a stage logs through on a launch's processes other than 0: nothing (process 0 logs the run)."""

    run_id = None

    def log_params(self, params: Mapping[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        pass

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        pass

    def trainer_callback(self):
        from transformers import TrainerCallback

        return TrainerCallback()


UNTRACKED = _Untracked()


class TrackingStoreError(StageError):
    """The tracking store cannot be opened or written; nothing of the stage ran."""


def _first_line(err: BaseException) -> str:
    """The first line of an error's message (SQLAlchemy appends the SQL and a link), at most 300 characters."""
    text = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return text if len(text) <= 300 else text[:297] + "..."


def _open_stage_run(study: str, experiment: str, stage: str, variant: str | None, root: Path):
    mlflow = _mlflow(experiment, root)
    parent = _parent_run_id(mlflow, study, experiment, root)
    name = f"{stage}@{variant}" if variant else stage
    tags = {
        "aligntrain.role": "stage",
        "aligntrain.stage": stage,
        "aligntrain.variant": variant or "",
        "aligntrain.study": study,
        "aligntrain.git_commit": git_commit(root),
    }
    client = mlflow.MlflowClient()
    experiment_id = mlflow.get_experiment_by_name(experiment).experiment_id
    # An earlier attempt of this stage under the same parent that is still RUNNING was killed
    # (kill -9, a lost worker): one attempt of a stage runs at a time, so it is closed now.
    _close_killed(client, experiment_id, f"tags.`mlflow.parentRunId` = '{parent}' and attributes.run_name = '{name}'")
    run = client.create_run(experiment_id, run_name=name, tags={**tags, "mlflow.parentRunId": parent})
    return client, run
