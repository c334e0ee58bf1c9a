"""Shared fixtures: a tiny tokenizer/model pair and small arith rows."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def arith_rows():
    from aligntrain.problems import get_problem

    sizes = {"train": 48, "validation": 8, "test": 6}
    return get_problem("arith").generate_splits(sizes, levels=[1, 2], seed=0)


@pytest.fixture()
def tiny_model(arith_rows):
    """A fresh 2-layer Llama over the arith alphabet (random weights, seed 0)."""
    from aligntrain.models import build_char_tokenizer, build_tiny_llama

    texts = [r[f] for rows in arith_rows.values() for r in rows for f in ("prompt", "completion")]
    tokenizer = build_char_tokenizer(texts)
    model = build_tiny_llama(
        tokenizer, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_length=128, seed=0
    )
    return model, tokenizer


@pytest.fixture(scope="session")
def plain_smoke_study(tmp_path_factory, worker_id):
    """The smoke profile by `dvc repro` alone (scripts/run_profile.sh --plain): the reference run.

    Built once per pytest run: under pytest-xdist the workers share the base temporary folder,
    and the first worker that asks builds the study under a file lock while the others wait for it.
    """
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    study = shared / "plain-smoke" / "study"
    with FileLock(str(shared / "plain-smoke.lock")):
        if not (study / "reports" / "compare.json").is_file():
            _build_plain_smoke_study(study)
    return study


def _build_plain_smoke_study(study):
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    shutil.rmtree(study.parent, ignore_errors=True)  # a half-built study of an interrupted worker
    study.parent.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "ALIGNTRAIN_", "PREFECT_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    out = subprocess.run(
        [str(root / "scripts" / "run_profile.sh"), str(root / "profiles" / "smoke.yaml"), str(study), "--plain"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    if out.returncode != 0:
        raise AssertionError(f"plain smoke study failed:\n{out.stdout[-4000:]}\n{out.stderr[-6000:]}")


# Under `--dist loadfile` a file is one work unit of pytest-xdist. The stand-in studies are
# independent end-to-end runs of minutes each, so each of their tests is a unit of its own and the
# two workers share them; every other file stays whole, so its module fixtures are built once.
ONE_UNIT_PER_TEST = ("tests/test_standin_studies.py",)


def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class StandInsApart(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return nodeid if path.endswith(ONE_UNIT_PER_TEST) else path

    return StandInsApart(config, log)
