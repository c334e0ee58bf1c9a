"""Comparing variants on the same test prompts: tables, paired intervals, the primary endpoint, scaling plot.

Each variant brings one per-prompt table per seed (a single table: one seed). A difference between
two variants is paired by seed and by prompt; its interval and p-value come from the seed × prompt
bootstrap of :mod:`aligntrain.evaluation.inference` (docs/evidence.md), the per-prompt
win/tie/loss from :mod:`aligntrain.estimators` (TEA App. B.2) on the seed-averaged scores.

Rows: every evaluated split × variant × score (``pass@k``, ``maj@k``, ``max@k``) against the
baseline, and the primary endpoint (``compare.primary``) when its baseline is another variant. ``role`` says what
each row is: ``baseline``; ``primary``, the endpoint fixed before the run, reported with its plain
interval; ``family``, every other comparison, whose p-values are adjusted together (``p_holm``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from aligntrain.estimators import ensemble_pass_at_k_curve, mean_and_stderr, win_tie_loss
from aligntrain.evaluation.curves import score_columns
from aligntrain.evaluation.inference import holm_adjusted, resamples_for, seed_prompt_bootstrap

if TYPE_CHECKING:
    from aligntrain.config import Params

#: variant -> its per-prompt tables, one per seed (a lone table is one seed)
Scores = Mapping[str, "pd.DataFrame | Sequence[pd.DataFrame]"]


def _aligned(per_prompt: Scores) -> dict[str, list[pd.DataFrame]]:
    """Every table indexed by prompt id; all variants on the same prompts and the same number of seeds."""
    indexed = {
        v: [t.set_index("prompt_id").sort_index() for t in ([ts] if isinstance(ts, pd.DataFrame) else ts)]
        for v, ts in per_prompt.items()
    }
    first_name, first = next(iter(indexed.items()))
    for name, tables in indexed.items():
        if not tables:
            raise ValueError(f"variant {name!r} has no evaluation")
        if len(tables) != len(first):
            raise ValueError(f"variants {first_name!r} and {name!r} have {len(first)} and {len(tables)} seeds")
        if any(not t.index.equals(first[0].index) for t in tables):
            raise ValueError(f"variants {first_name!r} and {name!r} were evaluated on different prompts")
    return indexed


def ensemble_scores(members: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """An ensemble's per-prompt pass@k from its members' per-prompt tables (one seed each), at the members' budgets.

    At budget k the K members share the attempts (``estimators.ensemble_budgets``); the
    score is exact from each member's count of correct samples (``num_correct`` of its n,
    the largest pass@k budget of its table). DCO §5.3, Table 2's ensemble.
    """
    indexed = [t.set_index("prompt_id").sort_index() for t in members]
    if any(not t.index.equals(indexed[0].index) for t in indexed):
        raise ValueError("an ensemble's members were evaluated on different prompts")
    budgets = [sorted(int(col.partition("@")[2]) for col in t.columns if col.startswith("pass@")) for t in indexed]
    if any(b != budgets[0] for b in budgets):  # each count is of its member's n samples: one n for all
        raise ValueError(
            f"an ensemble's members drew different numbers of samples per prompt: {[b[-1] for b in budgets]}"
        )
    if any(not np.array_equal(t["level"].to_numpy(), indexed[0]["level"].to_numpy()) for t in indexed):
        raise ValueError("an ensemble's members give a prompt different levels")
    ks = budgets[0]
    counts = np.stack([t["num_correct"].to_numpy(dtype=np.int64) for t in indexed], axis=1)
    curve = ensemble_pass_at_k_curve(ks[-1], counts, ks)
    table = pd.DataFrame({"prompt_id": indexed[0].index, "level": indexed[0]["level"].to_numpy()})
    table["num_correct"] = counts.sum(axis=1)
    for j, k in enumerate(ks):
        table[f"pass@{k}"] = curve[:, j]
    return table


def with_ensembles(per_prompt: Mapping[str, Sequence[pd.DataFrame]], ensembles: Mapping[str, Sequence[str]]) -> dict:
    """``per_prompt`` with one more entry per ensemble: its seed-by-seed tables (seed s from the members' seed s)."""
    scored = dict(per_prompt)
    for name, members in ensembles.items():
        seeds = {len(per_prompt[m]) for m in members}
        if len(seeds) != 1:
            raise ValueError(f"ensemble {name!r}: its members have different numbers of seeds")
        scored[name] = [ensemble_scores([per_prompt[m][s] for m in members]) for s in range(seeds.pop())]
    return scored


def _grid(tables: list[pd.DataFrame], score: str) -> np.ndarray:
    """seeds × prompts scores of one variant."""
    return np.stack([t[score].to_numpy(dtype=float) for t in tables])


def comparison_table(
    per_split: Mapping[str, Scores],
    baseline: str,
    *,
    n_resamples: int,
    confidence: float,
    seed: int,
    primary: tuple[str, str, str, str] | None = None,
) -> pd.DataFrame:
    """Long table: split × variant × score with mean, se, Δ to its baseline, interval, p-values and W/T/L.

    ``per_split``: for each evaluated split (``test`` first), every variant's per-prompt tables.
    ``primary``: (variant, score, baseline, split) of the endpoint. Every other row against
    ``baseline``, on every split, is in the one family; its p-values are Holm-adjusted at level
    1 − ``confidence``, with at least :func:`~aligntrain.evaluation.inference.resamples_for` the
    family's size resamples, so that the smallest p-value can pass Holm's first threshold
    (``resamples`` says how many were drawn).
    """
    aligned = {split: _aligned(per_prompt) for split, per_prompt in per_split.items()}
    for split, tables in aligned.items():
        if baseline not in tables:
            raise ValueError(f"baseline {baseline!r} has no evaluation on {split}; have {sorted(tables)}")
    if primary is not None:
        variant, score, against, split = primary
        if split not in aligned:
            raise ValueError(f"compare.primary.split {split!r} has no evaluation; have {sorted(aligned)}")
        for name in (variant, against):
            if name not in aligned[split]:
                raise ValueError(
                    f"compare.primary names {name!r}, which has no evaluation; have {sorted(aligned[split])}"
                )
        if score not in aligned[split][variant][0].columns:
            columns = score_columns(aligned[split][variant][0].reset_index())
            raise ValueError(f"compare.primary.score {score!r} is not scored; the evaluation has {columns}")
    comparisons = [
        (v, col, baseline, split)
        for split, tables in aligned.items()
        for v in tables
        for col in score_columns(tables[v][0].reset_index())
    ]
    if primary is not None and primary not in comparisons:
        comparisons.append(primary)
    family = sum(1 for c in comparisons if c[0] != c[2] and c != primary)
    resamples = max(n_resamples, resamples_for(family, 1.0 - confidence))
    rows = []
    for variant, score, against, split in comparisons:
        tables = aligned[split]
        a, b = _grid(tables[variant], score), _grid(tables[against], score)
        per_prompt_a, per_prompt_b = a.mean(axis=0), b.mean(axis=0)
        mean, se = mean_and_stderr(per_prompt_a)
        boot = seed_prompt_bootstrap(a - b, n_resamples=resamples, confidence=confidence, seed=seed)
        wtl = win_tie_loss(per_prompt_a, per_prompt_b)
        strategy, k = score.split("@")
        if variant == against:
            role = "baseline"
        else:
            role = "primary" if (variant, score, against, split) == primary else "family"
        rows.append(
            {
                "split": split,
                "variant": variant,
                "strategy": strategy,
                "k": int(k),
                "baseline": against,
                "role": role,
                "mean": mean,
                "se": se,
                "delta": boot.mean_diff,
                "delta_low": boot.low,
                "delta_high": boot.high,
                "p_value": np.nan if role == "baseline" else boot.p_value,
                "wins": wtl.wins,
                "ties": wtl.ties,
                "losses": wtl.losses,
                "seeds": boot.seeds,
                "prompts": boot.prompts,
                "resamples": resamples,
            }
        )
    table = pd.DataFrame(rows)
    in_family = (table.role == "family").to_numpy()
    table["p_holm"] = np.nan
    table.loc[in_family, "p_holm"] = holm_adjusted(table.loc[in_family, "p_value"].to_numpy())
    return table


def baseline_rows(table: pd.DataFrame, split: str = "test") -> pd.DataFrame:
    """The rows of one split against the study's baseline: one per variant, strategy and k."""
    baseline = table.loc[table.role == "baseline", "variant"].iloc[0]
    return table[(table.split == split) & (table.baseline == baseline)]


def prompts_per_split(table: pd.DataFrame) -> str:
    """ "200 test, 200 validation": how many prompts each split's comparisons are over."""
    return ", ".join(f"{int(group.prompts.iloc[0])} {split}" for split, group in table.groupby("split", sort=False))


def family_size(table: pd.DataFrame) -> int:
    return int((table.role == "family").sum())


def primary_sentence(table: pd.DataFrame, confidence: float) -> str:
    """The primary endpoint in words, with its interval; "" when the study fixed none."""
    rows = table[table.role == "primary"]
    if rows.empty:
        return ""
    r = rows.iloc[0]
    level = int(round(100 * confidence))
    if r.delta_low > 0:
        verdict = f"the interval lies above 0: `{r.variant}` is ahead of `{r.baseline}`"
    elif r.delta_high < 0:
        verdict = f"the interval lies below 0: `{r.variant}` is behind `{r.baseline}`"
    else:
        verdict = "the interval contains 0: no difference is shown at this size"
    return (
        f"`{r.variant}` − `{r.baseline}`, {r.strategy}@{r.k} on the {r.split} split: Δ {r.delta:+.3f}, "
        f"{level}% interval [{r.delta_low:+.3f}, {r.delta_high:+.3f}], p = {r.p_value:.3g}, over {r.seeds} "
        f"seed{'s' if r.seeds != 1 else ''} × {r.prompts} prompts ({r.resamples} seed × prompt bootstrap "
        f"resamples); {verdict}."
    )


def primary_paragraph(params: Params, table: pd.DataFrame) -> str:
    """The primary endpoint's paragraph of compare.md and the report: fixed, left out of this run, or none."""
    primary = params.compare.primary
    if primary is None:
        return "None fixed (`compare.primary` is unset): every comparison is in the corrected family."
    if params.primary_not_run:
        missing = ", ".join(f"`{v}`" for v in params.primary_not_run)
        return (
            f"`compare.primary` ({primary.variant} at {primary.score} on {primary.split}) is not tested by this run: "
            f"study.run leaves out {missing}. Every comparison is in the corrected family."
        )
    return f"Fixed in `compare.primary` before the run: {primary_sentence(table, params.evaluate.confidence)}"


def family_sentence(table: pd.DataFrame, confidence: float) -> str:
    """How the other comparisons were corrected, and which survive."""
    m = family_size(table)
    if not m:
        return ""
    alpha = 1.0 - confidence
    held = table[(table.role == "family") & (table.p_holm <= alpha)]
    said = (
        "; ".join(
            f"`{r.variant}` {r.strategy}@{r.k} ({r.split}) {r.delta:+.3f} [{r.delta_low:+.3f}, "
            f"{r.delta_high:+.3f}], p̃ {r.p_holm:.3g}"
            for r in held.itertuples()
        )
        or "none"
    )
    return (
        f"The other {m} comparisons against `{table[table.role == 'family'].baseline.iloc[0]}` are one family: "
        f"p̃ is the Holm-adjusted p-value (family-wise error ≤ {alpha:g}); the intervals shown are each "
        f"comparison's own {int(round(100 * confidence))}% interval, not adjusted. "
        f"Holding after the correction ({len(held)} of {m}): {said}."
    )


def markdown_table(table: pd.DataFrame, strategy: str, baseline: str, split: str = "test") -> str:
    """One Markdown table of a strategy on a split: a row per variant, a column per k, "mean ± se (Δ [lo, hi], p̃)"."""
    sub = table[(table.strategy == strategy) & (table.baseline == baseline) & (table.split == split)]
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
                cell += f" (Δ {r['delta']:+.3f} [{r['delta_low']:+.3f}, {r['delta_high']:+.3f}]"
                cell += ", primary)" if r["role"] == "primary" else f", p̃ {r['p_holm']:.3g})"
            cells.append(cell)
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_scaling(table: pd.DataFrame, path: str | Path, title: str) -> None:
    """Scaling curves (one panel per strategy) with ±1.96 se bands, log2 budget axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from aligntrain.io import atomic_path

    table = baseline_rows(table)  # the test split, one row per point
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
