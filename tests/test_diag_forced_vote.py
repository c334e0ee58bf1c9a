"""Forced-vote sensitivities and diagonal efficiency (aligntrain.diagnostics.forced_vote; docs/math.md §4).

Independent references: P as an explicit polynomial built by enumerating every N-tuple of
outcomes with exact fractions (each strategy's rule re-written here tuple by tuple), its
central finite differences off the simplex (the forced-vote identity's meaning) and along
proportional decay, closed forms, and Monte Carlo.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aligntrain.diagnostics.diagonal import (
    diagonal_efficiency,
    proportional_decay_derivative,
    training_weight_comparison,
)
from aligntrain.diagnostics.forced_vote import (
    class_distribution,
    forced_vote_sensitivities,
    monte_carlo_sensitivities,
    reward_distribution,
    strategy_value,
)
from aligntrain.diagnostics.pool_efficiency import pool_efficiencies
from aligntrain.estimators import maj_at_k

F = Fraction
STEP = F(1, 10**6)  # finite-difference step: the error h²·P‴/6 is ~1e-10 at N <= 6


# ---------------------------------------------------------------------------
# Brute-force references: one value per N-tuple of outcome indices


def pass_rule(correct):
    return lambda draws: F(int(any(correct[i] for i in draws)))


def majority_rule(target, votable, ties="uniform"):
    """Plurality vote: a tie of the target with τ rivals scores 1/(1+τ) (uniform) or 0 (strict)."""

    def value(draws):
        votes = Counter(i for i in draws if votable[i])
        if not votes:
            return F(0)
        top = max(votes.values())
        leaders = [i for i, count in votes.items() if count == top]
        if target not in leaders:
            return F(0)
        if ties == "strict":
            return F(int(leaders == [target]))
        return F(1, len(leaders))

    return value


def best_of_n_rule(rewards):
    return lambda draws: max(rewards[i] for i in draws)


def selection_rule(rewards, target):
    def value(draws):
        best = max(rewards[i] for i in draws)
        maximal = [i for i in draws if rewards[i] == best]
        return F(maximal.count(target), len(maximal))

    return value


def polynomial(num_outcomes, n, rule):
    """P as {exponent vector: coefficient}, summed over all num_outcomes**n tuples."""
    coefficients = Counter()
    for draws in itertools.product(range(num_outcomes), repeat=n):
        exponents = tuple(draws.count(j) for j in range(num_outcomes))
        coefficients[exponents] += rule(draws)
    return coefficients


def evaluate(coefficients, point):
    total = F(0)
    for exponents, coefficient in coefficients.items():
        term = coefficient
        for x, e in zip(point, exponents):
            term *= x**e
        total += term
    return total


def partial_derivative(coefficients, point, j):
    up, down = list(point), list(point)
    up[j] += STEP
    down[j] -= STEP
    return (evaluate(coefficients, up) - evaluate(coefficients, down)) / (2 * STEP)


def decay_derivative(coefficients, point, t):
    """d/dε P(p_t + ε, p_j (1 − p_t − ε)/(1 − p_t)) at ε = 0, on the simplex."""

    def moved(eps):
        scale = (1 - point[t] - eps) / (1 - point[t])
        return [x + eps if j == t else x * scale for j, x in enumerate(point)]

    return (evaluate(coefficients, moved(STEP)) - evaluate(coefficients, moved(-STEP))) / (2 * STEP)


def floats(values):
    return np.array([float(v) for v in values])


def tuple_mass(probs, draws):
    mass = F(1)
    for i in draws:
        mass *= probs[i]
    return mass


def enumerated_forced_votes(probs, n, rule):
    """Exact P = Σ over every N-tuple of Π p · value, and a_j = N Σ over every (N−1)-tuple
    of Π p · value(tuple + j): the forced-vote identity's right side, tuple by tuple."""
    outcomes = range(len(probs))
    value = sum(tuple_mass(probs, d) * rule(d) for d in itertools.product(outcomes, repeat=n))
    free = list(itertools.product(outcomes, repeat=n - 1))
    a = [n * sum(tuple_mass(probs, d) * rule((*d, j)) for d in free) for j in outcomes]
    return value, a


def exact_partial_derivative(coefficients, point, j):
    """∂P/∂p_j of the enumerated polynomial, term by term (no step)."""
    total = F(0)
    for exponents, coefficient in coefficients.items():
        if exponents[j] == 0:
            continue
        term = coefficient * exponents[j]
        for i, (x, e) in enumerate(zip(point, exponents)):
            term *= x ** (e - 1 if i == j else e)
        total += term
    return total


# Each case: (strategy, probabilities as fractions, keyword arguments, brute-force rule).
CASES = {
    "pass": (
        "pass",
        [F(3, 10), F(1, 5), F(1, 2)],
        {"correct": [True, False, True], "target": 0},
        pass_rule([True, False, True]),
    ),
    "pass_single": ("pass", [F(1, 10), F(3, 5), F(3, 10)], {"target": 0}, pass_rule([True, False, False])),
    # equal rival probabilities (shared powers), an unvotable outcome, even N gives ties
    "majority": (
        "majority",
        [F(3, 10), F(1, 5), F(1, 5), F(1, 10), F(1, 5)],
        {"target": 0, "votable": [True, True, True, True, False]},
        majority_rule(0, [True, True, True, True, False]),
    ),
    "majority_underdog": (
        "majority",
        [F(1, 10), F(2, 5), F(3, 10), F(1, 5)],
        {"target": 0, "votable": [True, True, True, False]},
        majority_rule(0, [True, True, True, False]),
    ),
    "majority_zero_rival": (
        "majority",
        [F(1, 2), F(0), F(1, 4), F(1, 4)],
        {"target": 0, "votable": [True, True, True, False]},
        majority_rule(0, [True, True, True, False]),
    ),
    "majority_two_unvotable": (
        "majority",
        [F(1, 5), F(1, 5), F(1, 5), F(2, 5)],
        {"target": 1, "votable": [False, True, True, False]},
        majority_rule(1, [False, True, True, False]),
    ),
    "best_of_n": (
        "best_of_n",
        [F(1, 5), F(3, 10), F(1, 10), F(2, 5)],
        {"rewards": [F(-1), F(1, 2), F(3), F(3)]},
        best_of_n_rule([F(-1), F(1, 2), F(3), F(3)]),
    ),
    "selection_tied": (
        "best_of_n_selection",
        [F(1, 5), F(3, 10), F(1, 10), F(2, 5)],
        {"rewards": [F(1), F(2), F(2), F(0)], "target": 1},
        selection_rule([F(1), F(2), F(2), F(0)], 1),
    ),
    "selection_middle": (
        "best_of_n_selection",
        [F(1, 5), F(3, 10), F(1, 10), F(2, 5)],
        {"rewards": [F(1), F(2), F(2), F(0)], "target": 0},
        selection_rule([F(1), F(2), F(2), F(0)], 0),
    ),
}


def call_arguments(kwargs):
    converted = {}
    for key, value in kwargs.items():
        if key in ("correct", "votable"):
            converted[key] = np.array(value, dtype=bool)
        elif key == "rewards":
            converted[key] = floats(value)
        else:
            converted[key] = value
    return converted


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_sensitivities_match_finite_differences_of_the_enumerated_polynomial(case, n):
    strategy, probs, kwargs, rule = CASES[case]
    coefficients = polynomial(len(probs), n, rule)
    expected = [float(partial_derivative(coefficients, probs, j)) for j in range(len(probs))]
    got = forced_vote_sensitivities(floats(probs), n, strategy, method="exact", **call_arguments(kwargs))
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)
    value = strategy_value(floats(probs), n, strategy, **call_arguments(kwargs))
    assert value == pytest.approx(float(evaluate(coefficients, probs)), rel=1e-12, abs=1e-14)
    # Euler's identity for a homogeneous polynomial of degree N: Σ p_j a_j = N·P
    assert float(np.dot(floats(probs), got)) == pytest.approx(n * value, rel=1e-12, abs=1e-13)


def test_majority_at_six_draws_with_ties():
    strategy, probs, kwargs, rule = CASES["majority"]
    coefficients = polynomial(len(probs), 6, rule)
    expected = [float(partial_derivative(coefficients, probs, j)) for j in range(len(probs))]
    got = forced_vote_sensitivities(floats(probs), 6, strategy, method="exact", **call_arguments(kwargs))
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(
    "case", ["pass", "majority", "majority_underdog", "best_of_n", "selection_tied", "selection_middle"]
)
def test_decay_derivative_matches_finite_difference_along_proportional_decay(case):
    strategy, probs, kwargs, rule = CASES[case]
    n = 5
    coefficients = polynomial(len(probs), n, rule)
    result = diagonal_efficiency(floats(probs), n, strategy, method="exact", **call_arguments(kwargs))
    expected = float(decay_derivative(coefficients, probs, result.target))
    assert result.exact_derivative == pytest.approx(expected, rel=1e-9, abs=1e-9)
    a = forced_vote_sensitivities(floats(probs), n, strategy, method="exact", **call_arguments(kwargs))
    assert proportional_decay_derivative(floats(probs), a, result.target) == pytest.approx(expected, rel=1e-9, abs=1e-9)
    assert result.rivalry_correction == pytest.approx(result.a_target - expected, rel=1e-9, abs=1e-9)
    assert result.efficiency == pytest.approx(expected / result.a_target, rel=1e-9)


@pytest.mark.parametrize("p_t", [0.01, 0.3, 0.9])
@pytest.mark.parametrize("n", [1, 4, 32, 200])
def test_pass_decay_derivative_is_n_times_miss_power(p_t, n):
    rest = 1.0 - p_t
    probs = [p_t, 0.25 * rest, 0.75 * rest]
    result = diagonal_efficiency(probs, n, "pass", target=0)
    assert result.exact_derivative == pytest.approx(n * (1 - p_t) ** (n - 1), rel=1e-12)
    assert result.a_target == n
    assert result.efficiency == pytest.approx((1 - p_t) ** (n - 1), rel=1e-12)


def test_best_of_n_defaults_to_the_top_reward_and_is_shift_sensitive_only_in_a_t():
    probs, rewards = [0.2, 0.5, 0.3], np.array([0.0, 1.0, 2.0])
    base = diagonal_efficiency(probs, 6, "best_of_n", rewards=rewards)
    shifted = diagonal_efficiency(probs, 6, "best_of_n", rewards=rewards + 10.0)
    assert base.target == 2
    assert shifted.exact_derivative == pytest.approx(base.exact_derivative, rel=1e-12)
    assert shifted.a_target == pytest.approx(base.a_target + 60.0, rel=1e-12)


@pytest.mark.parametrize(
    ("strategy", "probs", "kwargs"),
    [
        ("majority", [0.3, 0.25, 0.2, 0.15, 0.1], {"target": 0, "votable": np.array([True, True, True, True, False])}),
        ("majority", [0.2, 0.3, 0.3, 0.2], {"target": 0}),
        ("pass", [0.2, 0.3, 0.5], {"target": 0}),
        ("best_of_n", [0.2, 0.3, 0.5], {"rewards": np.array([0.0, 1.0, 3.0])}),
        ("best_of_n_selection", [0.2, 0.3, 0.4, 0.1], {"rewards": np.array([0.0, 1.0, 1.0, 3.0]), "target": 1}),
    ],
)
def test_monte_carlo_agrees_with_exact_within_standard_errors(strategy, probs, kwargs):
    exact = forced_vote_sensitivities(probs, 8, strategy, method="exact", **kwargs)
    estimate = monte_carlo_sensitivities(probs, 8, strategy, **kwargs)
    assert estimate.num_draws == 5000
    assert np.all(np.abs(estimate.values - exact) <= 4.5 * estimate.standard_errors + 1e-12)
    via_method = forced_vote_sensitivities(probs, 8, strategy, method="monte_carlo", **kwargs)
    np.testing.assert_array_equal(via_method, estimate.values)  # same default draws and seed


def test_auto_switches_majority_to_monte_carlo_above_its_budget():
    from aligntrain.diagnostics.forced_vote import AUTO_EXACT_MAJORITY_MAX_BUDGET as limit

    probs = [0.5, 0.3, 0.2]
    assert diagonal_efficiency(probs, limit, "majority", 0).method == "exact"
    assert diagonal_efficiency(probs, limit + 1, "majority", 0, num_draws=200).method == "monte_carlo"
    assert diagonal_efficiency(probs, 1000, "pass", 0).method == "exact"


def dirichlet_probs(weights):
    total = sum(weights)
    return np.array([w / total for w in weights])


@settings(max_examples=60, deadline=None)
@given(
    weights=st.lists(st.integers(1, 50), min_size=2, max_size=6),
    n=st.integers(1, 16),
    unvotable=st.booleans(),
    ties=st.sampled_from(["uniform", "strict"]),
)
def test_plurality_decay_derivative_lies_between_zero_and_a_t(weights, n, unvotable, ties):
    """Under either tie convention the win indicator rises with the gold count and falls
    with a rival's, so forcing a gold vote helps most and 0 <= C <= a_t."""
    probs = dirichlet_probs(weights)
    votable = np.ones(len(weights), dtype=bool)
    if unvotable and len(weights) > 2:
        votable[-1] = False
    result = diagonal_efficiency(probs, n, "majority", 0, votable=votable, ties=ties, method="exact")
    assert -1e-9 <= result.exact_derivative <= result.a_target + 1e-9
    a = forced_vote_sensitivities(probs, n, "majority", target=0, votable=votable, ties=ties, method="exact")
    assert np.all(a[votable] <= a[0] + 1e-9)  # adversarial symmetry (CAT eq. 38)
    assert 0.5 - 1e-9 <= result.paper_ratio <= 1 + 1e-9  # the paper's saved ratio, by construction


def test_formulas_example_seventy_thirty_at_thirty_two():
    result = diagonal_efficiency([0.7, 0.3], 32, "majority", 0)
    assert result.efficiency == pytest.approx(0.010, abs=0.0006)
    assert result.paper_ratio > 0.5


def test_share_below_one_half_on_random_distributions():
    """docs/math.md §4 reports 19/36/40/45% of D/a_t < 0.5 at N = 4/8/16/32 without its sampling
    scheme. Scheme used here [choice]: support size m uniform on {2, …, 6}, p ~ Dirichlet(1, …, 1),
    target = outcome 0 (a uniformly random class, not necessarily the plurality), all votable;
    400 distributions, seed 0. Measured with this scheme: 18.8% / 33.0% / 43.0% / 48.0%
    (1000 distributions: 20.0 / 33.4 / 42.0 / 47.8), checked within ±6 points of the claim
    (the binomial standard error at 400 draws is ≈ 2.5 points)."""
    rng = np.random.default_rng(0)
    distributions = [rng.dirichlet(np.ones(rng.integers(2, 7))) for _ in range(400)]
    shares = {}
    for n in (4, 8, 16, 32):
        efficiencies = [diagonal_efficiency(p, n, "majority", 0, method="exact").efficiency for p in distributions]
        shares[n] = float(np.mean(np.array(efficiencies) < 0.5))
    for n, claimed in {4: 0.19, 8: 0.36, 16: 0.40, 32: 0.45}.items():
        assert shares[n] == pytest.approx(claimed, abs=0.06), shares


@pytest.mark.parametrize("k", [3, 5])
def test_majority_value_approaches_maj_at_k_of_a_large_pool(k):
    """maj@k draws without replacement from the pool; P draws iid from its empirical law."""
    sizes = {"gold": 40, "b": 30, "c": 20, None: 10}  # proportions of every pool below
    probs = np.array([0.4, 0.3, 0.2, 0.1])
    value = strategy_value(probs, k, "majority", target=0, votable=np.array([True, True, True, False]))
    gaps = []
    for scale in (1, 10):
        answers = [label for label, size in sizes.items() for _ in range(size * scale)]
        gaps.append(abs(maj_at_k(answers, "gold", k) - value))
    assert gaps[1] < gaps[0] / 5  # the gap shrinks like 1/M
    assert gaps[1] < 2e-3


# ---------------------------------------------------------------------------
# Tie conventions of majority vote: "uniform" (1/(1+τ)) and "strict" (a tie loses)

# (probs, target, votable): 3–4 classes; unvotable outcomes, equal rival probabilities
# (shared factor powers), a zero-probability rival, an underdog target, two unvotables.
TIE_CASES = {
    "three_classes": ([F(1, 2), F(1, 3), F(1, 6)], 0, [True, True, True]),
    "equal_rivals_unvotable": ([F(3, 10), F(1, 5), F(1, 5), F(3, 10)], 0, [True, True, True, False]),
    "underdog_unvotable": ([F(1, 10), F(2, 5), F(3, 10), F(1, 5)], 0, [True, True, True, False]),
    "zero_rival": ([F(1, 2), F(0), F(1, 4), F(1, 4)], 0, [True, True, True, False]),
    "two_unvotable": ([F(1, 5), F(1, 5), F(1, 5), F(2, 5)], 1, [False, True, True, False]),
    "uniform_three": ([F(1, 3), F(1, 3), F(1, 3)], 2, [True, True, True]),
}


@pytest.mark.parametrize("ties", ["uniform", "strict"])
@pytest.mark.parametrize("case", sorted(TIE_CASES))
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_majority_dp_equals_enumeration_of_every_tuple(case, n, ties):
    probs, target, votable = TIE_CASES[case]
    rule = majority_rule(target, votable, ties)
    value, a = enumerated_forced_votes(probs, n, rule)
    # the forced-vote identity itself, exactly: a_j is ∂P/∂p_j of the enumerated polynomial
    coefficients = polynomial(len(probs), n, rule)
    assert evaluate(coefficients, probs) == value
    assert [exact_partial_derivative(coefficients, probs, j) for j in range(len(probs))] == a
    kwargs = {"target": target, "votable": np.array(votable), "ties": ties}
    got = forced_vote_sensitivities(floats(probs), n, "majority", method="exact", **kwargs)
    np.testing.assert_allclose(got, floats(a), rtol=1e-12, atol=1e-13)
    assert strategy_value(floats(probs), n, "majority", **kwargs) == pytest.approx(float(value), rel=1e-12, abs=1e-14)
    if probs[target] < 1:
        result = diagonal_efficiency(floats(probs), n, "majority", method="exact", **kwargs)
        expected = float(decay_derivative(coefficients, probs, target))
        assert result.exact_derivative == pytest.approx(expected, rel=1e-9, abs=1e-9)
        assert result.ties == ties


def test_majority_strict_and_uniform_differ_only_by_ties():
    """No tie possible (N = 1, or one votable class): the conventions agree; N = 2 with two
    classes ties half the split draws, and they differ."""
    for probs, kwargs in (([0.6, 0.4], {"target": 0}), ([0.6, 0.3, 0.1], {"target": 0})):
        uniform = forced_vote_sensitivities(probs, 1, "majority", method="exact", **kwargs)
        strict = forced_vote_sensitivities(probs, 1, "majority", method="exact", ties="strict", **kwargs)
        np.testing.assert_array_equal(uniform, strict)
    only_gold = {"target": 0, "votable": np.array([True, False])}
    np.testing.assert_allclose(
        forced_vote_sensitivities([0.6, 0.4], 5, "majority", method="exact", **only_gold),
        forced_vote_sensitivities([0.6, 0.4], 5, "majority", method="exact", ties="strict", **only_gold),
        rtol=1e-14,
    )


@pytest.mark.parametrize("p_t", [0.5, 0.9, 0.99])
def test_tie_conventions_differ_in_efficiency_by_up_to_a_factor_of_two(p_t):
    """Two classes, N = 2 (a = (2p, 0) strict; (2p + q, p) uniform): D = 2p_t against 1 on the
    simplex, a_t = 2p_t against 1 + p_t, so D/a_t = 1 strict and 1/(1 + p_t) uniform — a
    factor 1 + p_t, 1.99 at p_t = 0.99; CAT's saved ratio a_t/(a_t + C) is 1 against
    (1 + p_t)/(1 + 2p_t)."""
    probs = [p_t, 1 - p_t]
    uniform = diagonal_efficiency(probs, 2, "majority", 0)
    strict = diagonal_efficiency(probs, 2, "majority", 0, ties="strict")
    assert uniform.efficiency == pytest.approx(1 / (1 + p_t), rel=1e-12)
    assert strict.efficiency == pytest.approx(1.0, rel=1e-12)
    assert strict.efficiency / uniform.efficiency == pytest.approx(1 + p_t, rel=1e-12)
    assert uniform.paper_ratio == pytest.approx((1 + p_t) / (1 + 2 * p_t), rel=1e-12)
    assert strict.paper_ratio == pytest.approx(1.0, rel=1e-12)
    assert (uniform.ties, strict.ties) == ("uniform", "strict")


@pytest.mark.parametrize("ties", ["uniform", "strict"])
@pytest.mark.parametrize(
    ("probs", "votable", "n"),
    [
        ([0.3, 0.25, 0.2, 0.15, 0.1], [True, True, True, True, False], 8),
        ([0.2, 0.3, 0.3, 0.2], [True, True, True, True], 8),
        ([0.35, 0.3, 0.2, 0.15], [True, True, True, False], 24),
    ],
)
def test_majority_monte_carlo_agrees_with_the_dp_under_either_convention(probs, votable, n, ties):
    kwargs = {"target": 0, "votable": np.array(votable)}
    exact = forced_vote_sensitivities(probs, n, "majority", method="exact", ties=ties, **kwargs)
    other = forced_vote_sensitivities(
        probs, n, "majority", method="exact", ties="strict" if ties == "uniform" else "uniform", **kwargs
    )
    estimate = monte_carlo_sensitivities(probs, n, "majority", ties=ties, **kwargs)
    assert np.all(np.abs(estimate.values - exact) <= 4.5 * estimate.standard_errors + 1e-12)
    # the estimate tells the conventions apart: the other one's a_t is many errors away
    assert abs(estimate.values[0] - other[0]) > 6 * estimate.standard_errors[0]
    via_method = forced_vote_sensitivities(probs, n, "majority", method="monte_carlo", ties=ties, **kwargs)
    np.testing.assert_array_equal(via_method, estimate.values)


# ---------------------------------------------------------------------------
# Training weight against the exact derivative


@pytest.mark.parametrize("p", [0.05, 0.4, 0.8])
def test_pass_training_weight_is_exact_for_a_single_correct_class(p):
    n = 16
    probs = [p, (1 - p) / 2, (1 - p) / 2]
    result = training_weight_comparison(probs, n, "pass", 0)
    miss = (1 - p) ** n
    assert result.diagonal_derivative == pytest.approx(n * (1 - p) ** (n - 1), rel=1e-12)
    assert result.exact_derivative == pytest.approx(result.diagonal_derivative, rel=1e-12)
    assert result.diagonal_value == pytest.approx(1 - miss, rel=1e-12)
    assert result.diagonal_weight == pytest.approx(n * p * (1 - p) ** (n - 1) / (1 - miss), rel=1e-9)
    assert result.exact_weight == pytest.approx(result.diagonal_weight, rel=1e-9)


def test_majority_training_weight_uses_the_binomial_threshold_surrogate():
    n, k, p = 9, 4, F(3, 10)
    probs = [0.3, 0.5, 0.2]
    result = training_weight_comparison(probs, n, "majority", 0, threshold=k)
    tail = sum(F(math.comb(n, j)) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))
    slope = n * math.comb(n - 1, k - 1) * p ** (k - 1) * (1 - p) ** (n - k)
    assert result.diagonal_value == pytest.approx(float(tail), rel=1e-12)
    assert result.diagonal_derivative == pytest.approx(float(slope), rel=1e-12)
    assert result.diagonal_weight == pytest.approx(float(p * slope / tail), rel=1e-9)
    exact = diagonal_efficiency(probs, n, "majority", 0, method="exact")
    assert result.exact_derivative == pytest.approx(exact.exact_derivative, rel=1e-12)
    assert result.exact_weight == pytest.approx(0.3 * exact.exact_derivative / exact.value, rel=1e-12)


def test_majority_training_weight_comparison_follows_the_tie_convention():
    probs, n, k = [0.45, 0.35, 0.2], 6, 3
    for ties in ("uniform", "strict"):
        result = training_weight_comparison(probs, n, "majority", 0, threshold=k, ties=ties)
        exact = diagonal_efficiency(probs, n, "majority", 0, method="exact", ties=ties)
        assert result.exact_value == pytest.approx(strategy_value(probs, n, "majority", target=0, ties=ties))
        assert result.exact_derivative == pytest.approx(exact.exact_derivative, rel=1e-12)
    uniform = training_weight_comparison(probs, n, "majority", 0, threshold=k)
    strict = training_weight_comparison(probs, n, "majority", 0, threshold=k, ties="strict")
    assert strict.diagonal_weight == uniform.diagonal_weight  # B(p) has no ties
    assert strict.exact_value < uniform.exact_value  # a tie is a loss


def test_best_of_n_selection_compares_with_cats_rank_weight():
    probs, rewards = [0.2, 0.3, 0.5], np.array([0.0, 1.0, 2.0])
    result = training_weight_comparison(probs, 8, "best_of_n_selection", 1, rewards=rewards)
    assert result.diagonal_derivative == pytest.approx(8 * 0.2**7, rel=1e-12)
    assert result.diagonal_weight is None and result.diagonal_value is None
    # exact: only the lower outcome is a rival that helps; D = (a_t − N·P)/(1 − p_t)
    value = 0.5**8 - 0.2**8
    assert result.exact_value == pytest.approx(value, rel=1e-12)
    assert result.exact_derivative == pytest.approx((8 * 0.5**7 - 8 * value) / 0.7, rel=1e-12)


# ---------------------------------------------------------------------------
# Pools


def test_class_and_reward_distributions():
    d = class_distribution(["7", None, "3", "7", float("nan"), "7"], "7")
    assert d.labels == ("7", None, "3")
    np.testing.assert_allclose(d.probs, [0.5, 1 / 3, 1 / 6])
    assert d.votable.tolist() == [True, False, True] and d.target == 0
    assert d.sample_outcomes.tolist() == [0, 1, 2, 0, 1, 0]
    assert class_distribution(["1", "2"], "3").target is None
    r = reward_distribution([0.5, -1.0, 0.5, 2.0])
    assert r.labels == (-1.0, 0.5, 2.0) and r.target == 2
    np.testing.assert_allclose(r.probs, [0.25, 0.5, 0.25])
    assert r.sample_outcomes.tolist() == [1, 0, 1, 2]


def make_pool():
    rows = []

    def add(prompt_id, classes, gold):
        for i, c in enumerate(classes):
            rows.append(
                {
                    "prompt_id": prompt_id,
                    "sample_index": i,
                    "answer_class": c,
                    "correct": c == gold,
                    "reward": float(c == gold),
                }
            )

    add("a", ["1", "1", "1", "2", "2", None, "3", "1"], "1")  # normal: p_gold = 1/2
    add("b", ["2", "2", "3", None], "1")  # the gold class never appears
    add("c", ["1", "1", "1", "1"], "1")  # every sample is gold
    return pd.DataFrame(rows)


def test_pool_efficiencies_rows_reasons_and_values():
    pool = make_pool()
    table = pool_efficiencies(pool, [4, 8], "majority")
    assert len(table) == 6 and list(table["budget"]) == [4, 8, 4, 8, 4, 8]
    by_prompt = table.set_index(["prompt_id", "budget"])
    assert by_prompt.loc[("b", 4), "reason"] == "no_correct_sample"
    assert by_prompt.loc[("c", 8), "reason"] == "no_rival_mass"
    assert np.isnan(by_prompt.loc[("b", 4), "efficiency"]) and np.isnan(by_prompt.loc[("c", 4), "efficiency"])
    for n in (4, 8):
        expected = diagonal_efficiency(
            [0.5, 0.25, 0.125, 0.125], n, "majority", 0, votable=np.array([True, True, False, True])
        )
        row = by_prompt.loc[("a", n)]
        assert pd.isna(row["reason"])
        assert row["efficiency"] == pytest.approx(expected.efficiency, rel=1e-12)
        assert row["paper_ratio"] == pytest.approx(expected.paper_ratio, rel=1e-12)
        assert row["p_target"] == 0.5 and row["method"] == "exact"
    with_gold = pool_efficiencies(pool, [4], "majority", gold_classes={"a": "1", "b": "1"}).set_index("prompt_id")
    assert with_gold.loc["b", "reason"] == "gold_absent"
    assert with_gold.loc["c", "reason"] == "no_gold_class"
    assert set(table["ties"]) == {"uniform"}
    strict = pool_efficiencies(pool, [4, 8], "majority", ties="strict").set_index(["prompt_id", "budget"])
    assert set(strict["ties"]) == {"strict"}
    for n in (4, 8):
        expected = diagonal_efficiency(
            [0.5, 0.25, 0.125, 0.125], n, "majority", 0, votable=np.array([True, True, False, True]), ties="strict"
        )
        assert strict.loc[("a", n), "efficiency"] == pytest.approx(expected.efficiency, rel=1e-12)
        assert strict.loc[("a", n), "efficiency"] != pytest.approx(by_prompt.loc[("a", n), "efficiency"], rel=1e-3)
    passes = pool_efficiencies(pool, [4], "pass").set_index("prompt_id")
    assert passes["ties"].isna().all()  # pass@N has no ties to break
    assert passes.loc["a", "efficiency"] == pytest.approx(0.5**3, rel=1e-12)
    best = pool_efficiencies(pool, [4], "best_of_n").set_index("prompt_id")
    assert best.loc["a", "efficiency"] == pytest.approx(0.5**3, rel=1e-12)  # 0/1 rewards: pass@N


# ---------------------------------------------------------------------------
# Errors name their argument


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: forced_vote_sensitivities([0.5, 0.6], 4, "pass", target=0), "probs"),
        (lambda: forced_vote_sensitivities([0.5, -0.5, 1.0], 4, "pass", target=0), "probs"),
        (lambda: forced_vote_sensitivities([0.5, 0.5], 0, "pass", target=0), "n"),
        (lambda: forced_vote_sensitivities([0.5, 0.5], 4, "vote", target=0), "strategy"),
        (lambda: forced_vote_sensitivities([0.5, 0.5], 4, "majority"), "target"),
        (lambda: forced_vote_sensitivities([0.5, 0.5], 4, "majority", target=2), "target"),
        (lambda: forced_vote_sensitivities([0.5, 0.5], 4, "majority", target=0, votable=[1, 0]), "votable"),
        (
            lambda: forced_vote_sensitivities([0.5, 0.5], 4, "majority", target=0, votable=np.array([False, True])),
            "votable",
        ),
        (lambda: forced_vote_sensitivities([0.5, 0.5], 4, "best_of_n"), "rewards"),
        (lambda: forced_vote_sensitivities([0.5, 0.5], 4, "pass", target=0, method="fast"), "method"),
        (
            lambda: forced_vote_sensitivities([0.5, 0.5], 4, "pass", target=0, method="monte_carlo", num_draws=1),
            "num_draws",
        ),
        (lambda: proportional_decay_derivative([1.0, 0.0], [1.0, 0.0], 0), "probs"),
        (lambda: proportional_decay_derivative([0.5, 0.5], [1.0], 0), "sensitivities"),
        (lambda: training_weight_comparison([0.5, 0.5], 4, "majority", 0), "threshold"),
        (lambda: training_weight_comparison([0.5, 0.5], 4, "best_of_n", 0, rewards=[0.0, 1.0]), "strategy"),
        (lambda: pool_efficiencies(make_pool(), [], "majority"), "budgets"),
        (lambda: pool_efficiencies(make_pool(), [4], "best_of_n_selection"), "strategy"),
        (lambda: pool_efficiencies(make_pool().drop(columns="reward"), [4], "majority"), "reward"),
        (lambda: forced_vote_sensitivities([0.5, 0.5], 4, "majority", target=0, ties="coin"), "ties"),
        (lambda: forced_vote_sensitivities([0.5, 0.5], 4, "pass", target=0, ties="strict"), "ties"),
        (lambda: diagonal_efficiency([0.5, 0.5], 4, "best_of_n", rewards=[0.0, 1.0], ties="strict"), "ties"),
        (lambda: pool_efficiencies(make_pool(), [4], "best_of_n", ties="strict"), "ties"),
        (lambda: strategy_value([0.5, 0.5], 4, "majority", target=0, ties=None), "ties"),
    ],
)
def test_bad_arguments_raise_value_errors_naming_them(call, name):
    with pytest.raises(ValueError, match=name):
        call()
