"""End to end: the smoke study by `dvc repro` alone, and by the study flow (stages concurrently).

The reference (`plain_smoke_study`, tests/conftest.py) runs the real chain without
Prefect: DVC stages calling the `aligntrain` command line, MLflow into the copy's
SQLite store. The tests check its outputs, MLflow runs and DVC's view of what a
change invalidates. Then one run of the local study flow is stopped by Ctrl-C during
pretraining and run again: it must stop in seconds, leave no process, resume from the
checkpoint, and end with the files of the uninterrupted plain run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from scratch_study import root_study_copy, smoke_params

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path, scratch: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    for var in ("MLFLOW_TRACKING_URI", "ALIGNTRAIN_PARENT_RUN_ID", "PREFECT_API_URL"):
        env.pop(var, None)
    env["PREFECT_HOME"] = str(scratch / "prefect-home")
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise AssertionError(f"{cmd} failed ({out.returncode}):\n{out.stdout[-4000:]}\n{out.stderr[-6000:]}")
    return out


@pytest.fixture(scope="module")
def smoke_study(plain_smoke_study) -> Path:
    return plain_smoke_study


def test_outputs_and_metrics(smoke_study):
    params = yaml.safe_load((smoke_study / "params.yaml").read_text())
    variants = params["study"]["run"]
    assert set(params["variants"]) - set(variants), "the smoke catalog has a variant the study does not run"
    m = params["rollouts"]["samples_per_prompt"]
    for variant in variants:
        assert (smoke_study / "models" / "variants" / variant / "config.json").is_file()
        metrics = json.loads((smoke_study / "metrics" / f"{variant}.json").read_text())
        overall = metrics["overall"]
        assert overall["prompts"] == params["problem"]["test_size"]
        curve = [overall[f"pass@{k}"] for k in (1, 2, 4, m)]
        assert all(0.0 <= v <= 1.0 for v in curve)
        assert curve == sorted(curve), "pass@k is non-decreasing in k"
        assert set(metrics["by_level"]) == {f"level{lv}" for lv in params["problem"]["levels"]}
    compare = json.loads((smoke_study / "reports" / "compare.json").read_text())
    assert set(compare) == set(variants) | {"primary"}
    primary = compare["primary"]
    assert primary["delta_low"] <= primary["delta"] <= primary["delta_high"] and 0 < primary["p_value"] <= 1
    compared = (smoke_study / "reports" / "compare.md").read_text()
    assert "Fixed in `compare.primary` before the run: `pass_at_n` − `ce`, pass@8 on the validation split" in compared
    assert "### pass@k, validation split" in compared
    for variant in variants:  # the held-out split, scored per prompt
        held = json.loads((smoke_study / "metrics" / "validation" / f"{variant}.json").read_text())
        assert held["overall"]["prompts"] == params["problem"]["validation_size"]
    assert "pass@1_delta" in compare["pass_at_n"] and "pass@1_delta" not in compare["ce"]
    assert (smoke_study / "reports" / "scaling.png").read_bytes()[:4] == b"\x89PNG"
    assert "| pass_at_n |" in (smoke_study / "reports" / "compare.md").read_text()


def test_diagnostics_and_report(smoke_study):
    params = yaml.safe_load((smoke_study / "params.yaml").read_text())
    for variant in params["study"]["run"]:
        summary = json.loads((smoke_study / "metrics" / "diagnostics" / f"{variant}.json").read_text())
        assert 0.0 <= summary["confidence"]["greedy_accuracy"] <= 1.0
        for e in summary["efficiency"].values():
            assert e["median_efficiency"] is None or 0.0 <= e["median_efficiency"] <= 1.0
            assert e["median_paper_ratio"] is None or 0.5 <= e["median_paper_ratio"] <= 1.0
    oracle = pd.read_csv(smoke_study / "diagnoses" / "oracle_gradient" / "summary.csv")
    assert set(oracle.target) == {"pass", "majority"} and set(oracle.variant) == {"grpo", "rloo"}
    finite = oracle["mean"].dropna()
    assert ((finite >= -1) & (finite <= 1)).all()
    report = (smoke_study / "reports" / "index.md").read_text()
    for heading in (
        "## Setup",
        "## Primary endpoint",
        "## Scaling curves",
        "## Held-out prompts: the validation split",
        "## Alignment coefficient",
        "## Overconfidence",
        "## Diagonal-approximation efficiency",
        "## QQ tail fits",
        "## Oracle-gradient cosine",
        "## Synthetic checks",
    ):
        assert heading in report
    test_size = params["problem"]["test_size"]
    assert re.search(
        rf"Greedy answers wrong with π ≥ 0\.5, of {test_size} test prompts: `warmup` \d+, `ce` \d+", report
    )
    for link in re.findall(r"\]\((figures/[^)]+\.png)\)", report):
        assert (smoke_study / "reports" / link).read_bytes()[:4] == b"\x89PNG", link


def test_mlflow_runs(smoke_study):
    import mlflow

    variants = yaml.safe_load((smoke_study / "params.yaml").read_text())["study"]["run"]
    mlflow.set_tracking_uri(f"sqlite:///{smoke_study / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["aligntrain-smoke"], output_format="list")
    parents = [r for r in runs if r.data.tags.get("aligntrain.role") == "study"]
    children = [r for r in runs if r.data.tags.get("aligntrain.role") == "stage"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED", "the parent run ends with the study"
    names = {r.info.run_name for r in children}
    expected = {"prepare", "pretrain", "warmup", "compare", "oracle_gradient", "synthetic", "report"} | {
        f"{stage}@{v}" for stage in ("train", "rollouts", "evaluate", "diagnose") for v in variants
    }
    assert names == expected
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    unfinished = {r.info.run_name: r.info.status for r in children if r.info.status != "FINISHED"}
    assert not unfinished, f"every stage ends its run: {unfinished}"
    rl = next(r for r in children if r.info.run_name == "train@grpo")
    assert "rewards/arith/mean" in rl.data.metrics, "TRL's reward metric, named after the problem"
    train = next(r for r in children if r.info.run_name == "train@pass_at_n")
    assert train.data.params["variant.budget"] == "4"
    history = mlflow.MlflowClient().get_metric_history(train.info.run_id, "strategy_weight")
    assert len(history) >= 2, "per-step training metrics are logged"
    rl = next(r for r in children if r.info.run_name == "train@grpo")
    assert rl.data.params["variant.rule"] == "grpo_z" and "wall_seconds" in rl.data.metrics
    evaluate = next(r for r in children if r.info.run_name == "evaluate@ce")
    assert 0 <= evaluate.data.metrics["overall.pass_at_1"] <= 1
    assert evaluate.data.tags["aligntrain.git_commit"] != "unknown"


def test_dvc_knows_what_a_change_invalidates(smoke_study):
    status = _run([str(BIN / "dvc"), "status", "dvc.yaml", "--json"], cwd=smoke_study, scratch=smoke_study.parent)
    assert json.loads(status.stdout or "{}") == {}, "nothing to do right after a repro"
    params_file = smoke_study / "params.yaml"
    original = params_file.read_text()
    try:
        params = yaml.safe_load(original)
        # rloo is not in study.run: no training stage re-runs; only the oracle-gradient
        # diagnostic, which compares the rules of the catalog's RL variants, is affected.
        params["variants"]["rloo"]["rule"] = "grpo"
        params_file.write_text(yaml.safe_dump(params, sort_keys=False))
        status = _run([str(BIN / "dvc"), "status", "dvc.yaml", "--json"], cwd=smoke_study, scratch=smoke_study.parent)
        assert set(json.loads(status.stdout or "{}")) <= {"oracle_gradient"}
        params["variants"]["pass_at_n"]["budget"] = 8
        params_file.write_text(yaml.safe_dump(params, sort_keys=False))
        status = _run([str(BIN / "dvc"), "status", "dvc.yaml", "--json"], cwd=smoke_study, scratch=smoke_study.parent)
        changed = set(json.loads(status.stdout))
        assert "train@pass_at_n" in changed
        assert not {"train@ce", "train@warmup", "train@grpo", "warmup", "pretrain", "prepare"} & changed
    finally:
        params_file.write_text(original)


# ---------------------------------------------------------------- the study flow, locally


@pytest.fixture(scope="module")
def flow_study(tmp_path_factory) -> dict:
    """The smoke study's `ce` through flows/study.py, two stages at a time: Ctrl-C during pretraining,
    then the same command again, to the end. SIGINT goes to the terminal's process group, as Ctrl-C sends it."""
    import signal
    import time

    import psutil

    scratch = tmp_path_factory.mktemp("flow")
    raw = smoke_params()
    raw["study"]["run"] = ["ce"]
    raw["diagnostics"]["oracle"]["variant"] = "ce"
    study = scratch / "study"
    home = str(scratch / "prefect-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "ALIGNTRAIN_", "PREFECT_"))}
    env.pop("STAGEHOST_SOCKET", None)  # its subject is the processes: each stage a fresh one
    env["PREFECT_HOME"] = home
    root_study_copy(study, raw, env)
    run = subprocess.Popen(
        [sys.executable, "flows/study.py"],
        cwd=study,
        env=env,
        stdout=open(scratch / "first.log", "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    # The smoke study pretrains 200 steps with a checkpoint every 10: seconds of training are
    # left when the first checkpoint appears, so the signal lands in the stage.
    deadline = time.monotonic() + 600
    while not list((study / "checkpoints").glob("pretrain-*/checkpoint-*/trainer_state.json")):
        assert run.poll() is None and time.monotonic() < deadline, (scratch / "first.log").read_text()[-3000:]
        time.sleep(0.1)
    start = time.monotonic()
    os.killpg(run.pid, signal.SIGINT)
    run.wait(timeout=120)
    stop_seconds = time.monotonic() - start
    time.sleep(1)
    try:
        os.killpg(run.pid, 0)
        group_left = True
    except ProcessLookupError:
        group_left = False
    leftovers = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("PREFECT_HOME") == home:
                leftovers.append(proc.cmdline())
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            pass
    again = _run([sys.executable, "flows/study.py"], cwd=study, scratch=scratch)
    return {
        "study": study,
        "scratch": scratch,
        "first_log": (scratch / "first.log").read_text(),
        "log": again.stdout + again.stderr,
        "stop_seconds": stop_seconds,
        "group_left": group_left,
        "leftovers": leftovers,
    }


def test_ctrl_c_ends_the_study_in_seconds_and_leaves_no_process(flow_study):
    assert flow_study["stop_seconds"] < 30, f"Ctrl-C took {flow_study['stop_seconds']:.0f} s"
    assert not flow_study["group_left"], "something is left in the terminal's process group"
    assert not flow_study["leftovers"], f"orphaned processes: {flow_study['leftovers']}"


def test_the_rerun_resumes_pretraining_and_closes_the_stopped_run(flow_study):
    import mlflow

    study, log = flow_study["study"], flow_study["log"]
    assert "pretrain" in log
    mlflow.set_tracking_uri(f"sqlite:///{study / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["aligntrain-smoke"], output_format="list")
    parents = sorted(
        (r for r in runs if r.data.tags.get("aligntrain.role") == "study"), key=lambda r: r.info.start_time
    )
    assert [p.info.status for p in parents] == ["KILLED", "FINISHED"]
    pretrains = [r for r in runs if r.info.run_name == "pretrain" and r.info.status == "FINISHED"]
    assert len(pretrains) == 1 and pretrains[0].data.metrics["resumed_from_step"] >= 10, "the re-run resumed"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[1].info.run_id]
    assert {r.info.status for r in children} == {"FINISHED"}


def test_the_resumed_flow_gives_the_files_of_a_plain_repro(flow_study, smoke_study):
    """Interrupted, resumed and run concurrently, the study still computes what the plain run computed."""
    study, log = flow_study["study"], flow_study["log"]
    assert "in the checkout at the end: compare, report" in log
    assert "the final reproduction computed" not in log, "every stage restored from the run-cache, none recomputed"
    for name in ("metrics/ce.json", "plots/curves/ce.csv", "metrics/diagnostics/ce.json"):
        assert (study / name).read_bytes() == (smoke_study / name).read_bytes(), name
    assert (study / "models" / "base" / "model.safetensors").read_bytes() == (
        smoke_study / "models" / "base" / "model.safetensors"
    ).read_bytes(), "the resumed pretraining ends where the uninterrupted one did"
    lock = yaml.safe_load((study / "dvc.lock").read_text())["stages"]
    reference = yaml.safe_load((smoke_study / "dvc.lock").read_text())["stages"]
    for stage in ("prepare", "pretrain", "warmup", "train@ce", "rollouts@ce", "evaluate@ce", "synthetic"):
        assert lock[stage] == reference[stage], stage
    status = _run([str(BIN / "dvc"), "status", "dvc.yaml", "--json"], cwd=study, scratch=study.parent)
    assert json.loads(status.stdout or "{}") == {}
    assert not list((study / "build" / "workspaces").glob("*/*")), "workspaces are removed after success"


def test_a_second_flow_run_does_nothing(flow_study):
    import mlflow

    study = flow_study["study"]
    mlflow.set_tracking_uri(f"sqlite:///{study / 'mlflow.db'}")
    before = len(mlflow.search_runs(experiment_names=["aligntrain-smoke"], output_format="list"))
    again = _run([sys.executable, "flows/study.py"], cwd=study, scratch=study.parent)
    assert "0 of 11 stages to run" in again.stdout + again.stderr
    assert len(mlflow.search_runs(experiment_names=["aligntrain-smoke"], output_format="list")) == before


def test_a_seed_added_to_a_run_study_trains_only_its_replicates(smoke_study, tmp_path):
    """study.seeds [1] on a copy of the finished smoke study, run cut to the primary's pair: `dvc repro
    compare` runs the pair's replicates (train, rollouts, evaluate under seed 1) and compare, nothing
    else; the replicate's model differs from seed 0's, and compare's intervals run over 2 seeds."""
    import shutil

    study = tmp_path / "study"
    shutil.copytree(smoke_study, study, symlinks=True)
    params = yaml.safe_load((study / "params.yaml").read_text())
    params["study"]["seeds"] = [1]
    # Only the endpoint's pair, for time: the other variants' stages are DVC's, as tested above. The
    # oracle probes a variant of the run (it is not upstream of compare: nothing of it runs again).
    params["study"]["run"] = [params["compare"]["baseline"], params["compare"]["primary"]["variant"]]
    params["diagnostics"]["oracle"]["variant"] = params["compare"]["baseline"]
    (study / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    _run([str(BIN / "aligntrain"), "pipeline"], cwd=study, scratch=tmp_path)
    out = _run([str(BIN / "dvc"), "repro", "compare"], cwd=study, scratch=tmp_path).stdout
    ran = set(re.findall(r"Running stage '([^']+)'", out))
    replicates = {f"{stage}@{v}--s1" for stage in ("train", "rollouts", "evaluate") for v in params["study"]["run"]}
    assert ran == replicates | {"compare"}, ran
    weights = [(study / "models" / "variants" / v / "model.safetensors").read_bytes() for v in ("ce", "ce--s1")]
    assert weights[0] != weights[1], "the replicate trained under its own seed"
    table = pd.read_csv(study / "reports" / "compare.csv")
    assert set(table.seeds) == {2} and set(table.split) == {"test", "validation"}
    assert "2 seeds" in (study / "reports" / "compare.md").read_text().splitlines()[0]
