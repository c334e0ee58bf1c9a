"""The alignment coefficient Γ of a training weight with a test-time weight (docs/math.md §4; CAT App. F).

    Γ(a, b) = ∫₀¹ w_a(p) w_b(p) dp / sqrt(∫₀¹ w_a² dp · ∫₀¹ w_b² dp)        (CAT eq. 90)

Both weights multiply the same score function ∇ℓ (CAT eqs. 87–88): the training loss has
gradient w_a(p)·∇(−ℓ), the test utility U has gradient w_b(p)·∇ℓ, and a uniform density of
the gold likelihood p turns the expected first-order test gain into the integral.

Pass@N (CAT App. F.3). The training weight of Pass@N SFT is F(N, p) (DCO/CAT, docs/math.md §2;
cross-entropy is N = 1). [choice, with evidence] The printed test weight was lost in
extraction; this module takes w_b = F(k, p), the weight of the test utility log pass@k
(the same CAT form as training). It reproduces the three crossovers CAT App. F.3 predicts and
matches with its Table 2 — training N = 4 overtakes cross-entropy at k′ = 2, N = 16
overtakes N = 4 at k′ = 8, N = 64 overtakes N = 16 at k′ = 32 — whereas the other
candidate, w_b = p·d pass@k/dp = k p (1−p)^{k−1} (``pass_at_k_probability_weight``, the
utility pass@k itself), gives 4, 15 and 61. Both are offered; F is the default.

Quadrature [choice]: composite Gauss–Legendre, 12 nodes on each panel of a grid graded
geometrically toward both ends (breakpoints 2^−j and 1 − 2^−j, j = 1..50) merged with a
uniform grid of step 1/64: 1824 nodes, one vectorised weight call per Γ. F(N, p) varies
on the scale 1/N near p = 0, the majority weights peak with width ~ sqrt(p(1−p)/N)
inside; measured against 30-digit mpmath quadrature the relative error of Γ is below
1e-15 for F(1)·F(1024) and F(16)·F(256), 4e-15 for majority(256, 128)·F(64).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike

from aligntrain.losses import cat_pass_at_n_rl_weight, majority_weight, pass_at_n_weight
from aligntrain.validation import check_finite_vector, check_int, check_int_sequence

__all__ = [
    "WeightFunction",
    "alignment_coefficient",
    "crossover_budget",
    "majority_weight_function",
    "pass_at_k_probability_weight",
    "pass_at_n_alignment",
    "pass_at_n_alignment_curve",
    "pass_at_n_weight_function",
    "predicted_crossover_budget",
]

#: A weight as a function of the gold likelihood p, vectorised over a float64 array.
WeightFunction = Callable[[np.ndarray], np.ndarray]

_GRADED_LEVELS = 50
_UNIFORM_PANELS = 64
_NODES_PER_PANEL = 12


# ---------------------------------------------------------------------------
# Weights (the formulas live in aligntrain.losses)


def pass_at_n_weight_function(n: int) -> WeightFunction:
    """p ↦ F(n, p) = n p (1−p)^{n−1}/(1 − (1−p)^n) (``objectives.pass_at_n_weight``; docs/math.md §2).

    The Pass@N training weight (n = 1: cross-entropy, weight 1) and, by this module's
    convention, the pass@k test weight at n = k.
    """
    n = check_int(n, "n", minimum=1)
    return lambda p: pass_at_n_weight(p, n).numpy()


def pass_at_k_probability_weight(k: int) -> WeightFunction:
    """p ↦ p · d pass@k/dp = k p (1−p)^{k−1}: the score weight of the utility pass@k itself.

    p times the raw CAT Pass@N RL weight N(1−p)^{N−1} (``objectives.cat_pass_at_n_rl_weight``,
    unclipped). The alternative test weight (see the module docstring).
    """
    k = check_int(k, "k", minimum=1)

    def weight(p: np.ndarray) -> np.ndarray:
        return np.asarray(p, dtype=np.float64) * cat_pass_at_n_rl_weight(p, k, clip=math.inf).numpy()

    return weight


def majority_weight_function(n: int, k: int) -> WeightFunction:
    """p ↦ k C(n,k) p^k (1−p)^{n−k}/P[Bin(n, p) >= k], the majority SFT weight (``objectives.majority_weight``)."""
    n = check_int(n, "n", minimum=1)
    k = check_int(k, "k", minimum=1)
    if k > n:
        raise ValueError(f"k must be <= n = {n}, got {k}")
    return lambda p: majority_weight(p, n, k).numpy()


# ---------------------------------------------------------------------------
# Γ


@lru_cache(maxsize=1)
def _quadrature() -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the composite Gauss–Legendre rule on [0, 1] (module docstring)."""
    graded = 2.0 ** -np.arange(1, _GRADED_LEVELS + 1)
    breakpoints = np.unique(np.concatenate(([0.0, 1.0], graded, 1.0 - graded, np.linspace(0, 1, _UNIFORM_PANELS + 1))))
    reference_nodes, reference_weights = np.polynomial.legendre.leggauss(_NODES_PER_PANEL)
    left, width = breakpoints[:-1, None], np.diff(breakpoints)[:, None]
    nodes = (left + width * (reference_nodes + 1.0) / 2.0).ravel()
    weights = (width * reference_weights / 2.0).ravel()
    nodes.flags.writeable = weights.flags.writeable = False
    return nodes, weights


def _weight_values(weight: WeightFunction, name: str) -> np.ndarray:
    nodes, _ = _quadrature()
    values = np.asarray(weight(nodes), dtype=np.float64)
    if values.shape != nodes.shape:
        raise ValueError(f"{name} must map an array of p to an array of the same shape, got shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{name} must be finite on (0, 1)")
    return values


def _gamma(train: np.ndarray, test: np.ndarray) -> float:
    _, weights = _quadrature()
    cross = weights @ (train * test)
    train_norm, test_norm = weights @ train**2, weights @ test**2
    return float(cross / math.sqrt(train_norm * test_norm))


def alignment_coefficient(train_weight: WeightFunction, test_weight: WeightFunction) -> float:
    """Γ(a, b) = ∫ w_a w_b / sqrt(∫ w_a² ∫ w_b²) over p in [0, 1] (CAT eq. 90).

    Γ(a, a) = 1, symmetric, in [−1, 1] (Cauchy–Schwarz; [0, 1] for non-negative weights).
    Raises ValueError when a weight is not finite or vanishes (almost) everywhere.
    """
    train = _weight_values(train_weight, "train_weight")
    test = _weight_values(test_weight, "test_weight")
    _, weights = _quadrature()
    for values, name in ((train, "train_weight"), (test, "test_weight")):
        if not weights @ values**2 > 0:
            raise ValueError(f"{name} must not vanish on [0, 1] (its squared integral is 0)")
    return _gamma(train, test)


def _pass_at_n_alignment_curves(
    n_trains: Sequence[int], ks: Sequence[int], test_weight: Callable[[int], WeightFunction]
) -> np.ndarray:
    """Γ for every training budget (rows) and test budget (columns); each weight evaluated once."""
    trains = [_weight_values(pass_at_n_weight_function(n), "train_weight") for n in n_trains]
    curves = np.empty((len(trains), len(ks)))
    for column, k in enumerate(_check_budgets(ks)):
        test = _weight_values(test_weight(k), "test_weight")
        curves[:, column] = [_gamma(train, test) for train in trains]
    return curves


def pass_at_n_alignment_curve(
    n_train: int, ks: Sequence[int], test_weight: Callable[[int], WeightFunction] = pass_at_n_weight_function
) -> np.ndarray:
    """Γ(F(n_train, ·), test_weight(k)) for every k in ks (CAT App. F.3).

    ``test_weight`` maps a budget k to its weight: ``pass_at_n_weight_function`` (default,
    see the module docstring) or ``pass_at_k_probability_weight``.
    """
    return _pass_at_n_alignment_curves([n_train], ks, test_weight)[0]


def pass_at_n_alignment(
    n_train: int, k_test: int, test_weight: Callable[[int], WeightFunction] = pass_at_n_weight_function
) -> float:
    """Γ of Pass@N training at N = n_train with pass@k testing at k = k_test (see the curve)."""
    return float(pass_at_n_alignment_curve(n_train, [k_test], test_weight)[0])


# ---------------------------------------------------------------------------
# Crossover budgets


def _check_budgets(ks: Sequence[int]) -> list[int]:
    budgets = check_int_sequence(ks, "ks", minimum=1)
    if any(later <= earlier for earlier, later in zip(budgets, budgets[1:])):
        raise ValueError(f"ks must be strictly increasing, got {budgets}")
    return budgets


def crossover_budget(ks: Sequence[int], curve_small: ArrayLike, curve_large: ArrayLike) -> int | None:
    """The first budget k from which curve_large >= curve_small at every later k of ks.

    Rule [choice]: "overtakes and stays ahead" — a lead that is later lost again does not
    count, so noisy measured curves (e.g. pass@k of the models trained with N_small and
    N_large) give the budget after their last crossing. Returns ks[0] when the large curve
    leads from the start (the crossing lies at or before the range), None when it is
    behind at the last budget. Ties count as overtaking.
    """
    budgets = _check_budgets(ks)
    small, large = check_finite_vector(curve_small, "curve_small"), check_finite_vector(curve_large, "curve_large")
    for curve, name in ((small, "curve_small"), (large, "curve_large")):
        if curve.size != len(budgets):
            raise ValueError(f"{name} must have one value per k ({len(budgets)}), got {curve.size}")
    behind = np.flatnonzero(large < small)
    if behind.size == 0:
        return budgets[0]
    last_behind = int(behind[-1])
    return budgets[last_behind + 1] if last_behind + 1 < len(budgets) else None


def predicted_crossover_budget(
    n_small: int,
    n_large: int,
    max_budget: int | None = None,
    test_weight: Callable[[int], WeightFunction] = pass_at_n_weight_function,
) -> int | None:
    """The test budget k′ at which Pass@N training with n_large overtakes n_small (CAT eq. 91).

    Γ(n_large, k) against Γ(n_small, k) over the integers k = 1..max_budget (default
    4·n_large [choice]: the crossovers of the default weights lie near sqrt(n_small·n_large)),
    with the rule of ``crossover_budget``; None when n_large is still behind at max_budget.
    About 1 ms per k.
    """
    n_small = check_int(n_small, "n_small", minimum=1)
    n_large = check_int(n_large, "n_large", minimum=1)
    if n_large <= n_small:
        raise ValueError(f"n_large must be > n_small = {n_small}, got {n_large}")
    max_budget = 4 * n_large if max_budget is None else check_int(max_budget, "max_budget", minimum=1)
    ks = list(range(1, max_budget + 1))
    small, large = _pass_at_n_alignment_curves([n_small, n_large], ks, test_weight)
    return crossover_budget(ks, small, large)
