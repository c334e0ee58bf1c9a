"""The training-time monitor (aligntrain/training/monitor.py): its numbers, names, table, mode, RNG and resume."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from interruption import Crash
from transformers import TrainerCallback

from aligntrain import pipeline
from aligntrain.config import MonitorConfig, OptimConfig, RLConfig, load_params, parse_params
from aligntrain.estimators import pass_at_k_curve
from aligntrain.rollouts.generate import SamplingConfig, sample_completions
from aligntrain.training.monitor import (
    JOURNAL,
    MONITOR_COLUMNS,
    MonitorSplit,
    TrainingMonitor,
    logged_metrics,
    monitor_seed,
    select_prompts,
    write_monitor_csv,
)
from aligntrain.training.rl import train_rl
from aligntrain.training.sft import train_sft

ROOT = Path(__file__).resolve().parents[1]
KS = [1, 2, 4]
CONFIG = MonitorConfig(enabled=True, every=2, prompts=4, samples=4, ks=KS, max_new_tokens=10, batch_size=64)


class DigitProblem:
    """A problem a random tiny model solves sometimes: a completion is right when it starts with a digit."""

    name = "digit"

    def grade_batch(self, completions, rows):
        return [self.grade(c, r) for c, r in zip(completions, rows, strict=True)]

    def grade(self, completion, row):
        right = completion[:1].isdigit()
        return SimpleNamespace(
            answer=completion[:1], answer_class=completion[:1] or None, correct=right, reward=float(right)
        )


def _splits(arith_rows):
    return {
        "train": MonitorSplit.of(arith_rows["train"], arith_rows["train"], CONFIG.prompts),
        "validation": MonitorSplit.of(arith_rows["validation"], arith_rows["validation"], CONFIG.prompts),
    }


def _monitor(tokenizer, arith_rows, csv_path=None, config=CONFIG):
    return TrainingMonitor(
        config, problem=DigitProblem(), tokenizer=tokenizer, splits=_splits(arith_rows), seed=0, csv_path=csv_path
    )


def _optim(steps, **kw):
    return OptimConfig(
        steps=steps, batch_size=4, learning_rate=1e-3, lr_warmup_ratio=0.0, checkpoint_every=2, log_every=1, **kw
    )


class _Logs(TrainerCallback):
    """Every log the trainer hands its callbacks (what the MLflow callback receives), with its step."""

    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append((state.global_step, dict(logs or {})))

    def monitor(self):
        return [(step, logs) for step, logs in self.logs if any(k.startswith("monitor/") for k in logs)]


# --------------------------------------------------------------------------- the numbers


def test_pass_at_k_equals_the_estimator_on_completions_sampled_independently_with_the_same_seed(tiny_model, arith_rows):
    model, tokenizer = tiny_model
    frame = _monitor(tokenizer, arith_rows).measure_model(model, step=6)
    problem = DigitProblem()
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=CONFIG.max_new_tokens)
    seen_nonzero = False
    for name, split in _splits(arith_rows).items():
        completions = sample_completions(
            model,
            tokenizer,
            list(split.prompts),
            CONFIG.samples,
            sampling,
            batch_size=64,
            seed=monitor_seed(0, 6, name),
        )
        correct = np.zeros(len(split.rows), dtype=int)
        for c in completions:
            correct[c.prompt_index] += problem.grade(c.text, split.rows[c.prompt_index]).correct
        curve = pass_at_k_curve(CONFIG.samples, correct, KS)
        seen_nonzero |= bool(correct.any())
        rows = frame[(frame.split == name) & (frame.prompt_id == "all")]
        for j, k in enumerate(KS):
            overall = rows[(rows.level == "all") & (rows.metric == f"pass_at_{k}")].value
            assert overall.tolist() == pytest.approx([curve[:, j].mean()], abs=1e-12)
            for level in sorted({str(r["level"]) for r in split.rows}):
                mask = np.array([str(r["level"]) == level for r in split.rows])
                at_level = rows[(rows.level == level) & (rows.metric == f"pass_at_{k}")].value
                assert at_level.tolist() == pytest.approx([curve[mask, j].mean()], abs=1e-12)
        per_prompt = frame[(frame.split == name) & (frame.metric == "success_rate")]
        assert per_prompt.prompt_id.tolist() == [r["id"] for r in split.rows]
        assert per_prompt.value.tolist() == pytest.approx((correct / CONFIG.samples).tolist())
        greedy = sample_completions(
            model,
            tokenizer,
            list(split.prompts),
            1,
            SamplingConfig(max_new_tokens=10, greedy=True),
            batch_size=64,
            seed=0,
        )
        greedy_prob = frame[(frame.split == name) & (frame.metric == "greedy_prob") & (frame.prompt_id != "all")]
        assert greedy_prob.value.tolist() == pytest.approx([float(np.exp(c.logp)) for c in greedy])
    assert seen_nonzero, "the test problem should be solved sometimes, or the comparison shows little"


def test_the_table_schema_and_the_metric_names(tiny_model, arith_rows):
    model, tokenizer = tiny_model
    frame = _monitor(tokenizer, arith_rows).measure_model(model, step=0)
    assert list(frame.columns) == MONITOR_COLUMNS
    assert set(frame.step) == {0} and set(frame.split) == {"train", "validation"}
    assert set(frame.level) == {"all", "1", "2"}
    aggregate = {f"pass_at_{k}" for k in KS} | {
        "mean_reward",
        "greedy_prob",
        "greedy_accuracy",
        "confidently_wrong",
        "prompts",
    }
    assert set(frame[frame.prompt_id == "all"].metric) == aggregate
    assert set(frame[frame.prompt_id != "all"].metric) == {"success_rate", "greedy_correct", "greedy_prob"}
    assert frame[(frame.metric == "prompts") & (frame.level == "all")].value.tolist() == [4.0, 4.0]
    names = set(logged_metrics(frame, KS))
    expected = {
        f"monitor/{split}/{metric}"
        for split in ("train", "validation")
        for metric in [f"pass_at_{k}" for k in KS]
        + ["mean_reward", "greedy_prob", "greedy_accuracy", "confidently_wrong"]
    } | {f"monitor/{split}/level_{level}/pass_at_1" for split in ("train", "validation") for level in (1, 2)}
    assert names == expected


def test_select_prompts_takes_levels_in_turn_in_split_order():
    rows = [{"level": level} for level in (1, 1, 2, 1, 3, 2, 1)]
    assert select_prompts(rows, 3) == [0, 2, 4]
    assert select_prompts(rows, 5) == [0, 1, 2, 4, 5]
    assert select_prompts(rows, 50) == list(range(7))


def test_seeds_depend_on_the_study_seed_the_step_and_the_split():
    seeds = {monitor_seed(s, step, split) for s in (0, 1) for step in (0, 1, 50) for split in ("train", "validation")}
    assert len(seeds) == 12 and all(0 <= s < 2**63 for s in seeds)
    assert monitor_seed(0, 5, "train") == monitor_seed(0, 5, "train")


# --------------------------------------------------------------------------- what it must not change


@pytest.mark.parametrize("training", [True, False])
def test_the_models_mode_and_the_rng_are_restored(tiny_model, arith_rows, training):
    model, tokenizer = tiny_model
    model.train(training)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    _monitor(tokenizer, arith_rows).measure_model(model, step=2)
    assert model.training is training
    assert all(m.training is training for m in model.modules())
    assert torch.equal(torch.get_rng_state(), before), "sampling must not move the training RNG"


def test_training_with_the_monitor_logs_its_metrics_and_trains_the_same_weights(tiny_model, arith_rows, tmp_path):
    model, tokenizer = tiny_model
    rows = arith_rows["train"]
    plain, plain_logs = copy.deepcopy(model), _Logs()
    train_sft(plain, tokenizer, rows, _optim(5), tmp_path / "plain", max_length=128, seed=0, callbacks=[plain_logs])

    monitored, logs = copy.deepcopy(model), _Logs()
    csv = tmp_path / "plots" / "monitor.csv"
    monitor = _monitor(tokenizer, arith_rows, csv)
    metrics = train_sft(
        monitored, tokenizer, rows, _optim(5), tmp_path / "run", max_length=128, seed=0, callbacks=[monitor, logs]
    )
    assert monitored.training, "trained models are left in train mode, as without the monitor"
    for a, b in zip(plain.parameters(), monitored.parameters(), strict=True):
        assert torch.equal(a, b), "the monitor changed training"
    # step 0, every 2 steps, and the end (5)
    assert [step for step, _ in logs.monitor()] == [0, 2, 4, 5]
    assert set(logs.monitor()[0][1]) >= set(logged_metrics(monitor.frame[monitor.frame.step == 0], KS))
    # the trainer's own per-step metrics are logged as before, never merged into the monitor's logs
    assert all("loss" not in entry for _, entry in logs.monitor())
    own = [(step, entry) for step, entry in logs.logs if not any(k.startswith("monitor/") for k in entry)]
    assert [step for step, entry in own if "loss" in entry] == [1, 2, 3, 4, 5]

    def timing(entries):  # the logs without their wall-clock numbers
        return [
            (step, {k: v for k, v in e.items() if "runtime" not in k and "per_second" not in k}) for step, e in entries
        ]

    assert timing(own) == timing(plain_logs.logs), "the trainer's own logs are those of a run without the monitor"
    assert "train_loss" in metrics
    table = pd.read_csv(csv, keep_default_na=False)
    assert list(table.columns) == MONITOR_COLUMNS and sorted(set(table.step)) == [0, 2, 4, 5]
    assert len(table) == len(monitor.frame)


def test_a_resumed_run_records_the_same_table(tiny_model, arith_rows, tmp_path):
    model, tokenizer = tiny_model
    rows = arith_rows["train"]
    reference = _monitor(tokenizer, arith_rows, tmp_path / "reference.csv")
    train_sft(
        copy.deepcopy(model),
        tokenizer,
        rows,
        _optim(6),
        tmp_path / "ref",
        max_length=128,
        seed=0,
        callbacks=[reference],
    )

    first = _monitor(tokenizer, arith_rows)
    with pytest.raises(KeyboardInterrupt):
        train_sft(
            copy.deepcopy(model),
            tokenizer,
            rows,
            _optim(6),
            tmp_path / "run",
            max_length=128,
            seed=0,
            callbacks=[first, Crash(at_step=5)],
        )
    # killed during step 5: checkpoint-4 exists, the journal has steps 0, 2, 4
    assert (tmp_path / "run" / "checkpoint-4").is_dir()
    assert sorted(set(first.frame.step)) == [0, 2, 4]
    assert (tmp_path / "run" / JOURNAL).is_file()

    seeds = []
    resumed = _monitor(tokenizer, arith_rows, tmp_path / "resumed.csv")
    original = resumed.measure_model
    resumed.measure_model = lambda m, step: seeds.append(step) or original(m, step)
    metrics = train_sft(
        copy.deepcopy(model), tokenizer, rows, _optim(6), tmp_path / "run", max_length=128, seed=0, callbacks=[resumed]
    )
    assert metrics["resumed_from_step"] == 4
    assert seeds == [6], "steps up to the checkpoint come from the journal, the later ones are measured"
    a = pd.read_csv(tmp_path / "reference.csv", keep_default_na=False)
    b = pd.read_csv(tmp_path / "resumed.csv", keep_default_na=False)
    pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-6)


def test_a_journal_left_by_a_run_killed_before_its_first_checkpoint_is_dropped(tiny_model, arith_rows, tmp_path):
    model, tokenizer = tiny_model
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / JOURNAL).write_text('{"step": 2, "rows": []}\n{"step": 4, "ro')  # the last line cut short
    monitor = _monitor(tokenizer, arith_rows, config=CONFIG.model_copy(update={"every": 10}))
    args, state = SimpleNamespace(output_dir=str(folder)), SimpleNamespace(global_step=0, is_world_process_zero=True)
    monitor.on_train_begin(args, state, None, model=model)
    assert sorted(set(monitor.frame.step)) == [0]
    # a resume at step 4 keeps the journal's measurements up to 4 and skips the cut line
    (folder / JOURNAL).write_text('{"step": 2, "rows": []}\n{"step": 6, "rows": []}\n{"step": 4, "ro')
    monitor.on_train_begin(args, SimpleNamespace(global_step=4, is_world_process_zero=True), None, model=model)
    assert monitor._last_step == 2
    assert (folder / JOURNAL).read_text() == '{"step": 2, "rows": []}\n'


def test_the_rl_trainer_logs_the_monitor_too(tiny_model, arith_rows, tmp_path):
    model, tokenizer = tiny_model
    config = RLConfig(
        rule="grpo_z",
        steps=2,
        batch_size=8,
        num_generations=4,
        max_completion_length=8,
        learning_rate=1e-3,
        lr_warmup_ratio=0.0,
        log_every=1,
        checkpoint_every=10,
    )
    logs = _Logs()
    monitor = _monitor(tokenizer, arith_rows, tmp_path / "rl.csv", CONFIG.model_copy(update={"every": 1}))

    def reward(text, row):
        return float(text[:1].isdigit())

    train_rl(
        model,
        tokenizer,
        arith_rows["train"],
        config,
        tmp_path / "ck",
        reward_fn=reward,
        seed=0,
        callbacks=[monitor, logs],
    )
    assert [step for step, _ in logs.monitor()] == [0, 1, 2]
    assert "monitor/validation/pass_at_4" in logs.monitor()[-1][1]
    assert model.training
    assert sorted(set(pd.read_csv(tmp_path / "rl.csv").step)) == [0, 1, 2]


# --------------------------------------------------------------------------- configuration and stages


def test_off_means_no_callback_the_same_checkpoint_key_and_a_header_only_table(tmp_path):
    from aligntrain.stages import training

    params = load_params(ROOT / "params.yaml")
    assert params.monitor.enabled is False
    assert training._monitor(params, None, tmp_path / "x.csv", ([], []), ([], [])) == []
    assert training._callbacks_key(params, "warmup") == []
    write_monitor_csv(None, tmp_path / "x.csv")
    assert (tmp_path / "x.csv").read_text() == ",".join(MONITOR_COLUMNS) + "\n"
    on = params.model_copy(update={"monitor": params.monitor.model_copy(update={"enabled": True})})
    assert training._callbacks_key(on, "warmup") == [on.monitor]
    assert training._callbacks_key(on, "pretrain") == []


def test_on_the_stage_builds_the_callback_on_level_stratified_prompts(arith_rows, tmp_path):
    from aligntrain.stages import training

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["monitor"] = {"enabled": True, "prompts": 3, "samples": 8, "ks": [1, 8]}
    params = parse_params(raw)
    rows = arith_rows["train"]
    (callback,) = training._monitor(params, "tok", tmp_path / "m.csv", (rows, rows), (arith_rows["validation"],) * 2)
    assert isinstance(callback, TrainingMonitor) and callback.csv_path == tmp_path / "m.csv"
    assert len(callback.splits["train"].rows) == 3 and len(callback.splits["validation"].rows) == 3
    assert {r["level"] for r in callback.splits["train"].rows} == {1, 2}


def test_config_refuses_budgets_above_the_samples():
    with pytest.raises(ValueError, match="k <= samples"):
        MonitorConfig(samples=8, ks=[1, 16])
    with pytest.raises(ValueError, match="increasing"):
        MonitorConfig(ks=[4, 1])
    for name, field in MonitorConfig.model_fields.items():
        assert field.description, name


def test_the_training_stages_track_the_monitor_and_write_its_plot():
    for name, plot in (("warmup", "plots/monitor/warmup.csv"), ("train", "plots/monitor/variants/{v}.csv")):
        stage = pipeline.get_stage(name)
        assert "monitor" in stage.params and "problem" in stage.params
        assert stage.plots == (plot,)
        assert "aligntrain/estimators.py" in stage.deps and "aligntrain/problems" in stage.deps


@pytest.mark.parametrize(
    "path",
    ["params.yaml", *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("pipelines/*/params.yaml"))],
)
def test_every_study_writes_the_monitor_section(path):
    raw = yaml.safe_load((ROOT / path).read_text())
    assert "monitor" in raw, path


@pytest.mark.parametrize("enabled", [False, True])
def test_the_stages_write_their_monitor_tables(tmp_path, tiny_model, arith_rows, enabled):
    from aligntrain.models import save_model_and_tokenizer
    from aligntrain.paths import StudyPaths
    from aligntrain.stages import training

    raw = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    raw["warmup"].update(steps=2, batch_size=4, checkpoint_every=1)
    raw["train"].update(steps=2, batch_size=4, checkpoint_every=1)
    raw["rl"].update(steps=2, batch_size=8, num_generations=4, max_completion_length=8, checkpoint_every=1)
    raw["monitor"] = {"enabled": enabled, "every": 1, "prompts": 2, "samples": 2, "ks": [1, 2], "max_new_tokens": 8}
    params = parse_params(raw)
    paths = StudyPaths(tmp_path)
    save_model_and_tokenizer(*tiny_model, paths.base_model)
    val = arith_rows["validation"][:4]
    training.warmup(params, paths, arith_rows["train"], val)
    for variant in ("warmup", "ce", "grpo"):
        training.train_variant(params, paths, variant, arith_rows["train"], val)
    tables = {
        "warmup stage": paths.monitor_warmup,
        **{v: paths.monitor_variant(v) for v in ("warmup", "ce", "grpo")},
    }
    for name, path in tables.items():
        table = pd.read_csv(path, keep_default_na=False)
        assert list(table.columns) == MONITOR_COLUMNS, name
        trained = enabled and name != "warmup"  # the variant `warmup` trains nothing: nothing to measure
        assert sorted(set(table.step)) == ([0, 1, 2] if trained else []), name
        if trained:
            assert set(table.split) == {"train", "validation"}
    assert not any((tmp_path / "checkpoints").glob("*")), "checkpoints (and the journals in them) are removed"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_numbers_match_and_the_cuda_rng_and_mode_are_restored(tiny_model, arith_rows):
    model, tokenizer = tiny_model
    model = model.to("cuda").train()
    torch.cuda.manual_seed(7)
    cuda_before, cpu_before = torch.cuda.get_rng_state(), torch.get_rng_state()
    frame = _monitor(tokenizer, arith_rows).measure_model(model, step=4)
    assert model.training and model.device.type == "cuda"
    assert torch.equal(torch.cuda.get_rng_state(), cuda_before) and torch.equal(torch.get_rng_state(), cpu_before)
    split = _splits(arith_rows)["validation"]
    sampling = SamplingConfig(max_new_tokens=CONFIG.max_new_tokens)
    completions = sample_completions(
        model,
        tokenizer,
        list(split.prompts),
        CONFIG.samples,
        sampling,
        batch_size=64,
        seed=monitor_seed(0, 4, "validation"),
    )
    correct = np.zeros(len(split.rows), dtype=int)
    for c in completions:
        correct[c.prompt_index] += DigitProblem().grade(c.text, None).correct
    curve = pass_at_k_curve(CONFIG.samples, correct, KS).mean(axis=0)
    rows = frame[(frame.split == "validation") & (frame.level == "all") & (frame.prompt_id == "all")]
    assert [rows[rows.metric == f"pass_at_{k}"].value.item() for k in KS] == pytest.approx(curve.tolist())
