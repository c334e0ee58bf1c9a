"""The table of stages, the stage commands (no Prefect), and the dvc.yaml rendered from them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml

from aligntrain import pipeline, tracking
from aligntrain.config import load_params

ROOT = Path(__file__).resolve().parents[1]


def _cli(args: list[str], env: dict | None = None, block_prefect: bool = False, first: list[str] = ()):
    """``aligntrain <args>`` in a fresh interpreter; with ``block_prefect`` Prefect cannot be imported.

    ``first``: another command run before it, in the same interpreter (it must succeed)."""
    prelude = "import sys; sys.modules['prefect'] = None; " if block_prefect else ""
    code = prelude + "from aligntrain.cli import app; "
    if first:
        code += f"app({list(first)!r}, standalone_mode=False); "
    code += "app()"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "ALIGNTRAIN_", "PREFECT_"))}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _invoke(args: list[str]):
    """``aligntrain <args>`` in this process, where a fresh interpreter is not the subject."""
    from typer.testing import CliRunner

    from aligntrain.cli import app

    return CliRunner().invoke(app, args)


def test_dvc_yaml_is_rendered_from_the_table():
    """The committed dvc.yaml is what `aligntrain pipeline` writes for params.yaml (else: re-run it)."""
    expected = pipeline.render_dvc_yaml(load_params(ROOT / "params.yaml"))
    assert (ROOT / "dvc.yaml").read_text() == expected, "dvc.yaml is stale: run `aligntrain pipeline`"
    folders = pipeline.study_folders(ROOT)
    assert ROOT / "pipelines" / "hydro" in folders
    for folder in folders[1:]:
        expected = pipeline.render_dvc_yaml(load_params(folder / "params.yaml"), "../..")
        assert (folder / "dvc.yaml").read_text() == expected, f"{folder}/dvc.yaml: run `aligntrain pipeline --all`"


def test_a_pipelines_stages_run_in_its_folder_on_the_checkouts_code():
    """DVC runs a stage in its dvc.yaml's folder: data stays in the study, code deps point at the checkout."""
    stages = yaml.safe_load((ROOT / "pipelines" / "hydro" / "dvc.yaml").read_text())["stages"]
    assert "../../aligntrain/stages/training.py" in stages["pretrain"]["deps"]
    assert "data" in stages["pretrain"]["deps"] and stages["pretrain"]["outs"] == ["models/base"]
    code = [d for s in stages.values() for d in (s.get("do", s).get("deps") or []) if "aligntrain" in d]
    assert code and all(d.startswith("../../aligntrain/") for d in code)
    assert all((ROOT / "pipelines" / "hydro" / d).exists() for d in code)
    assert pipeline.code_root_of(ROOT) == "." and pipeline.code_root_of(ROOT / "pipelines" / "hydro") == "../.."


def test_each_study_is_a_dvc_project_of_its_own_on_the_roots_cache():
    """The root's DVC index holds the default study alone (so a bare `dvc status` there speaks of it);
    each pipelines/<study>/ is a subrepo whose index holds its own dvc.yaml and whose cache is the root's."""
    from dvc.repo import Repo

    with Repo(str(ROOT)) as repo:
        assert {Path(s.dvcfile.path).relative_to(ROOT).as_posix() for s in repo.index.stages} == {"dvc.yaml"}
        cache = Path(repo.cache.local_cache_dir).resolve()
    folders = pipeline.study_folders(ROOT)[1:]
    assert len(folders) >= 14
    for folder in folders:
        with Repo(str(folder)) as repo:
            files = {Path(s.dvcfile.path).resolve() for s in repo.index.stages}
            assert files == {(folder / "dvc.yaml").resolve()}, folder.name
            assert Path(repo.cache.local_cache_dir).resolve() == cache, folder.name
            assert repo.config["core"]["remote"] == "study", folder.name


def test_every_stage_of_dvc_yaml_is_in_the_table_and_back():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert list(stages) == [s.name for s in pipeline.STAGES]
    for stage in pipeline.STAGES:
        body = stages[stage.name]["do"] if stage.per_variant else stages[stage.name]
        assert body["cmd"].startswith(f"aligntrain {stage.command}")


def test_aggregating_stages_depend_on_each_file_not_on_folders():
    """compare and report read the study's variants file by file: a pool left by another experiment is no input."""
    params = load_params(ROOT / "params.yaml")
    stages = pipeline.dvc_pipeline(params)["stages"]
    for name in ("compare", "report"):
        deps = stages[name]["deps"]
        assert "pools" not in deps and "metrics/per_prompt" not in deps and "diagnoses" not in deps
    assert [d for d in stages["compare"]["deps"] if d.startswith("metrics/per_prompt/")] == [
        f"metrics/per_prompt/{v}.parquet" for v in params.run_variants
    ]
    assert f"pools/{params.run_variants[-1]}.parquet" in stages["report"]["deps"]


def test_held_out_splits_are_sampled_scored_and_compared_file_by_file():
    """rollouts.splits [test, validation]: each variant's pool and scores of the validation prompts sit in
    a folder of the split's name, and compare reads them file by file; the test split keeps its paths."""
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["rollouts"]["splits"] = ["test", "validation"]
    from aligntrain.config import parse_params

    params = parse_params(raw)
    stages = pipeline.dvc_pipeline(params)["stages"]
    rollouts, evaluate = stages["rollouts"]["do"], stages["evaluate"]["do"]
    assert rollouts["outs"] == ["pools/${item}.parquet", "pools/validation/${item}.parquet"]
    assert {"data/test.parquet", "data/validation.parquet"} <= set(rollouts["deps"])
    assert {"pools/${item}.parquet", "pools/validation/${item}.parquet"} <= set(evaluate["deps"])
    assert evaluate["outs"] == ["metrics/per_prompt/${item}.parquet", "metrics/per_prompt/validation/${item}.parquet"]
    assert [next(iter(m)) for m in evaluate["metrics"]] == ["metrics/${item}.json", "metrics/validation/${item}.json"]
    assert [d for d in stages["compare"]["deps"] if d.startswith("metrics/per_prompt/")] == [
        f"metrics/per_prompt/{v}.parquet" for v in params.run_variants
    ] + [f"metrics/per_prompt/validation/{v}.parquet" for v in params.run_variants]
    for bad in (["validation"], ["test", "test"], ["test", "train"]):
        raw["rollouts"]["splits"] = bad
        with pytest.raises(Exception, match="rollouts.splits"):
            parse_params(raw)


def test_every_stage_has_a_command_and_help():
    out = _invoke(["--help"])
    assert out.exit_code == 0
    for stage in pipeline.STAGES:
        assert stage.command in out.stdout


def test_a_stage_command_runs_where_prefect_cannot_be_imported(tmp_path):
    """The GPU environment cannot hold Prefect (vLLM's fastapi bound): stages must not need it."""
    shutil.copy(ROOT / "pipelines" / "smoke" / "params.yaml", tmp_path / "params.yaml")
    out = _cli(
        ["prepare", "--root", str(tmp_path)],
        env={"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'm.db'}"},
        block_prefect=True,
        first=["stages"],
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "data" / "test.parquet").is_file()
    assert out.stdout.startswith("prepare"), "`aligntrain stages` listed the stages first"


def test_prepare_writes_splits_and_logs_a_child_run(tmp_path, monkeypatch):
    from aligntrain.cli import run_stage

    shutil.copy(ROOT / "pipelines" / "smoke" / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    counts = run_stage(pipeline.get_stage("prepare"), "params.yaml", str(tmp_path), None, "")
    assert counts["train_rows"] == 256 and counts["test_rows"] == 16
    test = pd.read_parquet(tmp_path / "data" / "test.parquet")
    train = pd.read_parquet(tmp_path / "data" / "train.parquet")
    assert len(test) == 16 and not set(test.prompt) & set(train.prompt)
    (run,) = mlflow.search_runs(
        experiment_names=["aligntrain-smoke"], filter_string="tags.`aligntrain.stage` = 'prepare'", output_format="list"
    )
    assert run.data.metrics["train_rows"] == 256
    experiment = mlflow.get_experiment_by_name("aligntrain-smoke")
    assert experiment.tags[tracking.EXPERIMENT_KIND_TAG] == "custom_model_development", "opens in the training view"


def test_malformed_row_stops_prepare_with_its_id(tmp_path, monkeypatch):
    """A local parquet data set (the hub path) with a broken row: the stage names it and writes nothing."""
    from aligntrain.cli import run_stage
    from aligntrain.problems import get_problem

    rows = get_problem("arith").generate_splits({"train": 8, "validation": 4, "test": 4}, levels=[1], seed=1)
    files = {}
    for split, split_rows in rows.items():
        frame = pd.DataFrame(split_rows)
        if split == "train":
            frame.loc[3, "answer"] = "not a number"
        files[split] = str(tmp_path / f"{split}.parquet")
        frame.to_parquet(files[split])
    raw = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    raw["problem"]["data_files"] = files
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    with pytest.raises(ValueError, match=rows["train"][3]["id"]):
        run_stage(pipeline.get_stage("prepare"), "params.yaml", str(tmp_path), None, "")
    assert not (tmp_path / "data").exists()


def test_a_duplicated_test_split_stops_prepare_naming_the_rows(tmp_path, monkeypatch):
    """problem.data_files with the test split written twice: each prompt would be sampled twice as often."""
    from aligntrain.cli import run_stage
    from aligntrain.problems import get_problem

    rows = get_problem("arith").generate_splits({"train": 8, "validation": 4, "test": 4}, levels=[1], seed=1)
    files = {}
    for split, split_rows in rows.items():
        files[split] = str(tmp_path / f"{split}.parquet")
        pd.DataFrame(split_rows * (2 if split == "test" else 1)).to_parquet(files[split])
    raw = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    raw["problem"]["data_files"] = files
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    first = rows["test"][0]["id"]
    with pytest.raises(ValueError, match=re.escape(f"row id {first!r} is written twice: test row 0 and test row 4")):
        run_stage(pipeline.get_stage("prepare"), "params.yaml", str(tmp_path), None, "")
    assert not (tmp_path / "data").exists()


def test_a_read_only_tracking_store_is_one_line_before_any_work(tmp_path):
    """Was: 733 lines of SQLAlchemy traceback. Now one line naming the store, exit 2, nothing written."""
    import mlflow

    shutil.copy(ROOT / "pipelines" / "smoke" / "params.yaml", tmp_path / "params.yaml")
    db = tmp_path / "mlflow.db"
    mlflow.MlflowClient(f"sqlite:///{db}").search_experiments()  # an initialized store
    uri = f"sqlite:///file:{db}?mode=ro&uri=true"  # as root, a read-only store is one opened read-only
    out = _cli(["prepare", "--root", str(tmp_path)], env={"MLFLOW_TRACKING_URI": uri})
    assert out.returncode == 2
    errors = [line for line in out.stderr.splitlines() if "INFO mlflow" not in line]
    assert errors == [
        f"error: prepare: MLflow store {uri} cannot be used: (sqlite3.OperationalError) attempt to write a "
        "readonly database"
    ], out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db", "params.yaml"], "no data, no folders"


def test_a_full_disk_is_one_line_naming_the_file(tmp_path, monkeypatch, capsys):
    """ENOSPC while a stage writes its outputs: one line with the path, exit 2; the outputs stay as they were."""
    import errno

    import typer

    from aligntrain.cli import run_stage
    from aligntrain.stages import prepare

    shutil.copy(ROOT / "pipelines" / "smoke" / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    full = tmp_path / "data" / "train.parquet"

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(full))

    monkeypatch.setattr(prepare, "write_outputs", no_space)
    with pytest.raises(typer.Exit) as stopped:
        run_stage(pipeline.get_stage("prepare"), "params.yaml", str(tmp_path), None, "")
    assert stopped.value.exit_code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: prepare: No space left on device: {full}; nothing was lost: make room (or make it writable) "
        "and run the stage again, it resumes"
    )


def test_a_stale_dvc_yaml_is_named(tmp_path, monkeypatch):
    """dvc.yaml generated for other variants than study.run: compare stops before work, saying how to fix it."""
    shutil.copy(ROOT / "pipelines" / "smoke" / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'm.db'}")
    out = _invoke(["compare", "--root", str(tmp_path), "--variants", "warmup,ce"])
    assert out.exit_code == 2
    assert "run `aligntrain pipeline`" in out.stderr and "study.run" in out.stderr
    assert not (tmp_path / "m.db").exists()


def test_an_unreachable_tracking_server_fails_the_stage_at_once(tmp_path, monkeypatch):
    """Not after minutes of MLflow's retries: in seconds, naming the URI, before any work."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    shutil.copy(ROOT / "pipelines" / "smoke" / "params.yaml", tmp_path / "params.yaml")
    uri = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    start = time.monotonic()
    out = _invoke(["prepare", "--root", str(tmp_path)])
    assert out.exit_code == 2 and uri in out.stderr and "not reachable" in out.stderr
    assert time.monotonic() - start < 30
    assert not (tmp_path / "data").exists()


def test_the_parent_run_ends_with_the_studys_status(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = tracking.start_study_run("s", "exp", tmp_path)
    assert mlflow.get_run(run_id).info.status == "RUNNING"
    client = mlflow.MlflowClient()
    lost = client.create_run(mlflow.get_run(run_id).info.experiment_id, tags={"mlflow.parentRunId": run_id})
    out = _invoke(["end-study-run", run_id, "--status", "FAILED"])
    assert out.exit_code == 0, out.stderr
    assert mlflow.get_run(run_id).info.status == "FAILED"
    assert mlflow.get_run(lost.info.run_id).info.status == "KILLED", "a child left running by a lost stage is closed"
    with pytest.raises(ValueError, match="status"):
        tracking.end_study_run(run_id, "DONE", tmp_path)


def test_an_unreachable_dvc_remote_is_named_before_any_work(tmp_path):
    from tasks.dvc import StageFailed, check_remote

    with pytest.raises(StageFailed, match=str(tmp_path / "absent")):
        check_remote(str(tmp_path / "absent"))
    check_remote(str(tmp_path))  # a directory that exists is reachable


def test_two_studies_never_share_a_workspace(tmp_path):
    """Same commit, same stage, two studies: two folders, each a full copy sharing the checkout's cache."""
    import subprocess as sp

    from tasks.workspace import Workspace

    checkout = tmp_path / "checkout"
    (checkout / ".dvc").mkdir(parents=True)
    (checkout / ".dvc" / "config").write_text("[core]\n")
    (checkout / "params.yaml").write_text("a: 1\n")
    (checkout / "pipelines" / "s" / ".dvc").mkdir(parents=True)  # a study folder: a DVC project of its own
    (checkout / "pipelines" / "s" / ".dvc" / "config").write_text("[core]\n")
    sp.run(["git", "init", "-q"], cwd=checkout, check=True)
    one = Workspace.copy_of(checkout, "study-one", "train@ce")
    two = Workspace.copy_of(checkout, "study-two", "train@ce")
    assert one.path != two.path and one.path.name == "train_at_ce"
    cache = f"dir = {(checkout / '.dvc' / 'cache').resolve()}\n"
    for ws in (one, two):
        assert (ws.path / "params.yaml").read_text() == "a: 1\n"
        assert cache in (ws.path / ".dvc" / "config.local").read_text()
        assert cache in (ws.path / "pipelines" / "s" / ".dvc" / "config.local").read_text()
    # A checkout whose cache was moved (`dvc cache dir`): its workspaces use that cache.
    (checkout / ".dvc" / "config.local").write_text(f"[cache]\n    dir = {tmp_path / 'moved'}\n")
    three = Workspace.copy_of(checkout, "study-three", "train@ce")
    assert f"dir = {(tmp_path / 'moved').resolve()}\n" in (three.path / ".dvc" / "config.local").read_text()


def test_the_flow_makes_a_new_study_folder_a_dvc_project_on_the_checkouts_cache_and_remote(tmp_path):
    import subprocess as sp

    from dvc.repo import Repo

    from tasks.dvc import share_checkout_config

    checkout, remote = tmp_path / "checkout", tmp_path / "remote"
    (checkout / "pipelines" / "new").mkdir(parents=True)
    sp.run(["git", "init", "-q"], cwd=checkout, check=True)
    sp.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=checkout, check=True)
    sp.run([sys.executable, "-m", "dvc", "remote", "add", "-d", "study", str(remote)], cwd=checkout, check=True)
    share_checkout_config(checkout, "pipelines/new")
    with Repo(str(checkout / "pipelines" / "new")) as repo:
        assert Path(repo.root_dir) == (checkout / "pipelines" / "new").resolve()
        assert Path(repo.cache.local_cache_dir) == (checkout / ".dvc" / "cache").resolve()
        assert repo.config["core"]["remote"] == "study" and repo.config["remote"]["study"]["url"] == str(remote)
    with Repo(str(checkout)) as repo:
        assert not list(repo.index.stages)


def test_every_parameter_dvc_yaml_names_must_be_written_in_the_params_file():
    """DVC reads ${diagnostics.oracle.variant} and each stage's params: from the file, not from the defaults."""
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    params = load_params(ROOT / "params.yaml")
    pipeline.check_written_params(params, raw, "params.yaml")
    del raw["diagnostics"]["oracle"], raw["diagnostics"]["synthetic"], raw["evaluate"]
    with pytest.raises(ValueError) as err:
        pipeline.check_written_params(params, raw, "params.yaml")
    assert str(err.value).startswith(
        "params.yaml: dvc.yaml names diagnostics.oracle, diagnostics.oracle.variant, diagnostics.synthetic, "
        "evaluate: write them in the file"
    )


def test_outputs_no_cache_holds_are_one_line_per_stage_in_the_log(tmp_path):
    """`dvc repro --pull` where dvc.lock was written by another run (the committed results on agents):
    DVC's warning, its list of hashes and "Unable to pull" become one line per stage. Was: 86 lines."""
    from tasks.dvc import dvc_bin, run_dvc

    repo, remote = tmp_path / "repo", tmp_path / "remote"
    repo.mkdir()
    remote.mkdir()
    (repo / "dvc.yaml").write_text(
        "stages:\n"
        "  make:\n    cmd: python -c \"open('out.txt', 'w').write('x')\"\n    outs: [out.txt]\n"
        "  use:\n    cmd: python -c \"open('b.txt', 'w').write(open('out.txt').read() * 2)\"\n"
        "    deps: [out.txt]\n    outs: [b.txt]\n"
    )
    for command in (
        ["git", "init", "-q"],
        [dvc_bin(), "init", "-q"],
        [dvc_bin(), "remote", "add", "-d", "r", str(remote)],
    ):
        subprocess.run(command, cwd=repo, check=True, capture_output=True)
    run_dvc(["repro"], repo)
    shutil.rmtree(repo / ".dvc" / "cache")  # the lock's outputs now exist nowhere this repository can reach
    for name in ("out.txt", "b.txt"):
        (repo / name).unlink()

    class Log:
        lines: list[str] = []

        def info(self, fmt, *args):
            self.lines.append(fmt % args)

    log = Log()
    output = run_dvc(["repro", "--pull", "use"], repo, log=log)
    assert "md5: " in output and "Unable to pull data for stage: 'make'" in output, "DVC said it all"
    assert not [line for line in log.lines if "md5: " in line or "Unable to pull" in line or "do not exist" in line]
    for stage in ("make", "use"):
        assert (
            f"{stage}: 1 output file(s) that dvc.lock records are in neither the cache nor the remote "
            "(written by another run): DVC reproduces the stage"
        ) in log.lines
    assert "Running stage 'use':" in log.lines and (repo / "b.txt").read_text() == "xx"


def _seeded_study(tmp_path: Path) -> Path:
    """The smoke profile with study.seeds [1, 2]: its params.yaml and the dvc.yaml rendered for it."""
    raw = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    raw["study"]["run"] = ["warmup", "ce"]
    raw["study"]["seeds"] = [1, 2]
    study = tmp_path / "study"
    study.mkdir()
    (study / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    (study / "dvc.yaml").write_text(pipeline.render_dvc_yaml(load_params(study / "params.yaml")))
    return study


def test_seed_replicates_are_stages_of_one_dag(tmp_path):
    """study.seeds [1, 2]: training, rollouts and evaluation run once per (variant, seed), named
    `<variant>--s<seed>`; the diagnostics stay on study.seed's models; compare reads every replicate."""
    study = _seeded_study(tmp_path)
    params = load_params(study / "params.yaml")
    assert params.replicates == ["warmup", "ce", "warmup--s1", "ce--s1", "warmup--s2", "ce--s2"]
    stages = yaml.safe_load((study / "dvc.yaml").read_text())["stages"]
    train = stages["train"]
    assert train["foreach"]["ce--s2"] == {"variant": "ce"} and list(train["foreach"]) == params.replicates
    assert train["do"]["cmd"] == "aligntrain train --variant ${key}"
    assert "variants.${item.variant}" in train["do"]["params"] and "models/variants/${key}" in train["do"]["outs"]
    assert stages["diagnose"]["foreach"] == "${study.run}"
    per_prompt = [d for d in stages["compare"]["deps"] if d.startswith("metrics/per_prompt/")]
    assert per_prompt == [f"metrics/per_prompt/{r}.parquet" for r in params.replicates] + [
        f"metrics/per_prompt/validation/{r}.parquet" for r in params.replicates
    ]
    pipeline.check_written_params(params, yaml.safe_load((study / "params.yaml").read_text()), "params.yaml")


def test_dvc_resolves_the_replicates_commands(tmp_path):
    """DVC itself: the stage names and the commands it would run for the replicates."""
    from dvc.repo import Repo

    study = _seeded_study(tmp_path)
    subprocess.run(["git", "init", "-q"], cwd=study, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=study, check=True)
    with Repo(str(study)) as repo:
        commands = {stage.name: stage.cmd for stage in repo.index.stages}
    assert commands["train@ce--s1"] == "aligntrain train --variant ce--s1"
    assert commands["evaluate@warmup--s2"] == "aligntrain evaluate --variant warmup--s2"
    assert "diagnose@ce--s1" not in commands and commands["diagnose@ce"] == "aligntrain diagnose --variant ce"
