"""Prefect task that runs one stage on an agent: a run of the ``stage`` deployment of the stage's work pool.

The study flow waits on each run. A stage whose pool has no online worker is
never left waiting silently: the task logs that no worker is online, and fails
the stage when no worker of its pool has been online for ``start_deadline_s``
while it waited. A stage queued behind busy workers waits its turn and says so.
When the study is stopped (Ctrl-C, SIGTERM), :func:`cancel_submitted` cancels the stage runs it
submitted that have not ended: their workers stop them.
"""

from __future__ import annotations

import threading
import time

from prefect import get_client, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.deployments import run_deployment

from tasks.dvc import stopping

STAGE_FLOW = "stage"
"""Flow name of flows/stage.py; its deployments are named after their work pool (``stage/gpu``)."""


class NoWorker(RuntimeError):
    """No worker of the stage's pool picked it up before the deadline."""


def _online_workers(pool: str) -> int:
    with get_client(sync_client=True) as client:
        workers = client.read_workers_for_work_pool(work_pool_name=pool)
    return sum(1 for w in workers if str(getattr(w, "status", "")).upper().endswith("ONLINE"))


def _state(flow_run_id) -> tuple[str, str]:
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(flow_run_id)
    return run.state.type.value if run.state else "PENDING", (run.state.message or "") if run.state else ""


def _cancel(flow_run_id) -> None:
    from prefect.states import Cancelled

    with get_client(sync_client=True) as client:
        client.set_flow_run_state(flow_run_id, Cancelled(message="no worker started the stage in time"), force=True)


# The stage runs this study submitted and has not yet seen end: {flow run id: stage}.
_submitted: dict = {}
_submitted_lock = threading.Lock()


def cancel_submitted(reason: str = "the study was stopped") -> list[str]:
    """Cancel every stage run this study submitted that has not ended; return their stages.

    Each run goes to Cancelling; its worker then stops the run's process (SIGTERM, which stops
    its DVC process: tasks/dvc.py) and marks it Cancelled. A run no worker has started yet is
    never started."""
    from prefect.states import Cancelling

    with _submitted_lock:
        runs = dict(_submitted)
    if not runs:
        return []
    with get_client(sync_client=True) as client:
        for run_id in runs:
            try:
                client.set_flow_run_state(run_id, Cancelling(message=reason), force=True)
            except Exception:  # noqa: BLE001 - one unreachable run must not keep the others running
                pass
    return sorted(runs.values())


@task(name="agent-stage", cache_policy=NO_CACHE)
def run_stage_on_agent(stage: str, pool: str, parameters: dict, start_deadline_s: float, poll_s: float = 2.0) -> str:
    """Submit the stage to ``stage/<pool>`` and wait for it; raise when it fails or never starts."""
    log = get_run_logger()
    if stopping():  # a retry after Ctrl-C: nothing new goes to the workers
        raise RuntimeError("the study is stopping: no new stage starts")
    online = _online_workers(pool)
    if not online:
        log.warning(
            "stage %s needs work pool %r, which has no online worker; waiting up to %.0f s for one",
            stage,
            pool,
            start_deadline_s,
        )
    run = run_deployment(
        f"{STAGE_FLOW}/{pool}", parameters=parameters, timeout=0, as_subflow=False, flow_run_name=f"{stage}"
    )
    log.info("stage %s submitted to pool %r as flow run %s", stage, pool, run.id)
    with _submitted_lock:
        _submitted[run.id] = stage
    if stopping():  # the study was stopped while this run was being created: cancel_submitted missed it
        cancel_submitted()
    try:
        return _wait_for(run.id, stage, pool, start_deadline_s, poll_s, log)
    finally:
        with _submitted_lock:
            _submitted.pop(run.id, None)


def _wait_for(run_id, stage: str, pool: str, start_deadline_s: float, poll_s: float, log) -> str:
    # The deadline counts only time with no worker of the pool online: a stage queued behind a
    # busy worker waits its turn, however long, and says so once.
    alone_since: float | None = None
    said_queued = False
    while True:
        state, message = _state(run_id)
        if state == "COMPLETED":
            return stage
        if state in ("FAILED", "CRASHED", "CANCELLED", "CANCELLING"):
            raise RuntimeError(f"stage {stage} ended {state} on pool {pool!r}: {message}")
        if state in ("SCHEDULED", "PENDING"):
            online = _online_workers(pool)
            if online:
                alone_since = None
                if not said_queued:
                    log.info("stage %s is queued in pool %r behind busy workers (%d online)", stage, pool, online)
                    said_queued = True
            else:
                alone_since = alone_since if alone_since is not None else time.monotonic()
                if time.monotonic() - alone_since > start_deadline_s:
                    _cancel(run_id)
                    raise NoWorker(
                        f"stage {stage}: no worker of work pool {pool!r} was online for {start_deadline_s:.0f} s "
                        f"while it waited; start one with `make worker POOL={pool}`"
                    )
        time.sleep(poll_s)
