"""One study flow at a time in a checkout: a lock file naming the flow that holds it.

Two flows in one checkout would share its local Prefect server's database, its DVC
workspaces and its outputs; the second used to die after 22 s in a Prefect
database migration that never said another study was running. ``hold_study_lock``
takes an exclusive ``flock`` on ``build/study.lock`` before anything else starts, and
writes who holds it there. The kernel drops the lock when the holder exits, however it
exits (kill -9 included), so a stale lock file never blocks the next study.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

LOCK_FILE = Path("build") / "study.lock"

_held: list[int] = []  # the descriptor of the lock this process holds, open until it exits


class StudyRunning(RuntimeError):
    """Another study flow holds the checkout's lock."""


def hold_study_lock(root: Path) -> None:
    """Take the checkout's study lock for the rest of this process, or raise StudyRunning naming its holder."""
    path = root / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 4096).decode(errors="replace").strip() or "a process that has not written its name yet"
        os.close(fd)
        raise StudyRunning(
            f"another study is running in {root}: {holder}. Wait for it to end, or stop it (Ctrl-C in its "
            f"terminal); the lock is {path}"
        ) from None
    os.ftruncate(fd, 0)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    os.write(fd, f"pid {os.getpid()} ({' '.join(sys.argv)}), since {started}\n".encode())
    _held.append(fd)
