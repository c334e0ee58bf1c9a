"""The tests' stage host (tests/stagehost.py) runs a stage as the fresh process it stands for.

The strongest check is elsewhere: the plain smoke reference runs its stages through the host,
the Ctrl-C flow run (tests/test_e2e.py) runs them as fresh processes, and their metrics, models
and dvc.lock must be byte-identical. These check the rest: output, exit status, signals.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from stagehost import SOCKET_ENV, import_time_differences

ROOT = Path(__file__).resolve().parents[1]


def test_only_variables_read_at_import_decide_and_what_imports_set_is_no_difference():
    host = {"HOME": "/root", "PATH": "/bin", "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    added = {"KMP_INIT_AT_FORK": "FALSE"}
    same = {"HOME": "/root", "PATH": "/other", "HF_HUB_OFFLINE": "1", "PYTHONPATH": "/x", "PREFECT_HOME": "/p"}
    assert import_time_differences(same, host, added) == []
    assert import_time_differences({**same, "KMP_INIT_AT_FORK": "FALSE"}, host, added) == []
    assert import_time_differences({**same, "KMP_INIT_AT_FORK": "TRUE"}, host, added) == []  # not a prefix read
    changed = {**same, "HF_HOME": "/h", "PYTHONHASHSEED": "0", "LANG": "C"}
    del changed["HF_HUB_OFFLINE"]
    assert import_time_differences(changed, host, added) == ["HF_HOME", "HF_HUB_OFFLINE", "LANG", "PYTHONHASHSEED"]


def _host_log() -> list[str]:
    """The run's stagehost.log, next to the shim's folder (tests/conftest.py)."""
    shim = Path(os.environ["PATH"].split(os.pathsep)[0])
    return (shim.parent / "stagehost.log").read_text().splitlines()


def _served_pid(argv_start: str, cwd: Path, skip: int = 0, timeout_s: float = 60) -> int:
    """The pid of the stage the host forked for ``aligntrain <argv_start>`` in ``cwd`` (log lines after ``skip``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in _host_log()[skip:]:
            if line.startswith(f"served {argv_start}") and f" in {cwd} as " in line:
                return int(line.rsplit(" as ", 1)[1])
        time.sleep(0.1)
    raise AssertionError(f"the host did not serve {argv_start!r} in {cwd}")


def _gone(pid: int, timeout_s: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ", 1)[1].startswith("Z"):
                    return True  # exited; its relay reaps it
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def _study(folder: Path, pretrain_steps: int = 4) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    params = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    params["pretrain"]["steps"] = pretrain_steps
    (folder / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return folder


def _env(fresh: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "ALIGNTRAIN_", "PREFECT_"))}
    if fresh:
        env.pop(SOCKET_ENV)
    return env


@pytest.mark.slow
def test_a_served_stage_writes_what_a_fresh_process_writes(tmp_path):
    """`aligntrain prepare` through the host and as a fresh process: the same files, byte for byte;
    a bad command: the same exit status and message."""
    outputs = {}
    for how in ("host", "fresh"):
        study = _study(tmp_path / how)
        done = subprocess.run(
            ["aligntrain", "prepare"], cwd=study, env=_env(fresh=how == "fresh"), capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-3000:]
        outputs[how] = {p.name: p.read_bytes() for p in sorted((study / "data").iterdir())}
        bad = subprocess.run(
            ["aligntrain", "train", "--variant", "nope"], cwd=study, env=_env(fresh=how == "fresh"), capture_output=True
        )
        outputs[how]["bad"] = (bad.returncode, bad.stdout, bad.stderr)
    _served_pid("prepare", tmp_path / "host")
    assert outputs["host"] == outputs["fresh"]
    assert outputs["host"]["bad"][0] == 2 and b"nope" in outputs["host"]["bad"][1] + outputs["host"]["bad"][2]


@pytest.mark.slow
def test_a_stage_ends_with_its_shim_and_gets_its_signals(tmp_path):
    """SIGKILL of the shim's process group ends the stage; SIGTERM is forwarded to the stage, which ends
    by it, and the shim with it. (Ctrl-C through the shim is checked on the agents deployment:
    test_agents.py::test_ctrl_c_cancels_the_stage_runs_on_workers.)"""
    study = _study(tmp_path / "study", pretrain_steps=100_000)
    assert subprocess.run(["aligntrain", "prepare"], cwd=study, env=_env(), capture_output=True).returncode == 0
    for signum in (signal.SIGKILL, signal.SIGTERM):
        shutil.rmtree(study / "checkpoints", ignore_errors=True)
        log_lines = len(_host_log())
        shim = subprocess.Popen(
            ["aligntrain", "pretrain"],
            cwd=study,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        pid = _served_pid("pretrain", study, skip=log_lines)
        time.sleep(2.0)  # into the training
        assert shim.poll() is None, shim.stderr.read()[-2000:]
        os.killpg(shim.pid, signum)
        shim.wait(timeout=60)
        assert _gone(pid), f"the stage {pid} outlived its shim after signal {signum}"
        assert shim.returncode == -signum, shim.returncode
