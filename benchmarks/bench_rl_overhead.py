"""The advantage-rule hook's RL step against TRL's own GRPO advantage, through the real trainers.

    .venv/bin/python benchmarks/bench_rl_overhead.py [--quick] [--repeats 8] [--rounds 1] [--steps 3]

Baseline: plain ``trl.GRPOTrainer`` with the ``GRPOConfig`` that
:func:`aligntrain.training.rl.grpo_config` makes (``scale_rewards="none"``: TRL's
advantage is the reward minus its group mean). Against it:
``StrategyGRPOTrainer`` with the rules grpo (the same advantage through the
hook), grpo_z, loo_pass_at_k, cat_pass_at_n and tea. Every trainer gets the
same freshly initialised tiny Llama (the default study's shape), the same arith
prompts, the same reward function (the arith problem's reward through
:func:`~aligntrain.training.rl.safe_reward_fn`) and the same seeds.

(a) Steps interleaved step by step: one trainer per variant, and repeat r runs
the work of one iteration of the trainer loop on every trainer in turn (order
rotated per repeat): ``training_step`` (sampling the group, rewards, the
advantage, the loss and its backward), gradient clipping, AdamW and the
scheduler. Before each, torch's global RNG is seeded with the repeat's seed, so
every trainer draws its rollouts from the same random stream. Reported: medians
and the median of the per-repeat ratios to plain TRL (a 95% bootstrap interval).

(b) Whole runs: ``train_rl`` with ``steps`` steps against ``GRPOTrainer.train``
for as many, runs interleaved, each step timed by a callback between
consecutive ``on_step_end`` calls (the first step dropped).

(c) The advantage alone, on one (64,) reward vector (8 groups of 8, binary):
TRL's arithmetic (group ``nanmean``, ``repeat_interleave``, ``nanstd`` for its
zero-std log line, subtract), :func:`aligntrain.advantages.compute_advantages`,
and the trainer's whole hook ``StrategyGRPOTrainer.rule_advantages`` (the
unscorable mask, the history copy and update, the rule).

Wall time (``perf_counter``) and the main thread's CPU time (``thread_time``;
torch runs on one thread). Nothing is written outside a temporary folder.
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
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOTrainer
from trl.trainer.utils import nanstd

from aligntrain.advantages import compute_advantages
from aligntrain.config import RLConfig
from aligntrain.models import build_char_tokenizer, build_tiny_llama
from aligntrain.problems import get_problem
from aligntrain.training.rl import StrategyGRPOTrainer, grpo_config, safe_reward_fn, train_rl

#: the default study's model (params.yaml ``model``)
MODEL = dict(hidden_size=96, num_layers=3, num_heads=4, intermediate_size=256, max_length=128)
#: "trl" is plain GRPOTrainer; the others are StrategyGRPOTrainer with that rule (params.yaml's options)
RULES = {
    "grpo": "grpo",
    "grpo_z": "grpo_z",
    "loo_pass_at_k": "loo_pass_at_k",
    "cat_pass_at_n": {"name": "cat_pass_at_n", "budget": 16},
    "tea": "tea",
}
VARIANTS = ["trl", *RULES]


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


@contextmanager
def quiet():
    """The trainers' progress bars and log lines go to a buffer, shown only if the block fails."""
    buffer = io.StringIO()
    try:
        with redirect_stderr(buffer), redirect_stdout(buffer):
            yield
    except BaseException:
        print(buffer.getvalue()[-4000:])
        raise


def _config(variant: str, steps: int, args) -> RLConfig:
    rule = RULES.get(variant, "grpo")  # plain TRL: the same schedule and group; its rule is unused
    return RLConfig(
        rule=rule, steps=steps, batch_size=args.batch_size, num_generations=args.group,
        max_completion_length=args.max_completion_length, learning_rate=1e-4, lr_warmup_ratio=0.0,
        checkpoint_every=10_000, log_every=10_000,
    )  # fmt: skip


def _trainer(variant: str, steps: int, args, tokenizer, rows, tmp: str, callbacks=()):
    problem = get_problem("arith")
    model = build_tiny_llama(tokenizer, **MODEL, seed=0)
    config = _config(variant, steps, args)
    data = Dataset.from_dict({c: [r[c] for r in rows] for c in ("prompt", "answer")})
    reward = safe_reward_fn(problem.reward, config.reward_timeout_s)
    common = dict(train_dataset=data, processing_class=tokenizer, callbacks=list(callbacks))
    if variant == "trl":
        return GRPOTrainer(model=model, reward_funcs=[reward], args=grpo_config(config, tmp, seed=0), **common)
    config.rule.check_fits(binary_rewards=problem.binary_rewards)
    return StrategyGRPOTrainer(
        model, [reward], config=config, checkpoint_dir=tmp, seed=0, answer_class=problem.answer_class, **common
    )


def paired_steps(args, tokenizer, rows) -> dict[str, dict[str, np.ndarray]]:
    """CPU and wall seconds per step, (repeats,) per variant, interleaved step by step; repeat 0 dropped."""
    trainers = {}
    with tempfile.TemporaryDirectory() as tmp, quiet():
        for variant in VARIANTS:
            trainer = _trainer(variant, args.repeats + 1, args, tokenizer, rows, f"{tmp}/{variant}")
            trainer.create_optimizer_and_scheduler(num_training_steps=args.repeats + 1)
            trainer.model.train()
            trainer.current_gradient_accumulation_steps = 1  # set by the trainer loop, read by TRL's loss
            trainers[variant] = trainer
        loader = trainers["trl"].get_train_dataloader()
        batches = []
        while len(batches) < args.repeats + 1:
            batches.extend(loader)
        wall = {v: np.zeros(args.repeats + 1) for v in VARIANTS}
        cpu = {v: np.zeros(args.repeats + 1) for v in VARIANTS}
        tokens = {v: np.zeros(args.repeats + 1) for v in VARIANTS}
        for r in range(args.repeats + 1):
            for variant in VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]:
                trainer = trainers[variant]
                model = trainer.model
                torch.manual_seed(1000 + r)
                wall0, cpu0 = time.perf_counter(), time.thread_time()
                trainer.training_step(model, batches[r], None)
                trainer._clip_grad_norm(model)
                trainer.optimizer.step()
                trainer.lr_scheduler.step()
                model.zero_grad()
                trainer.state.global_step += 1
                wall[variant][r] = time.perf_counter() - wall0
                cpu[variant][r] = time.thread_time() - cpu0
                tokens[variant][r] = trainer._buffered_inputs[0]["completion_mask"].sum().item()
    return {k: {v: x[1:] for v, x in t.items()} for k, t in (("wall", wall), ("cpu", cpu), ("tokens", tokens))}


def whole_runs(args, tokenizer, rows) -> dict[str, StepClock]:
    """Per-step times of ``steps``-step runs (train_rl, or GRPOTrainer.train for "trl"), interleaved by run."""
    problem = get_problem("arith")
    clocks = {v: StepClock() for v in VARIANTS}
    for r in range(args.rounds):
        for variant in VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]:
            with tempfile.TemporaryDirectory() as tmp, quiet():
                if variant == "trl":
                    _trainer(variant, args.steps, args, tokenizer, rows, tmp, [clocks[variant]]).train()
                else:
                    model = build_tiny_llama(tokenizer, **MODEL, seed=0)
                    train_rl(
                        model, tokenizer, rows, _config(variant, args.steps, args), tmp, reward_fn=problem.reward,
                        answer_class=problem.answer_class, binary_rewards=problem.binary_rewards, seed=0,
                        callbacks=[clocks[variant]],
                    )  # fmt: skip
            clocks[variant].last = None
    return clocks


def trl_advantage(rewards_per_func: torch.Tensor, weights: torch.Tensor, n: int) -> torch.Tensor:
    """TRL 1.16's advantage with ``scale_rewards="none"`` (``sum_then_normalize``), as its trainer computes it."""
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    rewards[unscorable] = torch.nan
    mean = torch.nanmean(rewards.view(-1, n), dim=1).repeat_interleave(n, dim=0)
    std = nanstd(rewards.view(-1, n), dim=1).repeat_interleave(n, dim=0)  # TRL computes it for a log line
    advantages = rewards - mean
    torch.isclose(std, torch.zeros_like(std))
    return torch.nan_to_num(advantages, nan=0.0)


def advantage_only(args, tokenizer, rows, repeats: int) -> dict[str, tuple[float, float, float]]:
    """Median CPU µs per call: TRL's arithmetic, compute_advantages, and the trainer's hook, per rule."""
    n = args.group
    gen = torch.Generator().manual_seed(0)
    rewards_per_func = (torch.rand(args.batch_size, 1, generator=gen) < 0.4).float()
    completions = ["1"] * args.batch_size
    weights = torch.ones(1)

    def cpu_us(fn) -> float:
        fn()
        times = []
        for _ in range(repeats):
            start = time.thread_time()
            fn()
            times.append(time.thread_time() - start)
        return 1e6 * statistics.median(times)

    baseline = cpu_us(lambda: trl_advantage(rewards_per_func, weights, n))
    out = {"trl": (baseline, baseline, baseline)}
    with tempfile.TemporaryDirectory() as tmp, quiet():
        for variant in VARIANTS[1:]:
            trainer = _trainer(variant, 10, args, tokenizer, rows, tmp)
            trainer.model.train()
            rewards = rewards_per_func.view(-1, n)
            rule = cpu_us(lambda t=trainer, x=rewards: compute_advantages(t.rule, x))
            hook = cpu_us(lambda t=trainer: t.rule_advantages(rewards_per_func, completions, {}, "train"))
            out[variant] = (baseline, rule, hook)
    return out


def ratio_interval(ratios: np.ndarray, seed: int = 0) -> tuple[float, float, float]:
    """Median of paired ratios and a 95% bootstrap interval of that median."""
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(ratios, size=(2000, ratios.size)), axis=1)
    return float(np.median(ratios)), float(np.quantile(medians, 0.025)), float(np.quantile(medians, 0.975))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=8, help="steps per variant, interleaved step by step")
    parser.add_argument("--rounds", type=int, default=1, help="whole runs per variant (interleaved)")
    parser.add_argument("--steps", type=int, default=3, help="steps per whole run (the first is dropped)")
    parser.add_argument("--batch-size", type=int, default=64, help="completions per step (the study's rl.batch_size)")
    parser.add_argument("--group", type=int, default=8, help="rollouts per prompt (the study's rl.num_generations)")
    parser.add_argument("--max-completion-length", type=int, default=48, help="the study's rl.max_completion_length")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the study's default is 1)")
    parser.add_argument("--rules", nargs="+", choices=list(RULES), default=list(RULES), help="rules against TRL")
    parser.add_argument("--quick", action="store_true", help="smoke run: 16 completions, 2 repeats, 1 run of 2 steps")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.rounds, args.steps, args.batch_size, args.max_completion_length = 2, 1, 2, 16, 8

    VARIANTS[:] = ["trl", *args.rules]
    torch.set_num_threads(args.threads)
    problem = get_problem("arith")
    prompts = args.batch_size // args.group * max(args.repeats + 1, args.steps)
    rows = problem.generate_splits({"train": prompts, "validation": 1, "test": 1}, levels=[1, 2, 3, 4, 5], seed=0)
    rows = rows["train"]
    tokenizer = build_char_tokenizer(problem.pretrain_corpus(2000, seed=0))
    print(
        f"model {MODEL['hidden_size']} wide x {MODEL['num_layers']} layers, {args.batch_size} completions per step "
        f"(groups of {args.group}), up to {args.max_completion_length} tokens, torch threads {torch.get_num_threads()}"
    )

    start = time.perf_counter()
    steps = paired_steps(args, tokenizer, rows)
    print(
        f"\n(a) trainer steps interleaved step by step, {args.repeats} repeats ({time.perf_counter() - start:.0f} s); "
        "medians, and the median of the per-repeat ratios to plain TRL with a 95% bootstrap interval:"
    )
    print(f"{'variant':<15}{'tokens':>8}{'wall s':>9}{'CPU s':>8}{'x trl (CPU)':>25}{'x trl (wall)':>14}")
    for variant in VARIANTS:
        ratio, low, high = ratio_interval(steps["cpu"][variant] / steps["cpu"]["trl"])
        wall_ratio = np.median(steps["wall"][variant] / steps["wall"]["trl"])
        print(
            f"{variant:<15}{np.mean(steps['tokens'][variant]):>8.0f}{np.median(steps['wall'][variant]):>9.3f}"
            f"{np.median(steps['cpu'][variant]):>8.3f}{ratio:>10.3f} [{low:.3f}, {high:.3f}]{wall_ratio:>14.3f}"
        )
    for variant in VARIANTS[1:]:
        ratio, low, high = ratio_interval(steps["cpu"][variant] / steps["cpu"]["trl"])
        verdict = "met" if high <= 1.03 else ("not met" if low > 1.03 else "undecided at this precision")
        print(f"ratio {variant}/trl (CPU per step): {ratio:.3f} [{low:.3f}, {high:.3f}] (aim <= 1.03: {verdict})")

    start = time.perf_counter()
    clocks = whole_runs(args, tokenizer, rows)
    print(
        f"\n(b) whole steps of train_rl / GRPOTrainer.train: {args.rounds} runs x {args.steps - 1} kept steps per "
        f"variant ({time.perf_counter() - start:.0f} s); medians:"
    )
    base_wall, base_cpu = (statistics.median(getattr(clocks["trl"], k)) for k in ("wall", "cpu"))
    print(f"{'variant':<15}{'steps':>6}{'wall s':>9}{'CPU s':>8}{'x trl (CPU)':>13}{'x trl (wall)':>14}")
    for variant in VARIANTS:
        wall, cpu = statistics.median(clocks[variant].wall), statistics.median(clocks[variant].cpu)
        print(
            f"{variant:<15}{len(clocks[variant].wall):>6}{wall:>9.3f}{cpu:>8.3f}"
            f"{cpu / base_cpu:>13.3f}{wall / base_wall:>14.3f}"
        )

    adv = advantage_only(args, tokenizer, rows, repeats=200)
    step_cpu_us = 1e6 * np.median(steps["cpu"]["trl"])
    print(
        f"\n(c) the advantage alone on {args.batch_size} binary rewards, median CPU µs per call (200 calls); "
        f"as a share of plain TRL's step ({step_cpu_us / 1e6:.3f} s CPU):"
    )
    print(f"{'variant':<15}{'TRL arithmetic':>16}{'compute_advantages':>20}{'trainer hook':>14}{'hook / step':>13}")
    for variant, (base, rule, hook) in adv.items():
        if variant == "trl":
            print(f"{'trl':<15}{base:>16.0f}{'':>20}{'':>14}{base / step_cpu_us:>13.2%}")
        else:
            print(f"{variant:<15}{base:>16.0f}{rule:>20.0f}{hook:>14.0f}{hook / step_cpu_us:>13.2%}")


if __name__ == "__main__":
    main()
