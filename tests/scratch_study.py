"""A scratch copy of the checkout whose root study has the given parameters: the end-to-end tests' study.

The tests run a study (the smoke study's parameters, or a cut of them) away from the checkout, in a
git repository of its own: the files git sees here, ``params.yaml`` replaced, the checkout's own
results (``dvc.lock``, metrics, plots, reports) left out, and ``dvc.yaml`` written for the new
parameters by the copy's ``aligntrain pipeline``. Users run a study in place instead
(``make study STUDY=pipelines/smoke``); the copy keeps the tests off the checkout's outputs.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tasks.workspace import copy_working_tree

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "pipelines" / "smoke" / "params.yaml"  # generated from pipelines/smoke/overrides.yaml


def smoke_params() -> dict[str, Any]:
    """The smoke study's parameters (a fresh mapping each call: tests cut it)."""
    return yaml.safe_load(SMOKE.read_text())


def root_study_copy(dest: Path, params: Mapping[str, Any], env: Mapping[str, str], message: str = "study") -> Path:
    """``dest``: a new git repository copied from the checkout, with ``params`` as its root study's."""
    copy_working_tree(ROOT, dest)
    (dest / "params.yaml").write_text(yaml.safe_dump(dict(params), sort_keys=False))
    for name in ("dvc.lock", "metrics", "plots", "reports"):  # the checkout's results, not this study's
        path = dest / name
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    subprocess.run(["aligntrain", "pipeline"], cwd=dest, env=dict(env), check=True, capture_output=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=dest, check=True)
    subprocess.run(["git", "add", "-A"], cwd=dest, check=True)
    git = ["git", "-c", "user.name=aligntrain", "-c", "user.email=aligntrain@localhost"]
    subprocess.run([*git, "commit", "-qm", message], cwd=dest, check=True)
    return dest
