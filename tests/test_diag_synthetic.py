"""Synthetic checks (docs/math.md §5): Tang's bandit (Tang et al. Fig. 1) and TEA's Gaussian tail (TEA App. E).

References: enumeration of every k-tuple of a tiny bandit, finite differences of
enumerated objectives, mpmath quadrature of E[max of N] for a Gaussian, a
hand-computed tail score, and the papers' qualitative findings at small sizes.
"""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pandas as pd
import pytest
import torch

from aligntrain.advantages import compute_advantages
from aligntrain.diagnostics.synthetic import (
    BANDIT_METHODS,
    TeaVariant,
    average_over_seeds,
    best_of_n_gaussian_gradient,
    exact_expected_update,
    expected_max_of_draws,
    gaussian_policy_score,
    kl_from_reference,
    metric_at_kl,
    mse_crossover_batch,
    plot_tang_bandit,
    plot_tea_gaussian,
    policy_gradient_update,
    run_tang_bandit,
    run_tea_gaussian,
    sample_actions,
    tea_gradient_estimates,
)

# =========================================================================== tiny bandit by enumeration

LOGITS = [0.3, -0.4, 0.9, 0.1]
REWARDS = {"distinct": [0.2, -1.3, 1.1, 0.7], "tied": [0.5, -1.0, 0.5, 2.0], "tied_max": [1.5, -0.2, 1.5, 0.3]}


def softmax(logits: list[float]) -> list[float]:
    top = max(logits)
    weights = [math.exp(x - top) for x in logits]
    return [w / sum(weights) for w in weights]


def enumerated_expected_max(logits: list[float], rewards: list[float], draws: int) -> float:
    """Σ over all `draws`-tuples of actions of P(tuple)·max reward."""
    probs = softmax(logits)
    return math.fsum(
        math.prod(probs[a] for a in t) * max(rewards[a] for a in t)
        for t in itertools.product(range(len(rewards)), repeat=draws)
    )


def finite_difference_gradient(logits: list[float], rewards: list[float], draws: int, step: float = 1e-5) -> np.ndarray:
    gradient = []
    for j in range(len(logits)):
        up, down = list(logits), list(logits)
        up[j] += step
        down[j] -= step
        gradient.append(
            (enumerated_expected_max(up, rewards, draws) - enumerated_expected_max(down, rewards, draws)) / (2 * step)
        )
    return np.array(gradient)


def enumerated_expected_update(logits: list[float], rewards: list[float], rule: str, k: int) -> np.ndarray:
    """E[(1/k) Σ_i A_i (e_{y_i} − π)] over all k-tuples, A from the registry, the update written out by hand."""
    probs = softmax(logits)
    tuples = list(itertools.product(range(len(rewards)), repeat=k))
    group_rewards = torch.tensor([[rewards[a] for a in t] for t in tuples], dtype=torch.float64)
    advantages = compute_advantages(rule, group_rewards).tolist()
    expected = np.zeros(len(rewards))
    for t, a in zip(tuples, advantages):
        weight = math.prod(probs[y] for y in t)
        for y, advantage in zip(t, a):
            one_hot_minus_pi = -np.array(probs)
            one_hot_minus_pi[y] += 1.0
            expected += weight * advantage / k * one_hot_minus_pi
    return expected


@pytest.mark.parametrize("draws", [1, 2, 3, 4])
@pytest.mark.parametrize("case", sorted(REWARDS))
def test_expected_max_of_draws_matches_enumeration(case, draws):
    logits, rewards = torch.tensor(LOGITS, dtype=torch.float64), torch.tensor(REWARDS[case], dtype=torch.float64)
    value = expected_max_of_draws(logits, rewards, draws)
    assert value.item() == pytest.approx(enumerated_expected_max(LOGITS, REWARDS[case], draws), abs=1e-13)


@pytest.mark.parametrize("k", [3, 4])
@pytest.mark.parametrize("method", sorted(BANDIT_METHODS))
@pytest.mark.parametrize("case", sorted(REWARDS))
def test_expected_update_of_each_rule_is_the_gradient_of_its_objective(case, method, k):
    """Registry rule's expected update (all 4^k tuples) = finite-difference ∇ of E[max of m] = the exact update."""
    rewards = REWARDS[case]
    draws = {"mean_pg": 1, "loo_pass_at_k": k, "loo_pass_at_k_biased": k - 1}[method]
    finite_difference = finite_difference_gradient(LOGITS, rewards, draws)
    expected = enumerated_expected_update(LOGITS, rewards, BANDIT_METHODS[method].rule, k)
    np.testing.assert_allclose(expected, finite_difference, atol=1e-9)
    exact = exact_expected_update(
        torch.tensor([LOGITS], dtype=torch.float64), torch.tensor([rewards], dtype=torch.float64), method, k
    )
    np.testing.assert_allclose(exact[0].numpy(), finite_difference, atol=1e-9)


@pytest.mark.parametrize("method", sorted(BANDIT_METHODS))
def test_policy_gradient_update_averages_to_the_enumerated_expectation(method):
    """The module's sampled-update algebra, weighted over all tuples, gives the hand-written expectation."""
    k, rewards = 3, REWARDS["distinct"]
    tuples = torch.tensor(list(itertools.product(range(4), repeat=k)))
    logits = torch.tensor([LOGITS], dtype=torch.float64).expand(len(tuples), 4)
    group_rewards = torch.tensor(rewards, dtype=torch.float64)[tuples]
    updates = policy_gradient_update(logits, tuples, compute_advantages(BANDIT_METHODS[method].rule, group_rewards))
    weights = torch.tensor(softmax(LOGITS), dtype=torch.float64)[tuples].prod(dim=1)
    expected = enumerated_expected_update(LOGITS, rewards, BANDIT_METHODS[method].rule, k)
    np.testing.assert_allclose((weights[:, None] * updates).sum(dim=0).numpy(), expected, atol=1e-13)


def test_inverse_cdf_sampling_reproduces_the_policy_on_a_uniform_grid():
    grid = 10_000
    uniforms = ((torch.arange(grid, dtype=torch.float64) + 0.5) / grid).unsqueeze(0)
    actions = sample_actions(torch.tensor([LOGITS], dtype=torch.float64), uniforms)
    counts = torch.bincount(actions[0], minlength=4).numpy()
    np.testing.assert_allclose(counts / grid, softmax(LOGITS), atol=1.0 / grid)
    almost_one = torch.tensor([[1.0 - 1e-17]], dtype=torch.float64)  # rounds to 1.0 ≥ the last cdf entry
    assert sample_actions(torch.zeros(1, 3, dtype=torch.float64), almost_one).item() == 2


def test_kl_from_reference_hand_value():
    probs = softmax(LOGITS)
    expected = sum(p * math.log(p / 0.25) for p in probs)
    kl = kl_from_reference(torch.tensor([LOGITS], dtype=torch.float64), torch.zeros(1, 4, dtype=torch.float64))
    assert kl.item() == pytest.approx(expected, abs=1e-14)


# =========================================================================== Tang bandit runs


def test_bandit_run_is_tidy_deterministic_and_per_seed():
    runs = run_tang_bandit(num_actions=20, steps=5, seeds=(1, 3))
    assert list(runs.columns) == ["method", "step", "seed", "mean_reward", "pass_at_k", "kl"]
    assert len(runs) == len(BANDIT_METHODS) * 6 * 2
    start = runs[runs.step == 0]
    assert (start.kl.abs() < 1e-15).all()
    bandit = torch.randn(20, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    seed3 = start[start.seed == 3]
    np.testing.assert_allclose(seed3.mean_reward, bandit.mean().item(), atol=1e-14)
    alone = run_tang_bandit(num_actions=20, steps=5, seeds=(3,))
    pd.testing.assert_frame_equal(
        runs[runs.seed == 3].reset_index(drop=True), alone.reset_index(drop=True)
    )  # a seed's run does not depend on the other seeds


def small_bandit(update: str) -> pd.DataFrame:
    """Tang et al. Figure 1's setting (100 actions, k = 4, η = 1) at 100 steps and 32 seeds."""
    runs = run_tang_bandit(num_actions=100, k=4, learning_rate=1.0, steps=100, seeds=tuple(range(32)), update=update)
    return average_over_seeds(runs)


def test_sampled_k_sample_gradients_improve_pass_at_k_faster_and_spend_less_kl():
    """Tang et al. Fig. 1 (right, middle): the k-sample estimators lead in pass@k; mean PG drifts furthest from π_ref."""
    averaged = small_bandit("sampled")
    pass_at_k = averaged.pivot(index="step", columns="method", values="pass_at_k")
    kl = averaged.pivot(index="step", columns="method", values="kl")
    assert (pass_at_k.loc[10:, "loo_pass_at_k"] > pass_at_k.loc[10:, "mean_pg"]).all()
    assert (pass_at_k.loc[10:30, "loo_pass_at_k_biased"] > pass_at_k.loc[10:30, "mean_pg"]).all()
    assert pass_at_k.loc[100, "loo_pass_at_k_biased"] > pass_at_k.loc[100, "mean_pg"]
    assert kl.loc[100, "mean_pg"] > kl.loc[100, ["loo_pass_at_k", "loo_pass_at_k_biased"]].max() + 0.3
    at_kl = metric_at_kl(averaged, "pass_at_k", [2.0, 3.0])
    at_kl = at_kl.pivot(index="kl_level", columns="method", values="pass_at_k")
    assert (at_kl["loo_pass_at_k_biased"] > at_kl["mean_pg"]).all()


def test_exact_gradients_mean_pg_wins_the_mean_and_k_sample_wins_pass_at_k_early():
    """Tang et al. Fig. 1 (left, right) with expected updates: mean PG ends with the best mean reward."""
    averaged = small_bandit("exact")
    mean_reward = averaged.pivot(index="step", columns="method", values="mean_reward")
    pass_at_k = averaged.pivot(index="step", columns="method", values="pass_at_k")
    assert mean_reward.loc[100, "mean_pg"] > mean_reward.loc[100, ["loo_pass_at_k", "loo_pass_at_k_biased"]].max() + 0.1
    k_sample = pass_at_k.loc[10:30, ["loo_pass_at_k", "loo_pass_at_k_biased"]].min(axis=1)
    assert (k_sample > pass_at_k.loc[10:30, "mean_pg"]).all()


def test_metric_at_kl_takes_the_first_step_reaching_each_level():
    averaged = pd.DataFrame(
        {"method": "m", "step": [0, 1, 2, 3], "kl": [0.0, 0.5, 1.5, 1.2], "pass_at_k": [1.0, 2.0, 3.0, 4.0]}
    )
    table = metric_at_kl(averaged, "pass_at_k", [0.4, 1.2, 9.0])
    assert table.step.tolist() == [1, 2, -1]
    assert table.pass_at_k.tolist()[:2] == [2.0, 3.0] and math.isnan(table.pass_at_k.iloc[2])


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"methods": ("reinforce",)}, "method"),
        ({"update": "natural"}, "update"),
        ({"k": 1}, "k"),
        ({"seeds": ()}, "seeds"),
        ({"seeds": (1, 1)}, "seeds"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"num_actions": 1}, "num_actions"),
    ],
)
def test_bandit_bad_arguments_raise(kwargs, name):
    with pytest.raises(ValueError, match=name):
        run_tang_bandit(steps=1, **kwargs)


# =========================================================================== TEA Gaussian tail


def mp_expected_max_gaussian(n: int, mu: mpmath.mpf, sigma: mpmath.mpf) -> mpmath.mpf:
    """E[max of n iid N(μ, σ²)] = ∫ y n φ_σ(y − μ) Φ((y − μ)/σ)^{n−1} dy, 30-digit quadrature."""
    density = lambda y: mpmath.npdf(y, mu, sigma)  # noqa: E731
    integrand = lambda y: y * n * density(y) * mpmath.ncdf((y - mu) / sigma) ** (n - 1)  # noqa: E731
    return mpmath.quad(integrand, [mpmath.ninf, mu, mu + 2 * sigma, mu + 4 * sigma, mpmath.inf])


@pytest.mark.parametrize("budget", [16, 128])
def test_analytic_best_of_n_gradient_matches_finite_differences(budget):
    mu, sigma, step = mpmath.mpf("0.3"), mpmath.mpf("1.7"), mpmath.mpf("1e-8")
    with mpmath.workdps(30):
        d_mu = (
            mp_expected_max_gaussian(budget, mu + step, sigma) - mp_expected_max_gaussian(budget, mu - step, sigma)
        ) / (2 * step)
        d_log_sigma = (
            mp_expected_max_gaussian(budget, mu, sigma * mpmath.exp(step))
            - mp_expected_max_gaussian(budget, mu, sigma * mpmath.exp(-step))
        ) / (2 * step)
    assert best_of_n_gaussian_gradient(budget, 1.7) == pytest.approx((float(d_mu), float(d_log_sigma)), abs=1e-9)


def test_gaussian_score_matches_finite_differences_of_the_log_density():
    y, mu, sigma, h = 0.8, -0.4, 1.3, 1e-6
    log_density = lambda m, log_s: -0.5 * ((y - m) / math.exp(log_s)) ** 2 - log_s  # noqa: E731
    d_mu = (log_density(mu + h, math.log(sigma)) - log_density(mu - h, math.log(sigma))) / (2 * h)
    d_log_sigma = (log_density(mu, math.log(sigma) + h) - log_density(mu, math.log(sigma) - h)) / (2 * h)
    score = gaussian_policy_score(torch.tensor([y], dtype=torch.float64), mu, sigma)[0]
    np.testing.assert_allclose(score.numpy(), [d_mu, d_log_sigma], rtol=1e-8)


def test_raw_tea_estimate_hand_value():
    """n = 8, α = 1/4: tail (3.0, 2.0), q̂ = 2, m̂ = 2.5, ŝ = 0.5; g(3) = 1 + κ/(2·0.5)·(0.25 − 0.25) = 1.

    Only y = 3 has g ≠ 0, so the estimate is (1/α)(1/8)·1·S(3) = 0.5·(3, 8) at μ = 0, σ = 1.
    """
    samples = torch.tensor([[0.1, -0.7, 2.0, 1.2, -1.5, 3.0, 0.4, -0.2]], dtype=torch.float64)
    estimate = tea_gradient_estimates(samples, TeaVariant("tea", {"positive_part": False, "center": False}), 0.25, 128)
    np.testing.assert_allclose(estimate[0].numpy(), [1.5, 4.0], atol=1e-14)


RAW_VARIANTS = {
    "tea_raw": TeaVariant("tea", {"positive_part": False, "center": False}),
    "prefix_tea_raw": TeaVariant("prefix_tea", {"positive_part": False, "center": False}),
    "tea": TeaVariant("tea"),
}


@pytest.fixture(scope="module")
def gaussian_table() -> pd.DataFrame:
    return run_tea_gaussian(group_sizes=(32, 64, 128), repetitions=4000, variants=RAW_VARIANTS, seed=7)


def test_raw_tea_bias_is_negative_and_shrinks_like_one_over_n(gaussian_table):
    raw = gaussian_table[gaussian_table.estimator == "tea_raw"].set_index("n")
    assert (raw[["rel_bias_mu", "rel_bias_log_sigma"]] < 0).all().all()
    assert raw.rel_bias_norm[64] < 0.7 * raw.rel_bias_norm[32]
    assert raw.rel_bias_norm[128] < 0.7 * raw.rel_bias_norm[64]
    assert 0.12 < raw.rel_bias_norm[64] < 0.24  # docs/math.md §3: about 18% at n = 64


def test_prefix_tea_trades_bias_for_variance(gaussian_table):
    table = gaussian_table.set_index(["estimator", "n"])
    for n in (32, 64, 128):
        assert table.loc[("prefix_tea_raw", n), "rel_bias_norm"] < 0.6 * table.loc[("tea_raw", n), "rel_bias_norm"]
        assert table.loc[("prefix_tea_raw", n), "variance"] > 1.5 * table.loc[("tea_raw", n), "variance"]
    crossover = mse_crossover_batch(gaussian_table, "prefix_tea_raw", "tea_raw")
    assert (crossover.crossover_batch > 1).all() and np.isfinite(crossover.crossover_batch).all()


def test_positive_part_overshoots_the_mean_gradient(gaussian_table):
    """docs/math.md §3: g⁺ biases ∂μ upwards (population limit +24%), whatever n."""
    stabilised = gaussian_table[gaussian_table.estimator == "tea"].set_index("n")
    assert stabilised.rel_bias_mu[128] > 0.08


def test_gaussian_table_columns_are_consistent(gaussian_table):
    row = gaussian_table.iloc[0]
    assert row.true_log_sigma == pytest.approx(best_of_n_gaussian_gradient(128)[1])
    assert row.mse == pytest.approx(row.bias_norm**2 + row.variance)
    assert row.mse_batch_2048 == pytest.approx(row.bias_norm**2 + row.variance / 2048)
    assert row.variance == pytest.approx(row.std_mu**2 + row.std_log_sigma**2)
    assert len(gaussian_table) == 9 and set(gaussian_table.repetitions) == {4000}


def test_mse_crossover_hand_values():
    table = pd.DataFrame(
        {
            "estimator": ["a", "b", "a", "b", "a", "b"],
            "n": [1, 1, 2, 2, 3, 3],
            "bias_norm": [0.3, 0.1, 0.1, 0.05, 0.1, 0.2],
            "variance": [1.0, 5.0, 2.0, 1.0, 1.0, 2.0],
        }
    )
    crossover = mse_crossover_batch(table, "b", "a").set_index("n").crossover_batch
    assert crossover[1] == pytest.approx(4.0 / 0.08) and crossover[2] == 0.0 and crossover[3] == math.inf


def test_tea_bad_arguments_raise():
    samples = torch.zeros(2, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="rule"):
        tea_gradient_estimates(samples, TeaVariant("rloo"), 0.25, 128)
    with pytest.raises(ValueError, match="alpha"):
        tea_gradient_estimates(samples, TeaVariant("tea", {"alpha": 0.5}), 0.25, 128)
    with pytest.raises(ValueError, match="repetitions"):
        run_tea_gaussian(repetitions=1)
    with pytest.raises(ValueError, match="group_sizes"):
        run_tea_gaussian(group_sizes=(1,))
    with pytest.raises(ValueError, match="baseline"):
        one_row = pd.DataFrame({"estimator": ["a"], "n": [1], "bias_norm": [0.1], "variance": [1.0]})
        mse_crossover_batch(one_row, "a", "z")


# =========================================================================== plots


def test_plots_write_pngs(tmp_path, gaussian_table):
    bandit_path, tea_path = tmp_path / "bandit.png", tmp_path / "tea.png"
    plot_tang_bandit(run_tang_bandit(num_actions=10, steps=3, seeds=(0, 1)), bandit_path)
    plot_tea_gaussian(gaussian_table, tea_path)
    for path in (bandit_path, tea_path):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bandit.png", "tea.png"]
