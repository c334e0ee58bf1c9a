"""The smoke study on agents, for real on loopback: a Prefect server, cpu and gpu process work
pools with one worker each in a clone of its own (two "machines"), a local DVC remote, an MLflow
tracking server, and a submitting clone that runs the study flow with ``--agents``.

One deployment serves every check, and one study run: the smoke profile's ``ce``, during whose
pretraining the gpu machine dies (worker, flow run, DVC and the stage, all killed at once) and a
new worker starts there. Checks: Prefect marks the lost run crashed, the study flow retries it,
pretraining resumes from its checkpoint; stages ran on both workers; the submitting clone ends
clean (``dvc status``) with files byte-identical to a plain ``dvc repro``; outputs travel only
through the DVC remote, whose objects are whole; MLflow holds one FINISHED parent with every
stage's child run, the lost one closed KILLED. Then a stage whose pool has no worker fails at its
deadline, saying so.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from scratch_study import root_study_copy, smoke_params

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.slow


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args[:3]} exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"{url} not up after {timeout_s} s:\n{log.read_text()[-3000:]}")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "ALIGNTRAIN_", "PREFECT_"))}
    return {**env, **extra}


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 900) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise AssertionError(f"{cmd} failed ({out.returncode}):\n{out.stdout[-4000:]}\n{out.stderr[-6000:]}")
    return out


class Services:
    """Background processes of the test, stopped (whole process groups) at the end."""

    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.procs: list[subprocess.Popen] = []

    def start(self, name: str, cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[subprocess.Popen, Path]:
        log = self.scratch / f"{name}.log"
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True
        )
        self.procs.append(proc)
        return proc, log

    def stop(self) -> None:
        # Scratch services: a short grace, then SIGKILL (workers whose server stopped first retry it for
        # half a minute; nothing of theirs is checked after the tests).
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for proc in self.procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _study_repository(scratch: Path, env: dict[str, str]) -> tuple[Path, Path]:
    """A bare ``origin`` holding the smoke study with a DVC remote configured, and that remote."""
    # The smoke study's `ce`: every kind of stage, on both pools, in the fewest stages.
    raw = smoke_params()
    raw["study"]["run"] = ["ce"]
    raw["diagnostics"]["oracle"]["variant"] = "ce"
    src = root_study_copy(scratch / "src", raw, env, "smoke study")
    remote = scratch / "dvc-remote"
    remote.mkdir()
    _run(["dvc", "remote", "add", "-f", "-d", "study", str(remote)], src, env)
    _run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qam", "its DVC remote"], src, env)
    origin = scratch / "origin.git"
    _run(["git", "clone", "-q", "--bare", str(src), str(origin)], scratch, env)
    return origin, remote


HEARTBEAT_TIMEOUT_S = 45  # flow runs send one every 30 s (Prefect's minimum)


def start_worker(services: Services, pool: str, checkout: Path, env: dict[str, str], name: str | None = None):
    """`make worker POOL=<pool>` in ``checkout``: one stage at a time, heartbeats every 30 s.

    The worker asks for work every 2 s instead of Prefect's 10: a study of short stages waits less.
    """
    return services.start(
        name or f"worker-{pool}",
        ["prefect", "worker", "start", "--pool", pool, "--limit", "1"],
        checkout,
        {
            **env,
            "ALIGNTRAIN_CHECKOUT": str(checkout),
            "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30",
            "PREFECT_WORKER_QUERY_SECONDS": "2",
        },
    )


def _kill_tree(pid: int) -> None:
    """The machine dies: the worker, its flow run, DVC and the stage command, all at once."""
    import psutil

    root = psutil.Process(pid)
    for proc in [*root.children(recursive=True), root]:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


def _checkpoints(checkout: Path, stage: str) -> list[Path]:
    return list((checkout / "checkpoints").glob(f"{stage}-*/checkpoint-*/trainer_state.json"))


def _flow_run_states(api: str, flow: str, run_name: str | None = None) -> list[list[str]]:
    """Each run of ``flow`` (named ``run_name``): the types of its states, oldest first (Prefect's REST API)."""
    import urllib.request

    def call(path: str, body: dict | None = None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{api}{path}", data=data, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read())

    where = {"flows": {"name": {"any_": [flow]}}}
    if run_name:
        where["flow_runs"] = {"name": {"any_": [run_name]}}
    runs = sorted(call("/flow_runs/filter", where), key=lambda run: run["created"])
    states = []
    for run in runs:
        history = sorted(call(f"/flow_run_states/?flow_run_id={run['id']}"), key=lambda s: s["timestamp"])
        states.append([state["type"] for state in history])
    return states


@pytest.fixture(scope="module")
def agents(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("agents")
    services = Services(scratch)
    base = _env(PREFECT_HOME=str(scratch / "prefect-home"))
    try:
        origin, remote = _study_repository(scratch, base)
        prefect_port, mlflow_port = _port(), _port()
        prefect_url, mlflow_url = f"http://127.0.0.1:{prefect_port}/api", f"http://127.0.0.1:{mlflow_port}"
        # Started in the study's repository: its prefect.toml turns telemetry off.
        proc, log = services.start(
            "prefect-server",
            ["prefect", "server", "start", "--host", "127.0.0.1", "--port", str(prefect_port)],
            scratch / "src",
            base,
        )
        _wait_http(f"{prefect_url}/health", proc, log)
        proc, log = services.start(
            "mlflow-server",
            [
                "mlflow",
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(mlflow_port),
                "--backend-store-uri",
                f"sqlite:///{scratch / 'mlflow.db'}",
                "--artifacts-destination",
                str(scratch / "mlflow-artifacts"),
            ],
            scratch,
            base,
        )
        _wait_http(f"{mlflow_url}/health", proc, log)
        env = {**base, "PREFECT_API_URL": prefect_url, "MLFLOW_TRACKING_URI": mlflow_url}
        clones = {}
        for name in ("submitter", "machine-cpu", "machine-gpu"):
            clones[name] = scratch / name
            _run(["git", "clone", "-q", str(origin), str(clones[name])], scratch, env)
        # The pools, and the automation that crashes a flow run whose heartbeats stop (a lost worker).
        _run(
            [sys.executable, "flows/agents_setup.py", "--heartbeat-timeout-s", str(HEARTBEAT_TIMEOUT_S)],
            clones["submitter"],
            env,
        )
        _run(["prefect", "--no-prompt", "deploy", "--all"], clones["submitter"], env)
        workers = {pool: start_worker(services, pool, clones[f"machine-{pool}"], env) for pool in ("cpu", "gpu")}
        start = time.monotonic()
        study_log = scratch / "study.log"
        study = subprocess.Popen(
            [
                sys.executable,
                "flows/study.py",
                "--agents",
                "--gpu-pool",
                "gpu",
                "--concurrency",
                "1",  # a slot per pool: the two machines still work at once (test_each_pool_has_its_own_slots)
                "--retries",
                "1",
                "--start-deadline-s",
                "300",
            ],
            cwd=clones["submitter"],
            env=env,
            stdout=open(study_log, "w"),
            stderr=subprocess.STDOUT,
        )
        try:
            # The gpu machine dies between two of pretraining's checkpoints (the smoke study: 200 steps,
            # one every 10), and a new worker starts on it.
            gpu = clones["machine-gpu"]
            deadline = time.monotonic() + 600
            while not _checkpoints(gpu, "pretrain"):
                assert study.poll() is None and time.monotonic() < deadline, study_log.read_text()[-5000:]
                time.sleep(0.1)
            _kill_tree(workers["gpu"][0].pid)
            start_worker(services, "gpu", gpu, env, name="worker-gpu-restarted")
            assert study.wait(timeout=1200) == 0, study_log.read_text()[-5000:]
        finally:
            if study.poll() is None:
                study.kill()
        study_states = _flow_run_states(prefect_url, "study")
        yield {
            "scratch": scratch,
            "clones": clones,
            "remote": remote,
            "env": env,
            "mlflow": mlflow_url,
            "output": study_log.read_text(),
            "seconds": time.monotonic() - start,
            "study_states": study_states,
        }
    finally:
        services.stop()


@pytest.fixture(scope="module")
def plain(plain_smoke_study) -> Path:
    """The same study by `dvc repro` alone: the reference."""
    return plain_smoke_study


def _stage_logs(agents, pool: str) -> str:
    return "".join(log.read_text() for log in sorted(agents["scratch"].glob(f"worker-{pool}*.log")))


def test_the_prefect_server_sends_no_telemetry(agents):
    """prefect.toml turns it off; offline, the server would log a failure at every start."""
    log = (agents["scratch"] / "prefect-server.log").read_text()
    assert "Uvicorn running" in log or "Check out the dashboard" in log or "Configure Prefect" in log
    assert "telemetry" not in log.lower()


def test_each_pool_has_its_own_slots(agents):
    """With --concurrency 1, a cpu stage and a gpu stage were out at the same time, never two of one pool.
    Was: one count of slots for all pools, so gpu stages queued in the gpu pool held the cpu worker idle."""
    import re

    out: dict[str, str] = {}  # stage -> pool, for the stages submitted and not yet done
    most = 0
    for line in agents["output"].splitlines():
        if submitted := re.search(r"stage (\S+) submitted to pool '(\w+)'", line):
            out[submitted[1]] = submitted[2]
        elif ended := re.search(r"stage (\S+) (done|failed)", line):
            out.pop(ended[1], None)
        pools = list(out.values())
        assert all(pools.count(pool) <= 1 for pool in pools), f"two stages of one pool out at once: {out}"
        most = max(most, len(out))
    assert most == 2, "the cpu and gpu pools never had a stage out at the same time"


def test_the_live_study_is_never_marked_crashed(agents):
    """Was: the zombie automation marked the study flow Crashed while it waited for its stages (its heartbeat came
    every 180 s, the automation's patience here is 45 s); it must heartbeat like the stages and end Completed."""
    (states,) = agents["study_states"]
    assert "CRASHED" not in states and states[-1] == "COMPLETED", states


def test_stages_ran_on_both_workers(agents):
    cpu, gpu = _stage_logs(agents, "cpu"), _stage_logs(agents, "gpu")
    assert "Running stage 'train@ce'" in gpu and "Running stage 'pretrain'" in gpu
    assert "Running stage 'evaluate@ce'" in cpu and "Running stage 'synthetic'" in cpu
    assert "Running stage 'train@ce'" not in cpu and "Running stage 'evaluate@ce'" not in gpu


def test_a_lost_worker_is_retried_and_pretraining_resumes_from_its_checkpoint(agents):
    """The gpu machine died during pretraining: Prefect marked the run crashed (no heartbeat), the study flow
    retried the stage on the new worker, and pretraining resumed at its checkpoint."""
    import mlflow

    assert "CRASHED" in agents["output"] and "pretrain" in agents["output"]
    restarted = (agents["scratch"] / "worker-gpu-restarted.log").read_text()
    assert "Running stage 'pretrain'" in restarted
    client = mlflow.MlflowClient(tracking_uri=agents["mlflow"])
    experiment = client.get_experiment_by_name("aligntrain-smoke")
    runs = client.search_runs([experiment.experiment_id], "attributes.run_name = 'pretrain'")
    assert sorted(r.info.status for r in runs) == ["FINISHED", "KILLED"], "the lost run is closed with the study"
    (finished,) = [r for r in runs if r.info.status == "FINISHED"]
    assert finished.data.metrics["resumed_from_step"] >= 10


def test_the_submitting_clone_ends_clean_and_identical_to_a_plain_repro(agents, plain):
    """Killed, retried, resumed and spread over two machines, the study computes what the plain run computed."""
    submitter = agents["clones"]["submitter"]
    # The root study only: the pipelines/<study>/ folders are studies of their own, not run here.
    status = _run(["dvc", "status", "dvc.yaml", "--json"], submitter, agents["env"])
    assert json.loads(status.stdout or "{}") == {}
    assert "in the checkout at the end: compare, report" in agents["output"]
    assert "the final reproduction computed" not in agents["output"], "every agent stage restored, none recomputed"
    files = ["metrics/ce.json", "plots/curves/ce.csv", "metrics/diagnostics/ce.json"]
    files += ["metrics/diagnostics/synthetic.json", "models/base/model.safetensors"]
    for name in files:
        assert (submitter / name).read_bytes() == (plain / name).read_bytes(), name
    lock, reference = (yaml.safe_load((d / "dvc.lock").read_text())["stages"] for d in (submitter, plain))
    for stage in ("prepare", "pretrain", "warmup", "train@ce", "rollouts@ce", "evaluate@ce", "synthetic"):
        assert lock[stage] == reference[stage], stage


def test_outputs_travelled_through_the_remote_whole(agents):
    """The gpu machine's models reached the cpu machine only through the DVC remote (separate caches), and
    every object there is whole although a machine died mid-stage."""
    import hashlib

    cpu_cache = agents["clones"]["machine-cpu"] / ".dvc" / "cache"
    gpu_cache = agents["clones"]["machine-gpu"] / ".dvc" / "cache"
    assert (agents["remote"] / "files").is_dir() and (agents["remote"] / "runs").is_dir()
    assert cpu_cache.is_dir() and gpu_cache.is_dir() and not cpu_cache.samefile(gpu_cache)
    assert not list((agents["clones"]["machine-gpu"] / "build" / "workspaces").glob("*/*")), "workspaces removed"
    for obj in (agents["remote"] / "files" / "md5").rglob("*"):
        if obj.is_file():  # content-addressed: a half-written object would not match its name
            name = obj.parent.name + obj.name.removesuffix(".dir")
            assert hashlib.md5(obj.read_bytes()).hexdigest() == name, obj


def test_mlflow_holds_one_finished_parent_with_every_stage(agents):
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=agents["mlflow"])
    experiment = client.get_experiment_by_name("aligntrain-smoke")
    runs = client.search_runs([experiment.experiment_id], max_results=500)
    parents = [r for r in runs if r.data.tags.get("aligntrain.role") == "study"]
    children = [r for r in runs if r.data.tags.get("aligntrain.role") == "stage"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    expected = {"prepare", "pretrain", "warmup", "compare", "oracle_gradient", "synthetic", "report"} | {
        f"{stage}@ce" for stage in ("train", "rollouts", "evaluate", "diagnose")
    }
    assert sorted(r.info.run_name for r in children) == sorted([*expected, "pretrain"]), "pretraining ran twice"
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    unfinished = {r.info.run_name: r.info.status for r in children if r.info.status != "FINISHED"}
    assert unfinished == {"pretrain": "KILLED"}, f"stage runs not FINISHED: {unfinished}"


def test_a_stage_whose_pool_has_no_worker_fails_at_its_deadline(agents):
    """No worker on pool `nobody`: the flow says so in its log and fails after the deadline, never hangs."""
    submitter = agents["clones"]["submitter"]
    env = agents["env"]
    _run(["prefect", "work-pool", "create", "nobody", "--type", "process", "--overwrite"], submitter, env)
    params = submitter / "params.yaml"
    raw = yaml.safe_load(params.read_text())
    raw["study"]["seed"] += 1
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    _run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qam", "another seed"], submitter, env)
    _run(["git", "push", "-q", "origin", "HEAD:main"], submitter, env)
    # A deployment of the stage runner on the worker-less pool.
    text = (submitter / "prefect.yaml").read_text().replace("name: gpu\n", "name: nobody\n")
    (submitter / "prefect-nobody.yaml").write_text(text)
    _run(
        ["prefect", "--no-prompt", "deploy", "--prefect-file", "prefect-nobody.yaml", "--name", "nobody"],
        submitter,
        env,
    )
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "flows/study.py", "--agents", "--cpu-pool", "nobody", "--start-deadline-s", "20"],
        cwd=submitter,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = out.stdout + out.stderr
    assert out.returncode != 0
    assert "no online worker" in log and "was online for 20 s" in log and "make worker POOL=nobody" in log
    assert time.monotonic() - start < 300


def test_ctrl_c_cancels_the_stage_runs_on_workers(agents):
    """Ctrl-C of a study on agents: the stage a worker runs is cancelled and stops there, and the
    study ends in seconds. Was: the study flow stopped, the worker went on with its stage."""
    import psutil

    submitter, env = agents["clones"]["submitter"], agents["env"]
    params = submitter / "params.yaml"
    raw = yaml.safe_load(params.read_text())
    raw["study"]["seed"] += 1  # stages to compute, not restore
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    _run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qam", "a third seed"], submitter, env)
    _run(["git", "push", "-q", "origin", "HEAD:main"], submitter, env)
    gpu = agents["clones"]["machine-gpu"]
    log = agents["scratch"] / "study-ctrl-c.log"
    study = subprocess.Popen(
        [sys.executable, "flows/study.py", "--agents", "--gpu-pool", "gpu", "--start-deadline-s", "300"],
        cwd=submitter,
        env=env,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 600
        while not _checkpoints(gpu, "pretrain"):  # the gpu worker is in pretraining
            assert study.poll() is None and time.monotonic() < deadline, log.read_text()[-5000:]
            time.sleep(0.1)
        start = time.monotonic()
        os.killpg(study.pid, signal.SIGINT)
        assert study.wait(timeout=120) == 130, log.read_text()[-5000:]
        stop_seconds = time.monotonic() - start
    finally:
        if study.poll() is None:
            os.killpg(study.pid, signal.SIGKILL)
    assert stop_seconds < 30, f"Ctrl-C took {stop_seconds:.0f} s"
    # --concurrency 2 and one worker a pool: prepare and synthetic go to the cpu pool together.
    assert "is queued in pool 'cpu' behind busy workers (1 online)" in log.read_text(), "a queued stage says so"
    workspaces = str(gpu / "build" / "workspaces")

    def left_on_the_worker() -> list[list[str]]:
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.cwd().startswith(workspaces):
                    found.append(proc.cmdline())
            except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
                pass
        return found

    deadline = time.monotonic() + 90
    while left_on_the_worker() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left_on_the_worker(), f"the stage goes on on the worker: {left_on_the_worker()}"
    # The worker marks the run Cancelled once it sees the process gone (it looks every 3 s).
    deadline = time.monotonic() + 60
    while (states := _flow_run_states(env["PREFECT_API_URL"], "stage", run_name="pretrain")[-1])[-1] != "CANCELLED":
        assert time.monotonic() < deadline, states
        time.sleep(1)
    assert "COMPLETED" not in states
