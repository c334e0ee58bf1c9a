"""The stand-in hub studies end to end: scripts/run_standin.py --micro on each pipelines/<study>.

Each test is an xdist work unit of its own (tests/conftest.py), so `make test` runs two at a time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

# Each runs every stage of its pipelines/<study>/dvc.yaml at the micro size (scripts/run_standin.py
# --micro: two training steps a stage) with one trained variant, the one whose wiring is the
# study's own: the model family, the data schema, the objective or the rule's inputs (answers,
# reward model, sandbox). The other variants of a study differ from it by options the unit tests
# check. A stand-in test checks wiring, not learning.


def _run_standin(study: str, dest: Path, run: list[str], flow: bool = False) -> tuple[Path, dict]:
    """``scripts/run_standin.py pipelines/<study> DEST --micro --run ...`` to its end: the study's folder, params.
    ``flow``: through the study flow (``make study STUDY=pipelines/<study>``'s path), else plain ``dvc repro``."""
    env = dict(os.environ)  # PATH: tests/conftest.py's stage_commands
    env["PREFECT_HOME"] = str(dest.parent / "prefect-home")  # the flow's own local server
    command = [sys.executable, str(ROOT / "scripts" / "run_standin.py"), f"pipelines/{study}", str(dest)]
    done = subprocess.run(
        [*command, "--micro", "--run", ",".join(run), *(["--flow"] if flow else [])],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    folder = dest / "pipelines" / study
    status = subprocess.run(["dvc", "status"], cwd=folder, env=env, capture_output=True, text=True)
    assert "up to date" in status.stdout, status.stdout  # the study folder is a DVC project of its own
    assert not (dest / "data").exists() and not (dest / "models").exists(), "outputs stay in the study's folder"
    params = yaml.safe_load((folder / "params.yaml").read_text())
    assert params["study"]["run"] == run and params["warmup"]["steps"] == 2, "the micro size, these variants"
    return folder, params


def _check_every_variant_was_evaluated(study: Path, params: dict) -> None:
    """Each variant run has a pool of test_size × M rows and pass@k for k = 1, 2, 4, ..., M."""
    prompts, samples = params["problem"]["test_size"], params["rollouts"]["samples_per_prompt"]
    budgets = [2**i for i in range(samples.bit_length()) if 2**i <= samples]
    for variant in params["study"]["run"]:
        overall = json.loads((study / "metrics" / f"{variant}.json").read_text())["overall"]
        assert overall["prompts"] == prompts, variant
        assert sorted(int(k.split("@")[1]) for k in overall if k.startswith("pass@") and "_" not in k) == budgets
        assert all(0.0 <= overall[f"pass@{k}"] <= 1.0 for k in budgets), variant
        assert pq.read_table(study / "pools" / f"{variant}.parquet").num_rows == prompts * samples, variant


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def _moved_from_warmup(study: Path, variant: str) -> bool:
    warmup, trained = _weights(study / "models" / "warmup"), _weights(study / "models" / "variants" / variant)
    return any(not trained[k].equal(warmup[k]) for k in warmup)


@pytest.mark.slow
def test_cat_math_sft_runs_end_to_end_on_stand_ins(tmp_path):
    """pipelines/cat_math_sft: a tiny Mistral with LoRA on MATH-schema data, CAT's pass@N objective."""
    study, params = _run_standin("cat_math_sft", tmp_path / "run", ["pass_at_n"])
    _check_every_variant_was_evaluated(study, params)
    assert (study / "models" / "variants" / "pass_at_n" / "adapter" / "adapter_config.json").is_file()
    config = json.loads((study / "models" / "variants" / "pass_at_n" / "config.json").read_text())
    assert config["architectures"] == ["MistralForCausalLM"], "the merged model is a plain Mistral"
    report = (study / "reports" / "index.md").read_text()
    assert "`./standins/models/mistral` (float32) with LoRA r = 16, α = 32 on q_proj, v_proj over the base" in report
    assert "RL variants" not in report and "Not computed: no RL variant in the catalog" in report


@pytest.mark.slow
def test_dco_math_runs_end_to_end_on_stand_ins(tmp_path):
    """pipelines/dco_math: a tiny Llama fully fine-tuned with DCO (refill ε = 0.01), pass@k up to M = 16."""
    study, params = _run_standin("dco_math", tmp_path / "run", ["dco_16"])
    _check_every_variant_was_evaluated(study, params)
    folder = study / "models" / "variants" / "dco_16"
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert not (folder / "adapter").exists(), "full fine-tuning: no LoRA adapter"
    assert _moved_from_warmup(study, "dco_16")
    report = (study / "reports" / "index.md").read_text()
    assert "`./standins/models/llama` (float32), CE warm-up 2 steps." in report, "full fine-tuning, no LoRA"
    assert "| `dco_16` | pass_at_n | budget=16, refill_eps=0.01 |" in report
    assert "Not computed: no RL variant in the catalog" in report


@pytest.mark.slow
def test_tang_math_runs_end_to_end_on_stand_ins(tmp_path):
    """pipelines/tang_math: a tiny Llama, RL with Tang et al.'s LOO maj@k rule (MATH answers vote), k = 4."""
    study, params = _run_standin("tang_math", tmp_path / "run", ["loo_maj_at_k"])
    _check_every_variant_was_evaluated(study, params)
    assert params["rl"]["num_generations"] == 4 and params["rl"]["batch_size"] % 4 == 0
    config = json.loads((study / "models" / "variants" / "loo_maj_at_k" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    oracle = json.loads((study / "metrics" / "diagnostics" / "oracle_gradient.json").read_text())
    assert (oracle["model"], oracle["budget"], oracle["pool"]) == ("loo_maj_at_k", 4, 16), "pass@4 / maj@4 oracle"
    catalog_rl = [name for name, v in params["variants"].items() if v["objective"] == "rl"]
    assert sorted(oracle["pass"]) == sorted(catalog_rl) and sorted(oracle["pass"]["rloo"]) == ["n4", "n8"]
    report = (study / "reports" / "index.md").read_text()
    assert "| `loo_maj_at_k` | rl | " in report and "Not computed: no RL variant in the catalog" not in report


@pytest.mark.slow
def test_tea_ultrafeedback_runs_end_to_end_on_stand_ins(tmp_path):
    """pipelines/tea_ultrafeedback: a tiny Llama policy with a chat template, TEA's RL rewarded by a tiny Llama
    reward classifier on UltraFeedback-schema prompts; pools scored by the same reward model, max@k evaluated."""
    study, params = _run_standin("tea_ultrafeedback", tmp_path / "run", ["tea"])
    prompts, samples = params["problem"]["test_size"], params["rollouts"]["samples_per_prompt"]
    overall = json.loads((study / "metrics" / "tea.json").read_text())["overall"]
    assert overall["prompts"] == prompts and "max@16" in overall
    pool = pq.read_table(study / "pools" / "tea.parquet")
    assert pool.num_rows == prompts * samples
    assert json.loads(pool.schema.metadata[b"aligntrain.sampler"])["backend"] == "hf"
    rewards = pool.column("reward").to_pylist()
    assert all(r == r for r in rewards) and len(set(rewards)) > 1, "every sample scored by the reward model"
    # TEA App. B.2's checkpoint selection (params `selection`, every step here): each step scored, the best saved
    selection = json.loads((study / "models" / "variants" / "tea" / "selection.json").read_text())
    scores = {c["step"]: c["score"] for c in selection["candidates"]}
    assert sorted(scores) == list(range(params["rl"]["steps"] + 1))
    assert scores[selection["chosen_step"]] == max(scores.values())
    assert _moved_from_warmup(study, "tea") == (selection["chosen_step"] > 0), "the saved model is the chosen step's"


@pytest.mark.slow
def test_cat_protein_bon_runs_end_to_end_on_stand_ins(tmp_path):
    """pipelines/cat_protein_bon: a tiny GPT-2 (ProtGPT2's architecture) on the hydro rewards, CAT best-of-N RL,
    through the study flow: its stages in workspaces of the study folder (a DVC project of its own), then the
    final `dvc repro` there from the shared run-cache, the runs in the folder's MLflow store."""
    study, params = _run_standin("cat_protein_bon", tmp_path / "run", ["cat_best_of_n"], flow=True)
    overall = json.loads((study / "metrics" / "cat_best_of_n.json").read_text())["overall"]
    assert overall["prompts"] == params["problem"]["test_size"] and "max@16" in overall
    config = json.loads((study / "models" / "variants" / "cat_best_of_n" / "config.json").read_text())
    assert config["architectures"] == ["GPT2LMHeadModel"]
    summary = (study / "diagnoses" / "oracle_gradient" / "summary.csv").read_text()
    assert "cat_best_of_n" in summary, "the oracle gradient scored the GPT-2 block"
    assert (study / "mlflow.db").is_file() and not (tmp_path / "run" / "mlflow.db").exists()
    assert (study / ".dvc" / "config.local").is_file(), "the flow pointed the study at the root's cache"


@pytest.mark.slow
def test_tang_codecontests_runs_end_to_end_on_stand_ins(tmp_path):
    """pipelines/tang_codecontests: a tiny Llama with a chat template on CodeContests-schema problems, RL with
    Tang et al.'s LOO pass@k rule in groups of k = 8, every completion graded by running its program in the
    sandbox; pass@k of 16 samples."""
    study, params = _run_standin("tang_codecontests", tmp_path / "run", ["loo_pass_at_k"])
    _check_every_variant_was_evaluated(study, params)
    assert params["rl"]["num_generations"] == 8 and params["rollouts"]["top_p"] == 0.95
    pool = pq.read_table(study / "pools" / "loo_pass_at_k.parquet")
    assert all(r == r for r in pool.column("reward").to_pylist()), "every program graded in the sandbox"
    config = json.loads((study / "models" / "variants" / "loo_pass_at_k" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    test = pq.read_table(study / "data" / "test.parquet").to_pylist()
    assert all(row["id"].startswith("code_contests-cc-") and row["completion"].startswith("```python") for row in test)
    report = (study / "reports" / "index.md").read_text()
    assert "| `loo_pass_at_k` | rl | " in report


@pytest.mark.slow
def test_dco_lean_runs_end_to_end_on_stand_ins(tmp_path):
    """pipelines/dco_lean: a tiny Qwen2 (Qwen2.5-Math-1.5B's architecture) trained with DCO_step on step rows of
    LeanDojo-schema stand-in theorems, then proof search at test time, every tactic checked by the stand-in
    prover: each attempt's verifier calls are in the pool, and a proof it grades correct replays as one."""
    from aligntrain.lean.standin import StandinVerifier
    from aligntrain.lean.verifier import Theorem, check_proof

    study, params = _run_standin("dco_lean", tmp_path / "run", ["dco_step_4"])
    _check_every_variant_was_evaluated(study, params)
    config = json.loads((study / "models" / "variants" / "dco_step_4" / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    train = pq.read_table(study / "data" / "train.parquet").to_pylist()
    assert all("-s" in row["id"] and row["prompt"].startswith("[GOAL]\n") for row in train), "step rows"
    pool = pq.read_table(study / "pools" / "dco_step_4.parquet").to_pandas()
    assert (pool.verifier_calls >= 1).all() and (pool.verifier_calls <= params["problem"]["options"]["max_steps"]).all()
    test = {row["id"]: row for row in pq.read_table(study / "data" / "test.parquet").to_pylist()}
    for row in pool.itertuples():
        tactics = [line for line in row.text.splitlines() if line.strip()]
        check = check_proof(StandinVerifier(), Theorem.from_json(test[row.prompt_id]["answer"]), tactics, 8)
        assert check.proved == row.correct, row.text
    report = (study / "reports" / "index.md").read_text()
    assert "| `dco_step_4` | " in report


def _launch_standin(dest: Path, env: dict, *flags: str) -> tuple[Path, subprocess.CompletedProcess]:
    """scripts/run_standin.py on dco_math's micro stand-in, variant ce, up to its warm-up stage."""
    command = [sys.executable, str(ROOT / "scripts" / "run_standin.py"), "pipelines/dco_math", str(dest)]
    done = subprocess.run(
        [*command, "--micro", "--run", "ce", "--until", "warmup", *flags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return dest / "pipelines" / "dco_math", done


@pytest.mark.slow
def test_a_training_stage_launches_itself_as_two_processes_under_dvc_repro(tmp_path):
    """pipelines/dco_math with launch.num_processes 2: `dvc repro` runs the warm-up stage's command, which
    relaunches itself under accelerate launch (two gloo processes on CPU), each with half the batch; process 0
    alone logs and saves. The saved model is the one-process run's (batch 4) up to float32 rounding.

    One stand-in copy serves both runs: the one-process warm-up first, then the launch section in the
    study's params.yaml, `aligntrain pipeline`, and `dvc repro warmup` again (prepare is unchanged; pretrain,
    a launched stage too, copies the pretrained base again)."""
    import shutil

    env = {k: v for k, v in os.environ.items() if k != "STAGEHOST_SOCKET"}  # its subject is the processes
    study, _ = _launch_standin(tmp_path / "copy", env)
    single = tmp_path / "one"
    shutil.copytree(study / "models", single / "models")
    params = yaml.safe_load((study / "params.yaml").read_text())
    params["launch"] = {"num_processes": 2}
    params["warmup"]["batch_size"] = 2
    (study / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {**env, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(tmp_path / "copy")}  # the copy's code, as run_standin
    subprocess.run(["aligntrain", "pipeline", "--root", "."], cwd=study, env=env, check=True, capture_output=True)
    done = subprocess.run(["dvc", "repro", "warmup"], cwd=study, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "warmup: 2 processes: -m accelerate.commands.launch --num_processes 2 --multi_gpu" in done.stderr
    assert "Running stage 'prepare'" not in done.stdout  # pretrain runs again: launched too (it copies the base)
    lock = yaml.safe_load((study / "dvc.lock").read_text())["stages"]
    assert set(lock) == {"prepare", "pretrain", "warmup"}
    assert lock["warmup"]["params"]["params.yaml"]["launch"] == {"num_processes": 2}
    assert lock["warmup"]["cmd"].endswith("--processes 2")
    status = subprocess.run(["dvc", "status", "warmup"], cwd=study, env=env, capture_output=True, text=True)
    assert "up to date" in status.stdout, status.stdout
    import sqlite3

    with sqlite3.connect(study / "mlflow.db") as db:  # the study folder's store
        runs = db.execute(
            "select r.name, m.value from runs r left join metrics m on m.run_uuid = r.run_uuid "
            "and m.key = 'processes' where r.name = 'warmup'"
        ).fetchall()
    assert sorted(runs) == [("warmup", 1.0), ("warmup", 2.0)], "one run each: the launched one from process 0 alone"
    base, one, two = (
        _weights(f) for f in (single / "models" / "base", single / "models" / "warmup", study / "models" / "warmup")
    )
    update = max(float((one[k] - base[k]).abs().max()) for k in base)
    apart = max(float((one[k] - two[k]).abs().max()) for k in base)
    assert set(one) == set(two) and update > 1e-6
    assert apart <= 1e-3 * update, (apart, update)  # measured 2e-4 of the update: the same two steps
