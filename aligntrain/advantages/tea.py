"""Tail-Extrapolated Advantage: TEA and Prefix-TEA (TEA §2–4, App. B.1, D.5; docs/math.md §3).

Under a Gaussian upper tail, best-of-N value V_N ≈ m + κ_N s, with (q, m, s) the
threshold, mean and standard deviation of the top-α tail (TEA Lemma 1). For the
*raw* tail-shaped reward g at the population tail vector,
``(1/α) E[g(R) S] = ∇(m + κ_N s)`` exactly (TEA Lemma 2), which for a Gaussian
reward is ∇(μ + σ e_N). The rules return the paper's scale, without the 1/α:
``E[(1/n) Σ A_i S_i] ≈ α ∇V_N`` — TEA is not on the unbiased scale convention.

Bias [docs/math.md §3, measured]: the stabilised default (positive part g⁺, then
centring) has a bias that does not vanish with n (α = 0.25, N = 128, Gaussian:
(1/α)E[g⁺ S] → (1.241, 2.627) for (∂μ, ∂log σ) against the true (1, 2.595));
the raw form (``positive_part=False``) is consistent, with an O(1/n) plug-in
shrinkage that Prefix-TEA's extrapolation cancels to higher order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cache, lru_cache

import numpy as np
import torch
from pydantic import Field, StrictBool, StrictInt, field_validator
from torch import Tensor

from aligntrain.advantages.registry import RuleContext, RuleOptions, is_int, register_rule
from aligntrain.options import Real

#: below this empirical tail scale the quadratic (scale) term is dropped (docs/math.md §3)
MIN_TAIL_SCALE = 1e-8


@cache
def expected_max_standard_normal(n: int) -> float:
    """e_N = E[max of N iid N(0, 1)] = ∫ x N φ(x) Φ(x)^{N−1} dx, by adaptive quadrature.

    Φ^{N−1} is evaluated as exp((N−1) log Φ) for large N; the integrand is negligible
    outside [−12, 12 + √(2 log N)] and peaks near √(2 log N) (a hint to the quadrature).
    """
    # scipy is imported where it is used: every stage validates its parameters through the rule
    # registry, and importing scipy's modules at the top cost each stage's start about a second.
    from scipy import integrate, special

    if not is_int(n) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    peak = math.sqrt(2.0 * math.log(n)) if n > 1 else 0.0

    def integrand(x: float) -> float:
        return x * n * math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi) * math.exp((n - 1) * special.log_ndtr(x))

    value, _ = integrate.quad(integrand, -12.0, 12.0 + peak, points=[peak], limit=200, epsabs=1e-13, epsrel=1e-12)
    return float(value)


@dataclass(frozen=True)
class TailConstants:
    """Constants of the Gaussian-tail surrogate for tail mass α and budget N (docs/math.md §3)."""

    z: float  #: Φ^{−1}(1 − α)
    lam: float  #: λ = φ(z)/α, the standardised tail mean
    e_n: float  #: E[max of N iid N(0, 1)]
    kappa: float  #: κ_N = (e_N − λ)/√(1 + zλ − λ²)


@lru_cache(maxsize=256)
def tail_constants(alpha: float, budget: int) -> TailConstants:
    from scipy import stats  # where it is used (see expected_max_standard_normal)

    z = float(stats.norm.isf(alpha))
    lam = float(np.exp(stats.norm.logpdf(z)) / alpha)
    e_n = expected_max_standard_normal(budget)
    return TailConstants(z=z, lam=lam, e_n=e_n, kappa=(e_n - lam) / math.sqrt(1.0 + z * lam - lam * lam))


def tail_count(alpha: float, n: int) -> int:
    """k = ⌈α n⌉, at least 1; a 1e−9 slack keeps α n = 3.0000000000000004 at 3."""
    return min(n, max(1, math.ceil(alpha * n - 1e-9)))


def tail_shaped_reward(rewards: Tensor, alpha: float, kappa: float) -> Tensor:
    """g(r_i) from the group's own empirical tail (TEA eqs. 8, 10, 15; docs/math.md §3).

    (q̂, m̂, ŝ) = smallest, mean and standard deviation (ddof = 0) of the ⌈αn⌉
    largest rewards; g(r) = 1{r ≥ q̂}·[(r − q̂) + κ/(2ŝ)·((r − m̂)² − (q̂ − m̂)²)],
    without the quadratic term when ŝ < 1e−8. Ties at q̂ are harmless: g(q̂) = 0.
    """
    top = rewards.topk(tail_count(alpha, rewards.shape[1]), dim=1).values
    threshold = top[:, -1:]
    tail_mean = top.mean(dim=1, keepdim=True)
    tail_scale = top.std(dim=1, correction=0, keepdim=True)
    has_scale = tail_scale >= MIN_TAIL_SCALE
    curvature = torch.where(has_scale, kappa / (2.0 * tail_scale.clamp(min=MIN_TAIL_SCALE)), 0.0)
    shaped = (rewards - threshold) + curvature * ((rewards - tail_mean) ** 2 - (threshold - tail_mean) ** 2)
    return torch.where(rewards >= threshold, shaped, torch.zeros_like(rewards))


def _stabilise(scores: Tensor, positive_part: bool) -> Tensor:
    return scores.clamp(min=0.0) if positive_part else scores


def _center(advantages: Tensor, center: bool) -> Tensor:
    return advantages - advantages.mean(dim=1, keepdim=True) if center else advantages


@register_rule
class TEA(RuleOptions):
    """TEA: A_i = g⁺(r_i) − mean_j g⁺(r_j) (TEA eq. 16); ≈ α∇(m + κ_N s), biased (see module doc).

    ``positive_part=False`` keeps the raw g (TEA eq. 15), the consistent form;
    ``center=False`` skips the group centring (the paper's estimator eq. 11 has none).
    """

    name = "tea"
    alpha: Real = Field(0.25, gt=0, lt=1, description="Tail mass α: the top α of each group shapes the reward.")
    budget: StrictInt = Field(128, ge=1, description="Test-time budget N of best-of-N (κ_N).")
    positive_part: StrictBool = Field(True, description="Use g⁺ = max(g, 0) (TEA eq. 16) instead of the raw g.")
    center: StrictBool = Field(True, description="Subtract the group mean of the shaped rewards.")

    def check_group_size(self, group_size: int) -> None:
        # A tail of one rollout has q̂ = its reward: g is 0 for every rollout, so the rule would train nothing.
        if tail_count(self.alpha, group_size) < 2:
            raise ValueError(
                f"the tail holds ⌈α n⌉ = {tail_count(self.alpha, group_size)} rollout with alpha = {self.alpha} and "
                f"n = {group_size}: every advantage would be 0; raise alpha or the group size (α n > 1)"
            )

    def advantages(self, rewards: Tensor, context: RuleContext) -> Tensor:
        kappa = tail_constants(self.alpha, self.budget).kappa
        scores = _stabilise(tail_shaped_reward(rewards, self.alpha, kappa), self.positive_part)
        return _center(scores, self.center)


def prefix_cancellation_weights(prefixes: Sequence[int]) -> tuple[float, ...]:
    """w_ℓ = Π_{j≠ℓ} n_ℓ/(n_ℓ − n_j): Σ w_ℓ = 1, Σ w_ℓ n_ℓ^{−j} = 0 for j < L (docs/math.md §3).

    Lagrange extrapolation of the prefix estimates to 1/n = 0; (32, 64) → (−1, 2).
    Computed with exact fractions.
    """
    weights = []
    for ell, size in enumerate(prefixes):
        weight = Fraction(1)
        for other_index, other in enumerate(prefixes):
            if other_index != ell:
                weight *= Fraction(size, size - other)
        weights.append(float(weight))
    return tuple(weights)


def default_prefixes(n: int) -> tuple[int, int]:
    """(n/2, n), the paper's instance (TEA App. B.1: (32, 64) for n = 64)."""
    return (n // 2, n)


@register_rule
class PrefixTEA(TEA):
    """Prefix-TEA: Σ_ℓ w_ℓ (n/n_ℓ) g⁺⁽ℓ⁾(r_i) 1{i ≤ n_ℓ}, centred (TEA eq. 18, D.5); lower bias for raw g only.

    g⁽ℓ⁾ uses the tail statistics of the first n_ℓ rewards; the positive part is
    taken per prefix before combining (TEA eq. 18). The bias cancellation needs
    α n_ℓ to share its fractional part across prefixes (e.g. α = 0.25 with every
    n_ℓ a multiple of 4); this is not enforced.
    """

    name = "prefix_tea"
    prefixes: tuple[StrictInt, ...] | None = Field(
        None,
        description="Prefix sizes n_1 < ... < n_L = n (L >= 2, n_1 >= 2); None: (n/2, n) (TEA App. B.1).",
    )

    @field_validator("prefixes")
    @classmethod
    def _increasing(cls, prefixes: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if prefixes is not None and (
            len(prefixes) < 2 or prefixes[0] < 2 or any(b <= a for a, b in zip(prefixes, prefixes[1:]))
        ):
            raise ValueError(f"prefixes must be >= 2 strictly increasing integers, the first >= 2, got {prefixes}")
        return prefixes

    def check_group_size(self, group_size: int) -> None:
        if self.prefixes is None and group_size < 4:
            raise ValueError(f"option prefixes defaults to (n/2, n), which needs n >= 4 (n = {group_size})")
        if self.prefixes is not None and self.prefixes[-1] != group_size:
            raise ValueError(f"option prefixes must end at the group size n = {group_size}, got {self.prefixes}")
        super().check_group_size(group_size)
        # A prefix whose tail holds one rollout contributes 0, and the extrapolation weights then
        # only rescale the other prefixes: with (n/2, n) and weights (−1, 2) the rule is 2 × TEA.
        sizes = self.prefixes if self.prefixes is not None else default_prefixes(group_size)
        for size in sizes:
            if tail_count(self.alpha, size) < 2:
                raise ValueError(
                    f"prefix n_ℓ = {size} of {tuple(sizes)} has a tail of ⌈α n_ℓ⌉ = {tail_count(self.alpha, size)} "
                    f"rollout with alpha = {self.alpha}: its shaped rewards are 0 and Prefix-TEA would be a rescaled "
                    "TEA; raise alpha, the group size or the smallest prefix (α n_ℓ > 1)"
                )

    def advantages(self, rewards: Tensor, context: RuleContext) -> Tensor:
        n = rewards.shape[1]
        sizes = self.prefixes if self.prefixes is not None else default_prefixes(n)
        kappa = tail_constants(self.alpha, self.budget).kappa
        combined = torch.zeros_like(rewards)
        for size, weight in zip(sizes, prefix_cancellation_weights(sizes)):
            scores = _stabilise(tail_shaped_reward(rewards[:, :size], self.alpha, kappa), self.positive_part)
            combined[:, :size] += (weight * n / size) * scores
        return _center(combined, self.center)
