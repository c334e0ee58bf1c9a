"""Alignment coefficient and crossover budgets (aligntrain.diagnostics.alignment; docs/math.md §4, CAT App. F).

Independent references: exact Beta integrals with fractions (polynomial weights), a closed
form in ln 2 at 50 digits, mpmath quadrature at 25 digits, and the pass@k table of paper 000.
"""

from __future__ import annotations

import math
from decimal import Decimal, getcontext
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from aligntrain.diagnostics.alignment import (
    alignment_coefficient,
    crossover_budget,
    majority_weight_function,
    pass_at_k_probability_weight,
    pass_at_n_alignment,
    pass_at_n_alignment_curve,
    pass_at_n_weight_function,
    predicted_crossover_budget,
)


def beta(a: int, b: int) -> Fraction:
    """∫₀¹ p^(a−1) (1−p)^(b−1) dp for positive integers."""
    return Fraction(math.factorial(a - 1) * math.factorial(b - 1), math.factorial(a + b - 1))


def decimal_ratio(numerator: Fraction, squared_denominator: Fraction) -> float:
    getcontext().prec = 50
    value = Decimal(numerator.numerator) / Decimal(numerator.denominator)
    norm = (Decimal(squared_denominator.numerator) / Decimal(squared_denominator.denominator)).sqrt()
    return float(value / norm)


@pytest.mark.parametrize(("k1", "k2"), [(1, 1), (1, 3), (2, 5), (4, 16), (32, 256)])
def test_probability_weights_match_beta_integrals(k1, k2):
    # w_k = k p (1−p)^(k−1): ∫ w_a w_b = k1 k2 B(3, k1 + k2 − 1); the k's cancel in Γ.
    expected = decimal_ratio(beta(3, k1 + k2 - 1), beta(3, 2 * k1 - 1) * beta(3, 2 * k2 - 1))
    got = alignment_coefficient(pass_at_k_probability_weight(k1), pass_at_k_probability_weight(k2))
    assert got == pytest.approx(expected, rel=1e-13)


@pytest.mark.parametrize("k", [1, 2, 7, 64])
def test_cross_entropy_against_probability_weight_matches_beta_integrals(k):
    # w = 1 (F(1, p)) and k p (1−p)^(k−1): ∫ = k B(2, k), ∫ 1² = 1, ∫ w² = k² B(3, 2k − 1).
    expected = decimal_ratio(k * beta(2, k), k * k * beta(3, 2 * k - 1))
    got = alignment_coefficient(pass_at_n_weight_function(1), pass_at_k_probability_weight(k))
    assert got == pytest.approx(expected, rel=1e-13)


def test_cross_entropy_against_pass_at_two_matches_the_log_closed_form():
    # F(2, p) = 2(1−p)/(2−p): ∫ F = 2 − 2 ln 2, ∫ F² = 6 − 8 ln 2.
    getcontext().prec = 50
    ln2 = Decimal(2).ln()
    expected = float((2 - 2 * ln2) / (6 - 8 * ln2).sqrt())
    assert pass_at_n_alignment(1, 2) == pytest.approx(expected, rel=1e-14)


def mp_pass_weight(n):
    return lambda p: n * p * (1 - p) ** (n - 1) / -mpmath.expm1(n * mpmath.log1p(-p))


def mp_majority_weight(n, k):
    def weight(p):
        tail = mpmath.fsum(mpmath.binomial(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))
        return k * mpmath.binomial(n, k) * p**k * (1 - p) ** (n - k) / tail

    return weight


def mp_gamma(weight_a, weight_b, largest_n):
    breakpoints = [0] + [mpmath.mpf(2) ** -j for j in range(math.ceil(math.log2(largest_n)) + 6, 0, -1)] + [1]
    with mpmath.workdps(25):
        cross = mpmath.quad(lambda p: weight_a(p) * weight_b(p), breakpoints)
        norm_a = mpmath.quad(lambda p: weight_a(p) ** 2, breakpoints)
        norm_b = mpmath.quad(lambda p: weight_b(p) ** 2, breakpoints)
        return float(cross / mpmath.sqrt(norm_a * norm_b))


@pytest.mark.parametrize(("n_train", "k_test"), [(3, 7), (4, 2), (16, 256)])
def test_pass_weights_match_mpmath_quadrature(n_train, k_test):
    expected = mp_gamma(mp_pass_weight(n_train), mp_pass_weight(k_test), max(n_train, k_test))
    assert pass_at_n_alignment(n_train, k_test) == pytest.approx(expected, rel=1e-13)


def test_majority_weight_matches_mpmath_quadrature():
    expected = mp_gamma(mp_majority_weight(9, 4), mp_pass_weight(4), 9)
    got = alignment_coefficient(majority_weight_function(9, 4), pass_at_n_weight_function(4))
    assert got == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "weight",
    [
        pass_at_n_weight_function(1),
        pass_at_n_weight_function(256),
        pass_at_k_probability_weight(5),
        majority_weight_function(16, 9),
    ],
)
def test_self_alignment_is_one_and_the_coefficient_is_symmetric(weight):
    assert alignment_coefficient(weight, weight) == pytest.approx(1.0, rel=1e-14)
    other = pass_at_n_weight_function(8)
    assert alignment_coefficient(weight, other) == pytest.approx(alignment_coefficient(other, weight), rel=1e-14)
    assert 0.0 < alignment_coefficient(weight, other) <= 1.0 + 1e-15


def test_curve_matches_single_values():
    curve = pass_at_n_alignment_curve(4, [1, 2, 8])
    assert curve.tolist() == pytest.approx([pass_at_n_alignment(4, k) for k in (1, 2, 8)], rel=1e-15)


def test_predicted_crossovers_reproduce_paper_000_f3():
    """CAT App. F.3 predicts k′ = 2 (N = 4 over cross-entropy), 8 (16 over 4), 32 (64 over 16)."""
    assert predicted_crossover_budget(1, 4) == 2
    assert predicted_crossover_budget(4, 16) == 8
    assert predicted_crossover_budget(16, 64) == 32
    # independent check of the first crossing: CE leads at k = 1 (Γ(1,1) = 1), N = 4 leads at k = 2
    assert mp_gamma(mp_pass_weight(4), mp_pass_weight(2), 4) > pass_at_n_alignment(1, 2)
    # the alternative test weight (utility pass@k itself) moves the crossovers
    assert predicted_crossover_budget(1, 4, test_weight=pass_at_k_probability_weight) == 4
    assert predicted_crossover_budget(16, 64, max_budget=16) is None


# CAT Table 2, pass@k in % (SFT baseline, Pass@N with N = 4, 16, 64).
TABLE_2_KS = [1, 4, 8, 16, 32, 64]
TABLE_2 = {
    1: [15.8, 29.6, 37.9, 46.3, 53.7, 59.8],
    4: [15.2, 30.5, 39.9, 49.2, 57.5, 63.8],
    16: [14.5, 30.1, 40.3, 50.9, 59.8, 66.2],
    64: [13.5, 28.5, 38.7, 49.4, 59.3, 67.6],
}


@pytest.mark.parametrize(("small", "large", "expected"), [(1, 4, 4), (4, 16, 8), (16, 64, 64)])
def test_measured_crossover_on_paper_000_table_2(small, large, expected):
    assert crossover_budget(TABLE_2_KS, TABLE_2[small], TABLE_2[large]) == expected


def test_crossover_rule_requires_staying_ahead():
    ks = [1, 2, 4, 8]
    assert crossover_budget(ks, [0.5] * 4, [0.4, 0.6, 0.4, 0.6]) == 8  # the lead at k = 2 is lost again
    assert crossover_budget(ks, [0.5] * 4, [0.6, 0.6, 0.6, 0.6]) == 1  # ahead from the start
    assert crossover_budget(ks, [0.5] * 4, [0.4, 0.4, 0.5, 0.7]) == 4  # a tie counts
    assert crossover_budget(ks, [0.5] * 4, [0.4, 0.6, 0.6, 0.4]) is None  # behind at the end


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: crossover_budget([1, 2, 2], [0, 0, 0], [0, 0, 0]), "ks"),
        (lambda: crossover_budget([], [], []), "ks"),
        (lambda: crossover_budget([1, 2], [0.1], [0.1, 0.2]), "curve_small"),
        (lambda: crossover_budget([1, 2], [0.1, 0.2], [0.1, float("nan")]), "curve_large"),
        (lambda: predicted_crossover_budget(4, 4), "n_large"),
        (lambda: predicted_crossover_budget(0, 4), "n_small"),
        (lambda: predicted_crossover_budget(1, 4, max_budget=0), "max_budget"),
        (lambda: alignment_coefficient(lambda p: 0.0 * p, pass_at_n_weight_function(2)), "train_weight"),
        (lambda: alignment_coefficient(pass_at_n_weight_function(2), lambda p: np.ones(3)), "test_weight"),
        (lambda: alignment_coefficient(pass_at_n_weight_function(2), lambda p: np.full_like(p, np.inf)), "test_weight"),
        (lambda: majority_weight_function(4, 5), "k"),
        (lambda: pass_at_n_weight_function(0), "n"),
        (lambda: pass_at_n_alignment_curve(2, [3, 1]), "ks"),
    ],
)
def test_bad_arguments_raise_value_errors_naming_them(call, name):
    with pytest.raises(ValueError, match=name):
        call()
