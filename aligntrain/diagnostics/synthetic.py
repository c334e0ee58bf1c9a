"""Synthetic checks with known answers (docs/math.md §5): Tang's bandit and TEA's Gaussian tail.

Both experiments call the advantage registry (``aligntrain.advantages``) for every
rule; nothing here re-implements an advantage. Sizes come from the arguments;
the defaults finish in a few seconds on one CPU core (the caller sets
``torch.set_num_threads``).

**Tang bandit** (Tang et al. §3.3, Figure 1). A bandit with ``num_actions``
actions whose deterministic rewards are drawn from N(0, 1), a softmax policy
π = softmax(θ), k samples per update, learning rate η. Three estimators:

- ``mean_pg``: the registry's ``rloo`` (Tang et al. §3.1 "average reward": Tang's
  leave-one-out form of the mean policy gradient), unbiased for ∇E[r];
- ``loo_pass_at_k``: ``loo_pass_at_k`` (Tang et al. eq. 2), unbiased for ∇E[max of k];
  Tang's max@k rule works for continuous rewards as they are;
- ``loo_pass_at_k_biased``: ``loo_pass_at_k_biased`` (Tang et al. eq. 3), unbiased for
  ∇E[max of k − 1] (Tang et al. Lemma 2).

A sampled update is θ ← θ + η·(1/k) Σ_i A_i ∇log π(y_i), with ∇_θ log π(y) =
e_y − π; at the registry's scale convention (docs/math.md §3) this is Tang's
summed estimator exactly, and its expectation is η∇J of the rule's objective
J (checked by enumeration in the tests). ``update="exact"`` replaces it by that
expectation, η∇J, computed from the closed form of E[max of m draws].

Tracked per step: mean reward E_π[r], pass@k = E[max of k draws] and
KL(π‖π_ref) with π_ref the initial policy. The paper's finding (Tang et al. Figure 1
and §3.3): the mean policy gradient improves the *mean* reward fastest per step,
but is less KL-efficient; the k-sample estimators improve *pass@k*
significantly faster.

Choices [the paper is silent]: zero initial logits (π_ref uniform); seed s
draws both its own bandit and its own sampling noise (one generator: rewards
first, then all uniforms of the run), and every method sees the same uniforms
(common random numbers); actions are drawn by inverse CDF.

**TEA Gaussian tail** (TEA App. E, Table 15). One prompt whose policy is a
Gaussian over a scalar, y ~ N(μ, σ²), with reward r = y and parameters
θ = (μ, log σ), so the score is S(y) = ((y − μ)/σ², (y − μ)²/σ² − 1). The
best-of-N value is μ + σ e_N exactly, so the target gradient is
∇_θ = (1, σ e_N) (e_N = ``expected_max_standard_normal(N)``). A rule's gradient
estimate from one group of n samples is (1/α)·(1/n) Σ_i A_i S(y_i) (TEA's
advantages are at scale α∇V_N, docs/math.md §3). Over many groups we report the
bias, relative bias, standard deviation, variance (trace of the covariance)
and the MSE after averaging over a prompt batch of B independent prompts,
bias² + variance/B.

Choices [App. E's formulas were lost]: the unbounded Gaussian score above
(the paper clips the score to a "bounded two-dimensional score"); α = 0.25 and
N = 128 (TEA's defaults: App. E's values were lost); Prefix-TEA is the
registry's prefix form with prefixes (n/2, n), not the paper's cross-fitted
estimator with a Rao–Blackwellised evaluation split; prompt batches
B ∈ {1, 2048, 65536} (what Table 15's MSE columns imply: bias² + var/B matches
them for these B). Each group size n has its own seed, shared by all
estimators (common random numbers).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from aligntrain.advantages import compute_advantages, expected_max_standard_normal
from aligntrain.io import atomic_path
from aligntrain.validation import check_int, check_int_sequence, check_real

# =========================================================================== Tang bandit


@dataclass(frozen=True)
class BanditMethod:
    """A Tang-bandit estimator: its registry rule and the number of draws m of the
    objective E[max of m draws] that the rule is unbiased for, given k samples."""

    rule: str
    objective_draws: Callable[[int], int]
    description: str


#: method name → rule; the objective sizes are the registry's ``unbiased_for`` statements
BANDIT_METHODS: Mapping[str, BanditMethod] = MappingProxyType(
    {
        "mean_pg": BanditMethod("rloo", lambda k: 1, "mean policy gradient (RLOO), J = E[r]"),
        "loo_pass_at_k": BanditMethod("loo_pass_at_k", lambda k: k, "Tang LOO pass@k, J = E[max of k]"),
        "loo_pass_at_k_biased": BanditMethod(
            "loo_pass_at_k_biased", lambda k: k - 1, "Tang biased pass@k, J = E[max of k − 1]"
        ),
    }
)

BANDIT_UPDATES = ("sampled", "exact")


def expected_max_of_draws(logits: Tensor, rewards: Tensor, draws: int) -> Tensor:
    """E[max of ``draws`` iid actions from softmax(logits)] per row; differentiable in the logits.

    With the rewards sorted ascending and F_j the policy mass of the j smallest,
    E[max of m] = Σ_j r_(j)·(F_j^m − F_{j−1}^m) (ties telescope correctly).
    Shapes: logits and rewards (..., A); returns (...).
    """
    probs = torch.softmax(logits, dim=-1)
    ordered, order = rewards.sort(dim=-1)
    cdf = probs.gather(-1, order).cumsum(dim=-1)
    powered = cdf**draws
    below = torch.cat([torch.zeros_like(powered[..., :1]), powered[..., :-1]], dim=-1)
    return (ordered * (powered - below)).sum(dim=-1)


def kl_from_reference(logits: Tensor, reference_logits: Tensor) -> Tensor:
    """KL(π‖π_ref) = Σ_y π(y)(log π(y) − log π_ref(y)) per row."""
    log_probs = torch.log_softmax(logits, dim=-1)
    return (log_probs.exp() * (log_probs - torch.log_softmax(reference_logits, dim=-1))).sum(dim=-1)


def exact_expected_update(logits: Tensor, rewards: Tensor, method: str, k: int) -> Tensor:
    """∇_θ J of the method's objective (E[max of m draws], m from ``BANDIT_METHODS``), per row.

    This is the expectation of the method's sampled update at learning rate 1.
    """
    draws = bandit_method(method).objective_draws(k)
    with torch.enable_grad():
        theta = logits.detach().clone().requires_grad_(True)
        (gradient,) = torch.autograd.grad(expected_max_of_draws(theta, rewards, draws).sum(), theta)
    return gradient


def policy_gradient_update(logits: Tensor, actions: Tensor, advantages: Tensor) -> Tensor:
    """(1/k) Σ_i A_i ∇_θ log π(y_i) = (1/k) Σ_i A_i (e_{y_i} − π) per row (the trainer's mean over samples).

    Shapes: logits (G, A); actions (G, k) integer; advantages (G, k).
    """
    probs = torch.softmax(logits, dim=-1)
    k = actions.shape[1]
    chosen = torch.zeros_like(logits).scatter_add_(1, actions, advantages)
    return (chosen - advantages.sum(dim=1, keepdim=True) * probs) / k


def sample_actions(logits: Tensor, uniforms: Tensor) -> Tensor:
    """Inverse-CDF draws: row g takes the first action whose cumulative mass exceeds each uniform."""
    cdf = torch.softmax(logits, dim=-1).cumsum(dim=-1)
    return torch.searchsorted(cdf, uniforms, right=True).clamp(max=logits.shape[-1] - 1)


def sampled_update(logits: Tensor, rewards: Tensor, method: str, uniforms: Tensor) -> Tensor:
    """One sampled estimate per row: k = uniforms.shape[1] actions, the registry rule's advantages."""
    actions = sample_actions(logits, uniforms)
    advantages = compute_advantages(bandit_method(method).rule, rewards.gather(1, actions))
    return policy_gradient_update(logits, actions, advantages)


def bandit_method(method: str) -> BanditMethod:
    try:
        return BANDIT_METHODS[method]
    except (KeyError, TypeError):
        raise ValueError(f"method must be one of {sorted(BANDIT_METHODS)}, got {method!r}") from None


def _check_seeds(seeds: Sequence[int]) -> list[int]:
    values = check_int_sequence(seeds, "seeds", minimum=0)
    if len(set(values)) != len(values):
        raise ValueError(f"seeds must be distinct, got {seeds!r}")
    return values


def run_tang_bandit(
    num_actions: int = 100,
    k: int = 4,
    learning_rate: float = 1.0,
    steps: int = 300,
    seeds: Sequence[int] = tuple(range(16)),
    methods: Sequence[str] = tuple(BANDIT_METHODS),
    update: str = "sampled",
) -> pd.DataFrame:
    """Tang et al.'s bandit (Tang et al. Figure 1): every method from zero logits, all seeds at once.

    Returns a tidy frame with columns method, step, seed, mean_reward, pass_at_k,
    kl: one row per method, seed and step 0..steps (step t = after t updates).
    """
    num_actions = check_int(num_actions, "num_actions", minimum=2)
    k = check_int(k, "k", minimum=2)
    steps = check_int(steps, "steps", minimum=0)
    seed_list = _check_seeds(seeds)
    check_real(learning_rate, "learning_rate", low=0, low_open=True)
    if update not in BANDIT_UPDATES:
        raise ValueError(f"update must be one of {list(BANDIT_UPDATES)}, got {update!r}")
    if isinstance(methods, (str, bytes)) or len(methods) == 0:
        raise ValueError(f"methods must be a non-empty sequence of names from {sorted(BANDIT_METHODS)}")
    for method in methods:
        bandit_method(method)

    rewards_rows, uniform_rows = [], []
    for seed in seed_list:
        generator = torch.Generator().manual_seed(seed)
        rewards_rows.append(torch.randn(num_actions, generator=generator, dtype=torch.float64))
        uniform_rows.append(torch.rand(steps, k, generator=generator, dtype=torch.float64))
    rewards = torch.stack(rewards_rows)  # (S, A)
    uniforms = torch.stack(uniform_rows)  # (S, steps, k)
    reference = torch.zeros_like(rewards)

    frames = []
    for method in methods:
        logits = reference.clone()
        records = np.empty((steps + 1, len(seed_list), 3))
        for step in range(steps + 1):
            records[step, :, 0] = (torch.softmax(logits, dim=-1) * rewards).sum(dim=-1).numpy()
            records[step, :, 1] = expected_max_of_draws(logits, rewards, k).numpy()
            records[step, :, 2] = kl_from_reference(logits, reference).numpy()
            if step == steps:
                break
            if update == "exact":
                direction = exact_expected_update(logits, rewards, method, k)
            else:
                direction = sampled_update(logits, rewards, method, uniforms[:, step, :].contiguous())
            logits = logits + learning_rate * direction
        frames.append(
            pd.DataFrame(
                {
                    "method": method,
                    "step": np.repeat(np.arange(steps + 1), len(seed_list)),
                    "seed": np.tile(seed_list, steps + 1),
                    "mean_reward": records[:, :, 0].ravel(),
                    "pass_at_k": records[:, :, 1].ravel(),
                    "kl": records[:, :, 2].ravel(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


BANDIT_METRICS = ("mean_reward", "pass_at_k", "kl")


def average_over_seeds(runs: pd.DataFrame) -> pd.DataFrame:
    """Seed-averaged curves: method, step, seeds, and mean and standard error of each metric."""
    grouped = runs.groupby(["method", "step"], sort=False)[list(BANDIT_METRICS)]
    means = grouped.mean()
    errors = grouped.sem(ddof=1).add_suffix("_se")
    counts = grouped.size().rename("seeds")
    return pd.concat([counts, means, errors], axis=1).reset_index()


def metric_at_kl(averaged: pd.DataFrame, metric: str, kl_levels: Sequence[float]) -> pd.DataFrame:
    """A seed-averaged metric at the first step whose seed-averaged KL reaches each level (NaN if never).

    The KL-efficiency comparison of Tang et al. Figure 1 (middle panel): more of the
    metric for the same KL from the reference policy is better.
    """
    if metric not in BANDIT_METRICS:
        raise ValueError(f"metric must be one of {list(BANDIT_METRICS)}, got {metric!r}")
    rows = []
    for method, curve in averaged.groupby("method", sort=False):
        curve = curve.sort_values("step")
        kl, values = curve["kl"].to_numpy(), curve[metric].to_numpy()
        for level in kl_levels:
            reached = np.flatnonzero(kl >= level)
            value = float(values[reached[0]]) if reached.size else float("nan")
            step = int(curve["step"].iloc[reached[0]]) if reached.size else -1
            rows.append({"method": method, "kl_level": float(level), "step": step, metric: value})
    return pd.DataFrame.from_records(rows)


def plot_tang_bandit(runs: pd.DataFrame, path: str | Path, title: str = "Tang bandit (Tang et al. Fig. 1)") -> None:
    """Tang et al. Figure 1's three panels from seed-averaged curves: mean reward vs step, mean reward
    vs KL(π‖π_ref), pass@k vs step (±1 standard error bands). Writes a PNG atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    averaged = average_over_seeds(runs)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    panels = [("step", "mean_reward"), ("kl", "mean_reward"), ("step", "pass_at_k")]
    for ax, (x, y) in zip(axes, panels):
        for method, curve in averaged.groupby("method", sort=False):
            ax.plot(curve[x], curve[y], label=method)
            if x == "step":
                ax.fill_between(curve[x], curve[y] - curve[f"{y}_se"], curve[y] + curve[f"{y}_se"], alpha=0.2)
        ax.set_xlabel("KL(π‖π_ref)" if x == "kl" else "step")
        ax.set_ylabel(y)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"{title}: {int(averaged.seeds.max())} seeds")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


# =========================================================================== TEA Gaussian tail

TEA_RULES = ("tea", "prefix_tea")


@dataclass(frozen=True)
class TeaVariant:
    """An estimator of the Gaussian-tail study: a TEA registry rule and its options (not alpha/budget)."""

    rule: str
    options: Mapping[str, Any] = field(default_factory=dict)


#: raw = TEA eq. 11's plug-in estimator (no positive part, no centring), the consistent form;
#: the unlabelled ones are the registry defaults (positive part, centred), as the trainer uses them
DEFAULT_TEA_VARIANTS: Mapping[str, TeaVariant] = MappingProxyType(
    {
        "tea_raw": TeaVariant("tea", {"positive_part": False, "center": False}),
        "prefix_tea_raw": TeaVariant("prefix_tea", {"positive_part": False, "center": False}),
        "tea": TeaVariant("tea"),
        "prefix_tea": TeaVariant("prefix_tea"),
    }
)

#: prompt batch sizes B of the MSE columns (Table 15's values imply 1, 2048 and 65536)
DEFAULT_PROMPT_BATCHES = (1, 2048, 65536)


def gaussian_policy_score(samples: Tensor, mu: float, sigma: float) -> Tensor:
    """∇_(μ, log σ) log N(y; μ, σ²) = ((y − μ)/σ², (y − μ)²/σ² − 1), stacked on a last axis of 2."""
    standardised = (samples - mu) / sigma
    return torch.stack([standardised / sigma, standardised**2 - 1.0], dim=-1)


def best_of_n_gaussian_gradient(budget: int, sigma: float = 1.0) -> tuple[float, float]:
    """∇_(μ, log σ) of E[max of N draws of N(μ, σ²)] = μ + σ e_N: (1, σ e_N) (TEA Lemma 1 is exact here)."""
    return 1.0, float(sigma) * expected_max_standard_normal(budget)


def tea_gradient_estimates(
    samples: Tensor, variant: TeaVariant, alpha: float, budget: int, mu: float = 0.0, sigma: float = 1.0
) -> Tensor:
    """One estimate per group: (1/α)·(1/n) Σ_i A_i S(y_i), A from the registry; shape (G, 2).

    ``samples`` (G, n) are the sampled y, which are also the rewards.
    """
    if variant.rule not in TEA_RULES:
        raise ValueError(f"variant rule must be one of {list(TEA_RULES)}, got {variant.rule!r}")
    clashing = {"alpha", "budget"} & set(variant.options)
    if clashing:
        raise ValueError(f"variant options must not set {sorted(clashing)}; pass them as arguments")
    advantages = compute_advantages(variant.rule, samples, alpha=alpha, budget=budget, **variant.options)
    score = gaussian_policy_score(samples, mu, sigma)
    return (advantages.unsqueeze(-1) * score).mean(dim=1) / alpha


def _group_generator(seed: int, group_size: int) -> torch.Generator:
    state = np.random.SeedSequence([seed, group_size]).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


def run_tea_gaussian(
    group_sizes: Sequence[int] = (16, 32, 64, 128, 256),
    repetitions: int = 20_000,
    variants: Mapping[str, TeaVariant] = DEFAULT_TEA_VARIANTS,
    alpha: float = 0.25,
    budget: int = 128,
    mu: float = 0.0,
    sigma: float = 1.0,
    seed: int = 0,
    chunk_size: int = 4096,
    prompt_batches: Sequence[int] = DEFAULT_PROMPT_BATCHES,
) -> pd.DataFrame:
    """Bias and variance of TEA-type gradient estimates vs the group size n (TEA App. E, Table 15).

    One row per (estimator, n) with columns: estimator, rule, n, repetitions,
    grad_mu, grad_log_sigma (Monte Carlo means), true_mu, true_log_sigma,
    rel_bias_mu, rel_bias_log_sigma (per component, signed), bias_norm,
    rel_bias_norm (‖bias‖/‖∇‖), rel_bias_se (Monte Carlo standard error of the
    bias, √(variance/repetitions)/‖∇‖), std_mu, std_log_sigma, variance (trace
    of the covariance), rel_std (√variance/‖∇‖), mse (bias² + variance) and
    mse_batch_B = bias² + variance/B for each B in ``prompt_batches``.
    """
    sizes = check_int_sequence(group_sizes, "group_sizes", minimum=2)
    repetitions = check_int(repetitions, "repetitions", minimum=2)
    chunk_size = check_int(chunk_size, "chunk_size", minimum=1)
    budget = check_int(budget, "budget", minimum=1)
    batches = [check_int(b, "prompt_batches", minimum=1) for b in prompt_batches]
    check_real(sigma, "sigma", low=0, low_open=True)
    if not variants:
        raise ValueError("variants must name at least one estimator")
    truth = np.array(best_of_n_gaussian_gradient(budget, sigma))
    truth_norm = float(np.linalg.norm(truth))

    rows = []
    for n in sizes:
        generator = _group_generator(seed, n)
        per_variant: dict[str, list[Tensor]] = {label: [] for label in variants}
        for start in range(0, repetitions, chunk_size):  # chunks bound the memory; all variants share them
            size = min(chunk_size, repetitions - start)
            chunk = mu + sigma * torch.randn(size, n, generator=generator, dtype=torch.float64)
            for label, variant in variants.items():
                per_variant[label].append(tea_gradient_estimates(chunk, variant, alpha, budget, mu, sigma))
        for label, variant in variants.items():
            estimates = torch.cat(per_variant[label]).numpy()
            mean = estimates.mean(axis=0)
            bias = mean - truth
            variances = estimates.var(axis=0, ddof=1)
            variance = float(variances.sum())
            bias_norm = float(np.linalg.norm(bias))
            row = {
                "estimator": label,
                "rule": variant.rule,
                "n": n,
                "repetitions": repetitions,
                "grad_mu": float(mean[0]),
                "grad_log_sigma": float(mean[1]),
                "true_mu": float(truth[0]),
                "true_log_sigma": float(truth[1]),
                "rel_bias_mu": float(bias[0] / truth[0]),
                "rel_bias_log_sigma": float(bias[1] / truth[1]),
                "bias_norm": bias_norm,
                "rel_bias_norm": bias_norm / truth_norm,
                "rel_bias_se": float(np.sqrt(variance / repetitions)) / truth_norm,
                "std_mu": float(np.sqrt(variances[0])),
                "std_log_sigma": float(np.sqrt(variances[1])),
                "variance": variance,
                "rel_std": float(np.sqrt(variance)) / truth_norm,
                "mse": bias_norm**2 + variance,
            }
            row.update({f"mse_batch_{b}": bias_norm**2 + variance / b for b in batches})
            rows.append(row)
    return pd.DataFrame.from_records(rows)


def mse_crossover_batch(table: pd.DataFrame, estimator: str, baseline: str) -> pd.DataFrame:
    """Per n, the prompt batch B* above which ``estimator`` has a lower MSE than ``baseline`` (TEA Figure 5).

    bias_e² + var_e/B < bias_b² + var_b/B  ⇔  B > B* = (var_e − var_b)/(bias_b² − bias_e²)
    when the estimator has the smaller bias and the larger variance. B* = 0 when it
    wins at every B, inf when it does not win for all large B (its bias is not smaller).
    Returns columns n, crossover_batch.
    """
    labels = set(table.estimator)
    for name, label in (("estimator", estimator), ("baseline", baseline)):
        if label not in labels:
            raise ValueError(f"{name} {label!r} is not in the table; it has {sorted(labels)}")
    pair = table[table.estimator.isin([estimator, baseline])].pivot(
        index="n", columns="estimator", values=["bias_norm", "variance"]
    )
    rows = []
    for n, row in pair.iterrows():
        bias_gain = row[("bias_norm", baseline)] ** 2 - row[("bias_norm", estimator)] ** 2
        variance_cost = row[("variance", estimator)] - row[("variance", baseline)]
        if bias_gain > 0:
            crossover = max(variance_cost, 0.0) / bias_gain
        elif bias_gain == 0 and variance_cost < 0:
            crossover = 0.0
        else:  # no smaller bias: it cannot win once the variance is averaged away
            crossover = float("inf")
        rows.append({"n": int(n), "crossover_batch": float(crossover)})
    return pd.DataFrame.from_records(rows)


def plot_tea_gaussian(table: pd.DataFrame, path: str | Path, title: str = "TEA Gaussian tail (TEA App. E)") -> None:
    """Relative bias ‖bias‖/‖∇‖ (± Monte Carlo standard error) and relative standard deviation
    √variance/‖∇‖ against n, log-log, one line per estimator. Writes a PNG atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for label, rows in table.groupby("estimator", sort=False):
        rows = rows.sort_values("n")
        axes[0].errorbar(rows.n, rows.rel_bias_norm, yerr=rows.rel_bias_se, marker="o", ms=3, capsize=2, label=label)
        axes[1].plot(rows.n, rows.rel_std, marker="o", ms=3, label=label)
    ylabels = ["relative bias ‖E ĝ − ∇‖ / ‖∇‖", "relative std √tr Cov(ĝ) / ‖∇‖"]
    for ax, ylabel in zip(axes, ylabels):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("group size n")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
