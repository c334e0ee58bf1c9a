#!/usr/bin/env python
"""Run a hub-scale study end to end on a CPU, on local stand-ins: ``scripts/run_standin.py pipelines/<study> DEST``.

DEST receives a copy of the checkout (tracked and untracked, non-ignored files) in a git
repository of its own. In DEST/pipelines/<study>: params.yaml becomes the study's
params.yaml with its standin.yaml laid over it (aligntrain.study_folder.overlay), the stand-in
models and data are written to ./standins (aligntrain.standins.write_standins), dvc.yaml is
generated for the merged parameters (both by ``aligntrain standins`` and ``aligntrain pipeline``,
the copy's own code), and ``dvc repro`` in the pipeline's folder (a DVC project of its own) runs every
stage there, as on a GPU machine (``--flow``: the study flow runs them, two at
a time, as ``flows/study.py --study pipelines/<study>``). Exit status: DVC's (the flow's).

``--micro`` lays :data:`aligntrain.standins.MICRO` over the stand-in sizes (training of two steps,
the diagnostics' own sampling cut down): the wiring check of the tests, about a minute a study.
``--run a,b`` runs those variants of the catalog only. ``--processes N`` (and ``--accelerate
fsdp2.yaml``) runs the training stages as N processes under accelerate launch (params' ``launch``);
``--until train`` reproduces that stage and what it needs only; ``--set train.batch_size=2`` sets one
more parameter.

DEST is emptied first only when it is a folder this script made (it holds ``.aligntrain-scratch``)
or is empty; anything else is refused, and nothing is deleted.
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

from aligntrain.standins import MICRO, restrict_run  # noqa: E402
from aligntrain.study_folder import overlay  # noqa: E402
from tasks.workspace import copy_working_tree  # noqa: E402

SCRATCH_MARK = ".aligntrain-scratch"  # in every DEST this script made: the only folders it empties


def fresh_destination(dest: Path) -> None:
    """Empty ``dest`` if this script made it, create it if it is missing; refuse anything else."""
    if dest.exists() and not dest.is_dir():
        raise SystemExit(f"error: {dest} exists and is not a folder; nothing was changed")
    if dest.is_dir() and any(dest.iterdir()):
        if not (dest / SCRATCH_MARK).is_file():
            raise SystemExit(
                f"error: {dest} holds files that scripts/run_standin.py did not write (no {SCRATCH_MARK}); "
                "give a new or empty folder. Nothing was deleted."
            )
        shutil.rmtree(dest)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / SCRATCH_MARK).write_text("made by scripts/run_standin.py: emptied by its next run\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", help="the study's folder, e.g. pipelines/cat_math_sft (holds standin.yaml)")
    parser.add_argument("dest", help="scratch folder: new, empty, or made by an earlier run of this script")
    parser.add_argument(
        "--flow", action="store_true", help="run through the study flow (flows/study.py --study), 2 stages at a time"
    )
    parser.add_argument("--micro", action="store_true", help="the micro size (aligntrain.standins.MICRO)")
    parser.add_argument("--run", default="", help="comma-separated variants to run (default: the study's)")
    parser.add_argument("--processes", type=int, default=1, help="processes per training stage (launch.num_processes)")
    parser.add_argument(
        "--accelerate", default="", help="an accelerate config of the repository's accelerate/, e.g. fsdp2.yaml"
    )
    parser.add_argument("--until", default="", help="reproduce this stage and what it needs only (e.g. train)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="one more parameter, e.g. train.batch_size=2"
    )
    args = parser.parse_args()
    study = Path(args.study).resolve().relative_to(ROOT)
    if not (ROOT / study / "standin.yaml").is_file():
        parser.error(f"{study}/standin.yaml: no stand-in override for this study")
    source = ROOT / study
    params = overlay(
        yaml.safe_load((source / "params.yaml").read_text()), yaml.safe_load((source / "standin.yaml").read_text())
    )
    laid = "standin.yaml"
    if args.micro:
        params, laid = overlay(params, MICRO), laid + " and the micro size"
    if args.run:
        try:
            params = restrict_run(params, args.run.split(","))
        except ValueError as err:
            parser.error(f"--run: {err}")
    if args.processes > 1 or args.accelerate:
        launched = {"num_processes": args.processes}
        if args.accelerate:
            checkout = Path(os.path.relpath(ROOT, ROOT / study))  # ../.. from pipelines/<study>
            launched["config_file"] = (checkout / "accelerate" / args.accelerate).as_posix()
        params, laid = overlay(params, {"launch": launched}), laid + f" and launch {launched}"
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--set {item!r}: give KEY=VALUE")
        tree: dict = {}
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
        params, laid = overlay(params, tree), laid + f" and {key} = {value}"
    dest = Path(args.dest).resolve()
    fresh_destination(dest)
    copy_working_tree(ROOT, dest)

    folder = dest / study
    (folder / "params.yaml").write_text(
        f"# {study}/params.yaml with {laid} laid over it (scripts/run_standin.py)\n"
        + yaml.safe_dump(params, sort_keys=False)
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(dest)}
    # Both by the command line, in the copy's own code (its PYTHONPATH), as the stages will run.
    subprocess.run(["aligntrain", "standins", str(folder / "standins")], cwd=dest, env=env, check=True)
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
        command = ["dvc", "repro", *([args.until] if args.until else [])]
    # A study folder is a DVC project of its own (pipelines/<study>/.dvc): DVC runs there.
    done = subprocess.run(command, cwd=dest if args.flow else folder, env=env)
    print(f"stand-in {study}: {command[1]} exit {done.returncode} after {time.monotonic() - start:.0f} s in {dest}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
