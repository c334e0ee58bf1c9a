#!/usr/bin/env python
"""Run a hub-scale study end to end on a CPU, on local stand-ins: ``scripts/run_standin.py pipelines/<study> DEST``.

DEST receives a copy of the checkout (tracked and untracked, non-ignored files) in a git
repository of its own. In DEST/pipelines/<study>: params.yaml becomes the study's
params.yaml with its standin.yaml laid over it (aligntrain.standins.overlay), the stand-in
models and data are written to ./standins (aligntrain.standins.write_standins), dvc.yaml is
generated for the merged parameters, and ``dvc repro pipelines/<study>/dvc.yaml`` runs every
stage in the pipeline's folder, as on a GPU machine (``--flow``: the study flow runs them, two at
a time, as ``flows/study.py --study pipelines/<study>``). Exit status: DVC's (the flow's).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aligntrain.standins import overlay, write_standins  # noqa: E402


def copy_checkout(source: Path, dest: Path) -> None:
    """The files git sees in ``source`` (tracked, and untracked but not ignored), copied to ``dest``."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=source, check=True, capture_output=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        path = source / name
        if path.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest / name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", help="the study's folder, e.g. pipelines/cat_math_sft (holds standin.yaml)")
    parser.add_argument("dest", help="scratch folder (emptied first)")
    parser.add_argument(
        "--flow", action="store_true", help="run through the study flow (flows/study.py --study), 2 stages at a time"
    )
    args = parser.parse_args()
    study = Path(args.study).resolve().relative_to(ROOT)
    if not (ROOT / study / "standin.yaml").is_file():
        parser.error(f"{study}/standin.yaml: no stand-in override for this study")
    dest = Path(args.dest).resolve()
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    copy_checkout(ROOT, dest)

    folder = dest / study
    params = overlay(
        yaml.safe_load((folder / "params.yaml").read_text()), yaml.safe_load((folder / "standin.yaml").read_text())
    )
    (folder / "params.yaml").write_text(
        f"# {study}/params.yaml with {study}/standin.yaml laid over it (scripts/run_standin.py)\n"
        + yaml.safe_dump(params, sort_keys=False)
    )
    write_standins(folder / "standins")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(dest)}
    subprocess.run(["aligntrain", "pipeline", "--root", str(study)], cwd=dest, env=env, check=True)
    git = ["git", "-c", "user.name=aligntrain", "-c", "user.email=aligntrain@localhost"]
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run(["git", "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-qm", f"stand-in run of {study}"], cwd=dest, check=True)
    # A DVC repository of its own: the copy's .dvc/config names the checkout's remote, not this one's cache.
    start = time.monotonic()
    if args.flow:
        command = [sys.executable, str(dest / "flows" / "study.py"), "--root", str(dest), "--study", str(study)]
    else:
        command = ["dvc", "repro", f"{study}/dvc.yaml"]
    done = subprocess.run(command, cwd=dest, env=env)
    print(f"stand-in {study}: {command[1]} exit {done.returncode} after {time.monotonic() - start:.0f} s in {dest}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
