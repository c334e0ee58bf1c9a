"""The study flow's scheduling, with real Prefect tasks under Prefect's test harness (a temporary API)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from prefect import flow, task
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.testing.utilities import prefect_test_harness

from flows.study import _schedule, downstream_closure, stage_graph, stage_name
from tasks.dvc import study_of
from tasks.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]

# A diamond with a tail: a -> (b, c) -> d, and e alone.
ORDER = ["a", "b", "c", "e", "d"]
UPSTREAM = {"a": set(), "b": {"a"}, "c": {"a"}, "d": {"b", "c"}, "e": set()}


def test_downstream_closure_takes_everything_below_a_change():
    assert downstream_closure(ORDER, UPSTREAM, {"b"}) == ["b", "d"]
    assert downstream_closure(ORDER, UPSTREAM, {"a"}) == ["a", "b", "c", "d"]
    assert downstream_closure(ORDER, UPSTREAM, set()) == []
    assert stage_name("train@ce") == "train" and stage_name("compare") == "compare"
    assert stage_name("pipelines/hydro/dvc.yaml:train@tea") == "train"
    assert stage_name("pipelines/hydro/dvc.yaml:report") == "report"
    assert study_of("pipelines/hydro/dvc.yaml:train@tea") == ("pipelines/hydro", "train@tea")
    assert study_of("train@ce") == (".", "train@ce")


def test_the_flow_schedules_one_study_of_the_repository():
    """DVC's index holds every dvc.yaml (root study, pipelines/*): the flow takes only its study's stages."""
    order, upstream, _, unrestorable = stage_graph(ROOT)
    assert "report" in order and not any("dvc.yaml:" in address for address in order)
    assert upstream["pretrain"] == {"prepare"} and "report" in unrestorable
    order, upstream, _, unrestorable = stage_graph(ROOT, "pipelines/hydro")
    hydro = "pipelines/hydro/dvc.yaml:"
    assert order and all(address.startswith(hydro) for address in order)
    assert upstream[hydro + "pretrain"] == {hydro + "prepare"}
    assert upstream[hydro + "train@tea"] == {hydro + "prepare", hydro + "warmup"}  # rows and starting model
    assert hydro + "report" in unrestorable
    folder = Workspace.folder(Path("/w"), "s1", hydro + "train@tea")
    assert folder == Path("/w/s1/pipelines--hydro--train_at_tea")
    with pytest.raises(FileNotFoundError, match="no such pipeline"):
        stage_graph(ROOT, "pipelines/nope")


@pytest.fixture(scope="module")
def prefect_api():
    with prefect_test_harness(server_startup_timeout=120):
        yield


class Recorder:
    def __init__(self, fail: set[str] = frozenset()):
        self.lock = threading.Lock()
        self.events: list[tuple[str, str]] = []
        self.running = 0
        self.peak = 0
        self.fail = fail

    def stage(self, name: str) -> str:
        with self.lock:
            self.events.append(("start", name))
            self.running += 1
            self.peak = max(self.peak, self.running)
        time.sleep(0.4)
        with self.lock:
            self.running -= 1
            self.events.append(("end", name))
        if name in self.fail:
            raise RuntimeError(f"{name} broke")
        return name


def _run_schedule(recorder: Recorder, todo: list[str], concurrency: int) -> list[str]:
    stage_task = task(recorder.stage, name="fake-stage")

    @flow(task_runner=ThreadPoolTaskRunner(max_workers=4))
    def schedule_flow() -> list[str]:
        import logging

        return _schedule(todo, UPSTREAM, lambda name: stage_task.submit(name), concurrency, logging.getLogger("t"))

    return schedule_flow()


def test_stages_start_after_their_upstream_and_never_above_the_limit(prefect_api):
    recorder = Recorder()
    assert _run_schedule(recorder, ORDER, concurrency=2) == []
    ends = {name: i for i, (kind, name) in enumerate(recorder.events) if kind == "end"}
    starts = {name: i for i, (kind, name) in enumerate(recorder.events) if kind == "start"}
    for name, ups in UPSTREAM.items():
        assert all(ends[u] < starts[name] for u in ups), name
    assert recorder.peak == 2, "independent stages (b, c, e) ran two at a time"


def test_one_at_a_time_is_sequential(prefect_api):
    recorder = Recorder()
    _run_schedule(recorder, ORDER, concurrency=1)
    assert recorder.peak == 1


def test_after_a_failure_nothing_new_starts_and_the_failure_is_named(prefect_api):
    recorder = Recorder(fail={"b"})
    failed = _run_schedule(recorder, ORDER, concurrency=1)
    assert failed == ["b"]
    started = [name for kind, name in recorder.events if kind == "start"]
    assert started == ["a", "b"] and "d" not in started


def test_a_second_study_in_the_same_checkout_is_refused_naming_the_first(tmp_path):
    """Was: the second `make study` died after 22 s in a Prefect migration. Now exit 2 at once, naming the holder;
    once the holder ends, however it ends, the next study takes the lock."""
    import os
    import signal
    import subprocess
    import sys

    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from tasks.lock import hold_study_lock; from pathlib import Path; "
         f"hold_study_lock(Path({str(tmp_path)!r})); print('held', flush=True); time.sleep(600)"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
        second = subprocess.run(
            [sys.executable, str(ROOT / "flows" / "study.py"), "--root", str(tmp_path)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert second.returncode == 2, second.stderr[-2000:]
        assert f"error: another study is running in {tmp_path}: pid {holder.pid} (-c), since " in second.stderr
        assert not (tmp_path / "build" / "prefect").exists(), "refused before the study's Prefect server started"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    from tasks.lock import _held, hold_study_lock

    hold_study_lock(tmp_path)  # kill -9 released it
    os.close(_held.pop())


def test_on_agents_each_pool_has_its_own_slots(prefect_api):
    """Was: four slots held by gpu stages queued in the gpu pool, the cpu worker idle for 35 min while cpu stages
    were ready. Each lane (work pool) now has `concurrency` slots of its own."""
    recorder = Recorder()
    stage_task = task(recorder.stage, name="fake-stage")
    # b and c are gpu stages (slow, queued); e is a cpu stage ready from the start.
    lane = {"a": "cpu", "b": "gpu", "c": "gpu", "d": "cpu", "e": "cpu"}.__getitem__

    @flow(task_runner=ThreadPoolTaskRunner(max_workers=4))
    def schedule_flow() -> list[str]:
        import logging

        return _schedule(ORDER, UPSTREAM, lambda n: stage_task.submit(n), 1, logging.getLogger("t"), lane=lane)

    assert schedule_flow() == []
    starts = [name for kind, name in recorder.events if kind == "start"]
    first_gpu_end = next(i for i, (kind, name) in enumerate(recorder.events) if kind == "end" and lane(name) == "gpu")
    assert ("start", "e") in recorder.events[:first_gpu_end], "the cpu stage did not wait for the gpu lane"
    assert recorder.peak == 2 and sorted(starts) == sorted(ORDER)


def test_a_stage_queued_behind_a_busy_worker_is_not_failed_at_the_deadline(monkeypatch):
    """Was: the 10-min start deadline counted time queued behind a busy worker, and the message said to start a
    worker while one was online. Now only time with no worker online counts, and the wait is named."""
    import logging
    import types

    from tasks import agents

    clock = {"t": 0.0}
    states = iter(["SCHEDULED"] * 6 + ["RUNNING", "COMPLETED"])
    online = iter([1, 1, 1, 1, 1, 1])  # one worker, busy with another stage, the whole time
    monkeypatch.setattr(agents, "get_run_logger", lambda: logging.getLogger("t"))
    monkeypatch.setattr(agents, "run_deployment", lambda *a, **k: types.SimpleNamespace(id="r1"))
    monkeypatch.setattr(agents, "_state", lambda run_id: (next(states), ""))
    monkeypatch.setattr(agents, "_online_workers", lambda pool: next(online, 1))
    monkeypatch.setattr(agents.time, "monotonic", lambda: clock["t"])
    monkeypatch.setattr(agents.time, "sleep", lambda s: clock.__setitem__("t", clock["t"] + 100.0))
    assert agents.run_stage_on_agent.fn("train@ce", "gpu", {}, start_deadline_s=60.0) == "train@ce"

    # No worker online at all: the deadline still fails the stage, and says why.
    clock["t"] = 0.0
    states = iter(["SCHEDULED"] * 10)
    monkeypatch.setattr(agents, "_state", lambda run_id: (next(states), ""))
    monkeypatch.setattr(agents, "_online_workers", lambda pool: 0)
    cancelled = []
    monkeypatch.setattr(agents, "_cancel", cancelled.append)
    with pytest.raises(agents.NoWorker, match=r"no worker of work pool 'gpu' was online for 60 s while it waited"):
        agents.run_stage_on_agent.fn("train@ce", "gpu", {}, start_deadline_s=60.0)
    assert cancelled == ["r1"]
