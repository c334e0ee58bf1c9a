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
