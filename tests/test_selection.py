"""Checkpoint selection on validation prompts (aligntrain/training/selection.py, TEA App. B.2): the score, the
kept best step and the saved model, training left unchanged, resume, the config's refusals, dvc.yaml and the stage."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml
from interruption import Crash
from transformers import TrainerCallback

from aligntrain import pipeline
from aligntrain.config import OptimConfig, ParamsError, SelectionConfig, load_params, parse_params
from aligntrain.models import load_model_and_tokenizer, save_model_and_tokenizer
from aligntrain.rollouts.generate import SamplingConfig, sample_completions
from aligntrain.training import selection as selection_module
from aligntrain.training.monitor import MonitorSplit
from aligntrain.training.selection import BEST, JOURNAL, REPORT, CheckpointSelector, top_mean_score
from aligntrain.training.sft import train_sft

ROOT = Path(__file__).resolve().parents[1]
CONFIG = SelectionConfig(enabled=True, every=2, prompts=4, samples=4, top=2, max_new_tokens=8, batch_size=64)


class DigitProblem:
    """A problem a random tiny model solves sometimes: a completion is right when it starts with a digit (0/1)."""

    name = "digit"

    def grade_batch(self, completions, rows):
        return [self.grade(c, r) for c, r in zip(completions, rows, strict=True)]

    def grade(self, completion, row):
        right = completion[:1].isdigit()
        return SimpleNamespace(
            answer=completion[:1], answer_class=completion[:1] or None, correct=right, reward=float(right)
        )


def _split(arith_rows, n=CONFIG.prompts):
    rows = arith_rows["validation"]
    return MonitorSplit.of(rows, rows, n)


def _selector(tokenizer, arith_rows, config=CONFIG, seed=0, cls=CheckpointSelector, **kw):
    return cls(
        config, problem=DigitProblem(), tokenizer=tokenizer, split=_split(arith_rows, config.prompts), seed=seed, **kw
    )


class Scripted(CheckpointSelector):
    """The real selector with its score scripted by step (nothing sampled)."""

    def __init__(self, config, *, scores, **kw):
        super().__init__(config, **kw)
        self.scores = scores
        self.scored: list[int] = []

    def _score(self, model, step):
        self.scored.append(step)
        return self.scores[step]


def _cpu(model):
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


class Snapshots(TrainerCallback):
    """The weights at the start and after every step (cloned to CPU), and what the checkpoint folder held then."""

    def __init__(self):
        self.weights: dict[int, dict[str, torch.Tensor]] = {}
        self.journal: dict[int, list[dict]] = {}
        self.best_file_step: dict[int, int | None] = {}
        self.losses: dict[int, float] = {}

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.weights[state.global_step] = _cpu(model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        self.weights[step] = _cpu(model)
        folder = Path(args.output_dir)
        journal = folder / JOURNAL
        self.journal[step] = (
            [json.loads(line) for line in journal.read_text().splitlines()] if journal.is_file() else []
        )
        self.best_file_step[step] = _file_step(folder / BEST) if (folder / BEST).is_file() else None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses[state.global_step] = logs["loss"]


def _file_step(path):
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        return int(handle.metadata()["step"])


def _optim(steps, **kw):
    return OptimConfig(
        steps=steps, batch_size=4, learning_rate=1e-3, lr_warmup_ratio=0.0, checkpoint_every=2, log_every=1, **kw
    )


def _equal(a: dict, b: dict) -> bool:
    assert a.keys() == b.keys()
    return all(torch.equal(a[k], b[k]) for k in a)


def _saved_weights(path):
    model, _ = load_model_and_tokenizer(path)
    return _cpu(model)


# --------------------------------------------------------------------------- the score


def test_top_mean_score_hand_computed_on_a_continuous_matrix():
    """Per prompt the mean of its top rewards, then the mean over prompts, worked out by hand."""
    rewards = np.array([[0.1, 0.9, 0.5, 0.3], [0.0, 0.2, 0.8, 0.8]])
    assert top_mean_score(rewards, 1) == pytest.approx((0.9 + 0.8) / 2)
    assert top_mean_score(rewards, 2) == pytest.approx(((0.9 + 0.5) / 2 + (0.8 + 0.8) / 2) / 2)  # 0.75
    assert top_mean_score(rewards, 3) == pytest.approx(((0.9 + 0.5 + 0.3) / 3 + (0.8 + 0.8 + 0.2) / 3) / 2)
    assert top_mean_score(rewards, 4) == pytest.approx((1.8 / 4 + 1.8 / 4) / 2)
    assert top_mean_score(rewards.tolist(), 2) == pytest.approx(0.75), "a nested list is accepted too"
    assert isinstance(top_mean_score(rewards, 2), float)


def test_top_mean_score_with_0_1_rewards_is_the_mean_of_min_c_top_over_top():
    """With 0/1 rewards a prompt with c right answers scores min(c, top)/top (random matrices)."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        prompts, samples = rng.integers(1, 7), rng.integers(1, 9)
        rewards = (rng.random((prompts, samples)) < rng.random()).astype(float)
        top = int(rng.integers(1, samples + 1))
        c = rewards.sum(axis=1)
        expected = float(np.mean(np.minimum(c, top) / top))
        assert top_mean_score(rewards, top) == pytest.approx(expected, abs=1e-12), (rewards, top)


def test_top_mean_score_ties_and_negative_rewards():
    """Tied rewards count once each; negative rewards are averaged as they are, not clipped."""
    assert top_mean_score(np.array([[-1.0, -3.0, -1.0], [2.0, 2.0, 2.0]]), 2) == pytest.approx((-1.0 + 2.0) / 2)
    assert top_mean_score(np.array([[-5.0, -2.0, -4.0]]), 2) == pytest.approx(-3.0)
    assert top_mean_score(np.array([[0.5, 0.5, 0.5, 0.5]]), 3) == pytest.approx(0.5)


@pytest.mark.parametrize(
    "rewards, top",
    [
        (np.array([0.0, 1.0, 1.0]), 1),  # 1-D
        (np.zeros((2, 2, 2)), 1),  # 3-D
        (np.zeros((2, 4)), 0),
        (np.zeros((2, 4)), -1),
        (np.zeros((2, 4)), 5),  # top > samples
        (np.zeros((0, 4)), 1),  # no prompts
    ],
)
def test_top_mean_score_refuses_bad_shapes_and_tops(rewards, top):
    """Anything but prompts x samples with 1 <= top <= samples is a ValueError."""
    with pytest.raises(ValueError, match="top"):
        top_mean_score(rewards, top)


# --------------------------------------------------------------------------- the kept best step and the saved model


def test_the_best_step_is_saved_a_later_tie_does_not_replace_it(tiny_model, arith_rows, tmp_path):
    """Scripted scores, best at step 2 and tied at 4: the saved model is step 2's weights; the folder is cleaned."""
    model, tokenizer = tiny_model
    scores = {0: 0.2, 2: 0.6, 4: 0.6, 5: 0.4}
    selector = _selector(tokenizer, arith_rows, cls=Scripted, scores=scores)
    snaps = Snapshots()
    out = tmp_path / "model"
    run = tmp_path / "run"
    train_sft(
        model,
        tokenizer,
        arith_rows["train"],
        _optim(5),
        run,
        max_length=128,
        seed=0,
        callbacks=[selector, snaps],  # snaps after the selector: sees its files of the same step
        save_final=lambda state_dict=None: save_model_and_tokenizer(model, tokenizer, out, state_dict=state_dict),
    )
    assert selector.scored == [0, 2, 4, 5], "step 0, every 2 steps and the end, each scored once"
    assert selector.best_step == 2
    assert sorted(snaps.weights) == [0, 1, 2, 3, 4, 5]
    assert not _equal(snaps.weights[2], snaps.weights[5]), "training moved the weights after step 2"
    saved = _saved_weights(out)
    assert _equal(saved, snaps.weights[2]), "the saved model is the chosen step's weights"
    assert not _equal(saved, snaps.weights[5])
    assert _equal(_cpu(model), snaps.weights[2]), "the model in memory holds the chosen step's weights too"
    report = selector.report()
    assert report["chosen_step"] == 2 and report["chosen_score"] == pytest.approx(0.6)
    assert report["candidates"] == [{"step": s, "score": scores[s]} for s in (0, 2, 4, 5)]
    assert "top 2" in report["rule"] and "4 samples" in report["rule"] and "4 validation prompts" in report["rule"]
    json.dumps(report)  # what the stage writes must be JSON
    # during the run: the journal grows with every candidate, the best file holds the best step so far
    assert snaps.journal[1] == [{"step": 0, "score": 0.2}]
    assert snaps.journal[2] == [{"step": 0, "score": 0.2}, {"step": 2, "score": 0.6}]
    assert snaps.journal[5] == report["candidates"]
    assert snaps.best_file_step == {1: 0, 2: 2, 3: 2, 4: 2, 5: 2}
    # finish_run removes the checkpoint folder, the journal and the best file with it
    assert not run.exists()


def test_the_starting_model_can_be_the_chosen_one(tiny_model, arith_rows, tmp_path):
    """Best at step 0 (strictly): the saved model is the untrained model."""
    model, tokenizer = tiny_model
    start = _cpu(model)
    selector = _selector(tokenizer, arith_rows, cls=Scripted, scores={0: 0.5, 2: 0.5, 3: 0.1})
    out = tmp_path / "model"
    train_sft(
        model,
        tokenizer,
        arith_rows["train"],
        _optim(3),
        tmp_path / "run",
        max_length=128,
        seed=0,
        callbacks=[selector],
        save_final=lambda state_dict=None: save_model_and_tokenizer(model, tokenizer, out, state_dict=state_dict),
    )
    assert selector.best_step == 0
    assert [c["step"] for c in selector.report()["candidates"]] == [0, 2, 3]
    assert _equal(_saved_weights(out), start)


def test_best_at_the_last_step_keeps_the_trained_weights(tiny_model, arith_rows, tmp_path):
    """Rising scores: the last step is chosen and the saved model is the last step's weights."""
    model, tokenizer = tiny_model
    selector = _selector(tokenizer, arith_rows, cls=Scripted, scores={0: 0.0, 2: 0.25, 4: 0.5})
    snaps = Snapshots()
    out = tmp_path / "model"
    train_sft(
        model,
        tokenizer,
        arith_rows["train"],
        _optim(4),
        tmp_path / "run",
        max_length=128,
        seed=0,
        callbacks=[selector, snaps],
        save_final=lambda state_dict=None: save_model_and_tokenizer(model, tokenizer, out, state_dict=state_dict),
    )
    assert selector.best_step == 4
    assert [c["step"] for c in selector.candidates] == [0, 2, 4], "the end is a multiple of every: measured once"
    assert _equal(_saved_weights(out), snaps.weights[4])


# --------------------------------------------------------------------------- what it must not change


def test_selection_never_changes_training(tiny_model, arith_rows, tmp_path):
    """A real selector (sampling real completions) leaves every step's weights and loss as without it."""
    model, tokenizer = tiny_model
    rows = arith_rows["train"]
    plain, plain_snaps = copy.deepcopy(model), Snapshots()
    train_sft(plain, tokenizer, rows, _optim(5), tmp_path / "plain", max_length=128, seed=0, callbacks=[plain_snaps])

    selected, snaps = copy.deepcopy(model), Snapshots()
    config = CONFIG.model_copy(update={"samples": 3, "prompts": 3, "top": 2})
    selector = _selector(tokenizer, arith_rows, config=config)
    out = tmp_path / "model"
    train_sft(
        selected,
        tokenizer,
        rows,
        _optim(5),
        tmp_path / "run",
        max_length=128,
        seed=0,
        callbacks=[selector, snaps],
        save_final=lambda state_dict=None: save_model_and_tokenizer(selected, tokenizer, out, state_dict=state_dict),
    )
    assert [c["step"] for c in selector.candidates] == [0, 2, 4, 5]
    assert all(0.0 <= c["score"] <= 1.0 for c in selector.candidates)
    assert selected.training, "trained models are left in train mode, as without selection"
    assert sorted(snaps.weights) == sorted(plain_snaps.weights) == [0, 1, 2, 3, 4, 5]
    for step in snaps.weights:
        assert _equal(snaps.weights[step], plain_snaps.weights[step]), f"selection changed the weights at step {step}"
    assert snaps.losses == plain_snaps.losses and len(snaps.losses) == 5
    # what is saved: the final weights when the last step is best, else the chosen step's (which training reached)
    assert _equal(_saved_weights(out), plain_snaps.weights[selector.best_step])
    if selector.best_step == 5:
        assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), selected.parameters(), strict=True))


@pytest.mark.parametrize("training", [True, False])
def test_scoring_restores_the_mode_and_the_rng(tiny_model, arith_rows, training):
    """Sampling runs under a forked RNG and leaves the model's mode as it found it."""
    model, tokenizer = tiny_model
    model.train(training)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    _selector(tokenizer, arith_rows).measure(model, 2)
    assert model.training is training and all(m.training is training for m in model.modules())
    assert torch.equal(torch.get_rng_state(), before)


# --------------------------------------------------------------------------- real scoring


def test_real_scoring_is_deterministic_and_equals_the_top_mean_of_the_graded_samples(
    tiny_model, arith_rows, monkeypatch
):
    """The same model at the same step scores the same; the score is top_mean_score of its completions graded here."""
    model, tokenizer = tiny_model
    calls = []
    real = selection_module.sample_completions

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(selection_module, "sample_completions", recording)
    first = _selector(tokenizer, arith_rows)._score(model, 4)
    second = _selector(tokenizer, arith_rows)._score(model, 4)
    assert first == second
    assert 0.0 <= first <= 1.0
    assert calls[0]["seed"] == calls[1]["seed"]
    other_step = _selector(tokenizer, arith_rows)._score(model, 6)
    other_seed = _selector(tokenizer, arith_rows, seed=1)._score(model, 4)
    seeds = [c["seed"] for c in calls]
    assert len({seeds[0], seeds[2], seeds[3]}) == 3, "the seed depends on the step and the study seed"
    assert 0.0 <= other_step <= 1.0 and 0.0 <= other_seed <= 1.0

    # independently: the same completions (same seed, model and batch size), graded here, one row per prompt
    split = _split(arith_rows)
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=CONFIG.max_new_tokens)
    completions = sample_completions(
        model, tokenizer, list(split.prompts), CONFIG.samples, sampling, batch_size=CONFIG.batch_size, seed=seeds[0]
    )
    rewards = [[] for _ in split.rows]
    for c in completions:
        rewards[c.prompt_index].append(DigitProblem().grade(c.text, split.rows[c.prompt_index]).reward)
    assert [len(r) for r in rewards] == [CONFIG.samples] * CONFIG.prompts
    assert first == pytest.approx(top_mean_score(np.array(rewards), CONFIG.top), abs=1e-12)
    c = np.array(rewards).sum(axis=1)
    assert first == pytest.approx(float(np.mean(np.minimum(c, CONFIG.top) / CONFIG.top)), abs=1e-12)


# --------------------------------------------------------------------------- resume


def _perturbed(model, step):
    """``model`` with every weight shifted by ``step`` / 100: distinct weights per step, no training needed."""
    m = copy.deepcopy(model)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(step / 100)
    return m


def _first_run(model, tokenizer, arith_rows, folder, scores):
    """A first selector's candidates 0..5 written to ``folder`` (its journal and best file), as a run would."""
    first = _selector(tokenizer, arith_rows, config=CONFIG.model_copy(update={"every": 1}), cls=Scripted, scores=scores)
    state = SimpleNamespace(global_step=0, is_world_process_zero=True)
    first.on_train_begin(SimpleNamespace(output_dir=str(folder)), state, None, model=_perturbed(model, 0))
    models = {0: _perturbed(model, 0)}
    for step in range(1, 6):
        models[step] = _perturbed(model, step)
        first.measure(models[step], step)
    return first, {s: _cpu(m) for s, m in models.items()}


def _restored(tokenizer, arith_rows, folder, resumed_step):
    selector = _selector(tokenizer, arith_rows, cls=Scripted, scores={})
    selector._folder = folder
    selector._restore(resumed_step)
    return selector


def test_resume_keeps_the_candidates_up_to_the_resumed_step_and_the_best_weights(tiny_model, arith_rows, tmp_path):
    """Best at 2, resumed at 4: candidates 0..4 and step 2's weights are kept, the journal cut at 4."""
    model, tokenizer = tiny_model
    scores = {0: 0.1, 1: 0.2, 2: 0.5, 3: 0.3, 4: 0.5, 5: 0.45}
    first, weights = _first_run(model, tokenizer, arith_rows, tmp_path, scores)
    assert first.best_step == 2 and _file_step(tmp_path / BEST) == 2
    assert len((tmp_path / JOURNAL).read_text().splitlines()) == 6

    selector = _restored(tokenizer, arith_rows, tmp_path, 4)
    assert selector.candidates == [{"step": s, "score": scores[s]} for s in range(5)]
    assert selector.best_step == 2 and selector.report()["chosen_score"] == pytest.approx(0.5)
    assert _equal(selector._best_weights, weights[2])
    lines = [json.loads(line) for line in (tmp_path / JOURNAL).read_text().splitlines()]
    assert lines == selector.candidates
    assert _file_step(tmp_path / BEST) == 2
    # later candidates replace the best only when strictly better, and are journalled after the kept ones
    assert selector.measure(model, 4) == 0.5 and selector.scored == [], "the resumed step's candidate is kept"
    selector.scores = {6: 0.5}
    selector.measure(_perturbed(model, 6), 6)
    assert selector.best_step == 2 and _file_step(tmp_path / BEST) == 2
    selector.scores = {7: 0.9}
    selector.measure(_perturbed(model, 7), 7)
    assert selector.best_step == 7 and _file_step(tmp_path / BEST) == 7
    assert [json.loads(x)["step"] for x in (tmp_path / JOURNAL).read_text().splitlines()] == [0, 1, 2, 3, 4, 6, 7]


def test_resume_skips_a_journal_line_cut_short(tiny_model, arith_rows, tmp_path):
    """The last journal line of a run killed while writing it is ignored."""
    model, tokenizer = tiny_model
    scores = {0: 0.1, 1: 0.2, 2: 0.5, 3: 0.3, 4: 0.5, 5: 0.45}
    _first_run(model, tokenizer, arith_rows, tmp_path, scores)
    with open(tmp_path / JOURNAL, "a") as handle:
        handle.write('{"step": 6, "sco')
    selector = _restored(tokenizer, arith_rows, tmp_path, 6)
    assert [c["step"] for c in selector.candidates] == [0, 1, 2, 3, 4, 5] and selector.best_step == 2


def test_resume_starts_again_when_a_later_candidate_overwrote_the_best_file(tiny_model, arith_rows, tmp_path, caplog):
    """Best at 5 (after the resumed step 4): the kept best's weights are gone, so everything starts again."""
    model, tokenizer = tiny_model
    scores = {0: 0.1, 1: 0.2, 2: 0.5, 3: 0.3, 4: 0.4, 5: 0.9}
    _first_run(model, tokenizer, arith_rows, tmp_path, scores)
    assert _file_step(tmp_path / BEST) == 5
    with caplog.at_level(logging.WARNING, logger="aligntrain.training.selection"):
        selector = _restored(tokenizer, arith_rows, tmp_path, 4)
    assert selector.candidates == [] and selector.best_step is None and selector._best_weights is None
    assert not (tmp_path / JOURNAL).exists() and not (tmp_path / BEST).exists()
    assert any(r.levelno == logging.WARNING and "step 4" in r.getMessage() for r in caplog.records)


def test_resume_at_step_0_clears_everything(tiny_model, arith_rows, tmp_path):
    """A fresh run in a used folder: nothing of the old journal or best file counts."""
    model, tokenizer = tiny_model
    _first_run(model, tokenizer, arith_rows, tmp_path, {0: 0.1, 1: 0.2, 2: 0.5, 3: 0.3, 4: 0.4, 5: 0.45})
    selector = _restored(tokenizer, arith_rows, tmp_path, 0)
    assert selector.candidates == [] and selector.best_step is None
    assert not (tmp_path / JOURNAL).exists() and not (tmp_path / BEST).exists()


def test_an_interrupted_run_resumes_to_the_same_choice_and_model(tiny_model, arith_rows, tmp_path):
    """Killed during step 6, resumed from checkpoint-4: the same candidates, choice and saved weights as unbroken."""
    model, tokenizer = tiny_model
    rows = arith_rows["train"]
    scores = {0: 0.1, 2: 0.7, 4: 0.3, 5: 0.2, 6: 0.5}
    config = CONFIG.model_copy(update={"every": 2})

    def saver(m, path):
        return lambda state_dict=None: save_model_and_tokenizer(m, tokenizer, path, state_dict=state_dict)

    reference, ref_model, ref_snaps = (
        _selector(tokenizer, arith_rows, config=config, cls=Scripted, scores=scores),
        copy.deepcopy(model),
        Snapshots(),
    )
    train_sft(
        ref_model,
        tokenizer,
        rows,
        _optim(6),
        tmp_path / "ref",
        max_length=128,
        seed=0,
        callbacks=[reference, ref_snaps],
        save_final=saver(ref_model, tmp_path / "ref-model"),
    )
    assert reference.best_step == 2

    first = _selector(tokenizer, arith_rows, config=config, cls=Scripted, scores=scores)
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
    # killed after step 5: checkpoint-4 is the newest, the journal has 0, 2, 4 (5 is not a multiple of every)
    assert (tmp_path / "run" / "checkpoint-4").is_dir()
    assert [json.loads(x)["step"] for x in (tmp_path / "run" / JOURNAL).read_text().splitlines()] == [0, 2, 4]
    assert _file_step(tmp_path / "run" / BEST) == 2

    resumed, resumed_model = (
        _selector(tokenizer, arith_rows, config=config, cls=Scripted, scores=scores),
        copy.deepcopy(model),
    )
    metrics = train_sft(
        resumed_model,
        tokenizer,
        rows,
        _optim(6),
        tmp_path / "run",
        max_length=128,
        seed=0,
        callbacks=[resumed],
        save_final=saver(resumed_model, tmp_path / "model"),
    )
    assert metrics["resumed_from_step"] == 4
    assert resumed.scored == [6], "steps up to the checkpoint come from the journal"
    assert resumed.report()["candidates"] == reference.report()["candidates"]
    assert resumed.best_step == 2
    assert _equal(_saved_weights(tmp_path / "model"), ref_snaps.weights[2])
    assert _equal(_saved_weights(tmp_path / "model"), _saved_weights(tmp_path / "ref-model"))


# --------------------------------------------------------------------------- configuration and dvc.yaml


def _raw():
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def test_config_refuses_a_top_above_the_samples():
    """selection.top > selection.samples is refused, by the section and through params naming selection.top."""
    with pytest.raises(ValueError, match="selection.top"):
        SelectionConfig(samples=4, top=5)
    assert SelectionConfig(samples=4, top=4).top == 4
    raw = _raw()
    raw["selection"] = {"enabled": True, "samples": 4, "top": 8}
    with pytest.raises(ParamsError, match="selection.top"):
        parse_params(raw)
    for name, field in SelectionConfig.model_fields.items():
        assert field.description, name


def test_selection_is_off_by_default_and_refused_for_a_launched_study():
    """Off by default; on under launch.num_processes 2 is refused, off under it is fine."""
    assert load_params(ROOT / "params.yaml").selection == SelectionConfig() and not SelectionConfig().enabled
    raw = _raw()
    raw["launch"] = {"num_processes": 2}
    assert parse_params(raw).launch.num_processes == 2
    raw["selection"] = {"enabled": True}
    with pytest.raises(ParamsError, match=r"selection\.enabled.*num_processes is 2"):
        parse_params(raw)


def test_selection_without_validation_prompts_is_refused():
    """validation_size 0 is refused by the problem section itself (ge=1): selection always has prompts."""
    raw = _raw()
    raw["problem"]["validation_size"] = 0
    raw["selection"] = {"enabled": True}
    with pytest.raises(ParamsError, match="validation_size"):
        parse_params(raw)


def _entry_params(name, study):
    entry = pipeline.stage_entry(pipeline.get_stage(name), study)
    return entry.get("do", entry).get("params", [])


@pytest.mark.parametrize(
    "section, listed",
    [
        (None, False),
        ({"enabled": False}, False),  # written but equal to the default
        ({"enabled": True}, True),
        ({"enabled": True, "every": 2, "prompts": 2, "samples": 2, "top": 1}, True),
        ({"enabled": False, "every": 10}, True),  # differs from the default though off
    ],
)
def test_the_train_stage_tracks_selection_only_when_the_study_changes_it(section, listed):
    """dvc.yaml's train entry names `selection` only when the section differs from the default; no other stage."""
    raw = _raw()
    if section is not None:
        raw["selection"] = section
    study = parse_params(raw)
    assert ("selection" in _entry_params("train", study)) is listed
    for name in ("prepare", "pretrain", "warmup", "rollouts", "evaluate", "compare", "diagnose", "report"):
        assert "selection" not in _entry_params(name, study), name
    assert sum(s.selects for s in pipeline.STAGES) == 1 and pipeline.get_stage("train").selects
    if listed:
        pipeline.check_written_params(study, raw, "params.yaml")  # the section is written: nothing missing


def test_the_checkpoint_key_holds_selection_for_variants_only():
    """A run with selection resumes only from a folder of a run with the same selection; warm-up has none."""
    from aligntrain.stages import training

    params = load_params(ROOT / "params.yaml")
    on = params.model_copy(update={"selection": SelectionConfig(enabled=True)})
    assert training._callbacks_key(on, "train-ce") == [on.selection]
    assert training._callbacks_key(on, "warmup") == [] and training._callbacks_key(on, "pretrain") == []
    assert training._callbacks_key(params, "train-ce") == []


# --------------------------------------------------------------------------- the stage


def test_the_train_stage_writes_the_selection_report(tmp_path, tiny_model, arith_rows):
    """train_variant with selection on: selection.json beside the saved model, its chosen step one of its
    candidates, and the metric selected_step; the untrained variant `warmup` has neither."""
    from aligntrain.paths import StudyPaths
    from aligntrain.stages import training

    raw = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    raw["warmup"].update(steps=2, batch_size=4, checkpoint_every=1)
    raw["train"].update(steps=3, batch_size=4, checkpoint_every=1)
    raw["rl"].update(steps=3, batch_size=8, num_generations=4, max_completion_length=8, checkpoint_every=1)
    raw["selection"] = {"enabled": True, "every": 2, "prompts": 2, "samples": 2, "top": 1, "max_new_tokens": 8}
    params = parse_params(raw)
    paths = StudyPaths(tmp_path)
    save_model_and_tokenizer(*tiny_model, paths.base_model)
    val = arith_rows["validation"][:4]
    training.warmup(params, paths, arith_rows["train"], val)
    for variant in ("ce", "grpo"):
        metrics = training.train_variant(params, paths, variant, arith_rows["train"], val)
        report = json.loads((paths.variant_model(variant) / REPORT).read_text())
        steps = [c["step"] for c in report["candidates"]]
        assert steps == [0, 2, 3], variant
        assert report["chosen_step"] in steps
        best = max(report["candidates"], key=lambda c: (c["score"], -c["step"]))
        assert report["chosen_step"] == best["step"] and report["chosen_score"] == best["score"], variant
        assert all(0.0 <= c["score"] <= 1.0 for c in report["candidates"])
        assert metrics["selected_step"] == float(report["chosen_step"]), variant
        assert (paths.variant_model(variant) / "config.json").is_file()
    metrics = training.train_variant(params, paths, "warmup", arith_rows["train"], val)
    assert "selected_step" not in metrics and not (paths.variant_model("warmup") / REPORT).exists()
    assert not any((tmp_path / "checkpoints").glob("*")), (
        "checkpoints (the journals and best files in them) are removed"
    )
