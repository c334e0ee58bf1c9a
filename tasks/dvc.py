"""Prefect tasks that drive DVC: one stage in a workspace of its own, and the final reproduction.

A stage never runs in the submitting checkout while other stages run: two
``dvc repro`` in one folder are refused by DVC's repository lock. Each stage
gets a *workspace* instead, a copy of the study at the submitted state:

- locally, a copy of the checkout's working tree whose DVC cache is the
  checkout's own (``.dvc/config.local``), so outputs and the run-cache land
  where the checkout will find them;
- on an agent, a clone of the study's commit whose cache is the agent's, with
  inputs pulled from the DVC remote and outputs pushed back to it.

In the workspace, ``dvc repro <stage>`` restores every upstream stage from the
run-cache ("cached - skipping run") and computes only the stage itself, with
DVC's own single-stage semantics (deps, params, outs, lock entry, run-cache
entry). When all stages are done, :func:`reproduce_from_run_cache` runs
``dvc repro`` in the submitting checkout: every stage is a run-cache hit, so
DVC restores the outputs, computes nothing, and writes the same ``dvc.lock``
as a plain local ``dvc repro``.

Each study folder under ``pipelines/`` is a DVC project of its own (a subrepo, its
``.dvc/`` committed), so the root's ``dvc status`` speaks of the default study alone.
DVC therefore runs in the study's folder: a stage's address
(``pipelines/hydro/dvc.yaml:train@ce``) gives the folder and the stage's name there.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from tasks.workspace import Workspace, cache_dir_of, write_local_config

STAGE_BIN_ENV = "ALIGNTRAIN_STAGE_BIN"
"""Folder of the ``aligntrain`` executable the stages run (default: whatever PATH finds)."""


class StageFailed(RuntimeError):
    """A DVC command exited non-zero; the message holds the end of its output."""


def dvc_bin() -> str:
    """The ``dvc`` next to this Python (the project's venv), else the one on PATH."""
    local = Path(sys.executable).with_name("dvc")
    return str(local) if local.exists() else "dvc"


# The DVC processes this study runs, each in a session of its own so that the study
# decides how they stop: on Ctrl-C, stop_all_stages() interrupts them (DVC then stops
# the stage command), waits briefly, kills what is left, and no retry starts another.
_PROGRESS = re.compile(r"\d+%\|")  # a tqdm bar: "  27%|██▋  | 410/1500"


class MissingCacheLines:
    """Condenses DVC's report of outputs it could not pull into one line per report.

    ``dvc repro --pull`` tries to pull each stage that dvc.lock says is unchanged. Where dvc.lock
    was written by another machine's run (the committed results of a study), its outputs are in
    no cache this remote holds: DVC warns, lists every missing hash, says "Unable to pull data
    for stage", and computes the stage (or restores it from the run-cache). That is normal on
    agents, and it was 86 lines of warnings in one study's log.
    """

    HEADER = "Some of the cache files do not exist neither locally nor on remote"
    ENTRY = re.compile(r"^(name: .+, )?[a-z0-9-]+: [0-9a-f]+(\.dir)?$")  # "md5: 9dd4…", "name: b.txt, md5: …"
    UNABLE = re.compile(r"^Unable to pull data for stage: '(.+)'$")

    def __init__(self) -> None:
        self.missing: int | None = None  # files listed by the report being read, if one is

    def feed(self, line: str) -> list[str]:
        """The lines to log in place of ``line``."""
        if self.HEADER in line:
            out, self.missing = self.flush(), 0
            return out
        if self.missing is not None and self.ENTRY.match(line):
            self.missing += 1
            return []
        unable = self.UNABLE.match(line)
        if unable and self.missing is not None:
            count, self.missing = self.missing, None
            return [
                f"{unable[1]}: {count} output file(s) that dvc.lock records are in neither the cache nor the "
                "remote (written by another run): DVC reproduces the stage"
            ]
        return [*self.flush(), line]

    def flush(self) -> list[str]:
        if self.missing is None:
            return []
        count, self.missing = self.missing, None
        return [f"{count} file(s) that dvc.lock records are in neither the cache nor the remote"]


_live: set[subprocess.Popen] = set()
_live_lock = threading.Lock()
_stopping = threading.Event()


def stopping() -> bool:
    """True once :func:`stop_all_stages` was called: the study is being stopped (Ctrl-C)."""
    return _stopping.is_set()


def stop_all_stages(grace_s: float = 10.0) -> None:
    """Interrupt every running DVC process of this study (SIGINT, then SIGKILL after ``grace_s``)."""
    _stopping.set()
    with _live_lock:
        procs = list(_live)
    _stop(procs, grace_s)


def _stop(procs: list[subprocess.Popen], grace_s: float) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of the stage's group is left


def run_dvc(args: list[str], cwd: Path, env: Mapping[str, str] | None = None, log=None) -> str:
    """Run ``dvc <args>`` in ``cwd``, streaming its lines to ``log``; raise StageFailed on failure."""
    if _stopping.is_set():
        raise StageFailed("the study is stopping: no new stage starts")
    proc = subprocess.Popen(
        [dvc_bin(), *args],
        cwd=cwd,
        env=dict(env or os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        start_new_session=True,
    )
    with _live_lock:
        _live.add(proc)
    lines: list[str] = []  # everything, for the error's tail; the log gets the condensed stream
    missing = MissingCacheLines()
    last_progress = 0.0
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            lines.append(line)
            if log is None or not line:
                continue
            if _PROGRESS.search(line):
                # A progress bar redraws on every step: one line in 10 s is enough to watch it.
                if time.monotonic() - last_progress < 10:
                    continue
                last_progress = time.monotonic()
            for shown in missing.feed(line):
                log.info("%s", shown)
        if log is not None:
            for shown in missing.flush():
                log.info("%s", shown)
        proc.wait()
    except BaseException:
        # The caller was interrupted: Ctrl-C, or on an agent the worker's SIGTERM when the study
        # cancels the stage's flow run. DVC runs in a session of its own, so it must be stopped
        # here, or the stage would go on computing for a study that no longer waits for it.
        _stop([proc], grace_s=10.0)
        raise
    finally:
        with _live_lock:
            _live.discard(proc)
    if proc.returncode != 0:
        tail = "\n".join(lines[-40:])
        raise StageFailed(f"`dvc {' '.join(args)}` failed in {cwd} (exit {proc.returncode}):\n{tail}")
    return "\n".join(lines)


def stage_address(study: str, name: str) -> str:
    """How DVC names stage ``name`` of the study in folder ``study`` from the checkout's root: the root
    study's stages by their names (``train@ce``), a pipeline's by its dvc.yaml and name
    (``pipelines/hydro/dvc.yaml:train@ce``), as ``dvc repro`` and its log write them. :func:`study_of` reads one back.
    """
    return name if study in ("", ".") else f"{Path(study).as_posix()}/dvc.yaml:{name}"


def study_of(stage: str) -> tuple[str, str]:
    """A stage's address -> (its study's folder, its name in that folder's dvc.yaml):
    ``pipelines/hydro/dvc.yaml:train@ce`` -> (``pipelines/hydro``, ``train@ce``);
    ``train@ce`` -> (``.``, ``train@ce``)."""
    dvcfile, sep, name = stage.rpartition(":")
    return (Path(dvcfile).parent.as_posix() if sep else "."), name


def share_checkout_config(checkout: Path, study: str) -> None:
    """Make ``study`` a DVC project of its own if it is not one, and point it at the checkout's
    cache and default remote (in its git-ignored ``.dvc/config.local``)."""
    from dvc.repo import Repo

    folder = (checkout / study).resolve()
    if folder == checkout.resolve():
        return
    if not (folder / ".dvc").is_dir():
        Repo.init(str(folder), subdir=True).close()
    cache_dir = cache_dir_of(checkout)
    with Repo(str(checkout)) as root:
        remote = root.config["core"].get("remote")
        url = root.config["remote"][remote]["url"] if remote else None
    write_local_config(folder, cache_dir, url)


def recomputed_upstream(output: str, stage: str) -> list[str]:
    """Stages other than ``stage`` that ``dvc repro`` ran instead of restoring from the run-cache."""
    ran = []
    for line in output.splitlines():
        if line.startswith("Running stage '"):
            name = line.split("'")[1]
            if name != stage:
                ran.append(name)
    return ran


def reproduce_stage(workspace: Workspace, stage: str, env: Mapping[str, str], log) -> None:
    """``dvc repro <stage>`` in the workspace's study folder, pulling from and pushing to the remote
    when it has one."""
    pull = ["--pull"] if workspace.remote else []
    env = dict(env)
    # The stage runs the workspace's code, the code DVC hashed as its deps, not whatever
    # checkout the environment's editable install points at (an agent's may be at another commit).
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(workspace.path), env.get("PYTHONPATH")) if p)
    if env.get(STAGE_BIN_ENV):
        # The stage commands come from the compute environment (vLLM, CUDA torch), which
        # cannot hold Prefect; DVC finds `aligntrain` there first.
        env["PATH"] = f"{env[STAGE_BIN_ENV]}{os.pathsep}{env.get('PATH', '')}"
    study, name = study_of(stage)
    folder = workspace.path / study
    output = run_dvc(["repro", *pull, name], folder, env, log)
    for upstream in recomputed_upstream(output, name):
        log.warning("upstream stage %s was not in the run-cache and was recomputed in %s's workspace", upstream, stage)
    if workspace.remote:
        run_dvc(["push", "--run-cache"], folder, env, log)
        push_uncached_outputs(folder, name, log)


def push_uncached_outputs(folder: Path, name: str, log) -> None:
    """Push the objects of stage ``name``'s git-tracked outputs (metrics, plot CSVs) to the remote.

    DVC's run-cache entry restores them (it commits them to the cache when it saves
    the entry), and ``dvc repro --pull`` fetches them for the entry, but ``dvc push
    --run-cache`` sends only the outputs of the workspace's ``dvc.lock`` that DVC caches.
    Without this the submitter would find the entry incomplete and compute the stage again.
    ``folder`` is the study's folder (a DVC project of its own).
    """
    from dvc.repo import Repo

    dvcfile = (folder / "dvc.yaml").resolve()
    with Repo(str(folder)) as repo:
        (target,) = [s for s in repo.index.stages if s.name == name and Path(s.dvcfile.path).resolve() == dvcfile]
        hashes = [out.hash_info for out in target.outs if not out.use_cache and out.hash_info]
        if hashes:
            result = repo.cloud.push(hashes)
            if result.failed:
                raise StageFailed(f"{name}: could not push {len(result.failed)} output object(s) to the remote")
            log.info("%s: %d git-tracked output object(s) pushed with the run-cache", name, len(hashes))


@task(name="dvc-stage", cache_policy=NO_CACHE)
def run_stage_in_workspace(stage: str, checkout: str, study_id: str, env: dict[str, str]) -> str:
    """One stage, locally, in a fresh copy of ``checkout`` that shares its DVC cache."""
    log = get_run_logger()
    workspace = Workspace.copy_of(Path(checkout), study_id, stage)
    log.info("stage %s in workspace %s", stage, workspace.path)
    reproduce_stage(workspace, stage, {**os.environ, **env}, log)
    shutil.rmtree(workspace.path, ignore_errors=True)
    return stage


@task(name="reproduce-from-run-cache", cache_policy=NO_CACHE)
def reproduce_from_run_cache(
    checkout: str, pull: bool, env: dict[str, str], computed_here: list[str], study: str = "."
) -> str:
    """The final ``dvc repro`` of the study in the submitting checkout (in the study's folder): every
    stage restored, none computed but ``computed_here`` (the stages the run-cache cannot hold)."""
    log = get_run_logger()
    args = ["repro", "--pull", "dvc.yaml"] if pull else ["repro", "dvc.yaml"]
    output = run_dvc(args, Path(checkout) / study, {**os.environ, **env}, log)
    ran = set(recomputed_upstream(output, stage="")) - {study_of(stage)[1] for stage in computed_here}
    if ran:
        log.warning("the final reproduction computed %s (not in the run-cache)", ", ".join(sorted(ran)))
    return output


def check_remote(url: str) -> None:
    """Fail before any work, naming the remote, when the DVC remote cannot be reached."""
    if "://" not in url:
        if not Path(url).is_dir():
            raise StageFailed(f"DVC remote {url} is not reachable from this machine (no such directory)")
        return
    out = subprocess.run([dvc_bin(), "ls-url", url], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise StageFailed(f"DVC remote {url} is not reachable from this machine: {out.stderr.strip()[-500:]}")


@task(name="dvc-stage-on-agent", cache_policy=NO_CACHE)
def run_stage_in_clone(
    stage: str,
    repo_url: str,
    commit: str,
    study_id: str,
    remote_url: str,
    env: dict[str, str],
    workspaces: str,
    cache_dir: str,
) -> str:
    """One stage on an agent: clone the commit, pull inputs, run, push outputs and the run-cache."""
    log = get_run_logger()
    check_remote(remote_url)
    workspace = Workspace.clone_of(repo_url, commit, Path(workspaces), study_id, stage, Path(cache_dir), remote_url)
    log.info("stage %s of study %s at %s in workspace %s", stage, study_id, commit[:12], workspace.path)
    reproduce_stage(workspace, stage, {**os.environ, **env}, log)
    shutil.rmtree(workspace.path, ignore_errors=True)
    return stage
