"""QQ tail fit: is a prompt's upper reward tail Gaussian? (TEA §4.6, Table 14; docs/math.md §4).

TEA (docs/math.md §3) assumes that the top α of each prompt's reward distribution is
Gaussian. On a stored pool of M rewards per prompt the check is a normal QQ plot
of the upper tail: sort the rewards, r_(1) ≤ … ≤ r_(M), keep the k = ⌈αM⌉
largest, and regress them on the standard-normal quantiles of their plotting
positions,

    r_(i) ≈ a + b·Φ^{−1}((i − 0.5)/M),   i = M − k + 1, …, M.

A Gaussian tail makes the points collinear (intercept a ≈ μ, slope b ≈ σ), so
the fit's R² (= the squared correlation of the points) is close to 1. The
paper reports, per model, the median, mean and 10th percentile of the
prompt-level R² and the share of prompts with R² ≥ 0.95 (Table 14).

Choices where the paper is silent or its text was lost [choice]:

- ``tail_fraction`` α defaults to 0.25, TEA's default tail mass (the range the
  paper fitted over was lost in extraction), so the check tests the very tail
  that TEA models. k = ⌈αM⌉ is TEA's own tail count (``tea.tail_count``).
- Plotting positions are (i − 0.5)/M with i the rank among all M rewards (Hazen).
- R² is undefined (NaN) when the tail has fewer than ``MIN_TAIL_POINTS`` = 3
  points (two points always fit exactly) or when all its rewards are equal
  (zero total sum of squares; e.g. binary rewards whose top α are all 1).
  With α = 0.25 a prompt needs M ≥ 9 samples.
- The summary drops undefined R² values and counts only the prompts it used.
- p10 is numpy's default (linear-interpolation) 10th percentile.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import special

from aligntrain.advantages.tea import tail_count
from aligntrain.io import atomic_path
from aligntrain.validation import check_finite_vector, check_int, check_real

#: default tail mass α: TEA's default (docs/math.md §3); the paper's fitting range was lost
DEFAULT_TAIL_FRACTION = 0.25
#: fewest tail points for which R² is reported (two points are always collinear)
MIN_TAIL_POINTS = 3
#: Table 14's threshold for a "Gaussian-looking" tail
GOOD_FIT_R2 = 0.95


@dataclass(frozen=True)
class QQTailFit:
    """Least-squares fit r_(i) ≈ intercept + slope·Φ^{−1}((i − 0.5)/M) over the top-α order statistics."""

    r2: float  #: NaN when the tail is too small or constant (see the module docstring)
    slope: float  #: the tail's σ estimate; NaN when fewer than 2 tail points
    intercept: float  #: the tail's μ estimate; NaN when fewer than 2 tail points
    tail_points: int  #: k = ⌈αM⌉
    num_samples: int  #: M


def tail_normal_quantiles(num_samples: int, tail_points: int) -> np.ndarray:
    """Φ^{−1}((i − 0.5)/M) for the ranks i = M − k + 1..M of the top k of M samples (ascending)."""
    ranks = np.arange(num_samples - tail_points + 1, num_samples + 1, dtype=np.float64)
    return special.ndtri((ranks - 0.5) / num_samples)


def qq_tail_fit(rewards: ArrayLike, tail_fraction: float = DEFAULT_TAIL_FRACTION) -> QQTailFit:
    """The QQ tail regression of one prompt's pool of M rewards (docs/math.md §4; TEA Table 14)."""
    alpha = check_real(tail_fraction, "tail_fraction", low=0, high=1, low_open=True)
    values = check_finite_vector(rewards, "rewards")
    num_samples = values.size
    points = tail_count(alpha, num_samples)
    tail = np.sort(values)[num_samples - points :]
    if points < 2:
        return QQTailFit(math.nan, math.nan, math.nan, points, num_samples)
    quantiles = tail_normal_quantiles(num_samples, points)
    # centred sums: the normal equations of simple least squares, stable in float64
    dx, dy = quantiles - quantiles.mean(), tail - tail.mean()
    sxx, sxy, syy = float(dx @ dx), float(dx @ dy), float(dy @ dy)
    slope = sxy / sxx
    intercept = float(tail.mean() - slope * quantiles.mean())
    if points < MIN_TAIL_POINTS or syy == 0.0:
        return QQTailFit(math.nan, slope, intercept, points, num_samples)
    residuals = dy - slope * dx
    r2 = 1.0 - float(residuals @ residuals) / syy
    return QQTailFit(min(max(r2, 0.0), 1.0), slope, intercept, points, num_samples)


def qq_tail_r2(rewards: ArrayLike, tail_fraction: float = DEFAULT_TAIL_FRACTION) -> float:
    """R² of the upper-tail QQ fit of one prompt's rewards; NaN if < 3 tail points or a constant tail."""
    return qq_tail_fit(rewards, tail_fraction).r2


def pool_tail_fits(pool: pd.DataFrame, tail_fraction: float = DEFAULT_TAIL_FRACTION) -> pd.DataFrame:
    """One QQ tail fit per prompt of a pool (columns ``prompt_id``, ``reward``; see rollouts/pool.py).

    Returns columns prompt_id, num_samples (M), tail_points (k), r2, slope,
    intercept, one row per prompt in order of first appearance.
    """
    check_real(tail_fraction, "tail_fraction", low=0, high=1, low_open=True)
    missing = {"prompt_id", "reward"} - set(pool.columns)
    if missing:
        raise ValueError(f"pool is missing columns {sorted(missing)}")
    if len(pool) == 0:
        raise ValueError("pool must have at least one row")
    rows = []
    for prompt_id, group in pool.groupby("prompt_id", sort=False):
        rewards = check_finite_vector(group["reward"].to_numpy(), f"pool rewards of prompt {prompt_id!r}")
        fit = qq_tail_fit(rewards, tail_fraction)
        rows.append(
            {
                "prompt_id": prompt_id,
                "num_samples": fit.num_samples,
                "tail_points": fit.tail_points,
                "r2": fit.r2,
                "slope": fit.slope,
                "intercept": fit.intercept,
            }
        )
    return pd.DataFrame.from_records(rows)


def summarize_tail_fits(r2s: ArrayLike) -> dict[str, float | int]:
    """Table 14's columns over prompts: median, mean, p10 and share with R² ≥ 0.95; NaN R² dropped.

    ``prompts`` counts the prompts with a defined R²; with none, every statistic is NaN.
    """
    try:
        values = np.asarray(r2s, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise ValueError("r2s must be an array of real numbers (NaN allowed)") from None
    defined = values[~np.isnan(values)]
    if ((defined < 0.0) | (defined > 1.0)).any():
        raise ValueError("r2s must lie in [0, 1] (or be NaN)")
    if defined.size == 0:
        return {"median": math.nan, "mean": math.nan, "p10": math.nan, "share_ge_095": math.nan, "prompts": 0}
    return {
        "median": float(np.median(defined)),
        "mean": float(defined.mean()),
        "p10": float(np.percentile(defined, 10)),
        "share_ge_095": float((defined >= GOOD_FIT_R2).mean()),
        "prompts": int(defined.size),
    }


def _example_prompts(fits: pd.DataFrame, count: int) -> list:
    """``count`` prompts spread evenly over the R² ranking, worst fit first (undefined R² skipped)."""
    ranked = fits[fits.r2.notna()].sort_values("r2", kind="stable")
    if ranked.empty:
        return []
    positions = np.unique(np.linspace(0, len(ranked) - 1, num=min(count, len(ranked))).round().astype(int))
    return ranked.prompt_id.iloc[positions].tolist()


def plot_qq_tails(
    pool: pd.DataFrame,
    path: str | Path,
    tail_fraction: float = DEFAULT_TAIL_FRACTION,
    prompt_ids: Sequence | None = None,
    max_prompts: int = 4,
    title: str = "Upper-tail normal QQ fits",
) -> list:
    """Normal QQ plots of a few prompts' rewards with the tail fit; writes a PNG atomically.

    Every order statistic is drawn against Φ^{−1}((i − 0.5)/M) (grey), the top-α
    tail highlighted with its least-squares line and R² in the panel title. By
    default the prompts are spread over the R² ranking (worst to best fit).
    Returns the prompt ids plotted.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    max_prompts = check_int(max_prompts, "max_prompts", minimum=1)
    fits = pool_tail_fits(pool, tail_fraction)
    if prompt_ids is None:
        chosen = _example_prompts(fits, max_prompts)
    else:
        chosen = list(prompt_ids)
        unknown = [p for p in chosen if p not in set(fits.prompt_id)]
        if unknown:
            raise ValueError(f"prompt_ids not in the pool: {unknown}")
    if not chosen:
        raise ValueError("no prompt to plot: every prompt's tail fit is undefined")

    fig, axes = plt.subplots(1, len(chosen), figsize=(4 * len(chosen), 3.6), squeeze=False)
    for ax, prompt_id in zip(axes[0], chosen):
        rewards = np.sort(pool.loc[pool.prompt_id == prompt_id, "reward"].to_numpy(dtype=np.float64))
        fit = qq_tail_fit(rewards, tail_fraction)
        all_quantiles = tail_normal_quantiles(fit.num_samples, fit.num_samples)
        tail_quantiles = all_quantiles[fit.num_samples - fit.tail_points :]
        ax.scatter(all_quantiles, rewards, s=6, color="0.7", label="all samples")
        tail = rewards[fit.num_samples - fit.tail_points :]
        ax.scatter(tail_quantiles, tail, s=8, color="C0", label=f"top {tail_fraction:g}")
        if not math.isnan(fit.slope):
            ax.plot(tail_quantiles, fit.intercept + fit.slope * tail_quantiles, color="C3", label="tail fit")
        ax.set_title(f"{prompt_id}: R² = {fit.r2:.3f}", fontsize=9)
        ax.set_xlabel("standard-normal quantile")
        ax.set_ylabel("reward")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return chosen
