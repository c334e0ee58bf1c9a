"""A Prefect server for one local study, in a session of its own.

Without ``PREFECT_API_URL`` Prefect starts a temporary server in the flow's process
group; Ctrl-C then stops that server first, and the flow spends minutes retrying
a dead API before it exits. This server is started in a new session, so Ctrl-C
reaches the stages but not the server: the flow records its end, the server stops
after it, and nothing is left running.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from aligntrain.launch import free_port


def _wait_healthy(url: str, server: subprocess.Popen, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"prefect server exited with code {server.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"prefect server at {url} not healthy after {timeout_s:.0f} s (log: {log})")


@contextlib.contextmanager
def local_prefect_server(checkout: Path, timeout_s: float = 120) -> Iterator[str]:
    """A loopback Prefect server (database in ``build/prefect``); yields its API URL."""
    home = checkout / "build" / "prefect"
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    log = home / "server.log"
    prefect = Path(sys.executable).with_name("prefect")
    server = subprocess.Popen(
        [str(prefect), "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-services"],
        cwd=checkout,  # the project's prefect.toml: no telemetry
        env={**os.environ, "PREFECT_HOME": str(home)},
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait_healthy(url, server, log, timeout_s)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
