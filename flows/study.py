"""The study flow: DVC's stage graph, scheduled by Prefect, locally or on agents.

    python flows/study.py                       # local, 2 stages at a time (`make study`)
    python flows/study.py --concurrency 1       # one stage at a time
    python flows/study.py --agents --gpu-pool gpu   # on workers of the cpu/gpu pools (`make submit`)

DVC holds the DAG, the parameters and the caching; this flow only decides where
and when each stage runs. It reads the graph through DVC's Python API, runs
every stage that DVC reports changed (and everything downstream of it) as a
Prefect task, at most ``concurrency`` at a time, each started once all of its
upstream stages are done, each retried ``retries`` times. Each stage runs
``dvc repro <stage>`` in a workspace of its own (tasks/dvc.py); at the end the
checkout reproduces the whole pipeline from the run-cache, so it ends with the
``dvc.lock`` and files a plain ``dvc repro`` gives, and a second run does nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import uuid
from pathlib import Path

# Prefect loads this file by path; the Prefect layer's own modules live beside it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# A heartbeat every 30 s (Prefect's default is 180 s), as `make worker` sets for stage runs: the
# automation of `make pools` marks a flow run Crashed after 90 s without one, and the study flow
# of `make submit` must never look lost while it waits for its stages.
os.environ.setdefault("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "30")

from prefect import flow, get_run_logger  # noqa: E402
from prefect.events.worker import EventsWorker  # noqa: E402
from prefect.exceptions import TerminationSignal  # noqa: E402
from prefect.futures import as_completed  # noqa: E402
from prefect.logging.handlers import APILogWorker  # noqa: E402
from prefect.settings import PREFECT_API_URL, temporary_settings  # noqa: E402
from prefect.task_runners import ThreadPoolTaskRunner  # noqa: E402

from aligntrain import tracking  # noqa: E402
from aligntrain.paths import CHECKPOINT_ROOT_ENV  # noqa: E402
from aligntrain.pipeline import get_stage  # noqa: E402
from tasks.agents import cancel_submitted, run_stage_on_agent  # noqa: E402
from tasks.dvc import (  # noqa: E402
    check_remote,
    reproduce_from_run_cache,
    run_stage_in_workspace,
    share_checkout_config,
    stage_address,
    stop_all_stages,
    stopping,
    study_of,
)
from tasks.lock import StudyRunning, hold_study_lock  # noqa: E402
from tasks.server import local_prefect_server  # noqa: E402
from tasks.tracking import close_study_run, open_study_run  # noqa: E402
from tasks.workspace import git  # noqa: E402


def _restorable(stage) -> bool:
    """Whether DVC keeps a run-cache entry for the stage.

    DVC skips it for stages with an uncached output other than a metric or a plot
    (compare's and report's Markdown, kept in git): those cannot travel through the
    run-cache, so they run in the checkout's final ``dvc repro`` instead.
    """
    return all(out.use_cache or out.is_metric or out.is_plot for out in stage.outs)


def stage_graph(checkout: Path, study: str = ".") -> tuple[list[str], dict[str, set[str]], set[str], set[str]]:
    """(stages of the study in topological order, upstream stages of each, stages DVC reports changed,
    stages that cannot be restored from the run-cache), all as addresses (:func:`stage_address`).

    ``study`` is a DVC project of its own (the root, or a pipelines/<study>/ subrepo), so its index
    holds its dvc.yaml alone; the filter keeps a study folder that is not one (yet) to its own stages.
    """
    import networkx as nx
    from dvc.repo import Repo

    dvcfile = (checkout / study / "dvc.yaml").resolve()
    if not dvcfile.is_file():
        raise FileNotFoundError(f"{dvcfile}: no such pipeline (run `aligntrain pipeline --root {study}`)")
    with Repo(str(checkout / study)) as repo:
        full = repo.index.graph  # edges: stage -> a stage it depends on
        graph = full.subgraph([s for s in full.nodes if Path(s.dvcfile.path).resolve() == dvcfile])
        address = {s: stage_address(study, s.name) for s in graph.nodes}
        order = [address[s] for s in reversed(list(nx.topological_sort(graph)))]
        upstream = {address[s]: {address[d] for d in graph.successors(s)} for s in graph.nodes}
        unrestorable = {address[s] for s in graph.nodes if not _restorable(s)}
        # status() keys are addresses relative to the working directory (`dvc.yaml:train@ce` elsewhere).
        changed = {stage_address(study, study_of(key)[1]) for key in repo.status(targets=[str(dvcfile)])}
    return order, upstream, changed, unrestorable


def downstream_closure(order: list[str], upstream: dict[str, set[str]], seeds: set[str]) -> list[str]:
    """``seeds`` and every stage downstream of one, in topological order."""
    selected: set[str] = set()
    for name in order:  # topological: upstream stages are decided first
        if name in seeds or upstream[name] & selected:
            selected.add(name)
    return [name for name in order if name in selected]


def stage_name(address: str) -> str:
    """``train@ce`` or ``pipelines/hydro/dvc.yaml:train@ce`` -> ``train`` (the entry of the table of stages)."""
    return study_of(address)[1].split("@", 1)[0]


def _dvc_remote_url(checkout: Path) -> str | None:
    from dvc.repo import Repo

    with Repo(str(checkout)) as repo:
        name = repo.config["core"].get("remote")
        return repo.config["remote"][name]["url"] if name else None


@flow(name="study", log_prints=True)
def study_flow(
    root: str = ".",
    study: str = ".",
    concurrency: int = 2,
    agents: bool = False,
    cpu_pool: str = "cpu",
    gpu_pool: str | None = None,
    retries: int = 1,
    start_deadline_s: float = 600.0,
    repo_url: str | None = None,
) -> dict:
    """Run the study in ``root``. Returns the stages run and where.

    Parameters
    ----------
    root: the submitting checkout (its working tree locally; its HEAD commit on agents).
    study: the study's folder in the checkout: ``.`` (the default study) or ``pipelines/<study>``.
    concurrency: stages running at the same time (on agents: in each work pool).
    agents: run each stage on a worker of a work pool instead of in this process.
    cpu_pool / gpu_pool: work pools of the agents; stages that train or sample go to ``gpu_pool``
        when it is set (the study runs on CUDA), everything else to ``cpu_pool``.
    retries: times a failed stage is tried again (a killed training stage resumes from its checkpoint).
    start_deadline_s: agents only; a stage not started by a worker within this time fails.
    repo_url: agents only; the git URL they clone (default: the checkout's ``origin``).
    """
    log = get_run_logger()
    checkout = Path(root).resolve()
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    share_checkout_config(checkout, study)  # a pipelines/<study>/ is a DVC project on the checkout's cache
    order, upstream, changed, unrestorable = stage_graph(checkout, study)
    # DVC's status does not look ahead: everything downstream of a changed stage runs too.
    todo = downstream_closure(order, upstream, changed)
    in_checkout = set(downstream_closure(order, upstream, unrestorable))
    dispatched = [name for name in todo if name not in in_checkout]
    log.info(
        "%d of %d stages to run: %s; in the checkout at the end: %s",
        len(todo),
        len(order),
        ", ".join(dispatched) or "none",
        ", ".join(n for n in todo if n in in_checkout) or "none",
    )

    study_id = uuid.uuid4().hex[:12]
    store = checkout / study  # the study folder's MLflow store, as `dvc repro` of its stages uses
    env: dict[str, str] = {"MLFLOW_TRACKING_URI": tracking.tracking_uri(store)}
    if agents:
        commit, remote_url, repo_url = _agent_settings(checkout, repo_url)
    else:
        # Checkpoints in the checkout, not the workspace: a retried stage resumes.
        env[CHECKPOINT_ROOT_ENV] = os.environ.get(CHECKPOINT_ROOT_ENV, str(checkout / "checkpoints"))
    parent = os.environ.get(tracking.PARENT_ENV) or (open_study_run(str(checkout), study) if todo else None)
    if parent:
        env[tracking.PARENT_ENV] = parent

    status = "FAILED"
    try:

        def pool_of(address: str) -> str:
            return gpu_pool if gpu_pool and get_stage(stage_name(address)).accelerator else cpu_pool

        def submit(address: str):
            if not agents:
                task = run_stage_in_workspace.with_options(retries=retries, retry_delay_seconds=2)
                return task.submit(address, str(checkout), study_id, env)
            pool = pool_of(address)
            parameters = dict(
                stage=address, repo_url=repo_url, commit=commit, study_id=study_id, remote_url=remote_url, env=env
            )
            task = run_stage_on_agent.with_options(retries=retries, retry_delay_seconds=2)
            return task.submit(address, pool, parameters, start_deadline_s)

        failed = _schedule(dispatched, upstream, submit, concurrency, log, lane=pool_of if agents else lambda a: "")
        if failed:
            raise RuntimeError(f"stages failed: {', '.join(failed)}")
        reproduce_from_run_cache(str(checkout), pull=agents, env=env, computed_here=sorted(in_checkout), study=study)
        status = "FINISHED"
        shutil.rmtree(checkout / "build" / "workspaces" / study_id, ignore_errors=True)
    except (KeyboardInterrupt, TerminationSignal):
        # Ctrl-C, or SIGTERM (which Prefect's engine turns into TerminationSignal while the flow
        # runs): stop the stages (each in a session of its own), then close the parent run
        # directly rather than through a task, and leave no workspace behind.
        status = "KILLED"
        stop_all_stages()
        cancel_submitted()
        shutil.rmtree(checkout / "build" / "workspaces" / study_id, ignore_errors=True)
        raise
    finally:
        if stopping():  # Ctrl-C, even where the flow engine turned the interrupt into a failed task
            status = "KILLED"
        if parent and not os.environ.get(tracking.PARENT_ENV):
            if status == "KILLED":
                tracking.end_study_run(parent, status, store)
            else:
                close_study_run(str(store), parent, status)
    return {"stages": todo, "study_id": study_id, "agents": agents}


def _schedule(
    todo: list[str], upstream: dict[str, set[str]], submit, concurrency: int, log, lane=lambda address: ""
) -> list[str]:
    """Start each stage once its upstream stages are done, at most ``concurrency`` at a time in each lane.

    On agents a stage's lane is its work pool, so stages queued behind a busy gpu worker never hold
    the slots of cpu stages that a cpu worker could run now; locally there is one lane.
    After a failure nothing new starts; the stages already running finish. Returns the failed stages.
    """
    waiting = list(todo)  # topological order: earlier stages first among those ready
    running: dict = {}
    failed: list[str] = []
    while (waiting and not failed) or running:
        pending = set(waiting) | set(running.values())
        for address in list(waiting):
            if failed:
                break
            busy = sum(1 for other in running.values() if lane(other) == lane(address))
            if busy < concurrency and not upstream[address] & pending:
                running[submit(address)] = address
                waiting.remove(address)
                pending = set(waiting) | set(running.values())
        if not running:
            break
        future = next(as_completed(list(running)))
        address = running.pop(future)
        try:
            future.result()
            log.info("stage %s done (%d left)", address, len(waiting) + len(running))
        except Exception as err:  # noqa: BLE001  (the stage's own error, after its retries)
            failed.append(address)
            log.error("stage %s failed: %s", address, err)
    return failed


def _agent_settings(checkout: Path, repo_url: str | None) -> tuple[str, str, str]:
    """The commit agents run, the DVC remote they share and the git URL they clone."""
    dirty = git(["status", "--porcelain", "--untracked-files=no"], checkout).strip()
    if dirty:
        raise RuntimeError(f"agents run a commit: commit (and push) these changes first:\n{dirty}")
    if not tracking.tracking_uri(checkout).startswith(("http://", "https://")):
        raise RuntimeError(
            "agents log to one MLflow tracking server: set MLFLOW_TRACKING_URI to its URL "
            "(`make mlflow-server`), not a local store"
        )
    remote_url = _dvc_remote_url(checkout)
    if not remote_url:
        raise RuntimeError("agents exchange outputs through a DVC remote: set one (`dvc remote add -d study <url>`)")
    check_remote(remote_url)
    commit = git(["rev-parse", "HEAD"], checkout).strip()
    return commit, remote_url, repo_url or git(["remote", "get-url", "origin"], checkout).strip()


def _interrupt(signum, frame) -> None:
    """Ctrl-C or SIGTERM: stop every stage first, then interrupt the flow.

    The stages stop here, in the handler, because the KeyboardInterrupt that follows can land
    inside the flow engine's own code, which may record it as a failed task and go on (seen
    under load: the study then ran to its end). Once stopping, no new stage starts.
    """
    stop_all_stages()
    cancel_submitted()  # on agents: the stage runs on workers stop too
    _signals.append(signum)
    raise KeyboardInterrupt


_signals: list[int] = []  # the signals that stopped the study (SIGINT, SIGTERM)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=".")
    parser.add_argument("--study", default=".", help="the study's folder in the checkout (e.g. pipelines/hydro)")
    parser.add_argument("--concurrency", type=int, default=int(os.environ.get("ALIGNTRAIN_CONCURRENCY", 2)))
    parser.add_argument("--agents", action="store_true")
    parser.add_argument("--cpu-pool", default="cpu")
    parser.add_argument("--gpu-pool", default=None)
    parser.add_argument("--retries", type=int, default=1)
    parser.add_argument("--start-deadline-s", type=float, default=600.0)
    parser.add_argument("--repo-url", default=None)
    args = parser.parse_args(argv)
    try:
        hold_study_lock(Path(args.root).resolve())
    except StudyRunning as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    # On agents each work pool has `concurrency` slots (see _schedule); a thread only waits on its stage.
    runner = ThreadPoolTaskRunner(max_workers=max(args.concurrency, 1) * (2 if args.agents else 1))
    run = study_flow.with_options(task_runner=runner)
    kwargs = dict(
        root=args.root,
        study=args.study,
        concurrency=args.concurrency,
        agents=args.agents,
        cpu_pool=args.cpu_pool,
        gpu_pool=args.gpu_pool,
        retries=args.retries,
        start_deadline_s=args.start_deadline_s,
        repo_url=args.repo_url,
    )
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)  # `kill`, a scheduler's stop: ends the study as Ctrl-C does
    with contextlib.ExitStack() as server:
        if not os.environ.get("PREFECT_API_URL"):  # else a server of the user's (agents): theirs to run
            url = server.enter_context(local_prefect_server(Path(args.root).resolve()))
            server.enter_context(temporary_settings({PREFECT_API_URL: url}))
        try:
            run(**kwargs)
        except BaseException as err:
            if not (isinstance(err, (KeyboardInterrupt, TerminationSignal)) or stopping()):
                raise
            if isinstance(err, TerminationSignal):
                _signals.append(signal.SIGTERM)
            print("study interrupted: re-run the same command to resume", file=sys.stderr)
            return 128 + (_signals[0] if _signals else signal.SIGINT)
        finally:
            # Logs and events still queued go to the server before it stops, not into retries.
            APILogWorker.drain_all(timeout=10)
            EventsWorker.drain_all(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
