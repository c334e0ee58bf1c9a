"""How good the diagonal approximation is: the exact derivative along the target (docs/math.md §4).

CAT's training rules keep the diagonal term a_t of a strategy's gradient (the
forced-vote sensitivity of the target, ``forced_vote``). Under proportional decay
(CAT App. A.8–A.9: raising p_t takes mass from every rival in proportion to its
probability) the exact derivative along the target t is

    D = a_t − C,   C = Σ_{j≠t} p_j a_j / (1 − p_t)        (CAT eq. 32, corrected in docs/math.md §4),

and the informative efficiency of the diagonal term is D/a_t; CAT saved a_t/(a_t + C)
for its Figure 9 (``paper_ratio`` here, in [½, 1] by construction for plurality vote).
Only D is intrinsic: a_t and C depend on how P is extended off the simplex (for pass@N the
forced-vote extension gives D/a_t = (1 − p_t)^{N−1}, while CAT Theorem 4 calls pass@N exact
by treating P as a function of p_t alone). Euler's identity for homogeneous polynomials,
Σ_j p_j a_j = N·P, gives D = (a_t − N·P)/(1 − p_t), the oracle advantage of docs/math.md §4 over
1 − p_t; the tests use it as a cross-check.

``diagonal_efficiency`` gives a_t, C, D and D/a_t for one distribution;
``training_weight_comparison`` sets the derivative (and SFT weight) CAT trains with,
a function of p_t alone, beside D (and p_t·D/P).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import ArrayLike

from aligntrain.diagnostics.forced_vote import (
    DEFAULT_NUM_DRAWS,
    DEFAULT_SEED,
    STRATEGIES,
    Ties,
    _check_probs,
    _check_target,
    _Outcomes,
    _prepared,
    _sensitivities,
    _Strategy,
)
from aligntrain.losses import (
    as_tensor,
    cat_best_of_n_rl_weight,
    cat_majority_rl_weight,
    cat_pass_at_n_rl_weight,
    majority_loss,
    majority_weight,
    pass_at_n_loss,
    pass_at_n_weight,
)
from aligntrain.validation import check_int

__all__ = [
    "DiagonalEfficiency",
    "WeightComparison",
    "diagonal_efficiency",
    "proportional_decay_derivative",
    "training_weight_comparison",
]


def proportional_decay_derivative(probs: ArrayLike, sensitivities: ArrayLike, target: int) -> float:
    """D = a_t − Σ_{j≠t} p_j a_j/(1 − p_t): dP/dp_t when the rivals decay in proportion (docs/math.md §4).

    Needs p_t < 1 (with p_t = 1 there is no rival mass to take from).
    """
    p = _check_probs(probs)
    index = _check_target(target, p.size)
    if index is None:
        raise ValueError("target must be an outcome index, got None")
    a = np.asarray(sensitivities, dtype=np.float64)
    if a.shape != p.shape:
        raise ValueError(f"sensitivities must have one entry per outcome ({p.size}), got shape {a.shape}")
    rival_mass = 1.0 - p[index]
    if rival_mass <= 0:
        raise ValueError(f"probs[target] must be < 1 (no rival mass to decay), got {p[index]!r}")
    rivals = np.arange(p.size) != index
    return float(a[index] - np.dot(p[rivals], a[rivals]) / rival_mass)


@dataclass(frozen=True)
class DiagonalEfficiency:
    """The diagonal term against the exact proportional-decay derivative (docs/math.md §4).

    efficiency = D/a_t (NaN when a_t = 0); paper_ratio = a_t/(a_t + C), what CAT saved for
    Figure 9; value = P = Σ_j p_j a_j/N (Euler's identity). ties: majority's tie convention
    ("uniform" or "strict"), None for the strategies without plurality ties.
    """

    target: int
    p_target: float
    value: float
    a_target: float
    rivalry_correction: float
    exact_derivative: float
    efficiency: float
    paper_ratio: float
    method: str
    ties: Ties | None


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator != 0 else math.nan


def diagonal_efficiency(
    probs: ArrayLike,
    n: int,
    strategy: str,
    target: int | None = None,
    *,
    correct: ArrayLike | None = None,
    rewards: ArrayLike | None = None,
    votable: ArrayLike | None = None,
    ties: Ties = "uniform",
    method: str = "auto",
    num_draws: int = DEFAULT_NUM_DRAWS,
    seed: int | None = DEFAULT_SEED,
) -> DiagonalEfficiency:
    """a_t, C, D and D/a_t for one distribution (arguments as in ``forced_vote_sensitivities``).

    target defaults per strategy: the only correct outcome (pass), the top-reward outcome
    (best_of_n); majority and best_of_n_selection need it.
    """
    rule, outcomes, budget = _prepared(probs, n, strategy, target, correct, rewards, votable, ties)
    if outcomes.target is None:
        raise ValueError(f"target is required for strategy {strategy!r} with these arguments")
    return _efficiency(rule, outcomes, budget, method, num_draws, seed)


def _efficiency(
    rule: _Strategy, outcomes: _Outcomes, n: int, method: str, num_draws: object, seed: int | None
) -> DiagonalEfficiency:
    a, ran = _sensitivities(rule, outcomes, n, method, num_draws, seed)
    t = outcomes.target
    derivative = proportional_decay_derivative(outcomes.probs, a, t)
    a_target = float(a[t])
    correction = a_target - derivative
    return DiagonalEfficiency(
        target=t,
        p_target=float(outcomes.probs[t]),
        value=float(np.dot(outcomes.probs, a) / n),
        a_target=a_target,
        rivalry_correction=correction,
        exact_derivative=derivative,
        efficiency=_ratio(derivative, a_target),
        paper_ratio=_ratio(a_target, a_target + correction),
        method=ran,
        ties=_ties_shown(rule, outcomes.ties),
    )


def _ties_shown(rule: _Strategy, ties: Ties) -> Ties | None:
    """The tie convention a result was computed under, None where the strategy has no plurality ties."""
    return ties if rule is STRATEGIES["majority"] else None


# ---------------------------------------------------------------------------
# The training weight's derivative against the exact one


@dataclass(frozen=True)
class WeightComparison:
    """What CAT trains with (a function of p_t alone) next to the exact proportional-decay values.

    diagonal_derivative: dP̃/dp of the training surrogate P̃ (pass: 1 − (1−p)^N; majority:
    B(p) = P[Bin(N, p) >= k]; best_of_n_selection: CAT's N·q^{N−1}). exact_derivative: D.
    diagonal_weight: the SFT weight p·P̃′/P̃ (``pass_at_n_weight``, ``majority_weight``;
    None for best-of-N, an RL weight). exact_weight: p_t·D/P, the weight the exact objective
    −log P puts on ∇(−ℓ) under proportional decay (dP/dθ = D·p_t·∇ℓ).
    """

    p_target: float
    diagonal_value: float | None
    diagonal_derivative: float
    diagonal_weight: float | None
    exact_value: float
    exact_derivative: float
    exact_weight: float


def _pass_surrogate(p: float, n: int, o: _Outcomes, threshold: int | None) -> tuple[float, float, float]:
    value = math.exp(-float(pass_at_n_loss(torch.log(as_tensor(p, "p")), n)))
    derivative = float(cat_pass_at_n_rl_weight(p, n, clip=math.inf))
    return value, derivative, float(pass_at_n_weight(p, n))


def _majority_surrogate(p: float, n: int, o: _Outcomes, threshold: int | None) -> tuple[float, float, float]:
    if threshold is None:
        raise ValueError("threshold (the vote count k of B(p) = P[Bin(N, p) >= k]) is required for 'majority'")
    value = math.exp(-float(majority_loss(torch.log(as_tensor(p, "p")), n, threshold)))
    derivative = float(cat_majority_rl_weight(p, n, threshold, clip=math.inf))
    return value, derivative, float(majority_weight(p, n, threshold))


def _selection_surrogate(p: float, n: int, o: _Outcomes, threshold: int | None) -> tuple[None, float, None]:
    below = float(o.probs[o.rewards < o.rewards[o.target]].sum())
    return None, float(cat_best_of_n_rl_weight(below, n, clip=math.inf)), None


#: strategy -> (p_t, N, outcomes, threshold) -> (P̃(p_t), P̃′(p_t), SFT weight), from aligntrain.losses
_SURROGATES = {"pass": _pass_surrogate, "majority": _majority_surrogate, "best_of_n_selection": _selection_surrogate}


def training_weight_comparison(
    probs: ArrayLike,
    n: int,
    strategy: str,
    target: int | None = None,
    *,
    threshold: int | None = None,
    correct: ArrayLike | None = None,
    rewards: ArrayLike | None = None,
    votable: ArrayLike | None = None,
    ties: Ties = "uniform",
) -> WeightComparison:
    """The diagonal training rule's derivative (and SFT weight) against the exact D (and p_t·D/P).

    ``threshold`` is majority's k; ``ties`` its tie convention for the exact side (the
    surrogate B(p) = P[Bin(N, p) >= k] has no ties). Exact methods only; weights come from
    ``aligntrain.losses`` (pass: ``pass_at_n_weight``; majority: ``majority_weight`` and
    ``majority_loss`` for B; best_of_n_selection: ``cat_best_of_n_rl_weight``).
    """
    if strategy not in _SURROGATES:
        raise ValueError(f"strategy must be one of {sorted(_SURROGATES)} for a weight comparison, got {strategy!r}")
    rule, outcomes, budget = _prepared(probs, n, strategy, target, correct, rewards, votable, ties)
    if outcomes.target is None:
        raise ValueError(f"target is required for strategy {strategy!r} with these arguments")
    if threshold is not None:
        threshold = check_int(threshold, "threshold", minimum=1)
        if threshold > budget:
            raise ValueError(f"threshold must be <= n = {budget}, got {threshold}")
    value, a = rule.exact(outcomes, budget)
    p_t = float(outcomes.probs[outcomes.target])
    derivative = proportional_decay_derivative(outcomes.probs, a, outcomes.target)
    diagonal_value, diagonal_derivative, diagonal_weight = _SURROGATES[strategy](p_t, budget, outcomes, threshold)
    return WeightComparison(
        p_target=p_t,
        diagonal_value=diagonal_value,
        diagonal_derivative=diagonal_derivative,
        diagonal_weight=diagonal_weight,
        exact_value=float(value),
        exact_derivative=derivative,
        exact_weight=_ratio(p_t * derivative, float(value)),
    )
