"""Scaling curves of a pool: pass@k, maj@k and max@k for k = 1, 2, 4, …, M (docs/math.md §1).

Per prompt, the exact estimators of :mod:`aligntrain.estimators`; across
prompts, the mean with its standard error, overall and per difficulty level.
The per-prompt table is kept: ``compare`` pairs it across variants.

Which strategies apply is the problem's business (:func:`strategies_for`):
verifiable problems get pass@k and majority vote; continuous-reward problems get
best-of-N (max@k of the reward) and pass@k of their ``correct`` threshold.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from aligntrain.estimators import maj_at_k_curve, max_at_k_curve, mean_and_stderr, pass_at_k_curve

#: strategy name -> curve of one prompt's pool (its rows, its gold class, the budgets)
STRATEGY_CURVES = {
    "pass": lambda group, gold, ks: pass_at_k_curve(len(group), [int(group["correct"].sum())], ks)[0],
    "maj": lambda group, gold, ks: maj_at_k_curve(_answer_classes(group["answer_class"]), gold, ks),
    "max": lambda group, gold, ks: max_at_k_curve(group["reward"].to_numpy(dtype=float), ks),
}


def strategies_for(binary_rewards: bool) -> tuple[str, ...]:
    """pass@k and majority vote for 0/1 rewards; best-of-N and pass@k for continuous ones."""
    return ("pass", "maj") if binary_rewards else ("max", "pass")


def budgets(samples_per_prompt: int) -> list[int]:
    """1, 2, 4, …, up to M (M itself included when it is not a power of two)."""
    ks = [1 << i for i in range(samples_per_prompt.bit_length()) if (1 << i) <= samples_per_prompt]
    if ks[-1] != samples_per_prompt:
        ks.append(samples_per_prompt)
    return ks


def per_prompt_scores(
    pool: pd.DataFrame, gold_classes: dict[str, object], strategies: tuple[str, ...] = ("pass", "maj")
) -> pd.DataFrame:
    """One row per prompt: level, and a ``<strategy>@k`` column per strategy and budget k.

    ``gold_classes`` maps prompt id to the canonical class of its gold answer
    (used by ``maj``). Every prompt must have the same number of samples M.
    """
    unknown = set(strategies) - set(STRATEGY_CURVES)
    if unknown:
        raise ValueError(f"unknown strategies {sorted(unknown)}; known: {sorted(STRATEGY_CURVES)}")
    sizes = pool.groupby("prompt_id").size()
    if sizes.nunique() != 1:
        raise ValueError(f"pool prompts have different sample counts: {sorted(sizes.unique())}")
    m = int(sizes.iloc[0])
    ks = budgets(m)
    grouped = pool.sort_values(["prompt_id", "sample_index"]).groupby("prompt_id", sort=True)
    table = {
        "prompt_id": list(grouped.groups),
        "level": grouped["level"].first().to_numpy(),
        "num_correct": grouped["correct"].sum().to_numpy(),
    }
    for strategy in strategies:
        curves = np.stack([STRATEGY_CURVES[strategy](group, gold_classes.get(pid), ks) for pid, group in grouped])
        for j, k in enumerate(ks):
            table[f"{strategy}@{k}"] = curves[:, j]
    return pd.DataFrame(table)


def _answer_classes(column: pd.Series) -> list:
    # pandas stores a missing class as NaN (a hashable that would count as a wrong
    # answer); the estimators expect None: drawn, never winning.
    return [None if pd.isna(a) else a for a in column]


def score_columns(per_prompt: pd.DataFrame) -> list[str]:
    return [c for c in per_prompt.columns if "@" in c]


def summarize(per_prompt: pd.DataFrame) -> dict:
    """Mean and standard error of every score, overall and per level (the metrics JSON)."""

    def block(frame: pd.DataFrame) -> dict:
        out = {"prompts": int(len(frame))}
        for col in score_columns(frame):
            mean, se = mean_and_stderr(frame[col].to_numpy())
            out[col] = round(mean, 6)
            out[f"{col}_se"] = round(se, 6)
        return out

    summary = {"overall": block(per_prompt)}
    summary["by_level"] = {
        f"level{int(level)}": block(frame) for level, frame in per_prompt.groupby("level", sort=True)
    }
    return summary


def curve_table(per_prompt: pd.DataFrame) -> pd.DataFrame:
    """Wide table for ``dvc plots``: one row per budget k, a mean and se column per strategy."""
    table: dict[int, dict] = {}
    for col in score_columns(per_prompt):
        strategy, k = col.split("@")
        mean, se = mean_and_stderr(per_prompt[col].to_numpy())
        table.setdefault(int(k), {"k": int(k)}).update({f"{strategy}_at_k": mean, f"{strategy}_at_k_se": se})
    return pd.DataFrame([table[k] for k in sorted(table)])
