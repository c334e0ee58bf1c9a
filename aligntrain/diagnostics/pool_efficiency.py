"""The diagonal-approximation efficiency of every prompt of a stored pool (docs/math.md §4).

A pool holds M samples per prompt; each prompt's samples are read as an empirical
outcome distribution (answer classes, or reward values: ``forced_vote``'s
``class_distribution`` and ``reward_distribution``) and ``diagonal``'s efficiency
D/a_t is computed on it at every budget N asked for, one table row per prompt ×
budget (``pool_efficiencies``); the ``diagnose`` stage writes that table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from aligntrain.diagnostics.diagonal import _efficiency, _ties_shown
from aligntrain.diagnostics.forced_vote import (
    _METHODS,
    DEFAULT_NUM_DRAWS,
    DEFAULT_SEED,
    STRATEGIES,
    EmpiricalDistribution,
    Ties,
    _check_ties,
    _is_missing,
    _Outcomes,
    class_distribution,
    reward_distribution,
)
from aligntrain.validation import check_int_sequence

__all__ = ["POOL_STRATEGIES", "pool_efficiencies"]


def _gold_from_pool(group: pd.DataFrame) -> tuple[Hashable | None, str | None]:
    rows = zip(group["answer_class"], group["correct"], strict=True)
    classes = {label for label, ok in rows if ok and not _is_missing(label)}
    if not classes:
        return None, "no_correct_sample"
    if len(classes) > 1:
        return None, "several_correct_classes"
    return classes.pop(), None


def _class_outcomes(group: pd.DataFrame, gold: Hashable | None) -> tuple[EmpiricalDistribution | None, str | None]:
    distribution = class_distribution(list(group["answer_class"]), gold)
    return (distribution, None) if distribution.target is not None else (None, "gold_absent")


def _reward_outcomes(group: pd.DataFrame, gold: Hashable | None) -> tuple[EmpiricalDistribution | None, str | None]:
    return reward_distribution(group["reward"].to_numpy(dtype=np.float64)), None


@dataclass(frozen=True)
class _PoolOutcomes:
    """How a strategy reads one prompt's rows: (rows, gold class) -> (distribution, or why none)."""

    build: Callable[[pd.DataFrame, Hashable | None], tuple[EmpiricalDistribution | None, str | None]]
    needs_gold: bool


#: Majority and pass vote over answer classes (target: the gold class); best_of_n runs over
#: reward values (target: the top reward).
POOL_STRATEGIES: Mapping[str, _PoolOutcomes] = {
    "pass": _PoolOutcomes(_class_outcomes, needs_gold=True),
    "majority": _PoolOutcomes(_class_outcomes, needs_gold=True),
    "best_of_n": _PoolOutcomes(_reward_outcomes, needs_gold=False),
}

_POOL_COLUMNS = [
    "prompt_id",
    "budget",
    "strategy",
    "num_samples",
    "num_outcomes",
    "p_target",
    "value",
    "a_target",
    "rivalry_correction",
    "exact_derivative",
    "efficiency",
    "paper_ratio",
    "method",
    "ties",
    "reason",
]


def _prompt_distribution(
    group: pd.DataFrame, prompt_id: Hashable, reader: _PoolOutcomes, gold_classes: Mapping | None
) -> tuple[EmpiricalDistribution | None, str | None]:
    gold, reason = None, None
    if reader.needs_gold and gold_classes is not None:
        gold, reason = gold_classes.get(prompt_id), None if prompt_id in gold_classes else "no_gold_class"
    elif reader.needs_gold:
        gold, reason = _gold_from_pool(group)
    if reason is not None:
        return None, reason
    distribution, reason = reader.build(group, gold)
    if distribution is not None and distribution.probs[distribution.target] >= 1.0:
        return distribution, "no_rival_mass"
    return distribution, reason


def pool_efficiencies(
    pool: pd.DataFrame,
    budgets: Sequence[int],
    strategy: str,
    gold_classes: Mapping[Hashable, Hashable] | None = None,
    *,
    ties: Ties = "uniform",
    method: str = "auto",
    num_draws: int = DEFAULT_NUM_DRAWS,
    seed: int | None = DEFAULT_SEED,
) -> pd.DataFrame:
    """Diagonal efficiency of every prompt of a pool at every budget: one row per prompt × budget.

    Each prompt's samples form its empirical distribution (``class_distribution`` or
    ``reward_distribution``). The gold class comes from ``gold_classes`` (prompt_id ->
    class) or, without it, from the ``correct`` column (the one class of the correct rows).
    Rows where the efficiency is undefined carry NaN and a ``reason`` (missing otherwise:
    None, or NaN under pandas' string dtype):
    ``no_gold_class`` (prompt missing from gold_classes), ``no_correct_sample``,
    ``several_correct_classes``, ``gold_absent`` (p_t = 0), ``no_rival_mass`` (p_t = 1:
    every sample is the target), ``zero_target_sensitivity`` (a_t = 0, efficiency NaN).
    Every Monte Carlo call uses ``seed``. ``ties`` is majority's tie convention; every row
    of a majority table names it in the ``ties`` column (None for the other strategies),
    so a table read later says which convention it shows.
    """
    if strategy not in POOL_STRATEGIES:
        raise ValueError(f"strategy must be one of {sorted(POOL_STRATEGIES)} for a pool, got {strategy!r}")
    missing = {"prompt_id", "answer_class", "correct", "reward"} - set(pool.columns)
    if missing:
        raise ValueError(f"pool is missing columns {sorted(missing)}")
    budgets = check_int_sequence(budgets, "budgets", minimum=1)
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    ties = _check_ties(ties, strategy)
    rule, reader = STRATEGIES[strategy], POOL_STRATEGIES[strategy]
    ties_shown = _ties_shown(rule, ties)

    records = []
    for prompt_id, group in pool.groupby("prompt_id", sort=True):
        distribution, reason = _prompt_distribution(group, prompt_id, reader, gold_classes)
        outcomes = None
        if reason is None:
            d = distribution
            outcomes = rule.prepare(_Outcomes(d.probs, d.target, d.correct, d.rewards, d.votable, ties))
        for budget in budgets:
            row = dict.fromkeys(_POOL_COLUMNS, math.nan)
            row.update(prompt_id=prompt_id, budget=budget, strategy=strategy, num_samples=len(group))
            row.update(method=None, ties=ties_shown, reason=reason)
            if distribution is not None:
                row.update(num_outcomes=distribution.probs.size, p_target=distribution.probs[distribution.target])
            if outcomes is not None:
                result = _efficiency(rule, outcomes, budget, method, num_draws, seed)
                row.update(
                    value=result.value,
                    a_target=result.a_target,
                    rivalry_correction=result.rivalry_correction,
                    exact_derivative=result.exact_derivative,
                    efficiency=result.efficiency,
                    paper_ratio=result.paper_ratio,
                    method=result.method,
                )
                if result.a_target == 0:
                    row["reason"] = "zero_target_sensitivity"
            records.append(row)
    return pd.DataFrame.from_records(records, columns=_POOL_COLUMNS)
