"""Intervals and p-values for paired differences over seeds and prompts, and the family's correction.

A study's comparison is a grid: every variant trained under each of S seeds, each model scored on
the same P prompts. The paired difference of two variants is then an S × P table d[s, p] (the
same seed's runs paired, the same prompt paired), and its estimand the grand mean.

Seeds and prompts are crossed (every seed sees every prompt), so the bootstrap resamples both,
independently: S seeds with replacement, then P prompts with replacement, the statistic being
the mean of the resampled grid. This is Owen's pigeonhole bootstrap ("The pigeonhole bootstrap",
Annals of Applied Statistics 1(2), 2007), which for crossed designs errs on the conservative
side; a bootstrap over prompts alone ignores between-run spread, which in this project's studies
is as large as the prompt intervals (docs/evidence.md). With S = 1 it is the paired prompt
bootstrap of TEA App. B.2.

A study reports many comparisons (every variant, strategy and budget). One of them, fixed in
``compare.primary`` before the run, is the endpoint and is reported with its plain interval; the
others are one family whose p-values are adjusted by Holm's step-down method (Holm, "A simple
sequentially rejective multiple test procedure", Scandinavian Journal of Statistics 6(2), 1979).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from aligntrain.validation import check_int, check_real

_BLOCK_ENTRIES = 4_000_000  # resamples are drawn in blocks of about this many counts (bounds memory)


@dataclass(frozen=True)
class PairedInterval:
    """A paired difference over seeds and prompts: its mean, percentile interval and p-value."""

    mean_diff: float
    low: float
    high: float
    p_value: float
    """Two-sided bootstrap p-value of "the mean difference is 0": the smallest 1 − confidence at
    which the percentile interval would exclude 0, with the +1 correction of a Monte Carlo test."""
    seeds: int
    prompts: int
    n_resamples: int
    confidence: float


def _grid(differences: ArrayLike) -> np.ndarray:
    d = np.asarray(differences, dtype=float)
    if d.ndim == 1:
        d = d[None, :]
    if d.ndim != 2 or 0 in d.shape:
        raise ValueError(f"differences must be a non-empty seeds × prompts table, got shape {np.shape(differences)}")
    if not np.isfinite(d).all():
        raise ValueError("differences must be finite")
    return d


def resampled_means(differences: ArrayLike, n_resamples: int, seed: int = 0) -> np.ndarray:
    """R pigeonhole resamples of the grid mean of ``differences`` (seeds × prompts).

    Each draws seed counts w ~ Multinomial(S, 1/S) and prompt counts u ~ Multinomial(P, 1/P),
    independently (S seeds, then P prompts, with replacement), and takes wᵀ d u / (S·P).
    """
    d = _grid(differences)
    n_resamples = check_int(n_resamples, "n_resamples", minimum=1)
    seeds, prompts = d.shape
    generator = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    rows = max(1, _BLOCK_ENTRIES // (seeds + prompts))
    for start in range(0, n_resamples, rows):
        size = min(rows, n_resamples - start)
        w = generator.multinomial(seeds, np.full(seeds, 1.0 / seeds), size=size)
        u = generator.multinomial(prompts, np.full(prompts, 1.0 / prompts), size=size)
        means[start : start + size] = np.einsum("rs,sp,rp->r", w, d, u) / (seeds * prompts)
    return means


def seed_prompt_bootstrap(
    differences: ArrayLike, n_resamples: int = 10_000, confidence: float = 0.95, seed: int = 0
) -> PairedInterval:
    """Pigeonhole bootstrap of the mean of ``differences`` (shape seeds × prompts; one row: one seed).

    The interval is the percentile interval of :func:`resampled_means` (``np.quantile``'s linear
    interpolation); the p-value is ``min(1, 2·(1 + min(#{m* ≤ 0}, #{m* ≥ 0})) / (R + 1))`` over
    the R resampled means m*.
    """
    d = _grid(differences)
    check_real(confidence, "confidence", low=0, high=1, low_open=True, high_open=True)
    means = resampled_means(d, n_resamples, seed)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    below, above = int((means <= 0).sum()), int((means >= 0).sum())
    return PairedInterval(
        mean_diff=float(d.mean()),
        low=float(low),
        high=float(high),
        p_value=min(1.0, 2.0 * (1 + min(below, above)) / (len(means) + 1)),
        seeds=d.shape[0],
        prompts=d.shape[1],
        n_resamples=len(means),
        confidence=float(confidence),
    )


def holm_adjusted(p_values: ArrayLike) -> np.ndarray:
    """Holm's step-down adjusted p-values, in the input's order.

    With p₍₁₎ ≤ … ≤ p₍ₘ₎ sorted, p̃₍ᵢ₎ = max over j ≤ i of min(1, (m − j + 1)·p₍ⱼ₎). Rejecting every
    hypothesis with p̃ ≤ α is Holm's procedure at level α: it controls the family-wise error rate
    under any dependence between the comparisons.
    """
    p = np.asarray(p_values, dtype=float)
    if p.ndim != 1:
        raise ValueError(f"p_values must be one-dimensional, got shape {p.shape}")
    if ((p < 0) | (p > 1) | ~np.isfinite(p)).any():
        raise ValueError("p_values must lie in [0, 1]")
    m = p.size
    order = np.argsort(p, kind="stable")
    stepped = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(stepped)
    return adjusted


def smallest_p_value(n_resamples: int) -> float:
    """The smallest p-value :func:`seed_prompt_bootstrap` can return with ``n_resamples`` resamples."""
    return 2.0 / (n_resamples + 1)


def resamples_for(family_size: int, alpha: float) -> int:
    """The fewest resamples whose smallest p-value is a tenth of Holm's first threshold α / m.

    At exactly α / m a comparison far from 0 would pass or fail on the resampling's resolution; a
    tenfold margin puts about ten resampled means beyond 0 at the threshold, not one.
    """
    return int(np.ceil(20.0 * family_size / alpha)) if family_size else 1
