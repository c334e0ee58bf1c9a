"""Strategy SFT through TRL: the loss that reaches the parameters, DCO refill, and resuming."""

from __future__ import annotations

import copy
import math
import os
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from interruption import Crash
from transformers import TrainerCallback

from aligntrain.config import OptimConfig
from aligntrain.losses import majority_weight, pass_at_n_weight
from aligntrain.objectives import ApproximateDCO, ContrastiveMargin, MajorityVote, ObjectiveOptions, PassAtN
from aligntrain.problems.arith import ArithProblem
from aligntrain.rollouts.generate import SamplingConfig
from aligntrain.training.sft import StrategySFTTrainer, _sft_config, step_seed, train_sft


def _completion_logp(model, tokenizer, row) -> torch.Tensor:
    """Summed log π(completion + EOS | prompt), by teacher forcing, independent of TRL."""
    prompt = tokenizer(row["prompt"])["input_ids"]
    full = tokenizer(row["prompt"] + row["completion"])["input_ids"] + [tokenizer.eos_token_id]
    ids = torch.tensor([full])
    logits = model(input_ids=ids).logits[0, :-1]
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    return logp[len(prompt) - 1 :].sum()


def _optim(steps: int, **kw) -> OptimConfig:
    return OptimConfig(
        steps=steps, batch_size=4, learning_rate=1e-3, lr_warmup_ratio=0.0, checkpoint_every=2, log_every=1, **kw
    )


def _trainer(model, tokenizer, rows, objective: ObjectiveOptions, tmp_path) -> StrategySFTTrainer:
    args = _sft_config(_optim(1), tmp_path, max_length=128, seed=0, completion_only=True, eval_steps=None)
    data = Dataset.from_dict({c: [r[c] for r in rows] for c in ("prompt", "completion")})
    return StrategySFTTrainer(
        model=model, args=args, train_dataset=data, processing_class=tokenizer, objective=objective
    )


def _rows_of(batch, tokenizer, rows) -> list[dict]:
    """The data rows of a collated batch, in batch order (the dataloader shuffles)."""
    by_text = {r["prompt"] + r["completion"]: r for r in rows}
    return [by_text[tokenizer.decode(ids, skip_special_tokens=True)] for ids in batch["input_ids"]]


def _trainer_gradient(trainer, model, batch) -> list[torch.Tensor]:
    model.zero_grad()
    trainer.compute_loss(model, dict(batch)).backward()
    return [p.grad.clone() for p in model.parameters()]


def _reference_gradient(model, tokenizer, batch_rows, weight_of) -> list[torch.Tensor]:
    """∇ of mean_i w(p_i)·(−ℓ_i) with ℓ from ``_completion_logp`` and w detached."""
    model.zero_grad()
    total = 0
    for row in batch_rows:
        ell = _completion_logp(model, tokenizer, row)
        total = total + weight_of(ell.detach().exp().double()).float() * (-ell)
    (total / len(batch_rows)).backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.fixture()
def fitted_model(tiny_model, arith_rows):
    """The tiny model after 45 Adam steps of CE on the first 9 of 12 rows.

    A random model gives every completion p ≈ 1e−15, where every strategy weight
    sits at its p → 0 limit; after the fit those 9 rows have p spread over
    (0, 1) and the other 3 keep p ≈ 0, so the weights differ from row to row.
    """
    model, tokenizer = tiny_model
    rows = arith_rows["train"][:12]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(45):
        loss = -sum(_completion_logp(model, tokenizer, r) for r in rows[:9]) / 9
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.zero_grad()
    return model, tokenizer, rows


def test_pass_at_n_gradient_is_weighted_ce(tiny_model, arith_rows, tmp_path):
    """One SGD-free step: the trainer's loss gradient equals mean_i F(N, p_i)·∇(−ℓ_i) (docs/math.md §2)."""
    model, tokenizer = tiny_model
    rows = arith_rows["train"][:4]
    n = 8
    trainer = _trainer(model, tokenizer, rows, PassAtN(budget=n), tmp_path)
    batch = next(iter(trainer.get_train_dataloader()))
    got = _trainer_gradient(trainer, model, batch)
    # Reference: the same batch rows (the dataloader shuffles) with an independent log-prob.
    want = _reference_gradient(model, tokenizer, _rows_of(batch, tokenizer, rows), lambda p: pass_at_n_weight(p, n))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)


def test_majority_gradient_is_weighted_ce(fitted_model, tmp_path):
    """The trainer's gradient equals mean_i w(p_i)·∇(−ℓ_i), w the majority weight (docs/math.md §2, CAT eq. 16)."""
    model, tokenizer, rows = fitted_model
    n, k = 8, 3
    trainer = _trainer(model, tokenizer, rows, MajorityVote(budget=n, k=k), tmp_path)
    # 12 rows in batches of 4: take the batch with the widest spread of weights.
    batches = list(trainer.get_train_dataloader())
    p_of = {r["id"]: _completion_logp(model, tokenizer, r).exp().double() for r in rows}
    weight_of = {row_id: float(majority_weight(p, n, k)) for row_id, p in p_of.items()}
    weights = lambda b: [weight_of[r["id"]] for r in _rows_of(b, tokenizer, rows)]  # noqa: E731
    batch = max(batches, key=lambda b: max(weights(b)) - min(weights(b)))
    assert max(weights(batch)) - min(weights(batch)) > 0.5, "the test needs rows with different weights"

    got = _trainer_gradient(trainer, model, batch)
    want = _reference_gradient(model, tokenizer, _rows_of(batch, tokenizer, rows), lambda p: majority_weight(p, n, k))
    for g, w in zip(got, want):
        # float32 sums in another order (a padded batch against one row at a time): absolute
        # error up to ~1e-5 of the tensor's largest entry on some CPUs; a wrong weight moves far more.
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4 * float(w.abs().max()))


def test_majority_consensus_sets_the_threshold():
    # CAT App. I.4: ρ = 0.4 at N = 64 needs 26 votes; ρ = 0.1 at N = 30 needs 3 (not 4).
    assert MajorityVote(budget=64, consensus=0.4).threshold == 26
    assert MajorityVote(budget=30, consensus=0.1).threshold == 3
    assert MajorityVote(budget=30, k=7).threshold == 7


def _hand_hybrid(model, batch, generator: torch.Generator, num_rivals: int, mix: float) -> torch.Tensor:
    """mix·margin + (1 − mix)·token-mean CE per sequence, averaged, written out from CAT App. A.7.2–A.7.3."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1].float()
    labels = batch["labels"][:, 1:]
    valid = labels != -100
    gold = labels.clamp(min=0)
    token_ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), gold, reduction="none")
    # Rivals: at each supervised position in row-major order, K iid draws from the softmax with gold masked.
    at = valid.nonzero(as_tuple=True)
    masked = logits.detach()[at].scatter(-1, gold[at][:, None], -math.inf)
    rivals = torch.multinomial(torch.softmax(masked, dim=-1), num_rivals, replacement=True, generator=generator)
    gold_logit = logits[at].gather(-1, gold[at][:, None])
    token_margin = -torch.nn.functional.logsigmoid(gold_logit - logits[at].gather(-1, rivals)).mean(dim=-1)
    rows = at[0]
    per_row = lambda x: torch.zeros(len(labels)).index_add(0, rows, x) / valid.sum(dim=-1)  # noqa: E731
    return (mix * per_row(token_margin) + (1 - mix) * per_row(token_ce[at])).mean()


def test_contrastive_loss_is_the_hybrid_with_the_step_generator(tiny_model, arith_rows, tmp_path):
    model, tokenizer = tiny_model
    rows = arith_rows["train"][:4]
    num_rivals, mix = 4, 0.3  # mix ≠ 0.5, so that swapping the two terms would show
    trainer = _trainer(model, tokenizer, rows, ContrastiveMargin(num_rivals=num_rivals, mix=mix), tmp_path)
    batch = next(iter(trainer.get_train_dataloader()))

    step0 = trainer.compute_loss(model, dict(batch))
    want = _hand_hybrid(model, batch, torch.Generator().manual_seed(step_seed(0, 0)), num_rivals, mix)
    torch.testing.assert_close(step0, want, rtol=1e-5, atol=1e-6)
    # The rivals matter, and the seed decides them: another generator gives another loss.
    other = _hand_hybrid(model, batch, torch.Generator().manual_seed(step_seed(0, 0) + 1), num_rivals, mix)
    assert abs(other.item() - want.item()) > 1e-4

    # Reproducible within a step, fresh rivals at the next one.
    assert trainer.compute_loss(model, dict(batch)).item() == step0.item()
    trainer.state.global_step = 1
    step1 = trainer.compute_loss(model, dict(batch))
    assert step1.item() != step0.item()
    want1 = _hand_hybrid(model, batch, torch.Generator().manual_seed(step_seed(0, 1)), num_rivals, mix)
    torch.testing.assert_close(step1, want1, rtol=1e-5, atol=1e-6)


def _hand_hinge_hybrid(model, batch, target_margin: float, mix: float) -> torch.Tensor:
    """mix·hinge + (1 − mix)·token-mean CE per sequence, averaged: CAT eqs. 24 and 26 per gold token,
    max(0, γ − (z_gold − max_{v ≠ gold} z_v)), written out independently of aligntrain.losses."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1].float()
    labels = batch["labels"][:, 1:]
    valid = labels != -100
    gold = labels.clamp(min=0)
    token_ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), gold, reduction="none")
    gold_logit = logits.gather(-1, gold[..., None]).squeeze(-1)
    others = logits.masked_fill(torch.nn.functional.one_hot(gold, logits.shape[-1]).bool(), -math.inf)
    token_hinge = (target_margin - (gold_logit - others.max(dim=-1).values)).clamp(min=0)
    per_row = lambda x: (x * valid).sum(dim=-1) / valid.sum(dim=-1)  # noqa: E731
    return (mix * per_row(token_hinge) + (1 - mix) * per_row(token_ce)).mean()


def test_contrastive_hinge_form_reaches_the_trainer(tiny_model, arith_rows, tmp_path):
    """form="hinge": the trainer's loss is the hinge hybrid, with no sampling (the same at every step)."""
    model, tokenizer = tiny_model
    rows = arith_rows["train"][:4]
    target_margin, mix = 2.0, 0.3
    objective = ContrastiveMargin(form="hinge", target_margin=target_margin, mix=mix)
    trainer = _trainer(model, tokenizer, rows, objective, tmp_path)
    batch = next(iter(trainer.get_train_dataloader()))

    step0 = trainer.compute_loss(model, dict(batch))
    want = _hand_hinge_hybrid(model, batch, target_margin, mix)
    torch.testing.assert_close(step0, want, rtol=1e-5, atol=1e-6)
    # The tiny model's margins sit on both sides of γ = 2 (else the test would not see the hinge).
    assert abs(want.item() - _hand_hinge_hybrid(model, batch, 50.0, mix).item()) > 1e-3
    trainer.state.global_step = 1
    assert trainer.compute_loss(model, dict(batch)).item() == step0.item()
    # and it is not the sampled log-sigmoid form
    sampled = _hand_hybrid(model, batch, torch.Generator().manual_seed(step_seed(0, 0)), 4, mix)
    assert abs(sampled.item() - want.item()) > 1e-4


@pytest.mark.parametrize("passing", [7, 3], ids=["enough-pass", "too-few-pass"])
def test_dco_refill_replaces_low_weight_examples(fitted_model, tmp_path, passing):
    """F < ε examples are replaced by the next candidates; the batch keeps 4 rows (DCO §5.1, App. B).

    ``passing`` rows of the 12 candidates have F ≥ ε. With 7, the batch is the
    first 4 passing candidates in stream order, and the others get no gradient.
    With 3, the 3 passing ones are topped up with the failing one of highest F.
    """
    model, tokenizer, rows = fitted_model
    n, batch_size = 4, 4
    p_of = {r["id"]: _completion_logp(model, tokenizer, r).exp().double() for r in rows}
    weight_of = {row_id: float(pass_at_n_weight(p, n)) for row_id, p in p_of.items()}
    # ε halfway between the passing-th and (passing+1)-th largest F, far from both.
    ranked = sorted(weight_of.values(), reverse=True)
    eps = (ranked[passing - 1] + ranked[passing]) / 2
    assert ranked[passing - 1] - ranked[passing] > 1e-3

    trainer = _trainer(model, tokenizer, rows, PassAtN(budget=n, refill_eps=eps, refill_factor=2.0), tmp_path)
    candidates = next(iter(trainer.get_train_dataloader()))
    assert len(candidates["input_ids"]) == 12, "(1 + refill_factor)·batch_size candidates per step"
    order = _rows_of(candidates, tokenizer, rows)
    passed = [r for r in order if weight_of[r["id"]] >= eps]
    failed = sorted((r for r in order if weight_of[r["id"]] < eps), key=lambda r: -weight_of[r["id"]])
    expected = (passed + failed)[:batch_size]
    if passing >= batch_size:
        assert all(weight_of[r["id"]] >= eps for r in expected)
    replaced = sum(weight_of[r["id"]] < eps for r in order[:batch_size])
    assert replaced > 0, "the test needs a nominal batch with an example to replace"

    model.train()
    got = _trainer_gradient(trainer, model, candidates)
    want = _reference_gradient(model, tokenizer, expected, lambda p: pass_at_n_weight(p, n))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)
    assert trainer._metrics["train"]["refilled_fraction"] == [replaced / batch_size]


def test_refill_candidates_per_step():
    """B + ⌈factor·B⌉, with the factor read as a decimal (0.7·10 is 7, not 7.000000000000001)."""
    assert PassAtN(budget=4).candidates_per_step(10) == 10  # refill off
    assert PassAtN(budget=4, refill_eps=0.01).candidates_per_step(10) == 20
    assert PassAtN(budget=4, refill_eps=0.01, refill_factor=0.7).candidates_per_step(10) == 17
    assert PassAtN(budget=4, refill_eps=0.01, refill_factor=0.25).candidates_per_step(10) == 13


def _dco_a_trainer(model, tokenizer, rows, objective, tmp_path, temperature=1.0) -> StrategySFTTrainer:
    args = _sft_config(_optim(1), tmp_path, max_length=128, seed=0, completion_only=True, eval_steps=None)
    data = Dataset.from_dict({c: [r[c] for r in rows] for c in ("prompt", "completion")})
    return StrategySFTTrainer(
        model=model,
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        objective=objective,
        answer_class=ArithProblem().answer_class,
        answer_sampling=SamplingConfig(temperature=temperature, max_new_tokens=64),
    )


def _greedy_answer_is_gold(model, tokenizer, row) -> bool:
    """Independent of the trainer's sampler: transformers' greedy generate on the row's prompt."""
    problem = ArithProblem()
    ids = torch.tensor([tokenizer(row["prompt"])["input_ids"]])
    out = model.generate(input_ids=ids, do_sample=False, max_new_tokens=64, pad_token_id=tokenizer.pad_token_id)
    text = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    return problem.answer_class(text) == problem.answer_class(row["completion"])


def test_dco_a_estimates_the_answer_probability_by_sampling(fitted_model, tmp_path):
    """At a near-zero temperature every sample is the greedy completion: p̂ = 1 if its answer is gold, else 0."""
    model, tokenizer, rows = fitted_model
    trainer = _dco_a_trainer(model, tokenizer, rows, ApproximateDCO(budget=4, samples=3, refill_eps=0), tmp_path, 1e-4)
    batch = next(iter(trainer.get_train_dataloader()))
    model.train()
    got = trainer._answer_probability(model, dict(batch))
    assert model.training, "train mode is restored after sampling"
    model.eval()
    want = [float(_greedy_answer_is_gold(model, tokenizer, r)) for r in _rows_of(batch, tokenizer, rows)]
    assert got.tolist() == want
    assert 0 < sum(want) < len(want), "the test needs solved and unsolved rows"


def test_dco_a_gradient_is_f_of_p_hat_times_ce(fitted_model, tmp_path):
    """loss = mean_i F(N, p̂_i)·(−ℓ_i), F detached (DCO eq. 4 with the Monte Carlo p̂ of DCO §5.4)."""
    model, tokenizer, rows = fitted_model
    n = 4
    trainer = _dco_a_trainer(model, tokenizer, rows, ApproximateDCO(budget=n, samples=4, refill_eps=0), tmp_path)
    batch = next(iter(trainer.get_train_dataloader()))
    model.train()
    seen = {}
    original = trainer._answer_probability

    def spy(model_, inputs):
        seen["p"] = original(model_, inputs)
        return seen["p"]

    trainer._answer_probability = spy
    got = _trainer_gradient(trainer, model, batch)
    p_hat = seen["p"].tolist()
    assert all(4 * p in range(5) for p in p_hat), "p̂ is a share of 4 samples"
    weights = iter([float(pass_at_n_weight(torch.tensor(p, dtype=torch.float64), n)) for p in p_hat])
    want = _reference_gradient(
        model, tokenizer, _rows_of(batch, tokenizer, rows), lambda p: torch.tensor(next(weights))
    )
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4 * float(w.abs().max()))
    assert trainer._metrics["train"]["answer_p"] == [pytest.approx(sum(p_hat) / len(p_hat))]


def test_dco_a_refill_replaces_the_examples_the_model_always_answers(fitted_model, tmp_path):
    """p̂ = 1 gives F(N, 1) = 0 < ε: such candidates make way for the next ones (DCO App. B)."""
    model, tokenizer, rows = fitted_model
    objective = ApproximateDCO(budget=4, samples=2, refill_eps=0.01, refill_factor=2.0)
    trainer = _dco_a_trainer(model, tokenizer, rows, objective, tmp_path, temperature=1e-4)
    candidates = next(iter(trainer.get_train_dataloader()))
    assert len(candidates["input_ids"]) == 12
    model.eval()
    solved = [_greedy_answer_is_gold(model, tokenizer, r) for r in _rows_of(candidates, tokenizer, rows)]
    model.train()
    inputs = {**candidates, "answer_p": trainer._answer_probability(model, dict(candidates))}
    chosen = trainer._select_batch(model, inputs)
    kept = [
        solved[i] for i in range(12) if any(torch.equal(candidates["input_ids"][i], r) for r in chosen["input_ids"])
    ]
    unsolved = solved.count(False)
    assert len(chosen["input_ids"]) == 4
    assert kept.count(False) == min(4, unsolved), "unsolved candidates first, in stream order"
    assert trainer._metrics["train"]["refilled_fraction"] == [sum(solved[:4]) / 4]


def test_dco_a_refuses_a_gold_completion_without_an_answer(tiny_model, arith_rows, tmp_path):
    model, tokenizer = tiny_model
    rows = [dict(arith_rows["train"][0], completion="no answer here")] + arith_rows["train"][1:4]
    with pytest.raises(ValueError, match="gold completion of row .* has no answer"):
        train_sft(
            model,
            tokenizer,
            rows,
            _optim(1),
            tmp_path / "run",
            objective=ApproximateDCO(budget=4),
            max_length=128,
            seed=0,
            answer_class=ArithProblem().answer_class,
            answer_sampling=SamplingConfig(),
        )
    with pytest.raises(ValueError, match="answer_class and answer_sampling needed"):
        train_sft(
            model,
            tokenizer,
            arith_rows["train"][:4],
            _optim(1),
            tmp_path / "r2",
            objective=ApproximateDCO(budget=4),
            max_length=128,
            seed=0,
        )


class _LogRecorder(TrainerCallback):
    def __init__(self):
        self.logs: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs or {}))


@pytest.mark.parametrize(
    ("objective", "logged"),
    [
        (MajorityVote(budget=4, consensus=0.5), "strategy_weight"),
        (ContrastiveMargin(), "token_ce"),
        (ContrastiveMargin(form="hinge"), "token_ce"),
        (PassAtN(budget=4, refill_eps=0.5, refill_factor=0.5), "refilled_fraction"),
    ],
    ids=["majority", "contrastive", "contrastive-hinge", "pass_at_n-refill"],
)
def test_train_sft_runs_each_objective(tiny_model, arith_rows, tmp_path, objective, logged):
    model, tokenizer = tiny_model
    before = [p.detach().clone() for p in model.parameters()]
    recorder = _LogRecorder()
    metrics = train_sft(
        model,
        tokenizer,
        arith_rows["train"][:16],
        _optim(2),
        tmp_path / "run",
        objective=objective,
        eval_rows=arith_rows["validation"][:4],
        max_length=128,
        seed=0,
        callbacks=[recorder],
    )
    assert math.isfinite(metrics["train_loss"]) and math.isfinite(metrics["eval_loss"])
    step_logs = [log for log in recorder.logs if "loss" in log]
    assert len(step_logs) == 2 and all(math.isfinite(log[logged]) for log in step_logs)
    assert ("strategy_weight" in step_logs[0]) == (objective.weight(torch.zeros(1)) is not None)
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))


@pytest.mark.parametrize(
    "objective",
    [PassAtN(budget=4), ContrastiveMargin(), PassAtN(budget=4, refill_eps=0.5)],
    ids=["pass_at_n", "contrastive", "pass_at_n-refill"],
)
def test_interrupted_training_resumes_to_the_same_weights(tiny_model, arith_rows, tmp_path, objective):
    model, tokenizer = tiny_model
    rows = arith_rows["train"]
    optim = _optim(6)
    reference = copy.deepcopy(model)
    train_sft(reference, tokenizer, rows, optim, tmp_path / "ref", objective=objective, max_length=128, seed=0)

    interrupted = copy.deepcopy(model)
    with pytest.raises(KeyboardInterrupt):
        train_sft(
            interrupted,
            tokenizer,
            rows,
            optim,
            tmp_path / "run",
            objective=objective,
            max_length=128,
            seed=0,
            callbacks=[Crash(at_step=5)],
        )
    assert (tmp_path / "run" / "checkpoint-4").is_dir()

    resumed = copy.deepcopy(model)  # a new process would start from the initial weights again
    metrics = train_sft(resumed, tokenizer, rows, optim, tmp_path / "run", objective=objective, max_length=128, seed=0)
    assert metrics["resumed_from_step"] == 4
    assert "train_loss" not in metrics and math.isfinite(metrics["train_loss_since_resume"]), "named as partial"
    assert not (tmp_path / "run").exists(), "checkpoints are removed after a completed run"
    for a, b in zip(reference.parameters(), resumed.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_step_seed_differs_per_process_and_rank_zero_is_the_single_process_seed():
    assert step_seed(0, 5, rank=0) == step_seed(0, 5)
    seeds = {step_seed(0, 5, rank=r) for r in range(4)} | {step_seed(0, 6), step_seed(1, 5)}
    assert len(seeds) == 6


def test_a_corrupt_checkpoint_is_skipped_for_the_newest_valid_one(tiny_model, arith_rows, tmp_path, caplog):
    """A crash during a checkpoint write truncates it: the re-run resumes from the one before, naming the skipped."""
    model, tokenizer = tiny_model
    rows, optim = arith_rows["train"], _optim(6)
    reference = copy.deepcopy(model)
    train_sft(reference, tokenizer, rows, optim, tmp_path / "ref", objective=PassAtN(budget=4), max_length=128, seed=0)
    with pytest.raises(KeyboardInterrupt):
        train_sft(
            copy.deepcopy(model),
            tokenizer,
            rows,
            optim,
            tmp_path / "run",
            objective=PassAtN(budget=4),
            max_length=128,
            seed=0,
            callbacks=[Crash(at_step=5)],
        )
    weights = tmp_path / "run" / "checkpoint-4" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    resumed = copy.deepcopy(model)
    with caplog.at_level("WARNING"):
        metrics = train_sft(
            resumed, tokenizer, rows, optim, tmp_path / "run", objective=PassAtN(budget=4), max_length=128, seed=0
        )
    assert metrics["resumed_from_step"] == 2
    assert "checkpoint-4" in caplog.text and "truncated" in caplog.text
    for a, b in zip(reference.parameters(), resumed.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_failed_save_keeps_the_checkpoints_and_the_rerun_does_not_train_again(tiny_model, arith_rows, tmp_path):
    model, tokenizer = tiny_model
    rows, optim = arith_rows["train"], _optim(6)

    def read_only_disk(state_dict):
        raise PermissionError("models/variants is read-only")

    with pytest.raises(PermissionError):
        train_sft(
            copy.deepcopy(model),
            tokenizer,
            rows,
            optim,
            tmp_path / "run",
            max_length=128,
            seed=0,
            save_final=read_only_disk,
        )
    assert (tmp_path / "run" / "checkpoint-6").is_dir(), "the finished run's last checkpoint survives"
    saved = []
    metrics = train_sft(
        copy.deepcopy(model),
        tokenizer,
        rows,
        optim,
        tmp_path / "run",
        max_length=128,
        seed=0,
        save_final=lambda state_dict: saved.append(state_dict is None),
    )
    assert metrics["resumed_from_step"] == 6 and saved == [True]
    assert not (tmp_path / "run").exists()


def test_checkpoint_problems_are_named(tmp_path):
    from aligntrain.training.schedule import checkpoint_problem, last_checkpoint

    empty = tmp_path / "checkpoint-8"
    empty.mkdir()
    assert "trainer_state.json" in checkpoint_problem(empty)
    (empty / "trainer_state.json").write_text("{")
    assert "unreadable" in checkpoint_problem(empty)
    (empty / "trainer_state.json").write_text("{}")
    assert "safetensors" in checkpoint_problem(empty)
    (empty / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    assert checkpoint_problem(empty) is None
    (empty / "optimizer.pt").write_bytes(b"not a zip")
    assert "optimizer.pt" in checkpoint_problem(empty)
    assert last_checkpoint(tmp_path) == (None, 0)
    assert last_checkpoint(tmp_path / "absent") == (None, 0)


class _Published(TrainerCallback):
    """The folders of the checkpoint directory as each save ends."""

    def __init__(self):
        self.seen: list[list[str]] = []

    def on_save(self, args, state, control, **kwargs):
        self.seen.append(sorted(p.name for p in Path(args.output_dir).iterdir() if p.is_dir()))


def test_a_checkpoint_write_cut_short_leaves_no_checkpoint_and_the_rerun_resumes_from_the_last_whole_one(
    tiny_model, arith_rows, tmp_path, monkeypatch
):
    """Killed while checkpoint-4 is written (weights in, optimizer not): no checkpoint-4 folder exists."""
    model, tokenizer = tiny_model
    rows, optim = arith_rows["train"], _optim(6)
    run = dict(objective=PassAtN(budget=4), max_length=128, seed=0)
    reference = copy.deepcopy(model)
    train_sft(reference, tokenizer, rows, optim, tmp_path / "ref", **run)

    save_optimizer = StrategySFTTrainer._save_optimizer_and_scheduler

    def killed_at_step_4(self, output_dir):
        if self.state.global_step == 4:
            assert (Path(output_dir) / "model.safetensors").is_file(), "cut short mid-write"
            raise KeyboardInterrupt("killed while writing checkpoint-4")
        save_optimizer(self, output_dir)

    with monkeypatch.context() as patch, pytest.raises(KeyboardInterrupt):
        patch.setattr(StrategySFTTrainer, "_save_optimizer_and_scheduler", killed_at_step_4)
        train_sft(copy.deepcopy(model), tokenizer, rows, optim, tmp_path / "run", **run)
    folders = sorted(p.name for p in (tmp_path / "run").iterdir() if p.is_dir())
    assert folders == ["checkpoint-2", "tmp-checkpoint-4"], "only whole checkpoints are named checkpoint-*"

    published = _Published()
    resumed = copy.deepcopy(model)
    metrics = train_sft(resumed, tokenizer, rows, optim, tmp_path / "run", callbacks=[published], **run)
    assert metrics["resumed_from_step"] == 2
    # The leftover is cleared before the next save; the trainer still keeps its last two checkpoints.
    assert published.seen == [["checkpoint-2", "checkpoint-4"], ["checkpoint-4", "checkpoint-6"]]
    for a, b in zip(reference.parameters(), resumed.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


class _SavesLikeTheRLTrainer(StrategySFTTrainer):
    """Adds a file to the checkpoint folder after ``super()._save_checkpoint``, as training/rl.py does."""

    fail = False

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.fail:
            raise OSError("disk full")
        folder = os.path.join(self._get_output_dir(trial=trial), f"checkpoint-{self.state.global_step}")
        torch.save({"rule": 1}, os.path.join(folder, "rule_state.pt"))


@pytest.mark.parametrize("fail", [False, True], ids=["saved", "failed"])
def test_a_subclass_file_written_after_super_is_part_of_the_atomic_checkpoint(tiny_model, arith_rows, tmp_path, fail):
    model, tokenizer = tiny_model
    args = _sft_config(_optim(2), tmp_path, max_length=128, seed=0, completion_only=True, eval_steps=None)
    data = Dataset.from_dict({c: [r[c] for r in arith_rows["train"][:8]] for c in ("prompt", "completion")})
    trainer = _SavesLikeTheRLTrainer(
        model=model, args=args, train_dataset=data, processing_class=tokenizer, objective=PassAtN(budget=4)
    )
    trainer.fail = fail
    if fail:
        with pytest.raises(OSError, match="disk full"):
            trainer.train()
        assert not list(tmp_path.glob("checkpoint-*"))
    else:
        trainer.train()
        assert (tmp_path / "checkpoint-2" / "rule_state.pt").is_file()
        assert not list(tmp_path.glob("tmp-checkpoint-*"))


def test_atomic_checkpoints_must_come_before_the_trainer_class():
    from trl import SFTTrainer

    from aligntrain.training.schedule import AtomicCheckpoints

    with pytest.raises(TypeError, match="before the trainer class"):
        type("Late", (SFTTrainer, AtomicCheckpoints), {})


class _GradNorms(TrainerCallback):
    """The global gradient norm the optimizer is about to apply (after clipping), recomputed from p.grad."""

    def __init__(self):
        self.norms: list[float] = []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        grads = [p.grad.detach().double().flatten() for p in model.parameters() if p.grad is not None]
        self.norms.append(float(torch.cat(grads).norm()))


@pytest.mark.parametrize("max_grad_norm", [0.05, 1e6])
def test_max_grad_norm_bounds_the_applied_gradient(tiny_model, arith_rows, tmp_path, max_grad_norm):
    """CAT Table 10's max gradient norm reaches the trainer: the gradient the step applies has norm
    min(raw, max_grad_norm), where raw is the pre-clip norm the trainer logs."""
    model, tokenizer = tiny_model
    applied, logs = _GradNorms(), _LogRecorder()
    train_sft(
        model,
        tokenizer,
        arith_rows["train"][:16],
        _optim(2, max_grad_norm=max_grad_norm),
        tmp_path / "run",
        objective=PassAtN(budget=4),
        max_length=128,
        seed=0,
        callbacks=[applied, logs],
    )
    raw = [float(log["grad_norm"]) for log in logs.logs if "grad_norm" in log]
    assert len(raw) == len(applied.norms) == 2
    for before, after in zip(raw, applied.norms):
        assert after == pytest.approx(min(before, max_grad_norm), rel=1e-4)
    if max_grad_norm < 1:
        assert min(raw) > max_grad_norm, "the bound was exercised"


def test_max_grad_norm_must_be_positive():
    with pytest.raises(ValueError, match="max_grad_norm"):
        _optim(1, max_grad_norm=0)
