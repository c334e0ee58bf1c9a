"""Benchmark: every advantage rule (aligntrain.advantages) on a 512 × 64 reward batch.

Run: .venv/bin/python benchmarks/bench_advantages.py   (prints a Markdown table, writes nothing)

G = 512 prompts × n = 64 rollouts. Binary rewards (P(correct) drawn per prompt
from U(0, 1)) with answer classes as Python lists (correct → "42", wrong → one
of five wrong answers or None) for the binary and majority rules; standard
Gaussian rewards for the continuous ones. The history rules start from a full
4000-item RewardHistory. Each row is the median wall and CPU time of one
``compute_advantages`` call over the repeats (after one warm-up call), and its
CPU-time ratio to ``grpo`` measured in the same run. Answer lists are re-encoded on every
call, as in training. torch runs on one thread by default (``--threads``): on a
small, shared CPU, a second intra-op thread only adds scheduling stalls to these
sub-millisecond kernels.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable

import numpy as np
import torch

from aligntrain.advantages import MajorityThresholdState, RewardHistory, compute_advantages, list_rules

GROUPS, GROUP_SIZE = 512, 64
WRONG_ANSWERS = ("1", "2", "3", "4", "5", None)


def make_batch(seed: int) -> dict[str, object]:
    generator = torch.Generator().manual_seed(seed)
    solve_rate = torch.rand(GROUPS, 1, generator=generator)
    binary = (torch.rand(GROUPS, GROUP_SIZE, generator=generator) < solve_rate).float()
    wrong = torch.randint(0, len(WRONG_ANSWERS), (GROUPS, GROUP_SIZE), generator=generator).tolist()
    answers = [
        ["42" if correct else WRONG_ANSWERS[w] for correct, w in zip(row, wrong_row)]
        for row, wrong_row in zip(binary.bool().tolist(), wrong)
    ]
    gaussian = torch.randn(GROUPS, GROUP_SIZE, generator=generator)
    logps = -torch.rand(GROUPS, GROUP_SIZE, generator=generator) * 200.0
    return {"binary": binary, "answers": answers, "gaussian": gaussian, "logps": logps}


def full_history(decay: float | None, seed: int) -> RewardHistory:
    history = RewardHistory(capacity=4000, decay=decay)
    history.append(torch.randn(4000, generator=torch.Generator().manual_seed(seed + 1)), step=0)
    return history


def cases(batch: dict[str, object], seed: int) -> dict[str, Callable[[], torch.Tensor]]:
    """Benchmark name → a call. Every registered rule appears at least once."""
    binary, answers, gaussian, logps = batch["binary"], batch["answers"], batch["gaussian"], batch["logps"]
    history, timed_history = full_history(None, seed), full_history(0.99, seed)
    steps = iter(range(1, 10**9))
    state = MajorityThresholdState()
    run = compute_advantages
    table = {
        "grpo": lambda: run("grpo", gaussian),
        "grpo_z": lambda: run("grpo_z", gaussian),
        "dr_grpo": lambda: run("dr_grpo", gaussian),
        "rloo": lambda: run("rloo", gaussian),
        "loo_pass_at_k": lambda: run("loo_pass_at_k", gaussian),
        "loo_pass_at_k_biased": lambda: run("loo_pass_at_k_biased", gaussian),
        "pkpo k=8": lambda: run("pkpo", gaussian, budget=8),
        "pkpo k=32": lambda: run("pkpo", gaussian, budget=32),
        "loo_maj_at_k (answer lists)": lambda: run("loo_maj_at_k", binary, answers=answers),
        "loo_maj_at_k_biased (answer lists)": lambda: run("loo_maj_at_k_biased", binary, answers=answers),
        "bon_max_mean": lambda: run("bon_max_mean", gaussian),
        "bon_max_second": lambda: run("bon_max_second", gaussian),
        "chow_bon N=16": lambda: run("chow_bon", binary, budget=16),
        "cat_pass_at_n N=16 empirical": lambda: run("cat_pass_at_n", binary, budget=16),
        "cat_pass_at_n N=16 sequence": lambda: run(
            "cat_pass_at_n", binary, budget=16, p_source="sequence", logps=logps
        ),
        "cat_majority N=16 dynamic k": lambda: run("cat_majority", binary, budget=16, answers=answers),
        "cat_majority N=16 dynamic k + EMA": lambda: run(
            "cat_majority", binary, budget=16, answers=answers, threshold_ema=0.9, threshold_state=state
        ),
        "cat_best_of_n N=16 in_batch": lambda: run("cat_best_of_n", gaussian, budget=16),
        "cat_best_of_n N=16 history (4000)": lambda: run(
            "cat_best_of_n", gaussian, budget=16, quantile="history", history=history
        ),
        "cat_best_of_n N=16 time_weighted (4000)": lambda: run(
            "cat_best_of_n", gaussian, budget=16, quantile="time_weighted", history=timed_history, step=next(steps)
        ),
        "tea": lambda: run("tea", gaussian),
        "prefix_tea (32, 64)": lambda: run("prefix_tea", gaussian),
    }
    covered = {name.split()[0] for name in table}
    missing = set(list_rules()) - covered
    if missing:
        raise SystemExit(f"benchmark misses rules {sorted(missing)}")
    return table


def median_milliseconds(call: Callable[[], torch.Tensor], repeats: int) -> tuple[float, float]:
    """(wall, CPU) medians in ms. CPU is the calling thread's time: with one torch thread
    it holds all the work and is not inflated when other jobs preempt the process."""
    call()  # warm-up: caches (PKPO coefficients, TEA constants), allocator
    wall, cpu = [], []
    for _ in range(repeats):
        wall_start, cpu_start = time.perf_counter(), time.thread_time()
        call()
        cpu.append(time.thread_time() - cpu_start)
        wall.append(time.perf_counter() - wall_start)
    return 1000.0 * float(np.median(wall)), 1000.0 * float(np.median(cpu))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    table = cases(make_batch(args.seed), args.seed)
    timings = {name: median_milliseconds(call, args.repeats) for name, call in table.items()}
    base_wall, base_cpu = timings["grpo"]
    print(
        f"G × n = {GROUPS} × {GROUP_SIZE}, float32, median of {args.repeats}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s), {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}"
    )
    print()
    print("| rule | wall ms / call | CPU ms / call | × grpo (CPU) |")
    print("|---|---:|---:|---:|")
    for name, (wall, cpu) in timings.items():
        print(f"| {name} | {wall:.2f} | {cpu:.2f} | {cpu / base_cpu:.1f} |")
    print()
    print(f"grpo: {base_wall:.3f} ms wall, {base_cpu:.3f} ms CPU")


if __name__ == "__main__":
    main()
