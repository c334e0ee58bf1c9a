"""The seed × prompt bootstrap and Holm's adjustment against brute-force references."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from aligntrain.evaluation.inference import (
    holm_adjusted,
    resampled_means,
    resamples_for,
    seed_prompt_bootstrap,
    smallest_p_value,
)


def _exact_pigeonhole(d: list[list[Fraction]]) -> dict[Fraction, Fraction]:
    """The exact bootstrap distribution of the resampled grid mean: every draw of S seeds and P
    prompts with replacement, each of the S^S · P^P draws equally likely."""
    seeds, prompts = len(d), len(d[0])
    mass: dict[Fraction, Fraction] = {}
    draws = seeds**seeds * prompts**prompts
    for rows in itertools.product(range(seeds), repeat=seeds):
        for cols in itertools.product(range(prompts), repeat=prompts):
            mean = sum(d[r][c] for r in rows for c in cols) / (seeds * prompts)
            mass[mean] = mass.get(mean, Fraction(0)) + Fraction(1, draws)
    return mass


D = [[Fraction(3, 10), Fraction(-1, 10), Fraction(1, 2)], [Fraction(-2, 5), Fraction(1, 5), Fraction(0)]]


def test_resampled_means_follow_the_exact_pigeonhole_distribution():
    exact = _exact_pigeonhole(D)
    support = sorted(exact)
    means = resampled_means(np.array(D, dtype=float), n_resamples=200_000, seed=3)
    # Every resampled mean is a support point, and each point's frequency is its exact mass
    # within 5 Monte Carlo standard errors.
    values, counts = np.unique(means.round(12), return_counts=True)
    assert set(values.tolist()) <= {round(float(x), 12) for x in support}
    observed = dict(zip(values.tolist(), counts / len(means)))
    for x in support:
        mass = float(exact[x])
        assert observed.get(round(float(x), 12), 0.0) == pytest.approx(
            mass, abs=5 * np.sqrt(mass * (1 - mass) / len(means))
        )


def test_the_moments_of_the_resampled_means_are_the_exact_ones():
    rng = np.random.default_rng(0)
    d = rng.normal(size=(3, 4)).round(2)
    exact = _exact_pigeonhole([[Fraction(str(x)) for x in row] for row in d])
    mean = sum(x * m for x, m in exact.items())
    variance = float(sum((x - mean) ** 2 * m for x, m in exact.items()))
    means = resampled_means(d, n_resamples=200_000, seed=1)
    assert float(mean) == pytest.approx(d.mean(), abs=1e-12)
    assert means.mean() == pytest.approx(float(mean), abs=5 * np.sqrt(variance / len(means)))
    assert means.var() == pytest.approx(variance, rel=0.02)


def test_interval_and_p_value_are_the_exact_distributions_within_monte_carlo_error():
    exact = _exact_pigeonhole(D)
    resamples = 200_000
    result = seed_prompt_bootstrap(np.array(D, dtype=float), n_resamples=resamples, confidence=0.9, seed=4)
    support = sorted(exact)
    cdf = np.cumsum([float(exact[x]) for x in support])
    # The 5% and 95% quantiles of the exact distribution are support points; the interval's ends
    # (linearly interpolated between resampled means) lie between that point's neighbours.
    lo, hi = np.searchsorted(cdf, 0.05), np.searchsorted(cdf, 0.95)
    assert float(support[max(lo - 1, 0)]) - 1e-12 <= result.low <= float(support[lo]) + 1e-12
    assert float(support[hi]) - 1e-12 <= result.high <= float(support[min(hi + 1, len(support) - 1)]) + 1e-12
    assert result.mean_diff == pytest.approx(float(sum(sum(r) for r in D) / 6), abs=1e-15)
    below = float(sum(m for x, m in exact.items() if x <= 0))
    above = float(sum(m for x, m in exact.items() if x >= 0))
    expected = min(1.0, 2 * min(below, above))
    assert result.p_value == pytest.approx(expected, abs=10 * np.sqrt(expected * (1 - expected) / resamples))
    assert (result.seeds, result.prompts, result.n_resamples) == (2, 3, resamples)


def test_one_seed_is_the_paired_prompt_bootstrap_with_the_normal_width():
    """With one seed the resampling is over prompts alone (TEA App. B.2): on 400 prompts the percentile
    interval of mean(a − b) covers the true difference with the width of the normal approximation."""
    rng = np.random.default_rng(2024)
    prompts, true_difference = 400, 0.3
    b = rng.normal(size=prompts)
    a = b + true_difference + rng.normal(size=prompts)
    result = seed_prompt_bootstrap((a - b)[None, :], n_resamples=4000, seed=5)
    assert result.mean_diff == pytest.approx(float(np.mean(a - b)), rel=1e-14)
    assert result.low < true_difference < result.high and result.low < result.mean_diff < result.high
    normal_width = 2 * 1.959964 * np.std(a - b, ddof=1) / np.sqrt(prompts)
    assert result.high - result.low == pytest.approx(normal_width, rel=0.1)


def test_seed_spread_widens_the_interval_that_prompts_alone_would_give():
    rng = np.random.default_rng(4)
    prompts = rng.normal(0.05, 0.2, size=100)
    # Three runs whose overall level differs as much as the prompt interval: the seed × prompt
    # interval must be wider than the one over the first seed's prompts alone.
    d = np.stack([prompts + shift for shift in (-0.08, 0.0, 0.08)])
    one = seed_prompt_bootstrap(d[1:2], n_resamples=4000, seed=0)
    three = seed_prompt_bootstrap(d, n_resamples=4000, seed=0)
    assert three.high - three.low > 1.5 * (one.high - one.low)


def test_identical_variants_have_p_value_one_and_a_point_interval():
    result = seed_prompt_bootstrap(np.zeros((2, 5)), n_resamples=99, seed=0)
    assert (result.mean_diff, result.low, result.high, result.p_value) == (0.0, 0.0, 0.0, 1.0)


def test_a_difference_every_resample_puts_above_zero_gets_the_smallest_p_value():
    result = seed_prompt_bootstrap(np.full((2, 7), 0.3), n_resamples=999, seed=0)
    assert result.p_value == smallest_p_value(999) == pytest.approx(0.002)


@pytest.mark.parametrize(
    "bad, message",
    [(np.zeros((0, 3)), "non-empty"), (np.zeros((2, 2, 2)), "seeds × prompts"), ([[np.nan, 0.0]], "finite")],
)
def test_bad_tables_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        seed_prompt_bootstrap(bad, n_resamples=10)


def _holm_rejections(p: list[float], alpha: float) -> set[int]:
    """Holm's procedure as written in the 1979 paper: step down the sorted p-values, rejecting
    while p₍ᵢ₎ ≤ α / (m − i + 1), stopping at the first that is not."""
    order = sorted(range(len(p)), key=lambda i: (p[i], i))
    rejected: set[int] = set()
    for step, index in enumerate(order):
        if p[index] <= alpha / (len(p) - step):
            rejected.add(index)
        else:
            break
    return rejected


def test_holm_adjusted_p_values_reject_what_the_step_down_procedure_rejects():
    rng = np.random.default_rng(7)
    for _ in range(300):
        m = int(rng.integers(1, 12))
        p = [float(x) for x in np.where(rng.uniform(size=m) < 0.5, rng.uniform(0, 0.02, m), rng.uniform(size=m))]
        adjusted = holm_adjusted(p)
        for alpha in (0.001, 0.01, 0.05, 0.1, 0.2):
            assert {i for i in range(m) if adjusted[i] <= alpha} == _holm_rejections(p, alpha)


def test_holm_on_a_worked_example():
    # sorted 0.005, 0.01, 0.03, 0.04 → 4·0.005, 3·0.01, 2·0.03, max(1·0.04, 0.06)
    assert holm_adjusted([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)
    assert holm_adjusted([0.5, 0.9]).tolist() == [1.0, 1.0]
    assert holm_adjusted([]).size == 0


def test_holm_refuses_what_is_not_a_p_value():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm_adjusted([0.2, 1.5])


def test_resamples_for_a_family_put_its_smallest_p_value_a_tenth_below_the_first_threshold():
    for m in (1, 7, 80):
        r = resamples_for(m, 0.05)
        assert smallest_p_value(r) <= 0.05 / m / 10 < smallest_p_value(r - 20)
