"""Forced-vote sensitivities and the efficiency of the diagonal approximation (docs/math.md §4).

A strategy draws N iid outcomes from a finite distribution p (answer classes, or reward
values) and scores them; its value P(p) = Σ_counts multinomial(N; counts) Π p_j^{n_j}
value(counts) is a homogeneous polynomial of degree N. CAT (eqs. 35–37, 65) shows
its partial derivatives — taken on that polynomial, i.e. extended off the simplex — are

    a_j = ∂P/∂p_j = N · E[value | one of the N draws is forced to j]   (forced-vote identity).

Under proportional decay (CAT App. A.8–A.9: raising p_t takes mass from every rival in
proportion to its probability) the exact derivative along the target t is

    D = a_t − C,   C = Σ_{j≠t} p_j a_j / (1 − p_t)        (CAT eq. 32, corrected in docs/math.md §4),

and the informative efficiency of the diagonal term is D/a_t; CAT saved a_t/(a_t + C)
for its Figure 9 (``paper_ratio`` here, in [½, 1] by construction for plurality vote).
Only D is intrinsic: a_t and C depend on how P is extended off the simplex (for pass@N the
forced-vote extension gives D/a_t = (1 − p_t)^{N−1}, while CAT Theorem 4 calls pass@N exact
by treating P as a function of p_t alone). Euler's identity for homogeneous polynomials,
Σ_j p_j a_j = N·P, gives D = (a_t − N·P)/(1 − p_t), the oracle advantage of docs/math.md §4 over
1 − p_t; the tests use it as a cross-check.

Strategies (``STRATEGIES``):
- ``pass``: outcome j has a correct flag; the N draws win iff one is correct.
- ``majority``: plurality vote over answer classes, target = the gold class; an outcome with
  ``votable`` False (unparseable) is drawn but never wins; no votable draw fails. Ties
  follow ``ties`` (docs/math.md §4.1):
  ``"uniform"`` (default) — broken uniformly at random, a tie of the gold class with τ
  rivals is worth its expected value 1/(1+τ): the convention of
  ``aligntrain.estimators.maj_at_k`` (docs/math.md §1.2), so the diagnostics describe the
  metric the study reports; ``"strict"`` — the gold class wins only with strictly more
  votes than every rival, a tie is a loss: the CAT authors' convention, for comparison
  with CAT Figure 9. The two give different polynomials, hence different a_j
  and D/a_t: with two classes at N = 2, D/a_t = 1/(1 + p_t) uniform against 1 strict
  (a factor up to 2); on random distributions strict's D/a_t is the larger, by a median
  4–9% at N = 4–32 (docs/math.md §4.2). Either way with replacement (iid draws): on the
  empirical distribution of a pool of M, the uniform value agrees with maj@k only as M → ∞.
- ``best_of_n``: outcome j has reward r_j; value = E[max reward of the N draws]. Its forced-
  vote sensitivities are the oracle advantages of docs/math.md §4 plus N·P. [choice] target =
  the top-reward outcome (the first of them on a tie). D/a_t is not shift-invariant here:
  adding c to every reward leaves D unchanged and adds N·c to a_t.
- ``best_of_n_selection``: CAT's own best-of-N formulation (App. B.3, B.5, Fig. 10):
  value = probability that the selected draw is the target t (a draw of maximal reward,
  chosen uniformly among the draws sharing it), for any candidate t. Its training weight is
  CAT's N·q^{N−1} (``cat_best_of_n_rl_weight``), q = mass strictly below r_t.

Methods: ``exact`` — closed forms for pass, best_of_n and best_of_n_selection (O(m) or
O(N²)); a dynamic programme for majority, either tie convention (``_majority_exact``);
``monte_carlo`` — CAT's 5000 draws with seed 42 (``monte_carlo_sensitivities``); ``auto``
— exact, except majority with N > ``AUTO_EXACT_MAJORITY_MAX_BUDGET``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
import pandas as pd
import torch
from numpy.typing import ArrayLike
from scipy.special import gammaln, xlogy

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
from aligntrain.validation import check_finite_vector, check_int, check_int_sequence

__all__ = [
    "AUTO_EXACT_MAJORITY_MAX_BUDGET",
    "DEFAULT_NUM_DRAWS",
    "DEFAULT_SEED",
    "DiagonalEfficiency",
    "EmpiricalDistribution",
    "MonteCarloSensitivities",
    "POOL_STRATEGIES",
    "STRATEGIES",
    "TIES",
    "Ties",
    "WeightComparison",
    "class_distribution",
    "diagonal_efficiency",
    "forced_vote_sensitivities",
    "monte_carlo_sensitivities",
    "pool_efficiencies",
    "proportional_decay_derivative",
    "reward_distribution",
    "strategy_value",
    "training_weight_comparison",
]

#: CAT App. A.11: the off-diagonal sensitivities by Monte Carlo, 5000 draws, seed 42.
DEFAULT_NUM_DRAWS = 5000
DEFAULT_SEED = 42

#: ``method="auto"`` runs the exact majority DP up to this N, Monte Carlo above it. The DP's
#: time grows like K·N² to K·N³ for K distinct rival probabilities; measured on one core:
#: N = 64 with 10 distinct rivals 0.06 s, with 64 0.6 s; N = 128 0.25 s and 2 s; N = 256
#: 2 s with 10. The other strategies are closed forms, always exact.
AUTO_EXACT_MAJORITY_MAX_BUDGET = 128

#: The exact majority DP counts in float64 with binomial coefficients C(n, m) <= 2^n.
_MAJORITY_EXACT_MAX_BUDGET = 1000

_PROBABILITY_SUM_TOLERANCE = 1e-9

#: Majority vote's tie conventions (module docstring, docs/math.md §4.1): "uniform" scores a
#: tie of the gold class with τ rivals 1/(1+τ) (maj@k's convention), "strict" scores it 0 (CAT's).
Ties = Literal["uniform", "strict"]
TIES: tuple[Ties, ...] = ("uniform", "strict")

#: Only plurality vote has ties to break: the other strategies refuse ties="strict" (``_check_ties``).
_STRATEGIES_WITH_TIES = ("majority",)


# ---------------------------------------------------------------------------
# Validation


def _check_probs(probs: ArrayLike) -> np.ndarray:
    array = check_finite_vector(probs, "probs")
    if np.any(array < 0):
        raise ValueError("probs must be >= 0")
    total = array.sum()
    if abs(total - 1.0) > _PROBABILITY_SUM_TOLERANCE:
        raise ValueError(f"probs must sum to 1 (within {_PROBABILITY_SUM_TOLERANCE:g}), got {total!r}")
    return array / total  # exact normalisation: the CDFs below must end at 1


def _check_mask(mask: ArrayLike | None, size: int, name: str) -> np.ndarray | None:
    if mask is None:
        return None
    array = np.asarray(mask)
    if array.shape != (size,) or array.dtype != np.bool_:
        raise ValueError(f"{name} must be a boolean array of length len(probs) = {size}, got {array!r}")
    return array


def _check_ties(ties: object, strategy: str) -> Ties:
    if ties not in TIES:
        raise ValueError(f"ties must be one of {TIES}, got {ties!r}")
    if ties != "uniform" and strategy not in _STRATEGIES_WITH_TIES:
        # best_of_n_selection's equal-reward ties are a different rule (a uniform pick among
        # the maximal draws, CAT App. B.3): refuse rather than silently ignore the option.
        raise ValueError(f"ties={ties!r} applies to strategy 'majority' only, got strategy {strategy!r}")
    return ties


def _check_target(target: object, size: int) -> int | None:
    if target is None:
        return None
    index = check_int(target, "target", minimum=0)
    if index >= size:
        raise ValueError(f"target must be < len(probs) = {size}, got {index}")
    return index


@dataclass(frozen=True)
class _Outcomes:
    """A validated outcome distribution and what the strategies read from it."""

    probs: np.ndarray
    target: int | None = None
    correct: np.ndarray | None = None
    rewards: np.ndarray | None = None
    votable: np.ndarray | None = None
    ties: Ties = "uniform"  # majority only (``_check_ties``)

    def replace(self, **changes: object) -> _Outcomes:
        return _Outcomes(**{**self.__dict__, **changes})


def _outcomes(
    probs: ArrayLike,
    target: object = None,
    correct: ArrayLike | None = None,
    rewards: ArrayLike | None = None,
    votable: ArrayLike | None = None,
    ties: Ties = "uniform",
) -> _Outcomes:
    p = _check_probs(probs)
    reward_values = None
    if rewards is not None:
        reward_values = check_finite_vector(rewards, "rewards")
        if reward_values.shape != p.shape:
            raise ValueError(f"rewards must have one value per outcome (length {p.size}), got {rewards!r}")
    return _Outcomes(
        probs=p,
        target=_check_target(target, p.size),
        correct=_check_mask(correct, p.size, "correct"),
        rewards=reward_values,
        votable=_check_mask(votable, p.size, "votable"),
        ties=ties,
    )


# ---------------------------------------------------------------------------
# pass: win iff a draw is correct


def _prepare_pass(o: _Outcomes) -> _Outcomes:
    """correct defaults to the target alone; the target defaults to the only correct outcome."""
    if o.correct is None:
        if o.target is None:
            raise ValueError("strategy 'pass' needs correct (a boolean mask) or target")
        correct = np.zeros(o.probs.size, dtype=bool)
        correct[o.target] = True
        return o.replace(correct=correct)
    if o.target is None and int(o.correct.sum()) == 1:
        return o.replace(target=int(np.flatnonzero(o.correct)[0]))
    return o


def _pass_exact(o: _Outcomes, n: int) -> tuple[float, np.ndarray]:
    """P = 1 − (1 − s)^N, s the correct mass; a_j = N if j is correct, else N·(1 − (1 − s)^{N−1})."""
    correct_mass = float(o.probs[o.correct].sum())

    def win(draws: int) -> float:  # 1 − (1 − s)^draws, accurate for small s
        return 1.0 if correct_mass >= 1.0 else -math.expm1(draws * math.log1p(-correct_mass))

    return win(n), np.where(o.correct, float(n), n * win(n - 1))


def _pass_draw_values(o: _Outcomes, counts: np.ndarray) -> np.ndarray:
    return (counts[:, o.correct].sum(axis=1) > 0).astype(np.float64)


# ---------------------------------------------------------------------------
# majority: plurality vote, ties uniform or strict, unvotable outcomes never win


def _prepare_majority(o: _Outcomes) -> _Outcomes:
    if o.target is None:
        raise ValueError("strategy 'majority' needs target (the index of the gold class)")
    votable = np.ones(o.probs.size, dtype=bool) if o.votable is None else o.votable
    if not votable[o.target]:
        raise ValueError(f"votable[target] must be True: the gold class (target = {o.target}) must be able to win")
    return o.replace(votable=votable)


@lru_cache(maxsize=64)
def _binomial_table(size: int) -> np.ndarray:
    """C[n, m] = C(n, m) for 0 <= m <= n < size, else 0 (float64 of exact integers)."""
    table = np.zeros((size, size))
    for n in range(size):
        table[n, : n + 1] = [math.comb(n, m) for m in range(n + 1)]
    table.flags.writeable = False
    return table


@dataclass(frozen=True)
class _CountMass:
    """masses[..., n] (n < length): the total mass of the ways n draws fall on a set of classes,
    Σ multinomial(n; counts) Π p^count over the allowed count vectors. Entries from
    ``support`` on are zero, which makes products with one rival's factor cheap."""

    masses: np.ndarray
    support: int


def _combine(a: _CountMass, b: _CountMass) -> _CountMass:
    """The count masses of two disjoint sets of classes: c[n] = Σ_j C(n, j) b[j] a[n − j].

    A loop over the shorter support: the terms are positive, so float64 keeps its
    relative precision (no FFT, no division).
    """
    if b.support > a.support:
        a, b = b, a
    length = a.masses.shape[-1]
    table = _binomial_table(length)
    out = a.masses * b.masses[..., :1]
    for j in range(1, b.support):
        out[..., j:] += (b.masses[..., j : j + 1] * table[j:, j]) * a.masses[..., : length - j]
    return _CountMass(out, min(length, a.support + b.support - 1))


def _coefficient_at(a: _CountMass, b: _CountMass, degree: int) -> np.ndarray:
    """Entry ``degree`` of ``_combine(a, b)`` alone."""
    row = _binomial_table(degree + 1)[degree]
    return np.sum(row * a.masses[..., : degree + 1] * b.masses[..., degree::-1], axis=-1)


def _identity(shape: tuple[int, int]) -> _CountMass:
    masses = np.zeros(shape)
    masses[..., 0] = 1.0  # no draws, mass 1
    return _CountMass(masses, 1)


def _power(factor: _CountMass, exponent: int) -> _CountMass:
    result = _identity(factor.masses.shape)
    while exponent:
        if exponent & 1:
            result = _combine(result, factor)
        exponent >>= 1
        if exponent:
            factor = _combine(factor, factor)
    return result


@lru_cache(maxsize=256)
def _tie_quadrature(max_ties: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Legendre nodes/weights on [0, 1] exact for polynomials of degree <= max_ties.

    The tie weight 1/(1+τ) = ∫₀¹ z^τ dz: marking each rival tied with the gold class by a
    factor z turns the tie bookkeeping into a polynomial in z, integrated exactly here.
    """
    nodes, weights = np.polynomial.legendre.leggauss(max_ties // 2 + 1)
    return (nodes + 1.0) / 2.0, weights / 2.0


#: The strict convention has no tie to mark: one "node" z = 1 of weight 1 leaves the
#: rival factors plain truncated powers and the quadrature a plain sum.
_NO_TIE_QUADRATURE = (np.ones(1), np.ones(1))


def _rival_factor(prob: float, cap: int, nodes: np.ndarray, length: int) -> _CountMass:
    """One rival taking n draws (n < length) and ending with at most ``cap`` votes: mass p^n
    below the cap, z·p^cap at the cap (a tie, one row per node z; z = 1 under the strict
    convention, whose cap is one below the gold count), none above."""
    support = min(cap + 1, length)
    masses = np.zeros((nodes.size, length))
    masses[:, :support] = np.power(prob, np.arange(support))
    if cap < length:
        masses[:, cap] *= nodes
    return _CountMass(masses, support)


def _majority_exact(o: _Outcomes, n: int) -> tuple[float, np.ndarray]:
    """Exact P and a_j for plurality vote by a DP over the gold class's final vote count t.

    For each t, the non-gold draws are spread over the unvotable mass u (any count) and
    the rivals, each capped at c_t votes: c_t = t under the uniform convention (a tie at t
    marked by z, ``_tie_quadrature``: 1/(1+τ) = ∫₀¹ z^τ dz), c_t = t − 1 under the strict
    one (a tie loses, nothing to mark: z ≡ 1). Their joint count masses combine by
    binomial convolution (``_combine``). With R_t = U ⊛ Π_rivals g_{r,c_t} (g_{r,c}: rival
    r capped at c votes),
      P   = Σ_t C(N, t) p_g^t ∫ R_t[N − t] dz,
      a_g = N Σ_t C(N−1, t−1) p_g^{t−1} ∫ R_t[N − t] dz         (the forced vote is gold's),
      a_u = N Σ_t C(N−1, t) p_g^t ∫ R_t[N − 1 − t] dz          (a forced unvotable vote changes nothing),
      a_r = N Σ_t C(N−1, t) p_g^t ∫ (R_t / g_{r,c_t} ⊛ g_{r,c_t−1})[N − 1 − t] dz
    (a rival forced one vote may draw at most c_t − 1 more; none at all when c_t = 0, the
    strict t = 1, where a forced rival vote already ties the gold class and a_r gets no
    term), "/ g_{r,c_t}" meaning the product without that factor: prefix and suffix
    products, never a division. Rivals of equal probability share one factor power. Above
    t = N/2 no rival can reach t under either convention, R_t is the untruncated
    (Σ_{j≠g} p_j)^{N−t} and the sums close. Everything is the multinomial polynomial
    itself (nothing uses Σ p = 1), so the a_j are its partial derivatives.
    Cost: O(N) levels × O(K) products of length N − t for K distinct rival probabilities.
    """
    if n > _MAJORITY_EXACT_MAX_BUDGET:
        raise ValueError(f"n must be <= {_MAJORITY_EXACT_MAX_BUDGET} for the exact majority method, got {n}")
    probs, gold = o.probs, o.target
    is_rival = o.votable.copy()
    is_rival[gold] = False
    rival_probs, rival_group, group_sizes = np.unique(probs[is_rival], return_inverse=True, return_counts=True)
    unvotable_mass = float(probs[~o.votable].sum())
    gold_prob = float(probs[gold])
    num_rivals = int(is_rival.sum())
    binom = _binomial_table(n + 1)
    strict = o.ties == "strict"

    # Gold counts t > N/2: a sure win; the rest of the draws may fall anywhere.
    others_mass = float(np.delete(probs, gold).sum())
    sure = np.arange(n // 2 + 1, n + 1)
    value = float(np.sum(binom[n, sure] * gold_prob**sure * others_mass ** (n - sure)))
    a_gold = float(np.sum(binom[n - 1, sure - 1] * gold_prob ** (sure - 1) * others_mass ** (n - sure)))
    sure = sure[sure < n]
    a_other = float(np.sum(binom[n - 1, sure] * gold_prob**sure * others_mass ** (n - 1 - sure)))
    a_unvotable = a_other
    a_groups = np.full(rival_probs.size, a_other)

    for t in range(1, n // 2 + 1):
        length = n - t + 1  # the non-gold draws number at most N − t
        cap = t - 1 if strict else t
        nodes, weights = _NO_TIE_QUADRATURE if strict else _tie_quadrature(min(num_rivals, (n - t) // t))
        capped = [_rival_factor(q, cap, nodes, length) for q in rival_probs]
        rest_of_groups = [_power(g, r - 1) for g, r in zip(capped, group_sizes, strict=True)]
        factors = [_combine(g, rest) for g, rest in zip(capped, rest_of_groups, strict=True)]
        unvotable = np.broadcast_to(np.power(unvotable_mass, np.arange(length)), (nodes.size, length))
        prefix = [_CountMass(unvotable, length)]  # prefix[k] = U ⊛ factors[:k]
        for factor in factors:
            prefix.append(_combine(prefix[-1], factor))
        suffix = [_identity((nodes.size, length))]  # built backwards: suffix[k] = factors[k + 1:]
        for factor in reversed(factors[1:]):
            suffix.append(_combine(factor, suffix[-1]))
        suffix.reverse()
        rest = prefix[-1].masses

        gold_votes = gold_prob**t
        value += binom[n, t] * gold_votes * (weights @ rest[:, n - t])
        a_gold += binom[n - 1, t - 1] * gold_prob ** (t - 1) * (weights @ rest[:, n - t])
        last = n - 1 - t  # t <= N/2 < N, so last >= 0
        a_unvotable += binom[n - 1, t] * gold_votes * (weights @ rest[:, last])
        if cap == 0:
            continue  # strict, t = 1: a forced rival vote ties the single gold vote, a loss
        for k, (q, rest_of_group) in enumerate(zip(rival_probs, rest_of_groups, strict=True)):
            forced = _combine(rest_of_group, _rival_factor(q, cap - 1, nodes, length))
            with_forced = _combine(prefix[k], forced)
            a_groups[k] += binom[n - 1, t] * gold_votes * (weights @ _coefficient_at(with_forced, suffix[k], last))

    sensitivities = np.full(probs.size, n * a_unvotable)
    sensitivities[gold] = n * a_gold
    sensitivities[is_rival] = n * a_groups[rival_group]
    return value, sensitivities


def _majority_draw_values(o: _Outcomes, counts: np.ndarray) -> np.ndarray:
    votes = np.where(o.votable, counts, -1)  # unvotable outcomes never lead
    gold = counts[:, o.target]
    if o.ties == "strict":
        votes[:, o.target] = -1
        return ((gold > votes.max(axis=1)) & (gold > 0)).astype(np.float64)
    top = votes.max(axis=1)
    ties = (votes == top[:, None]).sum(axis=1)
    wins = (gold == top) & (top > 0)
    return wins / ties


# ---------------------------------------------------------------------------
# best_of_n: E[max reward]


def _prepare_best_of_n(o: _Outcomes) -> _Outcomes:
    if o.rewards is None:
        raise ValueError("strategy 'best_of_n' needs rewards (one per outcome)")
    return o if o.target is not None else o.replace(target=int(np.argmax(o.rewards)))


def _best_of_n_exact(o: _Outcomes, n: int) -> tuple[float, np.ndarray]:
    """P = Σ_v v [F(v)^N − F(v⁻)^N];
    a_j = N·(r_j F(r_j)^{N−1} + Σ_{v > r_j} v [F(v)^{N−1} − F(v⁻)^{N−1}]),
    over the distinct reward values v with CDF F (docs/math.md §4, the oracle advantage plus N·P)."""
    top = float(o.rewards.max())  # E[max] shifts with the rewards: compute on r − top, add top back
    values, position = np.unique(o.rewards - top, return_inverse=True)
    cdf = np.cumsum(np.bincount(position, weights=o.probs, minlength=values.size))
    cdf /= cdf[-1]
    below = np.concatenate(([0.0], cdf[:-1]))
    value = float(np.sum(values * (cdf**n - below**n)))
    increments = values * (cdf ** (n - 1) - below ** (n - 1))
    above = np.concatenate((np.cumsum(increments[::-1])[::-1][1:], [0.0]))  # Σ over larger values
    per_value = values * cdf ** (n - 1) + above
    return value + top, n * (per_value[position] + top)


def _best_of_n_draw_values(o: _Outcomes, counts: np.ndarray) -> np.ndarray:
    return np.where(counts > 0, o.rewards, -np.inf).max(axis=1)


# ---------------------------------------------------------------------------
# best_of_n_selection: probability that the selected draw is the target (CAT App. B.3)


def _prepare_selection(o: _Outcomes) -> _Outcomes:
    if o.rewards is None or o.target is None:
        raise ValueError("strategy 'best_of_n_selection' needs rewards and target (the candidate)")
    return o


def _selection_exact(o: _Outcomes, n: int) -> tuple[float, np.ndarray]:
    """Sum over the trinomial (target, equal-reward others, lower) counts with no higher draw.

    With n_t target draws and n_e draws of other outcomes sharing its reward, the target is
    selected with probability n_t/(n_t + n_e) (uniform among the maximal draws). A forced
    vote adds one to the target's, an equal's or a lower count; a forced higher vote loses.
    O(N²) terms, in log space.
    """
    reward = o.rewards[o.target]
    others = np.arange(o.probs.size) != o.target
    equal = others & (o.rewards == reward)
    lower = o.rewards < reward
    p, e, q = o.probs[o.target], o.probs[equal].sum(), o.probs[lower].sum()

    def expectation(draws: int, share: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> float:
        n_t, n_e = np.meshgrid(np.arange(draws + 1), np.arange(draws + 1), indexing="ij")
        n_l = draws - n_t - n_e
        feasible = n_l >= 0
        n_l = np.where(feasible, n_l, 0)
        log_mass = (
            gammaln(draws + 1)
            - gammaln(n_t + 1)
            - gammaln(n_e + 1)
            - gammaln(n_l + 1)
            + xlogy(n_t, p)
            + xlogy(n_e, e)
            + xlogy(n_l, q)
        )
        with np.errstate(invalid="ignore", divide="ignore"):
            shares = np.nan_to_num(share(n_t, n_e))  # 0/0 (nothing maximal drawn) scores 0
        return float(np.sum(np.where(feasible, np.exp(log_mass) * shares, 0.0)))

    value = expectation(n, lambda n_t, n_e: n_t / (n_t + n_e))
    sensitivities = np.zeros(o.probs.size)  # a higher reward drawn: the target is never selected
    sensitivities[o.target] = n * expectation(n - 1, lambda n_t, n_e: (n_t + 1) / (n_t + 1 + n_e))
    sensitivities[equal] = n * expectation(n - 1, lambda n_t, n_e: n_t / (n_t + n_e + 1))
    sensitivities[lower] = n * expectation(n - 1, lambda n_t, n_e: n_t / (n_t + n_e))
    return value, sensitivities


def _selection_draw_values(o: _Outcomes, counts: np.ndarray) -> np.ndarray:
    reward = o.rewards[o.target]
    others = np.arange(o.probs.size) != o.target
    n_t = counts[:, o.target]
    n_e = counts[:, others & (o.rewards == reward)].sum(axis=1)
    none_higher = counts[:, o.rewards > reward].sum(axis=1) == 0
    return np.where(none_higher & (n_t > 0), n_t / np.maximum(n_t + n_e, 1), 0.0)


# ---------------------------------------------------------------------------
# Registry


@dataclass(frozen=True)
class _Strategy:
    prepare: Callable[[_Outcomes], _Outcomes]  # validate, fill defaults (target, masks)
    exact: Callable[[_Outcomes, int], tuple[float, np.ndarray]]  # (P, a)
    draw_values: Callable[[_Outcomes, np.ndarray], np.ndarray]  # value per row of counts (D, m)
    auto_exact: Callable[[int], bool]  # whether ``method="auto"`` runs ``exact`` at this N


STRATEGIES: Mapping[str, _Strategy] = {
    "pass": _Strategy(_prepare_pass, _pass_exact, _pass_draw_values, lambda n: True),
    "majority": _Strategy(
        _prepare_majority, _majority_exact, _majority_draw_values, lambda n: n <= AUTO_EXACT_MAJORITY_MAX_BUDGET
    ),
    "best_of_n": _Strategy(_prepare_best_of_n, _best_of_n_exact, _best_of_n_draw_values, lambda n: True),
    "best_of_n_selection": _Strategy(_prepare_selection, _selection_exact, _selection_draw_values, lambda n: True),
}

_METHODS = ("auto", "exact", "monte_carlo")


def _strategy(name: object) -> _Strategy:
    if name not in STRATEGIES:
        raise ValueError(f"strategy must be one of {sorted(STRATEGIES)}, got {name!r}")
    return STRATEGIES[name]


def _prepared(
    probs: ArrayLike,
    n: object,
    strategy: str,
    target: object,
    correct: ArrayLike | None,
    rewards: ArrayLike | None,
    votable: ArrayLike | None,
    ties: object = "uniform",
) -> tuple[_Strategy, _Outcomes, int]:
    rule = _strategy(strategy)
    budget = check_int(n, "n", minimum=1)
    ties = _check_ties(ties, strategy)
    return rule, rule.prepare(_outcomes(probs, target, correct, rewards, votable, ties)), budget


# ---------------------------------------------------------------------------
# Public API


@dataclass(frozen=True)
class MonteCarloSensitivities:
    """Monte Carlo a_j with their standard errors (common random draws for every j)."""

    values: np.ndarray
    standard_errors: np.ndarray
    num_draws: int


def strategy_value(
    probs: ArrayLike,
    n: int,
    strategy: str,
    *,
    target: int | None = None,
    correct: ArrayLike | None = None,
    rewards: ArrayLike | None = None,
    votable: ArrayLike | None = None,
    ties: Ties = "uniform",
) -> float:
    """Exact P(p) of ``strategy`` at budget n (win probability, or E[max reward] for best_of_n).

    Arguments as in ``forced_vote_sensitivities``. The majority DP takes a few seconds at
    N = 256 (see ``_majority_exact``).
    """
    rule, outcomes, budget = _prepared(probs, n, strategy, target, correct, rewards, votable, ties)
    return float(rule.exact(outcomes, budget)[0])


def _monte_carlo(
    rule: _Strategy, outcomes: _Outcomes, n: int, num_draws: object, seed: int | None
) -> MonteCarloSensitivities:
    num_draws = check_int(num_draws, "num_draws", minimum=2)
    counts = np.random.default_rng(seed).multinomial(n - 1, outcomes.probs, size=num_draws)
    means, errors = np.empty(outcomes.probs.size), np.empty(outcomes.probs.size)
    for j in range(outcomes.probs.size):
        counts[:, j] += 1  # the forced vote
        draws = rule.draw_values(outcomes, counts)
        counts[:, j] -= 1
        means[j] = draws.mean()
        errors[j] = draws.std(ddof=1) / math.sqrt(num_draws)
    return MonteCarloSensitivities(n * means, n * errors, num_draws)


def monte_carlo_sensitivities(
    probs: ArrayLike,
    n: int,
    strategy: str,
    *,
    target: int | None = None,
    correct: ArrayLike | None = None,
    rewards: ArrayLike | None = None,
    votable: ArrayLike | None = None,
    ties: Ties = "uniform",
    num_draws: int = DEFAULT_NUM_DRAWS,
    seed: int | None = DEFAULT_SEED,
) -> MonteCarloSensitivities:
    """a_j ≈ N · mean over ``num_draws`` samples of the N − 1 free draws of value(counts + e_j).

    CAT App. A.11's estimate (5000 draws, seed 42). The same draws serve every j (common
    random numbers, so differences a_t − a_j are less noisy than each a_j); standard errors
    are N·std/√draws (ddof = 1). Arguments as in ``forced_vote_sensitivities``.
    """
    rule, outcomes, budget = _prepared(probs, n, strategy, target, correct, rewards, votable, ties)
    return _monte_carlo(rule, outcomes, budget, num_draws, seed)


def _sensitivities(
    rule: _Strategy, outcomes: _Outcomes, n: int, method: str, num_draws: object, seed: int | None
) -> tuple[np.ndarray, str]:
    """(a, the method that ran): ``auto`` resolves to exact or Monte Carlo by the strategy's rule."""
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    if method == "exact" or (method == "auto" and rule.auto_exact(n)):
        return rule.exact(outcomes, n)[1], "exact"
    return _monte_carlo(rule, outcomes, n, num_draws, seed).values, "monte_carlo"


def forced_vote_sensitivities(
    probs: ArrayLike,
    n: int,
    strategy: str,
    *,
    target: int | None = None,
    correct: ArrayLike | None = None,
    rewards: ArrayLike | None = None,
    votable: ArrayLike | None = None,
    ties: Ties = "uniform",
    method: str = "auto",
    num_draws: int = DEFAULT_NUM_DRAWS,
    seed: int | None = DEFAULT_SEED,
) -> np.ndarray:
    """a_j = ∂P/∂p_j = N·E[value | one draw forced to j] for every outcome j (CAT eqs. 37, 65).

    probs: the distribution over outcomes (sums to 1 within 1e-9; renormalised). Per
    strategy: ``pass`` reads ``correct`` (or a one-hot ``target``); ``majority`` reads
    ``target`` (the gold class), ``votable`` (default all True) and ``ties`` (``"uniform"``:
    a tie with τ rivals scores 1/(1+τ), maj@k's convention; ``"strict"``: a tie loses,
    the CAT authors' convention; the module docstring); ``best_of_n`` reads ``rewards``;
    ``best_of_n_selection`` reads ``rewards`` and ``target``. ``ties`` other than
    ``"uniform"`` is an error for the strategies other than majority. ``method``:
    ``exact``, ``monte_carlo`` (``num_draws`` draws, ``seed``; CAT uses 5000 and 42) or
    ``auto`` (exact unless majority with N > ``AUTO_EXACT_MAJORITY_MAX_BUDGET``).
    """
    rule, outcomes, budget = _prepared(probs, n, strategy, target, correct, rewards, votable, ties)
    return _sensitivities(rule, outcomes, budget, method, num_draws, seed)[0]


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


# ---------------------------------------------------------------------------
# Pools


@dataclass(frozen=True)
class EmpiricalDistribution:
    """A prompt's pool as an outcome distribution: labels[j] has probability probs[j].

    For answer classes, votable[j] is False for the unparseable outcome (label None) and
    correct[j] marks the gold class; for reward values, rewards[j] = labels[j]. target is
    the gold class's index (None when it is not in the pool) or the top reward's index.
    sample_outcomes[i] is the outcome index of input sample i (for per-sample quantities
    such as the oracle advantage A*(y_i) = a_{outcome(i)} − N·P, docs/math.md §4).
    """

    labels: tuple
    probs: np.ndarray
    votable: np.ndarray
    correct: np.ndarray
    rewards: np.ndarray | None
    target: int | None
    sample_outcomes: np.ndarray


def _is_missing(label: object) -> bool:
    # pandas reads a missing class back as NaN (or pd.NA); both mean unparseable.
    return label is None or label is pd.NA or (isinstance(label, float) and math.isnan(label))


def class_distribution(answer_classes: Sequence[Hashable | None], gold_class: Hashable | None) -> EmpiricalDistribution:
    """Empirical distribution over answer classes; None (or NaN) is the unparseable outcome.

    Outcomes in order of first appearance. gold_class None, or absent from the pool,
    gives target None.
    """
    if len(answer_classes) == 0:
        raise ValueError("answer_classes must be non-empty")
    labels = [None if _is_missing(label) else label for label in answer_classes]
    order = list(dict.fromkeys(labels))
    index = {label: j for j, label in enumerate(order)}
    sample_outcomes = np.array([index[label] for label in labels])
    counts = np.bincount(sample_outcomes, minlength=len(order)).astype(np.float64)
    votable = np.array([label is not None for label in order])
    correct = np.array([label is not None and label == gold_class for label in order])
    target = int(np.flatnonzero(correct)[0]) if gold_class is not None and correct.any() else None
    return EmpiricalDistribution(tuple(order), counts / counts.sum(), votable, correct, None, target, sample_outcomes)


def reward_distribution(rewards: ArrayLike) -> EmpiricalDistribution:
    """Empirical distribution over the distinct reward values (ascending); target = the top one."""
    values = check_finite_vector(rewards, "rewards")
    distinct, sample_outcomes, counts = np.unique(values, return_inverse=True, return_counts=True)
    ones = np.ones(distinct.size, dtype=bool)
    return EmpiricalDistribution(
        tuple(distinct.tolist()), counts / counts.sum(), ones, ones.copy(), distinct, distinct.size - 1, sample_outcomes
    )


def _gold_from_pool(group: pd.DataFrame) -> tuple[Hashable | None, str | None]:
    rows = zip(group["answer_class"], group["correct"], strict=True)
    classes = {label for label, ok in rows if ok and not _is_missing(label)}
    if not classes:
        return None, "no_correct_sample"
    if len(classes) > 1:
        return None, "several_correct_classes"
    return classes.pop(), None


def _class_outcomes(group: pd.DataFrame, gold: Hashable | None) -> tuple[EmpiricalDistribution | None, str | None]:
    distribution = class_distribution(list(group["answer_class"]), gold)
    return (distribution, None) if distribution.target is not None else (None, "gold_absent")


def _reward_outcomes(group: pd.DataFrame, gold: Hashable | None) -> tuple[EmpiricalDistribution | None, str | None]:
    return reward_distribution(group["reward"].to_numpy(dtype=np.float64)), None


@dataclass(frozen=True)
class _PoolOutcomes:
    """How a strategy reads one prompt's rows: (rows, gold class) -> (distribution, or why none)."""

    build: Callable[[pd.DataFrame, Hashable | None], tuple[EmpiricalDistribution | None, str | None]]
    needs_gold: bool


#: Majority and pass vote over answer classes (target: the gold class); best_of_n runs over
#: reward values (target: the top reward).
POOL_STRATEGIES: Mapping[str, _PoolOutcomes] = {
    "pass": _PoolOutcomes(_class_outcomes, needs_gold=True),
    "majority": _PoolOutcomes(_class_outcomes, needs_gold=True),
    "best_of_n": _PoolOutcomes(_reward_outcomes, needs_gold=False),
}

_POOL_COLUMNS = [
    "prompt_id",
    "budget",
    "strategy",
    "num_samples",
    "num_outcomes",
    "p_target",
    "value",
    "a_target",
    "rivalry_correction",
    "exact_derivative",
    "efficiency",
    "paper_ratio",
    "method",
    "ties",
    "reason",
]


def _prompt_distribution(
    group: pd.DataFrame, prompt_id: Hashable, reader: _PoolOutcomes, gold_classes: Mapping | None
) -> tuple[EmpiricalDistribution | None, str | None]:
    gold, reason = None, None
    if reader.needs_gold and gold_classes is not None:
        gold, reason = gold_classes.get(prompt_id), None if prompt_id in gold_classes else "no_gold_class"
    elif reader.needs_gold:
        gold, reason = _gold_from_pool(group)
    if reason is not None:
        return None, reason
    distribution, reason = reader.build(group, gold)
    if distribution is not None and distribution.probs[distribution.target] >= 1.0:
        return distribution, "no_rival_mass"
    return distribution, reason


def pool_efficiencies(
    pool: pd.DataFrame,
    budgets: Sequence[int],
    strategy: str,
    gold_classes: Mapping[Hashable, Hashable] | None = None,
    *,
    ties: Ties = "uniform",
    method: str = "auto",
    num_draws: int = DEFAULT_NUM_DRAWS,
    seed: int | None = DEFAULT_SEED,
) -> pd.DataFrame:
    """Diagonal efficiency of every prompt of a pool at every budget: one row per prompt × budget.

    Each prompt's samples form its empirical distribution (``class_distribution`` or
    ``reward_distribution``). The gold class comes from ``gold_classes`` (prompt_id ->
    class) or, without it, from the ``correct`` column (the one class of the correct rows).
    Rows where the efficiency is undefined carry NaN and a ``reason`` (missing otherwise:
    None, or NaN under pandas' string dtype):
    ``no_gold_class`` (prompt missing from gold_classes), ``no_correct_sample``,
    ``several_correct_classes``, ``gold_absent`` (p_t = 0), ``no_rival_mass`` (p_t = 1:
    every sample is the target), ``zero_target_sensitivity`` (a_t = 0, efficiency NaN).
    Every Monte Carlo call uses ``seed``. ``ties`` is majority's tie convention; every row
    of a majority table names it in the ``ties`` column (None for the other strategies),
    so a table read later says which convention it shows.
    """
    if strategy not in POOL_STRATEGIES:
        raise ValueError(f"strategy must be one of {sorted(POOL_STRATEGIES)} for a pool, got {strategy!r}")
    missing = {"prompt_id", "answer_class", "correct", "reward"} - set(pool.columns)
    if missing:
        raise ValueError(f"pool is missing columns {sorted(missing)}")
    budgets = check_int_sequence(budgets, "budgets", minimum=1)
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    ties = _check_ties(ties, strategy)
    rule, reader = STRATEGIES[strategy], POOL_STRATEGIES[strategy]
    ties_shown = _ties_shown(rule, ties)

    records = []
    for prompt_id, group in pool.groupby("prompt_id", sort=True):
        distribution, reason = _prompt_distribution(group, prompt_id, reader, gold_classes)
        outcomes = None
        if reason is None:
            d = distribution
            outcomes = rule.prepare(_Outcomes(d.probs, d.target, d.correct, d.rewards, d.votable, ties))
        for budget in budgets:
            row = dict.fromkeys(_POOL_COLUMNS, math.nan)
            row.update(prompt_id=prompt_id, budget=budget, strategy=strategy, num_samples=len(group))
            row.update(method=None, ties=ties_shown, reason=reason)
            if distribution is not None:
                row.update(num_outcomes=distribution.probs.size, p_target=distribution.probs[distribution.target])
            if outcomes is not None:
                result = _efficiency(rule, outcomes, budget, method, num_draws, seed)
                row.update(
                    value=result.value,
                    a_target=result.a_target,
                    rivalry_correction=result.rivalry_correction,
                    exact_derivative=result.exact_derivative,
                    efficiency=result.efficiency,
                    paper_ratio=result.paper_ratio,
                    method=result.method,
                )
                if result.a_target == 0:
                    row["reason"] = "zero_target_sensitivity"
            records.append(row)
    return pd.DataFrame.from_records(records, columns=_POOL_COLUMNS)
