"""SIGTERM of a local study flow (`kill`, a batch scheduler's stop) ends it as Ctrl-C does.

Was: the flow died and left its Prefect server and the running stage behind. The study here is the
smallest that has a running stage to stop: one DVC stage that sleeps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.slow


def test_sigterm_stops_the_stages_and_the_flows_server_and_exits_143(tmp_path):
    study = tmp_path / "study"
    study.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "ALIGNTRAIN_", "PREFECT_"))}
    env.pop("STAGEHOST_SOCKET", None)  # its subject is the processes: each stage a fresh one
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    (study / "params.yaml").write_text((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    (study / "dvc.yaml").write_text("stages:\n  prepare:\n    cmd: sleep 600 # aligntrain-sigterm-test\n")
    for command in (
        ["git", "init", "-q"],
        [str(BIN / "dvc"), "init", "-q"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "study"],
    ):
        subprocess.run(command, cwd=study, env=env, check=True)  # fmt: skip
    flow = subprocess.Popen(
        [sys.executable, str(ROOT / "flows" / "study.py"), "--root", str(study)],
        cwd=study,
        env=env,
        stdout=open(tmp_path / "flow.log", "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    # The flow's processes: the stages get its PREFECT_HOME, its own server the study's build/prefect.
    homes = {env["PREFECT_HOME"], str(study / "build" / "prefect")}

    def ours() -> list[list[str]]:
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.environ().get("PREFECT_HOME") in homes and proc.pid != flow.pid:
                    found.append(proc.cmdline())
            except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
                pass
        return found

    deadline = time.monotonic() + 300
    while not any("sleep" in cmd[:1] for cmd in ours()):
        assert flow.poll() is None and time.monotonic() < deadline, (tmp_path / "flow.log").read_text()[-3000:]
        time.sleep(0.2)
    assert any("prefect" in " ".join(cmd) and "server" in cmd for cmd in ours()), "the flow's own server runs"
    flow.send_signal(signal.SIGTERM)
    assert flow.wait(timeout=60) == 128 + signal.SIGTERM, (tmp_path / "flow.log").read_text()[-3000:]
    time.sleep(1)
    assert ours() == [], "the stage and the flow's Prefect server are stopped"
    assert "study interrupted: re-run the same command to resume" in (tmp_path / "flow.log").read_text()
