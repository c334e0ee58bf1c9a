"""MLflow layout on a real temporary SQLite store: one parent per study, a child per stage."""

from __future__ import annotations

import os

import mlflow
import pytest

from aligntrain import tracking


@pytest.fixture()
def store(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    return uri


def _runs(filter_string=""):
    return mlflow.search_runs(experiment_names=["exp"], filter_string=filter_string, output_format="list")


def test_children_share_the_study_parent(store, tmp_path):
    for stage, variant in [("train", "ce"), ("train", "pass_at_n")]:
        with tracking.stage_run(
            study="s", experiment="exp", stage=stage, variant=variant, params={"train": {"steps": 3}}, root=tmp_path
        ) as run:
            run.log_metrics({"loss": 1.5, "eval": {"pass@1": 0.25}, "skip": float("nan"), "flag": True}, step=2)
    parents = _runs("tags.`aligntrain.role` = 'study'")
    children = _runs("tags.`aligntrain.role` = 'stage'")
    assert len(parents) == 1 and len(children) == 2
    parent_id = parents[0].info.run_id
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent_id}
    child = next(c for c in children if c.info.run_name == "train@pass_at_n")
    assert child.data.params["train.steps"] == "3"
    assert child.data.metrics == {"loss": 1.5, "eval.pass_at_1": 0.25}
    assert child.data.tags["aligntrain.variant"] == "pass_at_n"
    assert "aligntrain.git_commit" in child.data.tags
    history = mlflow.MlflowClient().get_metric_history(child.info.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(2, 1.5)]


def test_explicit_parent_from_environment(store, tmp_path, monkeypatch):
    first = tracking.start_study_run("s", "exp", tmp_path)
    second = tracking.start_study_run("s", "exp", tmp_path)
    monkeypatch.setenv(tracking.PARENT_ENV, first)
    with tracking.stage_run(study="s", experiment="exp", stage="compare", variant=None, params={}, root=tmp_path):
        pass
    (child,) = _runs("tags.`aligntrain.role` = 'stage'")
    assert child.data.tags["mlflow.parentRunId"] == first != second
    assert child.info.run_name == "compare"


def test_a_tracking_server_lost_mid_stage_costs_no_work(tmp_path, monkeypatch, caplog):
    """A real `mlflow server`, killed while a stage runs: logging warns once, then drops; the stage ends cleanly."""
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request
    from pathlib import Path

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mlflow_bin = Path(sys.executable).with_name("mlflow")
    server = subprocess.Popen(
        [
            str(mlflow_bin),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 'server.db'}",
            "--artifacts-destination",
            str(tmp_path / "a"),
            "--workers",  # one is enough for one client; the default four take ~20 s to start on 2 cores
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "mlflow server did not start"
                time.sleep(0.5)
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
        monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
        tracking.check_tracking_server(tmp_path)  # reachable: no error
        with tracking.stage_run(
            study="s", experiment="exp", stage="train", variant="ce", params={"a": 1}, root=tmp_path
        ) as run:
            run.log_metrics({"loss": 1.0}, step=1)
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
            start = time.monotonic()
            with caplog.at_level("WARNING"):
                for step in range(2, 50):  # a training loop's per-step logging
                    run.log_metrics({"loss": 1.0 / step}, step=step)
            assert time.monotonic() - start < 60, "a dead server stalls the loop"
            saved = tmp_path / "model.bin"
            saved.write_bytes(b"the stage's work")  # the stage goes on to its outputs
        assert run.failed and saved.is_file()
        assert caplog.text.count("the stage goes on without logging") == 1
        with pytest.raises(ConnectionError, match=uri):
            tracking.check_tracking_server(tmp_path)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)


def test_library_metric_names_mlflow_refuses_are_renamed_not_lost(store, tmp_path):
    """TRL names a reward metric after its function; a lambda's ``rewards/<lambda>/mean`` failed the whole batch.

    That failure used to disable the run's logging, end_run included: the RL stage's run stayed
    RUNNING and the study's end closed it as KILLED (the agents test caught it).
    """
    with tracking.stage_run(study="s", experiment="exp", stage="train", variant="rl", params={}, root=tmp_path) as run:
        run.log_metrics({"rewards/<lambda>/mean": 0.5, "loss": 1.0, "eval": {"pass@1": 0.25}}, step=1)
    assert not run.failed and run.transient_failures == 0
    (child,) = _runs("tags.`aligntrain.role` = 'stage'")
    assert child.info.status == "FINISHED"
    assert child.data.metrics == {"rewards/_lambda_/mean": 0.5, "loss": 1.0, "eval.pass_at_1": 0.25}


def test_a_transient_logging_failure_does_not_stop_logging_nor_leave_the_run_running(store, tmp_path, caplog):
    """A request that fails while the store still answers (a loaded server timing out) loses that call only.

    Before, the first failure dropped every later call, end_run included: the run stayed
    RUNNING and the study's end closed it as KILLED although the stage had finished.
    """
    with tracking.stage_run(study="s", experiment="exp", stage="train", variant="ce", params={}, root=tmp_path) as run:
        real = run._client.log_batch
        calls = {"n": 0}

        def flaky(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 1:
                raise TimeoutError("read timed out")
            return real(*args, **kwargs)

        run._client.log_batch = flaky
        with caplog.at_level("WARNING"):
            for step in (1, 2, 3):
                run.log_metrics({"loss": float(step)}, step=step)
    assert not run.failed and run.transient_failures == 1
    assert "the server answers: logging goes on" in caplog.text
    (child,) = _runs("tags.`aligntrain.role` = 'stage'")
    assert child.info.status == "FINISHED"
    history = mlflow.MlflowClient().get_metric_history(child.info.run_id, "loss")
    assert [m.step for m in history] == [2, 3]


def test_a_copied_study_logs_its_artifacts_into_its_own_mlruns(tmp_path, monkeypatch, caplog):
    """cp -r study study2; cd study2; a stage: its artifacts land in study2/mlruns, nothing new in study/."""
    import shutil
    from pathlib import Path

    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)

    def run_a_stage(folder: Path) -> str:
        # A fresh stage process: the default store, mlflow.db in the study folder (mlflow.set_tracking_uri
        # exports MLFLOW_TRACKING_URI, which would carry the previous folder's store over).
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
        monkeypatch.chdir(folder)
        Path("metrics.json").write_text("{}")
        with tracking.stage_run(
            study="s", experiment="exp", stage="evaluate", variant="ce", params={}, root=Path(".")
        ) as run:
            run.log_artifact("metrics.json", artifact_path="out")
        return run.run_id

    def files(folder: Path) -> list[Path]:
        return sorted(p for p in (folder / "mlruns").rglob("*") if p.is_file())

    original, copy = tmp_path / "study", tmp_path / "study2"
    original.mkdir()
    first = run_a_stage(original)
    assert list(original.glob(f"mlruns/*/{first}/artifacts/out/metrics.json"))
    shutil.copytree(original, copy)
    before = files(original)
    with caplog.at_level("WARNING"):
        second = run_a_stage(copy)
    assert list(copy.glob(f"mlruns/*/{second}/artifacts/out/metrics.json")), "the copy logs into its own mlruns/"
    assert files(original) == before, "nothing new in the original's mlruns/"
    assert str(original / "mlruns") in caplog.text and str(copy) in caplog.text
    third = run_a_stage(copy)  # settled: the next stage neither warns nor moves again
    assert list(copy.glob(f"mlruns/*/{third}/artifacts/out/metrics.json"))
    client = mlflow.MlflowClient()
    assert client.get_run(third).info.experiment_id == client.get_run(second).info.experiment_id
    assert client.get_run(first).info.artifact_uri.startswith(str(original)), "the earlier runs stay as they were"


def test_runs_left_running_by_kill_9_are_closed_killed_by_the_rerun(store, tmp_path):
    """A study killed with -9 leaves its parent and its stage RUNNING; the next reproduction closes them KILLED."""
    import signal
    import subprocess
    import sys
    import textwrap

    parent = tracking.start_study_run("s", "exp", tmp_path)
    killed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(f"""
            import os, signal
            from pathlib import Path
            from aligntrain import tracking
            os.environ[tracking.PARENT_ENV] = {parent!r}
            with tracking.stage_run(study="s", experiment="exp", stage="train", variant="ce", params={{}},
                                    root=Path({str(tmp_path)!r})):
                os.kill(os.getpid(), signal.SIGKILL)
        """)],
        env=dict(os.environ),
        cwd=tmp_path,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL
    (stage,) = _runs("attributes.run_name = 'train@ce'")
    assert (stage.info.status, mlflow.get_run(parent).info.status) == ("RUNNING", "RUNNING"), "what kill -9 leaves"

    # `dvc repro` alone (no new parent): the stage's next attempt closes the killed one.
    os.environ[tracking.PARENT_ENV] = parent
    try:
        with tracking.stage_run(study="s", experiment="exp", stage="train", variant="ce", params={}, root=tmp_path):
            pass
    finally:
        del os.environ[tracking.PARENT_ENV]
    statuses = sorted(r.info.status for r in _runs("attributes.run_name = 'train@ce'"))
    assert statuses == ["FINISHED", "KILLED"]

    # A new reproduction of the folder (the flow, scripts/plain_repro.sh) closes the killed parent.
    other_folder = tracking.start_study_run("s", "exp", tmp_path / "elsewhere")  # another checkout: left alone
    fresh = tracking.start_study_run("s", "exp", tmp_path)
    status = {r.info.run_id: r.info.status for r in _runs("tags.`aligntrain.role` = 'study'")}
    assert status == {parent: "KILLED", other_folder: "RUNNING", fresh: "RUNNING"}


def test_runs_urls_open_the_runs_table_and_filter_each_variant(store, tmp_path):
    """The links `aligntrain ui` prints: the runs table of the study's experiment, and per variant that table
    filtered by the variant tag; the filter, decoded, selects exactly that variant's stage runs."""
    import urllib.parse

    for variant in ("ce", "pass_at_n"):
        with tracking.stage_run(study="s", experiment="exp", stage="train", variant=variant, params={}, root=tmp_path):
            pass
    exp_id = mlflow.get_experiment_by_name("exp").experiment_id
    urls = tracking.runs_urls("exp", ["ce", "pass_at_n"], "http://127.0.0.1:5000/", tmp_path)
    assert urls["runs"] == f"http://127.0.0.1:5000/#/experiments/{exp_id}/runs"
    assert set(urls) == {"runs", "ce", "pass_at_n"}
    for variant in ("ce", "pass_at_n"):
        table, query = urls[variant].split("?searchFilter=")
        assert table == urls["runs"]
        found = _runs(urllib.parse.unquote(query))
        assert [r.info.run_name for r in found] == [f"train@{variant}"]


def test_runs_urls_of_a_study_not_yet_run_name_the_experiment(store, tmp_path):
    with pytest.raises(ValueError, match="no experiment 'never-run'.*run the study first"):
        tracking.runs_urls("never-run", ["ce"], "http://127.0.0.1:5000", tmp_path)
