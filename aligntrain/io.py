"""Atomic file output: a reader never sees a half-written file or directory.

Outputs get the user's normal permissions (0666 / 0777 less the umask), as
``open`` and ``mkdir`` give them: the temporaries are created with those modes,
not with ``tempfile``'s private 0600 / 0700, which the rename would keep.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary file path next to ``path``; on success rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _create_sibling(path, lambda name: os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)))
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Yield a temporary directory next to ``path``; on success it replaces ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _create_sibling(path, lambda name: os.mkdir(name, 0o777))
    try:
        yield tmp
        _give_default_modes(tmp)
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _give_default_modes(folder: Path) -> None:
    """Give what a library wrote into ``folder`` the modes ``open`` and ``mkdir`` would have given.

    Some writers create private files (safetensors writes ``model.safetensors`` 0600). The
    default modes are read off a probe file and folder made beside ``folder`` with 0666 / 0777,
    so the umask (and any default ACL) decides, as in :func:`_create_sibling`. Execute bits a
    file has are kept where the folder mode allows them.
    """
    probe_file = _create_sibling(
        folder, lambda name: os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    )
    probe_dir = _create_sibling(folder, lambda name: os.mkdir(name, 0o777))
    file_mode, dir_mode = probe_file.stat().st_mode & 0o7777, probe_dir.stat().st_mode & 0o7777
    os.unlink(probe_file)
    os.rmdir(probe_dir)
    for parent, dirs, files in os.walk(folder):
        for name in dirs:
            os.chmod(os.path.join(parent, name), dir_mode)
        for name in files:
            target = os.path.join(parent, name)
            if not os.path.islink(target):
                os.chmod(target, file_mode | (os.stat(target).st_mode & 0o111 & dir_mode))


def _create_sibling(path: Path, create: Callable[[Path], None]) -> Path:
    """A new, uniquely named hidden sibling of ``path``, made by ``create`` (which must fail if it exists).

    ``create`` passes the full mode to os.open / os.mkdir, so the kernel applies
    the umask (and any default ACL) exactly as for an ordinary file; reading the
    umask in Python would need os.umask, which is process-wide and racy.
    """
    for _ in range(100):
        candidate = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            create(candidate)
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"no free temporary name next to {path}")


def fsync_tree(path: str | Path) -> None:
    """Flush a folder's files and entries to disk, subfolders included.

    Before a rename publishes what was written: otherwise a power cut can leave the new
    name on disk with its files' data never written.
    """
    for folder, _, names in os.walk(path):
        for name in names:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_directory(folder)


def fsync_directory(path: str | Path) -> None:
    """Flush a folder's entries (names created, renamed or removed in it) to disk."""
    with contextlib.suppress(OSError):  # not every filesystem (or OS) syncs a directory
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_json(path: str | Path, payload: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())


def fingerprint(payload: Any) -> str:
    """A short stable hash of a JSON-able payload (keys checkpoints to the config that made them)."""
    import hashlib

    blob = json.dumps(payload, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]
