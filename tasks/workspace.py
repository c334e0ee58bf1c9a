"""Workspaces: where one stage of one study runs, apart from every other stage and study.

The path is ``<root>/<study id>/<stage>``, so two studies submitted at once
from the same commit never share a folder. A retried stage starts from a fresh
workspace; what it resumes from is its checkpoint, which lives on shared
storage (``ALIGNTRAIN_CHECKPOINT_ROOT``), not in the workspace.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

WORKSPACES_ENV = "ALIGNTRAIN_WORKSPACES"


def git(args: list[str], cwd: Path) -> str:
    """``git <args>`` in ``cwd``: its output, or RuntimeError with its error."""
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"`git {' '.join(args)}` failed in {cwd}: {out.stderr.strip()[-2000:]}")
    return out.stdout


def _fresh(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def write_local_config(folder: Path, cache_dir: Path, remote_url: str | None) -> None:
    """``folder/.dvc/config.local``: DVC's cache at ``cache_dir`` and, if given, the default remote ``study``."""
    lines = ["[cache]", f"    dir = {cache_dir}"]
    if remote_url:
        lines += ["['remote \"study\"']", f"    url = {remote_url}", "[core]", "    remote = study"]
    (folder / ".dvc" / "config.local").write_text("\n".join(lines) + "\n")


def cache_dir_of(checkout: Path) -> Path:
    """The DVC cache folder of ``checkout`` as its configs set it (``.dvc/cache`` unless moved)."""
    from dvc.repo import Repo

    with Repo(str(checkout)) as repo:
        return Path(repo.cache.local_cache_dir).resolve()


def _use_cache(path: Path, cache_dir: Path, remote_url: str | None) -> None:
    """Point the workspace's DVC projects (the root and each pipelines/<study>/) at a shared cache
    (and the study's remote), in their local configs."""
    for project in (path, *(p.parent for p in path.glob("pipelines/*/.dvc"))):
        write_local_config(project, cache_dir.resolve(), remote_url)


@dataclass(frozen=True)
class Workspace:
    path: Path
    remote: str | None = None
    """URL of the DVC remote the workspace pulls from and pushes to (None: the cache is shared directly)."""

    @staticmethod
    def folder(root: Path, study_id: str, stage: str) -> Path:
        # A pipeline's stage address (pipelines/hydro/dvc.yaml:train@ce) as one folder name.
        return root / study_id / stage.replace("/dvc.yaml:", "--").replace("/", "--").replace("@", "_at_")

    @classmethod
    def copy_of(cls, checkout: Path, study_id: str, stage: str) -> Workspace:
        """The checkout's working tree as it is (tracked and untracked, not ignored files), sharing its cache."""
        checkout = checkout.resolve()
        path = _fresh(cls.folder(checkout / "build" / "workspaces", study_id, stage))
        copy_working_tree(checkout, path)
        _commit_snapshot(path)
        _use_cache(path, cache_dir_of(checkout), None)
        return cls(path)

    @classmethod
    def clone_of(
        cls, repo_url: str, commit: str, root: Path, study_id: str, stage: str, cache_dir: Path, remote_url: str
    ) -> Workspace:
        """A clone of the study's commit on an agent, with the agent's cache and the study's remote."""
        path = _fresh(cls.folder(root, study_id, stage))
        git(["clone", "--quiet", "--no-checkout", repo_url, str(path)], root)
        git(["checkout", "--quiet", "--detach", commit], path)
        _use_cache(path, cache_dir, remote_url)
        return cls(path, remote=remote_url)


def copy_working_tree(checkout: Path, dest: Path) -> None:
    """The files git sees in ``checkout`` (tracked, and untracked but not ignored), copied into ``dest``.

    The one home of "a copy of the checkout as it is": workspaces, scripts/run_standin.py and the tests'
    scratch studies use it.
    """
    for name in git(["ls-files", "-co", "--exclude-standard", "-z"], checkout).split("\0"):
        source = checkout / name
        if name and source.is_file():  # listed but deleted files are not part of the working tree
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def _commit_snapshot(path: Path) -> None:
    """DVC wants a git repository; the copy gets one commit of its own."""
    git(["init", "--quiet"], path)
    git(["add", "-A"], path)
    git(
        [
            "-c",
            "user.name=aligntrain",
            "-c",
            "user.email=aligntrain@localhost",
            "commit",
            "--quiet",
            "--no-verify",
            "-m",
            "workspace snapshot",
        ],
        path,
    )
