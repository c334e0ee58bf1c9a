"""Stage flows under Prefect's test harness (a real temporary Prefect API)."""

from __future__ import annotations

import shutil
from pathlib import Path

import mlflow
import pandas as pd
import pytest
from prefect.testing.utilities import prefect_test_harness

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def prefect_api():
    with prefect_test_harness(server_startup_timeout=120):
        yield


def test_prepare_flow_writes_splits_and_logs(prefect_api, tmp_path, monkeypatch):
    from flows.stages import prepare_flow

    shutil.copy(ROOT / "profiles" / "smoke.yaml", tmp_path / "params.yaml")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    counts = prepare_flow("params.yaml", str(tmp_path))
    assert counts["train_rows"] == 256 and counts["test_rows"] == 16
    test = pd.read_parquet(tmp_path / "data" / "test.parquet")
    train = pd.read_parquet(tmp_path / "data" / "train.parquet")
    assert len(test) == 16 and not set(test.prompt) & set(train.prompt)
    (run,) = mlflow.search_runs(experiment_names=["aligntrain-smoke"], filter_string="tags.`aligntrain.stage` = 'prepare'", output_format="list")
    assert run.data.metrics["train_rows"] == 256


def test_malformed_row_stops_prepare_with_its_id(prefect_api, tmp_path, monkeypatch):
    """A local parquet data set (the hub path) with a broken row: the stage names it."""
    import yaml

    from aligntrain.problems import get_problem
    from flows.stages import prepare_flow

    rows = get_problem("arith").generate_splits({"train": 8, "validation": 4, "test": 4}, levels=[1], seed=1)
    files = {}
    for split, split_rows in rows.items():
        frame = pd.DataFrame(split_rows)
        if split == "train":
            frame.loc[3, "answer"] = "not a number"
        files[split] = str(tmp_path / f"{split}.parquet")
        frame.to_parquet(files[split])
    raw = yaml.safe_load((ROOT / "profiles" / "smoke.yaml").read_text())
    raw["problem"]["data_files"] = files
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    bad_id = rows["train"][3]["id"]
    with pytest.raises(ValueError, match=bad_id):
        prepare_flow("params.yaml", str(tmp_path))
    assert not (tmp_path / "data").exists()


@pytest.mark.slow
def test_study_flow_runs_the_whole_dag_in_one_process(prefect_api, tmp_path, monkeypatch):
    """`aligntrain study`: every stage as a subflow of one flow run, one fresh MLflow parent."""
    import yaml

    from aligntrain import tracking
    from flows.stages import study_flow

    raw = yaml.safe_load((ROOT / "profiles" / "smoke.yaml").read_text())
    raw["study"]["run"] = ["ce", "grpo"]
    raw["diagnostics"]["oracle"].update(variant="ce", rules=["grpo"])
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    summary = study_flow("params.yaml", str(tmp_path))
    assert summary["variants"] == 2
    assert (tmp_path / "reports" / "compare.md").is_file() and (tmp_path / "reports" / "index.md").is_file()
    assert not (tmp_path / "models" / "variants" / "pass_at_n").exists(), "only study.run is trained"
    runs = mlflow.search_runs(experiment_names=["aligntrain-smoke"], output_format="list")
    parents = {r.info.run_id for r in runs if r.data.tags.get("aligntrain.role") == "study"}
    children = [r for r in runs if r.data.tags.get("aligntrain.role") == "stage"]
    # prepare, pretrain, warmup, compare, oracle_gradient, synthetic, report + 4 stages per variant
    assert len(parents) == 1 and len(children) == 7 + 4 * 2
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == parents


def test_a_stage_runs_without_any_prefect_server(tmp_path):
    """No PREFECT_API_URL: the stage's flow runs in Prefect's ephemeral mode."""
    import os
    import subprocess
    import sys

    shutil.copy(ROOT / "profiles" / "smoke.yaml", tmp_path / "params.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_", "ALIGNTRAIN_"))}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    out = subprocess.run(
        [sys.executable, "-m", "flows.cli", "prepare", "--root", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "data" / "test.parquet").is_file()
    assert (tmp_path / "mlflow.db").is_file()
    assert "Finished in state Completed" in out.stdout + out.stderr
