"""Run a command with a local Prefect server for its duration.

    python scripts/with_prefect_server.py -- dvc repro

Without ``PREFECT_API_URL`` every stage's flow starts Prefect's ephemeral server
(5–15 s each on a laptop CPU). One server for the whole ``dvc repro`` removes that
cost and keeps the flow runs browsable while it lasts. If ``PREFECT_API_URL`` is
already set, the command runs against that server unchanged.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, server: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"prefect server exited with code {server.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"prefect server at {url} not healthy after {timeout_s:.0f} s")


def main(argv: list[str]) -> int:
    if "--" in argv:
        argv = argv[argv.index("--") + 1 :]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    if os.environ.get("PREFECT_API_URL"):
        return subprocess.call(argv)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = dict(os.environ)
    home = Path(env.get("PREFECT_HOME", Path.cwd() / "build" / "prefect")).resolve()
    env["PREFECT_HOME"] = str(home)
    home.mkdir(parents=True, exist_ok=True)
    log = open(home / "server.log", "w")
    prefect = Path(sys.executable).with_name("prefect")
    server = subprocess.Popen(
        [str(prefect), "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-services", "--analytics-off"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_healthy(url, server, timeout_s=120)
        env["PREFECT_API_URL"] = url
        print(f"[with_prefect_server] Prefect server at {url} (log: {home / 'server.log'})", flush=True)
        return subprocess.call(argv, env=env)
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
