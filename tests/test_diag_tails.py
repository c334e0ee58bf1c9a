"""QQ tail fit (docs/math.md §4; TEA Table 14) against independent references.

References: exact normal quantiles (R² = 1), 50-digit Decimal least squares with
mpmath quantiles, a closed form for the uniform tail's limiting R², hand values
for the summary.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import mpmath
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aligntrain.diagnostics.tails import (
    MIN_TAIL_POINTS,
    plot_qq_tails,
    pool_tail_fits,
    qq_tail_fit,
    qq_tail_r2,
    summarize_tail_fits,
)

DIGITS = 50


def mp_normal_quantile(u: mpmath.mpf) -> mpmath.mpf:
    """Φ^{−1}(u) = −√2 erfc^{−1}(2u), at the current mpmath precision."""
    return -mpmath.sqrt(2) * mpmath.erfinv(1 - 2 * u)


def decimal_tail_r2(rewards: list[str], tail_points: int) -> Decimal:
    """R² of the top ``tail_points`` order statistics on Φ^{−1}((i − 0.5)/M), in 50-digit Decimal.

    Raw-sum normal equations (slope = (kΣxy − ΣxΣy)/(kΣx² − (Σx)²)), then
    R² = 1 − SSE/SST: a different route from the code's centred sums.
    """
    values = sorted(Decimal(r) for r in rewards)
    total = len(values)
    with mpmath.workdps(DIGITS + 10), localcontext() as context:
        context.prec = DIGITS
        ranks = range(total - tail_points + 1, total + 1)
        positions = [(mpmath.mpf(i) - mpmath.mpf("0.5")) / total for i in ranks]
        xs = [Decimal(mpmath.nstr(mp_normal_quantile(u), DIGITS)) for u in positions]
        ys = values[total - tail_points :]
        k = Decimal(tail_points)
        sx, sy = sum(xs), sum(ys)
        sxx = sum(x * x for x in xs)
        sxy = sum(x * y for x, y in zip(xs, ys))
        slope = (k * sxy - sx * sy) / (k * sxx - sx * sx)
        intercept = (sy - slope * sx) / k
        sse = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys))
        mean_y = sy / k
        sst = sum((y - mean_y) ** 2 for y in ys)
        return 1 - sse / sst


def uniform_tail_r2_limit(alpha: str) -> float:
    """lim_{M→∞} R² for rewards at the uniform quantiles: corr²(U, Φ^{−1}(U)), U ~ Unif(1 − α, 1).

    With q = Φ^{−1}(1 − α), Z = Φ^{−1}(U) is N(0, 1) truncated to (q, ∞):
    E Z = φ(q)/α, E Z² = 1 + q φ(q)/α, and
    E[UZ] = (1/α) ∫_q^∞ Φ(t) t φ(t) dt = (φ(q)Φ(q) + erfc(q)/(4√π))/α
    (integrate by parts, φ² = e^{−t²}/(2π)); E U = 1 − α/2, Var U = α²/12.
    """
    with mpmath.workdps(DIGITS):
        a = mpmath.mpf(alpha)
        q = mp_normal_quantile(1 - a)
        density, cdf = mpmath.npdf(q), mpmath.ncdf(q)
        mean_z = density / a
        var_z = 1 + q * density / a - mean_z**2
        mean_uz = (density * cdf + mpmath.erfc(q) / (4 * mpmath.sqrt(mpmath.pi))) / a
        cov = mean_uz - (1 - a / 2) * mean_z
        return float(cov**2 / (a**2 / 12 * var_z))


def normal_scores(total: int) -> np.ndarray:
    with mpmath.workdps(30):
        positions = [(mpmath.mpf(i) - mpmath.mpf("0.5")) / total for i in range(1, total + 1)]
        return np.array([float(mp_normal_quantile(u)) for u in positions])


# --------------------------------------------------------------------------- R²


@pytest.mark.parametrize(
    ("mu", "sigma", "total", "alpha"), [(0.0, 1.0, 200, 0.25), (-3.5, 0.2, 64, 0.1), (7.0, 40.0, 37, 1.0)]
)
def test_exact_normal_quantiles_fit_perfectly(mu, sigma, total, alpha):
    rewards = np.random.default_rng(0).permutation(mu + sigma * normal_scores(total))
    fit = qq_tail_fit(rewards, alpha)
    assert fit.r2 == pytest.approx(1.0, abs=1e-12)
    assert fit.slope == pytest.approx(sigma, rel=1e-9)
    assert fit.intercept == pytest.approx(mu, abs=1e-9 * max(1.0, sigma))
    assert fit.tail_points == math.ceil(alpha * total) and fit.num_samples == total


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    total=st.integers(30, 300),
    scale=st.floats(1e-2, 1e2),
    shift=st.floats(-1e2, 1e2),
    alpha=st.sampled_from([0.1, 0.25, 0.5, 1.0]),
)
def test_r2_is_invariant_to_increasing_affine_maps(seed, total, scale, shift, alpha):
    rewards = np.random.default_rng(seed).standard_t(3, size=total)
    assert qq_tail_r2(scale * rewards + shift, alpha) == pytest.approx(qq_tail_r2(rewards, alpha), abs=1e-9)


HAND_POOL = ["0.3", "-1.2", "2.75", "0.9", "1.4", "-0.05", "3.1", "0.61", "2.2", "1.05", "-2.4", "4.8"]


@pytest.mark.parametrize(("alpha", "tail_points"), [(0.25, 3), (0.5, 6), (1.0, 12)])
def test_r2_matches_decimal_least_squares_on_a_hand_pool(alpha, tail_points):
    expected = decimal_tail_r2(HAND_POOL, tail_points)
    fit = qq_tail_fit([float(r) for r in HAND_POOL], alpha)
    assert fit.tail_points == tail_points
    assert fit.r2 == pytest.approx(float(expected), rel=1e-12)
    assert 0.0 < fit.r2 < 1.0


def test_uniform_tail_closed_form_matches_quadrature():
    """The derivation of ``uniform_tail_r2_limit`` against direct quadrature of the moments over u."""
    alpha = mpmath.mpf("0.25")
    with mpmath.workdps(30):
        lower = 1 - alpha
        moment = lambda f: mpmath.quad(f, [lower, 1]) / alpha  # noqa: E731
        mean_u, mean_z = moment(lambda u: u), moment(mp_normal_quantile)
        mean_z2 = moment(lambda u: mp_normal_quantile(u) ** 2)
        mean_uz = moment(lambda u: u * mp_normal_quantile(u))
        var_u = moment(lambda u: u * u) - mean_u**2
        r2 = (mean_uz - mean_u * mean_z) ** 2 / (var_u * (mean_z2 - mean_z**2))
    assert uniform_tail_r2_limit("0.25") == pytest.approx(float(r2), rel=1e-12)


def test_uniform_tail_r2_reaches_its_known_limit():
    """Rewards at the uniform quantiles (i − 0.5)/M: R² → 0.866335 for α = 0.25 (not 1: a light tail)."""
    limit = uniform_tail_r2_limit("0.25")
    assert limit == pytest.approx(0.8663347368, abs=1e-10)
    total = 100_000
    rewards = (np.arange(1, total + 1) - 0.5) / total
    assert qq_tail_r2(rewards, 0.25) == pytest.approx(limit, abs=1e-4)
    small = [repr((i - 0.5) / 40) for i in range(1, 41)]  # M = 40: the 10-point tail in Decimal
    assert qq_tail_r2([float(r) for r in small], 0.25) == pytest.approx(float(decimal_tail_r2(small, 10)), rel=1e-12)


# --------------------------------------------------------------------------- undefined fits and bad input


def test_r2_is_nan_below_three_tail_points_and_defined_from_three():
    rewards = np.linspace(0.0, 1.0, 9) ** 2
    assert MIN_TAIL_POINTS == 3
    assert math.isnan(qq_tail_r2(rewards[:8], 0.25))  # ⌈0.25·8⌉ = 2 points
    assert not math.isnan(qq_tail_r2(rewards, 0.25))  # ⌈0.25·9⌉ = 3 points
    assert math.isnan(qq_tail_r2([1.0], 1.0))


def test_r2_is_nan_for_a_constant_tail():
    binary = [0.0] * 6 + [1.0] * 6  # the top quarter is all ones
    fit = qq_tail_fit(binary, 0.25)
    assert math.isnan(fit.r2) and fit.slope == 0.0 and fit.intercept == 1.0
    assert not math.isnan(qq_tail_r2(binary, 1.0))  # the whole pool is not constant


@pytest.mark.parametrize("alpha", [0.0, -0.1, 1.5, float("nan"), True, "0.25", None])
def test_bad_tail_fraction_raises(alpha):
    with pytest.raises(ValueError, match="tail_fraction"):
        qq_tail_r2([1.0, 2.0, 3.0, 4.0], alpha)


@pytest.mark.parametrize("rewards", [[], [1.0, float("nan"), 2.0], [[1.0, 2.0], [3.0, 4.0]], ["a", "b"]])
def test_bad_rewards_raise(rewards):
    with pytest.raises(ValueError, match="rewards"):
        qq_tail_r2(rewards)


# --------------------------------------------------------------------------- pool and summary


def make_pool() -> pd.DataFrame:
    gaussian = 2.0 + 0.5 * normal_scores(40)
    skewed = np.exp(normal_scores(40))
    frames = [
        pd.DataFrame({"prompt_id": "b_gauss", "reward": np.random.default_rng(1).permutation(gaussian)}),
        pd.DataFrame({"prompt_id": "a_const", "reward": np.ones(20)}),
        pd.DataFrame({"prompt_id": "c_short", "reward": [0.1, 0.5, 0.2, 0.9]}),
        pd.DataFrame({"prompt_id": "d_lognormal", "reward": skewed}),
    ]
    return pd.concat(frames, ignore_index=True)


def test_pool_tail_fits_one_row_per_prompt_in_pool_order():
    fits = pool_tail_fits(make_pool())
    assert fits.prompt_id.tolist() == ["b_gauss", "a_const", "c_short", "d_lognormal"]
    by_id = fits.set_index("prompt_id")
    assert by_id.loc["b_gauss", "r2"] == pytest.approx(1.0, abs=1e-12)
    assert by_id.loc["b_gauss", "slope"] == pytest.approx(0.5, rel=1e-9)
    assert math.isnan(by_id.loc["a_const", "r2"]) and math.isnan(by_id.loc["c_short", "r2"])
    assert by_id.loc["c_short", "tail_points"] == 1 and by_id.loc["d_lognormal", "num_samples"] == 40
    assert 0.8 < by_id.loc["d_lognormal", "r2"] < 0.99  # a log-normal tail bends upwards


def test_pool_without_reward_column_raises():
    with pytest.raises(ValueError, match="reward"):
        pool_tail_fits(pd.DataFrame({"prompt_id": [1, 1, 1]}))
    with pytest.raises(ValueError, match="pool"):
        pool_tail_fits(pd.DataFrame({"prompt_id": [], "reward": []}))
    with pytest.raises(ValueError, match="rewards"):
        pool_tail_fits(pd.DataFrame({"prompt_id": [1, 1], "reward": [1.0, float("inf")]}))


def test_summary_on_a_hand_list():
    summary = summarize_tail_fits([0.99, 0.95, 0.90, 0.60, float("nan"), 0.97])
    # defined, sorted: 0.60, 0.90, 0.95, 0.97, 0.99; p10 at position 0.1·4 = 0.4 → 0.60 + 0.4·0.30
    assert summary["prompts"] == 5
    assert summary["median"] == pytest.approx(0.95, abs=1e-15)
    assert summary["mean"] == pytest.approx(float(Fraction("4.41") / 5), abs=1e-15)
    assert summary["p10"] == pytest.approx(0.72, abs=1e-15)
    assert summary["share_ge_095"] == pytest.approx(0.6, abs=1e-15)  # 0.95 itself counts
    assert set(summary) == {"median", "mean", "p10", "share_ge_095", "prompts"}


def test_summary_of_no_defined_fit_is_nan():
    summary = summarize_tail_fits([float("nan")])
    assert summary["prompts"] == 0
    assert all(math.isnan(summary[key]) for key in ("median", "mean", "p10", "share_ge_095"))
    with pytest.raises(ValueError, match="r2s"):
        summarize_tail_fits([0.5, 1.2])


# --------------------------------------------------------------------------- plot


def test_plot_writes_a_png_atomically(tmp_path):
    path = tmp_path / "plots" / "qq.png"
    chosen = plot_qq_tails(make_pool(), path, max_prompts=3)
    assert chosen == ["d_lognormal", "b_gauss"]  # worst to best fit; undefined fits skipped
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in path.parent.iterdir()] == ["qq.png"]
    assert plot_qq_tails(make_pool(), path, prompt_ids=["a_const"]) == ["a_const"]
    with pytest.raises(ValueError, match="prompt_ids"):
        plot_qq_tails(make_pool(), path, prompt_ids=["missing"])
