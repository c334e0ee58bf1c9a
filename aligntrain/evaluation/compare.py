"""Comparing variants on the same test prompts: tables, paired intervals, scaling plot.

Differences against the baseline use the paired prompt bootstrap and per-prompt
win/tie/loss of :mod:`aligntrain.estimators` (docs/math.md §1, TEA App. B.2).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from aligntrain.estimators import mean_and_stderr, paired_bootstrap, win_tie_loss
from aligntrain.evaluation.curves import score_columns


def _aligned(per_prompt: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Index every table by prompt id and check they cover the same prompts."""
    indexed = {v: t.set_index("prompt_id").sort_index() for v, t in per_prompt.items()}
    first_name, first = next(iter(indexed.items()))
    for name, table in indexed.items():
        if not table.index.equals(first.index):
            raise ValueError(f"variants {first_name!r} and {name!r} were evaluated on different prompts")
    return indexed


def comparison_table(
    per_prompt: Mapping[str, pd.DataFrame],
    baseline: str,
    *,
    n_resamples: int,
    confidence: float,
    seed: int,
) -> pd.DataFrame:
    """Long table: variant × score (``pass@k``/``maj@k``) with mean, se, and Δ vs baseline."""
    if baseline not in per_prompt:
        raise ValueError(f"baseline {baseline!r} has no evaluation; have {sorted(per_prompt)}")
    tables = _aligned(per_prompt)
    base = tables[baseline]
    rows = []
    for variant, table in tables.items():
        for col in score_columns(table.reset_index()):
            a, b = table[col].to_numpy(), base[col].to_numpy()
            mean, se = mean_and_stderr(a)
            boot = paired_bootstrap(a, b, n_resamples=n_resamples, confidence=confidence, seed=seed)
            wtl = win_tie_loss(a, b)
            strategy, k = col.split("@")
            rows.append(
                {
                    "variant": variant,
                    "strategy": strategy,
                    "k": int(k),
                    "mean": mean,
                    "se": se,
                    "delta": boot.mean_diff,
                    "delta_low": boot.low,
                    "delta_high": boot.high,
                    "wins": wtl.wins,
                    "ties": wtl.ties,
                    "losses": wtl.losses,
                }
            )
    return pd.DataFrame(rows)


def markdown_table(table: pd.DataFrame, strategy: str, baseline: str) -> str:
    """One Markdown table of a strategy: a row per variant, a column per k, "mean ± se [Δ lo, hi]"."""
    sub = table[table.strategy == strategy]
    ks = sorted(sub.k.unique())
    lines = [
        "| variant | " + " | ".join(f"{strategy}@{k}" for k in ks) + " |",
        "|---|" + "---|" * len(ks),
    ]
    for variant, group in sub.groupby("variant", sort=False):
        cells = []
        for k in ks:
            r = group[group.k == k].iloc[0]
            cell = f"{r['mean']:.3f} ± {r['se']:.3f}"
            if variant != baseline:
                cell += f" (Δ {r['delta']:+.3f} [{r['delta_low']:+.3f}, {r['delta_high']:+.3f}])"
            cells.append(cell)
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_scaling(table: pd.DataFrame, path: str | Path, title: str) -> None:
    """Scaling curves (one panel per strategy) with ±1.96 se bands, log2 budget axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from aligntrain.io import atomic_path

    strategies = sorted(table.strategy.unique())
    fig, axes = plt.subplots(1, len(strategies), figsize=(5.5 * len(strategies), 4), squeeze=False)
    for ax, strategy in zip(axes[0], strategies):
        sub = table[table.strategy == strategy]
        for variant, group in sub.groupby("variant", sort=False):
            group = group.sort_values("k")
            ax.plot(group.k, group["mean"], marker="o", ms=3, label=variant)
            ax.fill_between(group.k, group["mean"] - 1.96 * group.se, group["mean"] + 1.96 * group.se, alpha=0.2)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("budget k")
        ax.set_ylabel(f"{strategy}@k")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
