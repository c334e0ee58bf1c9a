"""TEA and Prefix-TEA: constants, hand-computed scores, and bias on Gaussian rewards (docs/math.md §3).

Monte Carlo setting (TEA App. E): one prompt with reward R ~ N(μ, σ²) at μ = 0,
σ = 1, parameters θ = (μ, log σ), score S(r) = (r, r² − 1). The best-of-N surrogate
is μ + σ e_N, so the target of (1/α)·E[(1/n) Σ A_i S_i] is (1, e_N).
"""

from __future__ import annotations

import math
from functools import cache

import mpmath
import pytest
import torch

from aligntrain.advantages import compute_advantages, expected_max_standard_normal, parse_rule, tail_constants
from aligntrain.advantages.tea import TEA, prefix_cancellation_weights

ALPHA = 0.25
N_TARGET = 128
#: working precision of the mpmath references (set per call, not globally)
DIGITS = 30


def mp_expected_max(n: int) -> float:
    """e_N by 30-digit quadrature in mpmath (an independent reference)."""
    with mpmath.workdps(DIGITS):
        phi = lambda x: mpmath.exp(-x * x / 2) / mpmath.sqrt(2 * mpmath.pi)  # noqa: E731
        integrand = lambda x: x * n * phi(x) * mpmath.ncdf(x) ** (n - 1)  # noqa: E731
        return float(mpmath.quad(integrand, [-mpmath.inf, 0, 2, 4, mpmath.inf]))


def population_tail_gradient(alpha: float, budget: int, positive_part: bool) -> tuple[float, float]:
    """(1/α) ∫_q^∞ g(r) S(r) φ(r) dr at the population tail vector of N(0, 1), by mpmath quadrature.

    q = Φ^{−1}(1 − α), m = φ(q)/α, s² = 1 + q m − m², κ = (e_N − m)/s (all computed here).
    """
    with mpmath.workdps(DIGITS):
        q = -mpmath.sqrt(2) * mpmath.erfinv(2 * alpha - 1)  # Φ^{−1}(1 − α)
        density = lambda r: mpmath.exp(-r * r / 2) / mpmath.sqrt(2 * mpmath.pi)  # noqa: E731
        m = density(q) / alpha
        s = mpmath.sqrt(1 + q * m - m * m)
        kappa = (mp_expected_max(budget) - m) / s
        raw = lambda r: (r - q) + kappa / (2 * s) * ((r - m) ** 2 - (q - m) ** 2)  # noqa: E731
        g = (lambda r: max(raw(r), 0)) if positive_part else raw
        # g⁺ has a kink where g crosses 0: split the integral there
        cross = mpmath.findroot(raw, q + 1)
        pieces = [q, cross, mpmath.inf] if cross > q else [q, mpmath.inf]
        d_mu = mpmath.quad(lambda r: g(r) * r * density(r), pieces) / alpha
        d_log_sigma = mpmath.quad(lambda r: g(r) * (r * r - 1) * density(r), pieces) / alpha
        return float(d_mu), float(d_log_sigma)


# --------------------------------------------------------------------------- constants


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (1, 0.0),
        (2, 1 / math.sqrt(math.pi)),
        (3, 3 / (2 * math.sqrt(math.pi))),
        (4, 6 * math.atan(math.sqrt(2)) / math.pi**1.5),
    ],
)
def test_expected_max_matches_closed_forms(n, expected):
    assert expected_max_standard_normal(n) == pytest.approx(expected, abs=1e-11)


@pytest.mark.parametrize("n", [16, 128, 512, 10_000])
def test_expected_max_matches_high_precision_quadrature(n):
    assert expected_max_standard_normal(n) == pytest.approx(mp_expected_max(n), rel=1e-9)


def test_raw_tail_score_is_exactly_the_surrogate_gradient_at_the_population_tail():
    """(1/α) E[g S] = ∇(μ + σ e_N) = (1, e_N): checks κ, λ and g together (TEA Lemma 2)."""
    d_mu, d_log_sigma = population_tail_gradient(ALPHA, N_TARGET, positive_part=False)
    assert (d_mu, d_log_sigma) == pytest.approx((1.0, mp_expected_max(N_TARGET)), abs=1e-9)
    assert tail_constants(ALPHA, N_TARGET).kappa == pytest.approx(2.6923984652, abs=1e-8)


def test_positive_part_has_the_documented_population_bias():
    """docs/math.md §3: the population limit of (1/α)E[g⁺ S] is (1.241, 2.627), not (1, 2.595)."""
    assert population_tail_gradient(ALPHA, N_TARGET, positive_part=True) == pytest.approx((1.2413, 2.6267), abs=1e-4)


# --------------------------------------------------------------------------- hand-computed scores


def test_tea_two_sample_tail_hand_values():
    """n = 8, α = 1/4: tail (8, 6), q̂ = 6, m̂ = 7, ŝ = 1; g(8) = 2 + κ/2·(1 − 1) = 2, any κ."""
    rewards = torch.tensor([[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0]], dtype=torch.float64)
    raw = compute_advantages("tea", rewards, positive_part=False, center=False)
    torch.testing.assert_close(raw, torch.tensor([[0.0] * 7 + [2.0]], dtype=torch.float64))
    default = compute_advantages("tea", rewards)
    torch.testing.assert_close(default, torch.tensor([[-0.25] * 7 + [1.75]], dtype=torch.float64))


def test_tea_positive_part_cuts_the_negative_tail_scores():
    """n = 12: tail (10, 7, 4), q̂ = 4, m̂ = 7, ŝ = √6; g(10) = 6, g(7) = 3 − 9κ/(2√6) < 0 for N = 128."""
    rewards = torch.tensor([[0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5, 3.5, 1.5, 4.0, 7.0, 10.0]], dtype=torch.float64)
    e_n = mp_expected_max(N_TARGET)
    q = 0.6744897501960817  # Φ^{−1}(0.75)
    lam = math.exp(-q * q / 2) / math.sqrt(2 * math.pi) / ALPHA
    kappa = (e_n - lam) / math.sqrt(1 + q * lam - lam * lam)
    g7 = 3 - 9 * kappa / (2 * math.sqrt(6))
    assert g7 < 0
    raw = compute_advantages("tea", rewards, positive_part=False, center=False)
    torch.testing.assert_close(raw, torch.tensor([[0.0] * 10 + [g7, 6.0]], dtype=torch.float64))
    stabilised = compute_advantages("tea", rewards)
    torch.testing.assert_close(stabilised, torch.tensor([[-0.5] * 11 + [5.5]], dtype=torch.float64))


def test_equal_rewards_give_zero_tea_scores():
    rewards = torch.full((3, 16), 0.7)
    for rule in ("tea", "prefix_tea"):
        for positive_part in (True, False):
            assert (compute_advantages(rule, rewards, positive_part=positive_part) == 0).all()


def test_prefix_cancellation_weights():
    assert prefix_cancellation_weights((32, 64)) == (-1.0, 2.0)
    weights = prefix_cancellation_weights((16, 32, 64))
    assert weights == pytest.approx((1 / 3, -2.0, 8 / 3))
    for power in (1, 2):  # Σ w_ℓ n_ℓ^{−j} = 0 for j = 1, 2
        assert sum(w / size**power for w, size in zip(weights, (16, 32, 64))) == pytest.approx(0.0, abs=1e-15)


def test_prefix_tea_combines_prefix_scores_with_weights_and_scaling():
    """A = Σ_ℓ w_ℓ (n/n_ℓ) g⁺⁽ℓ⁾ on the first n_ℓ rollouts, then centred (TEA eq. 18)."""
    rewards = torch.randn(5, 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    first_half = compute_advantages("tea", rewards[:, :8], center=False)
    full = compute_advantages("tea", rewards, center=False)
    combined = 2.0 * full
    combined[:, :8] += -1.0 * (16 / 8) * first_half
    expected = combined - combined.mean(dim=1, keepdim=True)
    torch.testing.assert_close(compute_advantages("prefix_tea", rewards, prefixes=(8, 16)), expected)
    torch.testing.assert_close(compute_advantages("prefix_tea", rewards), expected)  # default (n/2, n)


# --------------------------------------------------------------------------- Monte Carlo bias


@cache
def monte_carlo(rule: str, n: int, groups: int, **options) -> tuple[torch.Tensor, torch.Tensor]:
    """(1/α)·(1/n)Σ A_i S_i averaged over ``groups`` N(0,1) groups: (mean, standard error)."""
    rewards = torch.randn(groups, n, generator=torch.Generator().manual_seed(20260 + n), dtype=torch.float64)
    advantages = compute_advantages(rule, rewards, **options)
    score = torch.stack([rewards, rewards**2 - 1], dim=-1)
    per_group = (advantages.unsqueeze(-1) * score).mean(dim=1) / ALPHA
    return per_group.mean(dim=0), per_group.std(dim=0) / math.sqrt(groups)


def truth() -> torch.Tensor:
    return torch.tensor([1.0, mp_expected_max(N_TARGET)], dtype=torch.float64)


RAW = {"positive_part": False, "center": False}
#: groups per Monte Carlo run, chosen for standard errors ≈ 0.5% of the target
GROUPS = {64: 20_000, 256: 8_000, 1024: 2_000}


def test_raw_tea_converges_to_the_surrogate_gradient():
    errors = {}
    for n in (64, 256, 1024):
        mean, se = monte_carlo("tea", n, GROUPS[n], **RAW)
        errors[n] = (mean - truth()) / truth()
        se_rel = se / truth()
        if n == 1024:
            assert (errors[n].abs() < 4 * se_rel + 0.01).all(), errors[n]
    # the O(1/n) plug-in shrinkage: negative and large at n = 64, about 4× smaller at n = 256
    assert (errors[64] < -0.08).all() and (errors[64] > -0.25).all(), errors[64]
    assert (errors[256].abs() < errors[64].abs() / 2).all(), (errors[64], errors[256])
    assert errors[1024].norm() < errors[256].norm()


def test_raw_prefix_tea_has_lower_bias_than_raw_tea_at_n_64():
    """Relative bias ‖E − ∇‖/‖∇‖: about 18% for TEA, 5–7% for Prefix-TEA (32, 64) (docs/math.md §3)."""
    tea_mean, _ = monte_carlo("tea", 64, GROUPS[64], **RAW)
    prefix_mean, _ = monte_carlo("prefix_tea", 64, GROUPS[64], prefixes=(32, 64), **RAW)
    tea_bias = ((tea_mean - truth()).norm() / truth().norm()).item()
    prefix_bias = ((prefix_mean - truth()).norm() / truth().norm()).item()
    assert tea_bias > 0.15, tea_bias
    assert prefix_bias < tea_bias / 2, (tea_bias, prefix_bias)


def test_raw_prefix_tea_pays_with_variance():
    _, tea_se = monte_carlo("tea", 64, GROUPS[64], **RAW)
    _, prefix_se = monte_carlo("prefix_tea", 64, GROUPS[64], prefixes=(32, 64), **RAW)
    assert (prefix_se > 1.2 * tea_se).all()


@pytest.mark.parametrize("rule", ["tea", "prefix_tea"])
def test_stabilised_default_converges_to_the_biased_population_limit(rule):
    """Positive part + centring: (1/α)E → (1.241, 2.627) ≠ (1, 2.595); the ∂μ bias does not vanish."""
    limit = torch.tensor(population_tail_gradient(ALPHA, N_TARGET, positive_part=True), dtype=torch.float64)
    mean, se = monte_carlo(rule, 1024, GROUPS[1024])
    assert ((mean - limit).abs() < 4 * se + 0.01 * limit).all(), (mean, limit)
    assert mean[0] > 1.15  # 15%+ above the true ∂μ = 1, at the largest n


@pytest.mark.parametrize("name", ["tea", "prefix_tea"])
def test_a_tail_of_one_rollout_is_refused_because_every_advantage_would_be_zero(name):
    rule = parse_rule(name, {"alpha": 0.25, "budget": 16})
    rewards = torch.tensor([[0.1, -0.3, 0.25, 0.05]])
    # What the check prevents: with ⌈α n⌉ = 1 the shaped reward is 0 for every rollout.
    assert torch.equal(TEA(alpha=0.25, budget=16).advantages(rewards, None), torch.zeros_like(rewards))
    with pytest.raises(ValueError, match=r"the tail holds ⌈α n⌉ = 1 rollout .* every advantage would be 0"):
        rule.check_fits(group_size=4)
    if name == "tea":
        rule.check_fits(group_size=8)  # ⌈0.25 · 8⌉ = 2
        parse_rule(name, {"alpha": 0.5, "budget": 16}).check_fits(group_size=4)


def test_prefix_tea_refuses_a_prefix_whose_tail_holds_one_rollout():
    """n = 8, α = 0.25: the n/2 = 4 prefix's tail is one rollout, so Prefix-TEA would be exactly 2·TEA."""
    rule = parse_rule("prefix_tea", {"alpha": 0.25, "budget": 64})
    rewards = torch.randn(5, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    # What the check prevents: weights (−1, 2) for prefixes (4, 8), the first contributing 0.
    doubled = rule.advantages(rewards, None)
    torch.testing.assert_close(doubled, 2 * TEA(alpha=0.25, budget=64).advantages(rewards, None))
    with pytest.raises(ValueError, match=r"prefix n_ℓ = 4 of \(4, 8\) has a tail of ⌈α n_ℓ⌉ = 1 rollout"):
        rule.check_fits(group_size=8)
    rule.check_fits(group_size=16)  # prefixes (8, 16): tails of 2 and 4
    parse_rule("prefix_tea", {"alpha": 0.5, "budget": 64}).check_fits(group_size=8)  # tails of 2 and 4
    with pytest.raises(ValueError, match=r"prefix n_ℓ = 3 of \(3, 12\)"):
        parse_rule("prefix_tea", {"alpha": 0.25, "budget": 64, "prefixes": (3, 12)}).check_fits(group_size=12)
