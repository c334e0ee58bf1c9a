"""Shared fixtures: a tiny tokenizer/model pair and small arith rows, the commands' PATH, the smoke reference."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(1)


TESTS = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


@pytest.fixture(scope="session", autouse=True)
def stage_commands(request, tmp_path_factory, worker_id):
    """The tests' commands: this environment's ``aligntrain`` and ``dvc`` first on PATH.

    In a run with end-to-end (slow) tests, the warm stage host's shim comes before them
    (tests/stagehost.py): stages then start in a second instead of ten. One host serves every
    pytest-xdist worker; ``STAGEHOST=0`` runs every stage as a fresh process instead. A test whose
    subject is the processes themselves drops ``STAGEHOST_SOCKET`` from its commands' environment."""
    sys.path.insert(0, str(TESTS))
    import stagehost

    path = os.environ["PATH"]
    os.environ["PATH"] = f"{BIN}{os.pathsep}{path}"
    slow = any(item.get_closest_marker("slow") for item in request.session.items)
    if slow and os.environ.get("STAGEHOST", "1") != "0":
        from filelock import FileLock

        shared = _shared_temp(tmp_path_factory, worker_id)
        with FileLock(str(shared / "stagehost.lock")):
            address = _stage_host(shared, owner=os.getpid() if worker_id == "master" else os.getppid())
        shim = stagehost.write_shim(str(shared / "stagehost-bin"))
        os.environ[stagehost.SOCKET_ENV] = address
        os.environ["PATH"] = f"{shim}{os.pathsep}{BIN}{os.pathsep}{path}"
    yield
    os.environ["PATH"] = path
    os.environ.pop(stagehost.SOCKET_ENV, None)


@pytest.fixture(autouse=True)
def tracking_environment_restored():
    """Each test ends with the tracking variables it started with. ``mlflow.set_tracking_uri`` (an
    in-process stage run) exports ``MLFLOW_TRACKING_URI``; left there, it would send every later
    subprocess of the same xdist worker to that test's store instead of its own study folder's."""
    names = ("MLFLOW_TRACKING_URI", "ALIGNTRAIN_PARENT_RUN_ID")
    saved = {name: os.environ.get(name) for name in names}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _shared_temp(tmp_path_factory, worker_id) -> Path:
    """The base temporary folder of the pytest run, the same for every xdist worker."""
    base = tmp_path_factory.getbasetemp()
    return base if worker_id == "master" else base.parent


def _stage_host(shared: Path, owner: int) -> str:
    """The socket of the run's stage host, started by the first worker that asks; it ends with ``owner``."""
    record = shared / "stagehost.address"
    if record.is_file():
        return record.read_text()
    import tempfile

    address = os.path.join(tempfile.mkdtemp(prefix="aligntrain-stagehost-"), "socket")  # short: AF_UNIX limit
    subprocess.Popen(
        [sys.executable, str(TESTS / "stagehost.py"), address, str(owner), str(shared / "stagehost.log")],
        stdin=subprocess.DEVNULL,
        stdout=open(shared / "stagehost.out", "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while not os.path.exists(address) and time.monotonic() < deadline:
        time.sleep(0.05)
    record.write_text(address)
    return address


GPU_SET_TEST = "test_the_gpu_set_resolves_with_pips_resolver"


@pytest.fixture(scope="session", autouse=True)
def gpu_set_resolving(request, tmp_path_factory, worker_id):
    """``scripts/check_gpu_env.sh`` started in the background at the run's first test, where its test
    (test_gpu_env.py) is selected: pip's resolver mostly waits on the package index (about 105 s,
    40 s of it CPU), so the wait overlaps the CPU-bound tests. The folder of its ``gpu-resolve.log``
    and ``gpu-resolve.rc`` (the exit status, written last)."""
    if not any(item.name == GPU_SET_TEST for item in request.session.items):
        return None
    from filelock import FileLock

    shared = _shared_temp(tmp_path_factory, worker_id)
    with FileLock(str(shared / "gpu-resolve.lock")):
        if not (shared / "gpu-resolve.started").exists():
            subprocess.Popen(
                ["bash", "-c", 'bash scripts/check_gpu_env.sh > "$1" 2>&1; echo $? > "$2.tmp"; mv "$2.tmp" "$2"', "-"]
                + [str(shared / "gpu-resolve.log"), str(shared / "gpu-resolve.rc")],
                cwd=TESTS.parent,
                env={**os.environ, "PYTHON": sys.executable},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            (shared / "gpu-resolve.started").touch()
    return shared


def pytest_terminal_summary(terminalreporter, config):
    """How many stage commands the stage host served, and why any ran as fresh processes."""
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None or hasattr(config, "workerinput"):
        return
    log = factory.getbasetemp() / "stagehost.log"
    if log.is_file():
        lines = log.read_text().splitlines()
        served = sum(line.startswith("served ") for line in lines)
        fallbacks = [line for line in lines if line.startswith("fallback ")]
        terminalreporter.write_line(f"stage host: {served} stage commands served, {len(fallbacks)} run fresh")
        seconds: dict[str, list[float]] = {}
        for line in lines:
            if line.startswith("ended "):
                _, command, _pid, took = line.split(" ")
                seconds.setdefault(command, []).append(float(took))
        if seconds:
            terminalreporter.write_line(
                "  stage seconds by command (count, total): "
                + ", ".join(f"{c} {len(t)} {sum(t):.0f}" for c, t in sorted(seconds.items(), key=lambda x: -sum(x[1])))
            )
        for line in [*[x for x in lines if x.startswith("host ")], *fallbacks[:10]]:
            terminalreporter.write_line(f"  {line}")


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
    """The smoke study by `dvc repro` alone (scripts/plain_repro.sh), in a scratch copy: the reference run.

    Built once per pytest run: under pytest-xdist the workers share the base temporary folder,
    and the first worker that asks builds the study under a file lock while the others wait for it.
    """
    from filelock import FileLock

    shared = _shared_temp(tmp_path_factory, worker_id)
    study = shared / "plain-smoke" / "study"
    with FileLock(str(shared / "plain-smoke.lock")):
        if not (study / "reports" / "compare.json").is_file():
            _build_plain_smoke_study(study)
    return study


def _build_plain_smoke_study(study):
    import shutil

    from scratch_study import root_study_copy, smoke_params

    shutil.rmtree(study.parent, ignore_errors=True)  # a half-built study of an interrupted worker
    study.parent.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "ALIGNTRAIN_", "PREFECT_"))}
    root_study_copy(study, smoke_params(), env, "the smoke study")
    out = subprocess.run(
        [str(study / "scripts" / "plain_repro.sh")],
        cwd=study,
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


def _recorded_seconds(config) -> dict[str, float]:
    """Seconds per test file of this run's tiers, from the last record (tests/durations.json,
    scripts/record_test_durations.py): `-m slow` the slow tier, `-m "not slow"` the fast one,
    no marker expression (`make test`) both summed."""
    import json

    record = json.loads((TESTS / "durations.json").read_text()) if (TESTS / "durations.json").is_file() else {}
    tiers = {"slow": ("slow",), "not slow": ("fast",)}.get(config.getoption("markexpr", ""), ("fast", "slow"))
    seconds: dict[str, float] = {}
    for tier in tiers:
        for path, s in record.get(tier, {}).items():
            seconds[path] = seconds.get(path, 0.0) + s
    return seconds


def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class StandInsApart(LoadFileScheduling):
        """Files as units (the stand-in studies' tests each a unit), the longest given out first."""

        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            # The GPU-set test waits on a resolve: a unit of its own, so that it can go out last.
            return nodeid if path.endswith(ONE_UNIT_PER_TEST) or nodeid.endswith(f"::{GPU_SET_TEST}") else path

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:
                # Longest processing time first: a long file started last keeps one worker busy
                # while the other idles (xdist orders by the number of tests, a poor proxy).
                seconds = _recorded_seconds(self.config)
                files = [scope.split("::", 1)[0] for scope in self.workqueue]

                def expected(unit) -> float:  # a test of a file split into units: its share of the file
                    if all(nodeid.endswith(f"::{GPU_SET_TEST}") for nodeid in unit[1]):
                        return 0.0  # it waits for the resolve started at the first test: last, it waits least
                    path = unit[0].split("::", 1)[0]
                    if path in seconds:
                        return seconds[path] / files.count(path)
                    return 0.05 * len(unit[1])

                units = sorted(self.workqueue.items(), key=lambda unit: -expected(unit))
                self.workqueue.clear()
                self.workqueue.update(units)
                self.ordered = True
            super()._assign_work_unit(node)

    return StandInsApart(config, log)
