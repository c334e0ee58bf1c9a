"""Benchmark: exact maj@k (aligntrain.estimators) against the papers' 500-draw Monte Carlo.

Run: .venv/bin/python benchmarks/bench_estimators.py   (prints a table, writes nothing)

Pools of 128 completions per prompt, answer classes drawn from four distributions
(a confident model, a contested vote, a long tail of distinct wrong answers, a hard
prompt with almost no correct completions; some completions unparseable).
  (a) exact maj@k curve for k in {1, 2, 4, ..., 64}, one pass per pool,
  (b) the papers' method (CAT App. I.3): a 500-draw Monte Carlo estimate per k,
  (c) one exact maj_at_k call against one 500-draw estimate at the same k,
  (d) equal precision: Monte Carlo draws for a standard error of 0.001 per prompt
      and k, from the Bernoulli variance p(1−p) of the papers' per-draw outcome (they
      take one mode: a 0/1 outcome with mean p = exact maj@k), times the measured
      cost per draw, against the exact curve.
Times are medians over repeats, then over pools, of wall time (time.perf_counter) and
of the thread's CPU time (time.thread_time): on a shared machine a long measurement is
preempted more often than a short one, which inflates its wall time; CPU time is not.
The cost per draw in (d) uses CPU time.
"""

from __future__ import annotations

import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aligntrain.estimators import maj_at_k, maj_at_k_curve, maj_at_k_monte_carlo

POOL_SIZE = 128
POOLS_PER_DISTRIBUTION = 8
KS = [1, 2, 4, 8, 16, 32, 64]
SINGLE_KS = [1, 8, 64]
MC_DRAWS = 500
REPEATS = 15
TARGET_STDERR = 0.001


def zipf(n_classes: int, exponent: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n_classes + 1) ** exponent
    return weights / weights.sum()


def answer_probabilities(distribution: str, rng: np.random.Generator) -> tuple[float, np.ndarray, float]:
    """(P(correct), wrong-class shares summing to 1, P(unparseable)) of one prompt."""
    if distribution == "confident":
        return 0.7, rng.dirichlet(np.ones(3)), 0.05
    if distribution == "contested":  # one strong distractor and a few minor ones
        minor = rng.dirichlet(np.ones(4)) * 0.25
        return 0.35, np.concatenate(([0.30], minor)) / 0.55, 0.10
    if distribution == "long tail":  # many distinct wrong answers
        return 0.10, zipf(60, 1.0), 0.15
    if distribution == "hard":  # almost never correct
        return 0.02, zipf(30, 1.2), 0.10
    raise ValueError(f"unknown distribution {distribution!r}")


def make_pool(distribution: str, rng: np.random.Generator) -> list[int | None]:
    """128 answer classes: 0 = correct, 1.. = wrong classes, None = unparseable."""
    p_correct, wrong_shares, p_unparseable = answer_probabilities(distribution, rng)
    probabilities = np.concatenate(([p_correct], (1 - p_correct - p_unparseable) * wrong_shares, [p_unparseable]))
    labels = rng.choice(len(probabilities), size=POOL_SIZE, p=probabilities)
    unparseable = len(probabilities) - 1
    return [None if label == unparseable else int(label) for label in labels]


@dataclass(frozen=True)
class Timing:
    wall: float  # seconds, time.perf_counter
    cpu: float  # seconds, time.thread_time


def median_timing(function: Callable[[], object], repeats: int = REPEATS) -> Timing:
    function()  # warm caches (binomial rows) as a long evaluation run would
    walls, cpus = [], []
    for _ in range(repeats):
        wall_start, cpu_start = time.perf_counter(), time.thread_time()
        function()
        cpus.append(time.thread_time() - cpu_start)
        walls.append(time.perf_counter() - wall_start)
    return Timing(wall=float(np.median(walls)), cpu=float(np.median(cpus)))


def median_over(timings: list[Timing]) -> Timing:
    return Timing(wall=float(np.median([t.wall for t in timings])), cpu=float(np.median([t.cpu for t in timings])))


def monte_carlo_curve(pool: list[int | None], seed: int) -> list[float]:
    """The seeds' protocol: an independent 500-draw estimate for every k."""
    rng = np.random.default_rng(seed)
    return [maj_at_k_monte_carlo(pool, 0, k, draws=MC_DRAWS, rng=rng) for k in KS]


def comparison_columns(exact: Timing, monte_carlo: Timing) -> str:
    """exact | MC | MC/exact, in wall time then in CPU time (milliseconds)."""
    return (
        f"{1e3 * exact.wall:>8.3f} {1e3 * monte_carlo.wall:>8.3f} {monte_carlo.wall / exact.wall:>6.1f}x   "
        f"{1e3 * exact.cpu:>8.3f} {1e3 * monte_carlo.cpu:>8.3f} {monte_carlo.cpu / exact.cpu:>6.1f}x"
    )


COMPARISON_HEADER = f"{'exact':>8} {'MC':>8} {'MC/ex':>7}   {'exact':>8} {'MC':>8} {'MC/ex':>7}"
COMPARISON_SUPER = f"{'wall ms':-^25}   {'CPU ms':-^25}"


def main() -> None:
    rng = np.random.default_rng(20260101)
    distributions = ["confident", "contested", "long tail", "hard"]
    pools = {name: [make_pool(name, rng) for _ in range(POOLS_PER_DISTRIBUTION)] for name in distributions}
    all_pools = [(name, index, pool) for name in distributions for index, pool in enumerate(pools[name])]

    print(f"maj@k benchmark: pools of {POOL_SIZE} completions, k in {KS}")
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} CPU cores, "
        f"load average {os.getloadavg()[0]:.2f}; medians over {REPEATS} repeats, then over pools\n"
    )

    # (a) + (b): exact curve against 500 draws per k, side by side.
    print("(a) exact maj@k curve, one pass  vs  (b) seeds' Monte Carlo, 500 draws for each of the 7 ks")
    print(f"{'':<12} {'':>5} {'':>7} {COMPARISON_SUPER} {'':>13}")
    header = f"{'distribution':<12} {'pools':>5} {'n_c med':>7} {COMPARISON_HEADER} {'max|MC-exact|':>13}"
    print(header)
    print("-" * len(header))
    exact_curves, exact_timings, mc_timings = {}, {}, {}
    for name in distributions:
        errors = []
        for index, pool in enumerate(pools[name]):
            exact_timings[(name, index)] = median_timing(lambda pool=pool: maj_at_k_curve(pool, 0, KS))
            mc_timings[(name, index)] = median_timing(lambda pool=pool, i=index: monte_carlo_curve(pool, seed=i))
            exact_curves[(name, index)] = maj_at_k_curve(pool, 0, KS)
            estimates = np.array(monte_carlo_curve(pool, seed=index))
            errors.append(np.max(np.abs(estimates - exact_curves[(name, index)])))
        exact = median_over([exact_timings[(name, i)] for i in range(len(pools[name]))])
        monte_carlo = median_over([mc_timings[(name, i)] for i in range(len(pools[name]))])
        n_correct = int(np.median([pool.count(0) for pool in pools[name]]))
        print(
            f"{name:<12} {len(pools[name]):>5} {n_correct:>7} {comparison_columns(exact, monte_carlo)} "
            f"{max(errors):>13.4f}"
        )
    exact, monte_carlo = median_over(list(exact_timings.values())), median_over(list(mc_timings.values()))
    print(f"{'all':<12} {len(all_pools):>5} {'':>7} {comparison_columns(exact, monte_carlo)}\n")

    # (c): one k, one exact call against one 500-draw estimate.
    print("(c) one k: one exact maj_at_k call vs one 500-draw Monte Carlo estimate")
    print(f"{'':>4} {COMPARISON_SUPER}")
    header = f"{'k':>4} {COMPARISON_HEADER} {'CPU: slowest exact / fastest MC':>32} {'exact slower':>13}"
    print(header)
    print("-" * len(header))
    for k in SINGLE_KS:
        exact_single = [median_timing(lambda pool=pool, k=k: maj_at_k(pool, 0, k)) for _, _, pool in all_pools]
        mc_single = [
            median_timing(lambda pool=pool, k=k, i=index: maj_at_k_monte_carlo(pool, 0, k, draws=MC_DRAWS, rng=i))
            for _, index, pool in all_pools
        ]
        cpu_ratios = np.array([m.cpu / e.cpu for e, m in zip(exact_single, mc_single)])
        slowest_exact = max(t.cpu for t in exact_single)
        fastest_mc = min(t.cpu for t in mc_single)
        print(
            f"{k:>4} {comparison_columns(median_over(exact_single), median_over(mc_single))} "
            f"{1e3 * slowest_exact:>16.3f} / {1e3 * fastest_mc:.3f} ms "
            f"{np.count_nonzero(cpu_ratios < 1):>3}/{cpu_ratios.size} pools"
        )
    print()

    # (d): equal precision.
    print(f"(d) equal precision: Monte Carlo draws for a standard error of {TARGET_STDERR} per prompt and k")
    header = f"{'k':>4} {'mean p(1-p)':>12} {'draws (mean)':>13} {'draws (max)':>12} {'MC CPU s/pool (mean)':>21}"
    print(header)
    print("-" * len(header))
    seconds_per_pool = {key: 0.0 for key in exact_curves}
    for column, k in enumerate(KS):
        variances, draws, seconds = [], [], []
        for name, index, pool in all_pools:
            p = exact_curves[(name, index)][column]
            needed = math.ceil(p * (1 - p) / TARGET_STDERR**2)
            draws = lambda pool=pool, k=k: maj_at_k_monte_carlo(pool, 0, k, draws=MC_DRAWS, rng=0)  # noqa: E731
            per_draw = median_timing(draws, 5).cpu / MC_DRAWS
            seconds_per_pool[(name, index)] += needed * per_draw
            variances.append(p * (1 - p))
            draws.append(needed)
            seconds.append(needed * per_draw)
        print(
            f"{k:>4} {np.mean(variances):>12.4f} {np.mean(draws):>13,.0f} {max(draws):>12,} {np.mean(seconds):>19.3f} s"
        )
    mc_total = float(np.median(list(seconds_per_pool.values())))
    exact_total = median_over(list(exact_timings.values())).cpu
    print(
        f"whole curve per pool (median): Monte Carlo at equal precision {mc_total:.2f} s CPU "
        f"(draws x measured CPU cost per draw) vs exact {1e3 * exact_total:.3f} ms CPU "
        f"-> {mc_total / exact_total:,.0f}x; and the exact value has no sampling error."
    )
    print(
        f"For scale: the papers' {MC_DRAWS}-draw estimate has a standard error up to "
        f"{math.sqrt(0.25 / MC_DRAWS):.4f} per prompt and k (at p = 0.5)."
    )


if __name__ == "__main__":
    main()
