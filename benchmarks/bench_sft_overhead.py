"""Strategy SFT objectives' training step against cross-entropy's, through the real trainer.

    .venv/bin/python benchmarks/bench_sft_overhead.py [--quick] [--repeats 30] [--rounds 1] [--steps 6]

Every objective (the default study's catalog entries: ``ce`` the baseline,
``pass_at_n``, ``majority``, ``contrastive``) trains the same freshly
initialised tiny Llama (the default study's shape) on the same arith rows with
``StrategySFTTrainer`` (TRL's ``SFTTrainer`` underneath).

(a) Steps interleaved step by step: one trainer per objective; repeat r feeds
every objective the same collated batch and runs the trainer loop's work on
it (``compute_loss``, backward, clipping, AdamW, scheduler), in an order
rotated per repeat, so the machine's load hits all objectives alike. Reported:
median per part, and the median of the per-batch ratios to ``ce`` with a 95%
bootstrap interval; the aim (≤ 3%) counts as met when the interval's upper end
is ≤ 1.03.

(b) What differs between the steps: from the same fused-LM-head
log-probabilities, CE's reduction and logged metrics against each sequence
objective's loss and ``_log_batch``, with their backward (:func:`loss_head`).

(c) Whole runs of :func:`aligntrain.training.sft.train_sft`, interleaved by run:
a callback reads the clock at each ``on_step_end``, so a step is one whole
iteration of the trainer's loop, fetching and collating the batch included
(the first step of each run dropped). Runs are seconds apart, so these ratios
carry the machine's load changes; (a) and (b) are the measurement.

Wall time (``perf_counter``) and the main thread's CPU time (``thread_time``;
torch runs on one thread, so the step's whole computation is on it).
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from contextlib import contextmanager, redirect_stderr, redirect_stdout

import numpy as np
import torch
from transformers import TrainerCallback

from aligntrain.config import OptimConfig
from aligntrain.models import build_char_tokenizer, build_tiny_llama
from aligntrain.objectives import ContrastiveMargin, CrossEntropy, MajorityVote, PassAtN
from aligntrain.problems import get_problem
from aligntrain.training.sft import StrategySFTTrainer, _sft_config, train_sft

#: the default study's catalog entries (params.yaml ``variants``): ce is the baseline
OBJECTIVES = {
    "ce": CrossEntropy(),
    "pass_at_n": PassAtN(budget=16),
    "majority": MajorityVote(budget=16, consensus=0.4),
    "contrastive": ContrastiveMargin(num_rivals=4, mix=0.5),
}
#: the default study's model (params.yaml ``model``)
MODEL = dict(hidden_size=96, num_layers=3, num_heads=4, intermediate_size=256, max_length=128)


class StepClock(TrainerCallback):
    """Wall and thread CPU time between consecutive optimizer steps' ends."""

    def __init__(self):
        self.last: tuple[float, float] | None = None
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def on_step_end(self, args, state, control, **kwargs):
        now = (time.perf_counter(), time.thread_time())
        if self.last is not None:  # the first step (lazy initialisation) only starts the clock
            self.wall.append(now[0] - self.last[0])
            self.cpu.append(now[1] - self.last[1])
        self.last = now


def _model(tokenizer):
    return build_tiny_llama(tokenizer, **MODEL, seed=0)


def _optim(steps: int, batch_size: int) -> OptimConfig:
    # No checkpoint and no log line inside the timed steps.
    return OptimConfig(
        steps=steps, batch_size=batch_size, learning_rate=5e-4, lr_warmup_ratio=0.0, checkpoint_every=10_000,
        log_every=10_000,
    )  # fmt: skip


@contextmanager
def quiet():
    """The trainer's and the data set's progress bars go to a buffer, shown only if the block fails."""
    buffer = io.StringIO()
    try:
        with redirect_stderr(buffer), redirect_stdout(buffer):
            yield
    except BaseException:
        print(buffer.getvalue()[-4000:])
        raise


def whole_steps(tokenizer, rows, names, rounds: int, steps: int, batch_size: int) -> dict[str, StepClock]:
    """Per-step times of ``steps``-step ``train_sft`` runs, ``rounds`` runs per objective, interleaved."""
    clocks = {name: StepClock() for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            with tempfile.TemporaryDirectory() as tmp, quiet():
                train_sft(
                    _model(tokenizer), tokenizer, rows, _optim(steps, batch_size), tmp,
                    objective=OBJECTIVES[name], max_length=MODEL["max_length"], seed=0, callbacks=[clocks[name]],
                )  # fmt: skip
            clocks[name].last = None
    return clocks


def paired_steps(tokenizer, rows, names, repeats: int, batch_size: int):
    """CPU and wall seconds of each part of a step, (repeats,) per part and objective, interleaved step by step.

    One ``StrategySFTTrainer`` per objective, each with its own model (same
    initial weights) and its trainer's AdamW and scheduler. Repeat r feeds every
    objective the same collated batch (the r-th of TRL's shuffled loader) and
    runs the trainer loop's work on it: ``compute_loss``, the accelerator's
    backward, gradient clipping, the optimizer and scheduler steps. The
    objectives' order rotates from repeat to repeat. Repeat 0 is a warm-up.
    """
    from datasets import Dataset

    data = Dataset.from_dict({c: [r[c] for r in rows] for c in ("prompt", "completion")})
    trainers, batches = {}, []
    with tempfile.TemporaryDirectory() as tmp, quiet():
        args = _sft_config(
            _optim(repeats + 1, batch_size), tmp, max_length=MODEL["max_length"], seed=0, completion_only=True,
            eval_steps=None,
        )  # fmt: skip
        for name in names:
            trainer = StrategySFTTrainer(
                model=_model(tokenizer), args=args, train_dataset=data, processing_class=tokenizer,
                objective=OBJECTIVES[name],
            )  # fmt: skip
            trainer.create_optimizer_and_scheduler(num_training_steps=repeats + 1)
            trainer.model.train()
            trainers[name] = trainer
        loader = trainers[names[0]].get_train_dataloader()
        while len(batches) < repeats + 1:
            batches.extend(loader)
    parts = ("forward + loss", "backward", "clip + optimizer")
    wall = {n: {p: np.zeros(repeats + 1) for p in parts} for n in names}
    cpu = {n: {p: np.zeros(repeats + 1) for p in parts} for n in names}
    for r in range(repeats + 1):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            trainer = trainers[name]
            model = trainer.model
            marks = [(time.perf_counter(), time.thread_time())]
            loss = trainer.compute_loss(model, dict(batches[r]))
            marks.append((time.perf_counter(), time.thread_time()))
            trainer.accelerator.backward(loss)
            marks.append((time.perf_counter(), time.thread_time()))
            trainer._clip_grad_norm(model)
            trainer.optimizer.step()
            trainer.lr_scheduler.step()
            model.zero_grad()
            marks.append((time.perf_counter(), time.thread_time()))
            for i, part in enumerate(parts):
                wall[name][part][r] = marks[i + 1][0] - marks[i][0]
                cpu[name][part][r] = marks[i + 1][1] - marks[i][1]
    drop = lambda t: {n: {p: v[1:] for p, v in row.items()} for n, row in t.items()}  # noqa: E731
    return {"wall": drop(wall), "cpu": drop(cpu)}, trainers, batches[0]


def loss_head(trainers: dict[str, StrategySFTTrainer], batch: dict, repeats: int) -> dict[str, float]:
    """Median CPU µs of what differs between CE's step and a sequence objective's: the loss on the log-probs.

    Both run the same fused-LM-head forward (``fused_lm_head=True``); from its
    per-token log-probabilities (here a leaf tensor), CE is TRL's token-mean
    reduction plus its logged entropy and token accuracy; a sequence objective
    is the trainer's step generator, ``sample_loss(...).mean()`` and its logged
    metrics (``_log_batch``). Each includes the backward down to the log-probs.
    ``contrastive`` needs the full logits (a different forward), so it is not here.
    """
    from aligntrain.objectives import ScoredBatch

    ce = trainers["ce"]
    model = ce.model
    with torch.no_grad():
        outputs = model(**{**batch, "use_cache": False}, fused_lm_head=True)
    mask = batch["labels"][:, 1:] != -100

    def ce_head():
        log_probs = outputs.log_probs.detach().requires_grad_()
        loss = -log_probs.sum() / outputs.label_mask.sum().clamp(min=1)
        num_valid = outputs.label_mask.sum()
        ce._metrics["train"]["entropy"].append((outputs.entropy.sum() / num_valid).item())
        ce._metrics["train"]["mean_token_accuracy"].append((outputs.is_top1.sum() / num_valid).item())
        loss.backward()

    def sequence_head(trainer):
        log_probs = outputs.log_probs.detach().requires_grad_()
        scored = ScoredBatch(log_probs, mask, batch["labels"][:, 1:], None, trainer.step_generator(log_probs.device))
        loss = trainer.objective.sample_loss(scored).mean()
        trainer._log_batch("train", scored)
        loss.backward()

    heads = {"ce": ce_head}
    heads.update(
        {n: (lambda t=t: sequence_head(t)) for n, t in trainers.items() if n != "ce" and not t.objective.needs_logits}
    )
    times = {n: [] for n in heads}
    for r in range(repeats + 1):
        for name, head in heads.items():
            start = time.thread_time()
            head()
            if r:
                times[name].append(time.thread_time() - start)
    return {n: 1e6 * statistics.median(t) for n, t in times.items()}


def ratio_interval(ratios: np.ndarray, seed: int = 0) -> tuple[float, float, float]:
    """Median of paired ratios and a 95% bootstrap interval of that median."""
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(ratios, size=(2000, ratios.size)), axis=1)
    return float(np.median(ratios)), float(np.quantile(medians, 0.025)), float(np.quantile(medians, 0.975))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30, help="steps per objective, interleaved step by step")
    parser.add_argument("--rounds", type=int, default=1, help="train_sft runs per objective (interleaved)")
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps per train_sft run (the first is dropped)")
    parser.add_argument("--batch-size", type=int, default=64, help="sequences per step (the study's train.batch_size)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the study's default is 1)")
    parser.add_argument("--quick", action="store_true", help="smoke run: batch 8, 3 paired repeats, 1 run of 3 steps")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.rounds, args.steps, args.batch_size = 3, 1, 3, 8

    torch.set_num_threads(args.threads)
    problem = get_problem("arith")
    size = args.batch_size * max(args.steps, args.repeats + 1)
    rows = problem.generate_splits({"train": size, "validation": 1, "test": 1}, levels=[1, 2, 3, 4, 5], seed=0)
    rows = rows["train"]
    tokenizer = build_char_tokenizer(problem.pretrain_corpus(2000, seed=0))
    names = list(OBJECTIVES)
    print(
        f"model {MODEL['hidden_size']} wide x {MODEL['num_layers']} layers, vocabulary {len(tokenizer)}, "
        f"batch {args.batch_size}, torch threads {torch.get_num_threads()}"
    )

    start = time.perf_counter()
    steps, trainers, first_batch = paired_steps(tokenizer, rows, names, args.repeats, args.batch_size)
    total = {k: {n: sum(parts.values()) for n, parts in t.items()} for k, t in steps.items()}
    print(
        f"\n(a) trainer steps interleaved step by step, {args.repeats} batches, the same for every objective "
        f"({time.perf_counter() - start:.0f} s); medians, and the median of the per-batch ratios to ce "
        "with a 95% bootstrap interval:"
    )
    part_names = list(steps["cpu"]["ce"])
    print(
        f"{'objective':<13}{'wall ms':>9}{'CPU ms':>9}" + "".join(f"{p:>18}" for p in part_names)
        + f"{'x ce (CPU)':>24}{'x ce (wall)':>13}"
    )  # fmt: skip
    for name in names:
        cpu_ratio = ratio_interval(total["cpu"][name] / total["cpu"]["ce"])
        wall_ratio = np.median(total["wall"][name] / total["wall"]["ce"])
        cells = "".join(f"{1000 * np.median(steps['cpu'][name][p]):>18.1f}" for p in part_names)
        print(
            f"{name:<13}{1000 * np.median(total['wall'][name]):>9.1f}{1000 * np.median(total['cpu'][name]):>9.1f}"
            f"{cells}{cpu_ratio[0]:>10.3f} [{cpu_ratio[1]:.3f}, {cpu_ratio[2]:.3f}]{wall_ratio:>13.3f}"
        )
    for name in names[1:]:
        ratio, low, high = ratio_interval(total["cpu"][name] / total["cpu"]["ce"])
        verdict = "met" if high <= 1.03 else ("not met" if low > 1.03 else "undecided at this precision")
        print(f"ratio {name}/ce (CPU per step): {ratio:.3f} [{low:.3f}, {high:.3f}] (aim <= 1.03: {verdict})")

    heads = loss_head(trainers, first_batch, repeats=200)
    step_us = 1e6 * np.median(total["cpu"]["ce"])
    print(
        f"\n(b) the loss on the fused head's log-probabilities alone, forward and backward, median CPU µs "
        f"(200 calls), and its difference from ce's as a share of ce's step ({step_us / 1000:.1f} ms CPU):"
    )
    print(f"{'objective':<13}{'µs':>8}{'- ce, share of step':>22}")
    for name, us in heads.items():
        print(f"{name:<13}{us:>8.0f}{(us - heads['ce']) / step_us:>22.3%}")

    start = time.perf_counter()
    clocks = whole_steps(tokenizer, rows, names, args.rounds, args.steps, args.batch_size)
    print(
        f"\n(c) whole optimizer steps through train_sft (data loading and the loop included): {args.rounds} runs x "
        f"{args.steps - 1} kept steps per objective ({time.perf_counter() - start:.0f} s); medians:"
    )
    base_wall, base_cpu = (statistics.median(getattr(clocks["ce"], k)) for k in ("wall", "cpu"))
    print(f"{'objective':<13}{'steps':>6}{'wall ms':>9}{'CPU ms':>9}{'x ce (CPU)':>12}{'x ce (wall)':>13}")
    for name in names:
        wall, cpu = statistics.median(clocks[name].wall), statistics.median(clocks[name].cpu)
        print(
            f"{name:<13}{len(clocks[name].wall):>6}{1000 * wall:>9.1f}{1000 * cpu:>9.1f}"
            f"{cpu / base_cpu:>12.3f}{wall / base_wall:>13.3f}"
        )


if __name__ == "__main__":
    main()
