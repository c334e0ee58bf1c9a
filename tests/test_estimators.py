"""Tests of aligntrain.estimators (docs/math.md §1) against independent references:
exact fractions, enumeration of every k-subset, and closed forms."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from aligntrain import estimators
from aligntrain.estimators import (
    WinTieLoss,
    grouped_max_at_k,
    maj_at_k,
    maj_at_k_curve,
    maj_at_k_monte_carlo,
    max_at_k,
    max_at_k_curve,
    mean_and_stderr,
    pass_at_k,
    pass_at_k_curve,
    win_tie_loss,
)

# ---------------------------------------------------------------------------
# Independent references


def pass_at_k_fraction(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def maj_at_k_by_enumeration(answers: list, correct, k: int) -> Fraction:
    """Average over every k-subset of the correct class's share of the plurality."""
    total = Fraction(0)
    for subset in itertools.combinations(range(len(answers)), k):
        votes = Counter(answers[i] for i in subset if answers[i] is not None)
        if not votes:
            continue
        top = max(votes.values())
        leaders = [answer for answer, count in votes.items() if count == top]
        if correct in leaders:
            total += Fraction(1, len(leaders))
    return total / math.comb(len(answers), k)


def maj_at_k_three_classes(n_correct: int, wrong: tuple[int, int], n_unparseable: int, k: int) -> Fraction:
    """Closed form for a pool with the correct class, two wrong classes, unparseable rest:
    sum over the vote counts (t, u, v) of the three classes, ties scoring 1/(1+τ)."""
    w1, w2 = wrong
    total = Fraction(0)
    for t in range(1, min(n_correct, k) + 1):
        for u in range(0, min(w1, t, k - t) + 1):
            for v in range(0, min(w2, t, k - t - u) + 1):
                rest = k - t - u - v
                if rest > n_unparseable:
                    continue
                ties = (u == t) + (v == t)
                ways = math.comb(n_correct, t) * math.comb(w1, u) * math.comb(w2, v) * math.comb(n_unparseable, rest)
                total += Fraction(ways, 1 + ties)
    return total / math.comb(n_correct + w1 + w2 + n_unparseable, k)


def maj_at_k_singleton_wrongs(n_correct: int, n_wrong: int, n_unparseable: int, k: int) -> Fraction:
    """Closed form when every wrong answer is its own class: two or more correct votes
    always win; one correct vote ties with each of the s wrong answers drawn."""
    pool = n_correct + n_wrong + n_unparseable
    others = n_wrong + n_unparseable
    total = Fraction(0)
    for t in range(2, min(n_correct, k) + 1):
        total += math.comb(n_correct, t) * math.comb(others, k - t)
    for s in range(0, min(n_wrong, k - 1) + 1):
        total += Fraction(n_correct * math.comb(n_wrong, s) * math.comb(n_unparseable, k - 1 - s), 1 + s)
    return total / math.comb(pool, k)


def max_at_k_by_enumeration(rewards: list[float], k: int) -> Fraction:
    subsets = list(itertools.combinations(rewards, k))
    return sum((Fraction(max(subset)) for subset in subsets), Fraction(0)) / len(subsets)


def relative_error(value: float, reference: Fraction) -> float:
    if reference == 0:
        return abs(value)
    return float(abs(Fraction(value) - reference) / abs(reference))


# ---------------------------------------------------------------------------
# pass@k


def test_pass_at_k_matches_exact_fractions_for_every_n_c_k():
    worst = 0.0
    for n in range(1, 26):
        for c in range(n + 1):
            for k in range(1, n + 1):
                worst = max(worst, relative_error(pass_at_k(n, c, k), pass_at_k_fraction(n, c, k)))
    assert worst < 1e-13


@pytest.mark.parametrize(("n", "c", "k"), [(1000, 1, 1), (1000, 1, 2), (10**6, 1, 1), (4096, 2, 3), (1000, 0, 5)])
def test_pass_at_k_keeps_relative_precision_for_tiny_probabilities(n, c, k):
    assert relative_error(pass_at_k(n, c, k), pass_at_k_fraction(n, c, k)) < 1e-14


@pytest.mark.parametrize(("n", "c", "k"), [(10**12, 1, 2), (10**12, 10**12 - 3, 2), (10**9, 7, 64)])
def test_pass_at_k_of_huge_pools_costs_k_factors_not_n(n, c, k):
    # A product over n factors would need terabytes here (n = 10¹²); the value is exact to 1e-13.
    assert relative_error(pass_at_k(n, c, k), pass_at_k_fraction(n, c, k)) < 1e-13


def test_pass_at_k_is_exactly_one_when_every_subset_holds_a_correct_sample():
    assert pass_at_k(10, 8, 3) == 1.0
    assert pass_at_k(10, 10, 1) == 1.0


def test_pass_at_k_curve_rows_are_prompts_and_columns_are_ks():
    n, counts, ks = 64, np.array([0, 1, 5, 32, 63, 64]), [1, 2, 8, 64]
    curve = pass_at_k_curve(n, counts, ks)
    assert curve.shape == (len(counts), len(ks))
    for row, c in enumerate(counts):
        for column, k in enumerate(ks):
            assert relative_error(curve[row, column], pass_at_k_fraction(n, int(c), k)) < 1e-13


# ---------------------------------------------------------------------------
# maj@k

answer_pools = st.lists(st.one_of(st.none(), st.integers(0, 4)), min_size=1, max_size=12)
few_class_pools = st.lists(st.sampled_from([None, 0, 0, 1, 1, 2]), min_size=1, max_size=12)


@settings(max_examples=120, deadline=None)
@given(answers=st.one_of(answer_pools, few_class_pools), correct=st.integers(0, 5))
@example(answers=[0] * 4 + [1] * 4 + [2] * 4, correct=0)  # two contenders at t = 4: the matmul branch
@example(answers=[0] * 5 + [1] * 4 + [2] * 4 + [None], correct=1)
@example(answers=[None] * 5, correct=0)
def test_maj_at_k_curve_equals_enumeration_of_all_subsets(answers, correct):
    ks = list(range(1, len(answers) + 1))
    curve = maj_at_k_curve(answers, correct, ks)
    for k, value in zip(ks, curve):
        assert abs(Fraction(value) - maj_at_k_by_enumeration(answers, correct, k)) < 1e-14


@settings(max_examples=30, deadline=None)
@given(answers=few_class_pools, correct=st.integers(0, 2))
@example(answers=[0] * 4 + [1] * 4 + [2] * 4, correct=0)
def test_maj_at_k_exact_integer_path_equals_enumeration(answers, correct):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(estimators, "MAJ_FLOAT64_POOL_LIMIT", 0)  # force exact integers
        values = [maj_at_k(answers, correct, k) for k in range(1, len(answers) + 1)]
    for k, value in enumerate(values, start=1):
        assert value == float(maj_at_k_by_enumeration(answers, correct, k))


def test_maj_at_k_curve_equals_single_k_calls():
    rng = np.random.default_rng(3)
    answers = [None if a == 9 else int(a) for a in rng.choice(10, size=128, p=[0.37] + [0.07] * 9)]
    ks = [1, 2, 3, 4, 8, 16, 31, 32, 64, 128]
    curve = maj_at_k_curve(answers, 0, ks)
    singles = np.array([maj_at_k(answers, 0, k) for k in ks])
    np.testing.assert_allclose(curve, singles, rtol=1e-13, atol=0)


@pytest.mark.parametrize("k", [1, 2, 7, 40, 64])
@pytest.mark.parametrize(("n_correct", "wrong", "n_unparseable"), [(100, (120, 90), 202), (40, (200, 200), 72)])
def test_maj_at_k_on_512_completions_matches_three_class_closed_form(n_correct, wrong, n_unparseable, k):
    answers = [0] * n_correct + [1] * wrong[0] + [2] * wrong[1] + [None] * n_unparseable
    reference = maj_at_k_three_classes(n_correct, wrong, n_unparseable, k)
    assert relative_error(maj_at_k(answers, 0, k), reference) < 1e-12


@pytest.mark.parametrize("k", [1, 2, 5, 64, 256, 512])
def test_maj_at_k_on_512_completions_with_singleton_wrong_answers(k):
    n_correct, n_wrong, n_unparseable = 20, 400, 92
    answers = [0] * n_correct + [f"wrong {i}" for i in range(n_wrong)] + [None] * n_unparseable
    reference = maj_at_k_singleton_wrongs(n_correct, n_wrong, n_unparseable, k)
    assert relative_error(maj_at_k(answers, 0, k), reference) < 1e-12


def test_maj_at_k_beyond_the_float64_limit_counts_exactly():
    n_correct, wrong, n_unparseable = 300, (350, 400), 150  # 1200 > MAJ_FLOAT64_POOL_LIMIT
    answers = [0] * n_correct + [1] * wrong[0] + [2] * wrong[1] + [None] * n_unparseable
    for k in (3, 12):
        reference = maj_at_k_three_classes(n_correct, wrong, n_unparseable, k)
        assert relative_error(maj_at_k(answers, 0, k), reference) < 1e-15


def test_maj_at_k_edge_pools():
    assert maj_at_k(["x", "y", None], "gold", 2) == 0.0  # no correct completion
    assert maj_at_k([None, None, "gold"], "gold", 1) == pytest.approx(1 / 3, rel=1e-15)
    assert maj_at_k(["gold"] * 5, "gold", 3) == 1.0
    assert maj_at_k(["gold", "x"], "gold", 2) == 0.5  # a two-way tie


def test_maj_at_k_monte_carlo_is_within_a_few_standard_errors_of_exact():
    rng = np.random.default_rng(7)
    answers = [None if a == 6 else int(a) for a in rng.choice(7, size=128, p=[0.3, 0.25, 0.15, 0.1, 0.1, 0.05, 0.05])]
    draws = 20_000
    for k in (1, 4, 16, 64):
        exact = maj_at_k(answers, 0, k)
        estimate = maj_at_k_monte_carlo(answers, 0, k, draws=draws, rng=k)
        # The Bernoulli variance p(1−p) bounds the variance of a score in [0, 1] with mean p.
        assert abs(estimate - exact) < 4 * math.sqrt(exact * (1 - exact) / draws) + 1e-12


def test_maj_at_k_monte_carlo_is_reproducible_and_exact_on_degenerate_pools():
    answers = ["a", "b", "a", None, "c", "a", "b"]
    assert maj_at_k_monte_carlo(answers, "a", 3, rng=11) == maj_at_k_monte_carlo(answers, "a", 3, rng=11)
    assert maj_at_k_monte_carlo(["a"] * 4, "a", 2, rng=0) == 1.0
    assert maj_at_k_monte_carlo(["b", None, "c"], "a", 2, rng=0) == 0.0
    assert maj_at_k_monte_carlo(["a", "b"], "a", 2, rng=0) == 0.5


# ---------------------------------------------------------------------------
# max@k


@settings(max_examples=80, deadline=None)
@given(rewards=st.lists(st.floats(-100, 100, allow_nan=False), min_size=1, max_size=10))
def test_max_at_k_equals_enumeration_of_all_subsets(rewards):
    curve = max_at_k_curve(rewards, list(range(1, len(rewards) + 1)))
    scale = max(1.0, max(abs(r) for r in rewards))
    for k, value in enumerate(curve, start=1):
        assert abs(Fraction(value) - max_at_k_by_enumeration(rewards, k)) <= 1e-13 * scale
        assert value == max_at_k(rewards, k)


def test_max_at_k_of_one_is_the_mean_and_of_all_is_the_max():
    rewards = np.random.default_rng(0).normal(size=257)
    assert max_at_k(rewards, 1) == pytest.approx(float(np.mean(rewards)), rel=1e-13)
    assert max_at_k(rewards, 257) == float(np.max(rewards))


@pytest.mark.parametrize(("pool_size", "k"), [(4096, 2048), (4096, 1), (4096, 4096), (4096, 3)])
def test_max_at_k_large_pools_match_the_uniform_order_statistic(pool_size, k):
    # Rewards 1..M: the expected maximum of k drawn without replacement is k (M+1)/(k+1).
    rewards = np.random.default_rng(1).permutation(np.arange(1, pool_size + 1, dtype=float))
    value = max_at_k(rewards, k)
    assert np.isfinite(value)
    assert relative_error(value, Fraction(k * (pool_size + 1), k + 1)) < 1e-12


def test_grouped_max_at_k_by_hand():
    rewards = [1.0, 5.0, 2.0, 3.0, 9.0, 4.0]
    assert grouped_max_at_k(rewards, 1) == pytest.approx(24 / 6)
    assert grouped_max_at_k(rewards, 2) == pytest.approx((5 + 3 + 9) / 3)  # [1,5] [2,3] [9,4]
    assert grouped_max_at_k(rewards, 3) == pytest.approx((5 + 9) / 2)  # [1,5,2] [3,9,4]
    assert grouped_max_at_k(rewards, 4) == 5.0  # [1,5,2,3]; the remainder [9,4] is dropped
    assert grouped_max_at_k(rewards, 6) == 9.0


# ---------------------------------------------------------------------------
# Uncertainty over prompts


def test_mean_and_stderr():
    mean, stderr = mean_and_stderr([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5
    assert stderr == pytest.approx(math.sqrt(5 / 3) / 2, rel=1e-15)
    assert mean_and_stderr([0.7]) == (0.7, 0.0)


def test_win_tie_loss_counts():
    a = [1.0, 2.0, 3.0, 4.0 + 1e-9, 0.0, 5.0]
    b = [0.0, 2.0, 4.0, 4.0, 1.0, 5.0 - 1e-6]
    assert win_tie_loss(a, b) == WinTieLoss(wins=2, ties=2, losses=2)
    assert win_tie_loss(a, b, tol=0.0) == WinTieLoss(wins=3, ties=1, losses=2)
    assert win_tie_loss(a, b, tol=2.0) == WinTieLoss(wins=0, ties=6, losses=0)


# ---------------------------------------------------------------------------
# Validation


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: pass_at_k(10, 3, 0), "k must be >= 1"),
        (lambda: pass_at_k(10, 3, 11), "k must be <= n"),
        (lambda: pass_at_k(10, -1, 2), "c must be >= 0"),
        (lambda: pass_at_k(10, 11, 2), "c must be <= n"),
        (lambda: pass_at_k(0, 0, 1), "n must be >= 1"),
        (lambda: pass_at_k(10, 2.5, 1), "c must be an integer"),
        (lambda: pass_at_k(10, 2, 1.5), "k must be an integer"),
        (lambda: pass_at_k_curve(10, [1, 2.5], [1]), "c must hold integer counts"),
        (lambda: pass_at_k_curve(10, [[1]], [1]), "c must be one-dimensional"),
        (lambda: pass_at_k_curve(10, [1], []), "ks must be a non-empty"),
        (lambda: maj_at_k([], "a", 1), "answers must be non-empty"),
        (lambda: maj_at_k(["a", "b"], "a", 0), "k must be >= 1"),
        (lambda: maj_at_k(["a", "b"], "a", 3), "k must be <= len\\(answers\\)"),
        (lambda: maj_at_k(["a", None], None, 1), "correct must be"),
        (lambda: maj_at_k_curve(["a"], "a", []), "ks must be a non-empty"),
        (lambda: maj_at_k_monte_carlo(["a"], "a", 2), "k must be <= len\\(answers\\)"),
        (lambda: maj_at_k_monte_carlo(["a"], "a", 1, draws=0), "draws must be >= 1"),
        (lambda: max_at_k([1.0, float("nan")], 1), "rewards must be finite"),
        (lambda: max_at_k([1.0, float("inf")], 1), "rewards must be finite"),
        (lambda: max_at_k([], 1), "rewards must be non-empty"),
        (lambda: max_at_k([1.0, 2.0], 3), "k must be <= len\\(rewards\\)"),
        (lambda: max_at_k([1.0, 2.0], 0), "k must be >= 1"),
        (lambda: max_at_k_curve([1.0, 2.0], [1, 5]), "k must be <= len\\(rewards\\)"),
        (lambda: max_at_k(["high", "low"], 1), "rewards must be numeric"),
        (lambda: grouped_max_at_k([1.0, 2.0], 3), "k must be <= len\\(rewards\\)"),
        (lambda: grouped_max_at_k([1.0, float("nan")], 1), "rewards must be finite"),
        (lambda: mean_and_stderr([]), "scores must be non-empty"),
        (lambda: mean_and_stderr([1.0, float("nan")]), "scores must be finite"),
        (lambda: win_tie_loss([1.0, 2.0], [1.0]), "a and b must have the same length"),
        (lambda: win_tie_loss([1.0], [float("nan")]), "b must be finite"),
        (lambda: win_tie_loss([1.0], [1.0], tol=-1.0), "tol must be"),
        # Booleans are not counts (True would silently be 1).
        (lambda: pass_at_k(True, 1, 1), "n must be an integer, got True"),
        (lambda: pass_at_k(10, True, 1), "c must be an integer, got True"),
        (lambda: pass_at_k(10, 3, True), "k must be an integer, got True"),
        (lambda: pass_at_k_curve(10, [3, True], [1]), "c must hold integer counts, not booleans"),
        (lambda: pass_at_k_curve(10, np.array([True, False]), [1]), "c must hold integer counts, not booleans"),
        (lambda: pass_at_k_curve(10, [3], [1, True]), "k must be an integer, got True"),
        (lambda: pass_at_k_curve(10, [3], np.array([True])), "k must be an integer, got True"),
        (lambda: maj_at_k(["a", "b"], "a", True), "k must be an integer, got True"),
        (lambda: maj_at_k_curve(["a", "b"], "a", [1, True]), "k must be an integer, got True"),
        (lambda: maj_at_k_monte_carlo(["a"], "a", 1, draws=True), "draws must be an integer, got True"),
        (lambda: max_at_k([1.0, 2.0], True), "k must be an integer, got True"),
        (lambda: grouped_max_at_k([1.0, 2.0], False), "k must be an integer, got False"),
        # Unhashable answer classes are a ValueError naming the argument, not a TypeError.
        (lambda: maj_at_k(["a", ["b"]], "a", 1), r"answers\[1\] is \['b'\]"),
        (lambda: maj_at_k(["a", ("b", [1])], "a", 1), r"answers must hold hashable answer classes"),
        (lambda: maj_at_k_curve([{"x": 1}], "a", [1]), r"answers\[0\] is \{'x': 1\}"),
        (lambda: maj_at_k_monte_carlo(["a", ["b"]], "a", 1), r"answers\[1\]"),
        (lambda: maj_at_k(["a", "b"], ["a"], 1), "correct must be a hashable answer class"),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()
