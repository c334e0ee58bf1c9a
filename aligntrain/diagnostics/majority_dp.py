"""The exact majority-vote polynomial and its partial derivatives, by dynamic programming.

Plurality vote's value P(p) over N iid draws, and every a_j = ∂P/∂p_j, computed
exactly (``majority_exact``) rather than by Monte Carlo: a DP over the gold class's
final vote count, with the rivals' joint count masses combined by binomial
convolution and majority's tie weight 1/(1+τ) integrated by Gauss–Legendre
quadrature. ``aligntrain.diagnostics.forced_vote`` calls it for the strategy
``majority`` (either tie convention); the derivation is docs/math.md §4.1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = ["MAJORITY_EXACT_MAX_BUDGET", "majority_exact"]

#: The exact majority DP counts in float64 with binomial coefficients C(n, m) <= 2^n.
MAJORITY_EXACT_MAX_BUDGET = 1000


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


def majority_exact(
    probs: np.ndarray, gold: int, votable: np.ndarray, n: int, *, strict: bool
) -> tuple[float, np.ndarray]:
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

    ``probs``: the distribution (validated by the caller); ``gold``: the gold class's
    index; ``votable``: False for the outcomes that never win (votable[gold] True);
    ``strict``: the strict tie convention, else uniform. Returns (P, a).
    """
    if n > MAJORITY_EXACT_MAX_BUDGET:
        raise ValueError(f"n must be <= {MAJORITY_EXACT_MAX_BUDGET} for the exact majority method, got {n}")
    is_rival = votable.copy()
    is_rival[gold] = False
    rival_probs, rival_group, group_sizes = np.unique(probs[is_rival], return_inverse=True, return_counts=True)
    unvotable_mass = float(probs[~votable].sum())
    gold_prob = float(probs[gold])
    num_rivals = int(is_rival.sum())
    binom = _binomial_table(n + 1)

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
