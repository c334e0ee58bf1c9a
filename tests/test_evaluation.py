"""Curves and comparisons of pools, against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from aligntrain.evaluation.compare import comparison_table, markdown_table, plot_scaling
from aligntrain.evaluation.curves import budgets, curve_table, per_prompt_scores, summarize


def _pool(prompt_answers: dict[str, list], gold: dict[str, str], levels: dict[str, int]) -> pd.DataFrame:
    rows = []
    for pid, answers in prompt_answers.items():
        for i, a in enumerate(answers):
            rows.append(
                {
                    "prompt_id": pid,
                    "level": levels[pid],
                    "sample_index": i,
                    "answer_class": a,
                    "correct": a == gold[pid],
                }
            )
    return pd.DataFrame(rows)


def test_budgets():
    assert budgets(64) == [1, 2, 4, 8, 16, 32, 64]
    assert budgets(1) == [1]
    assert budgets(12) == [1, 2, 4, 8, 12]


def test_per_prompt_scores_by_hand():
    gold = {"a": "1", "b": "2"}
    pool = _pool({"a": ["1", "3", "3", None], "b": ["2", "2", "2", "2"]}, gold, {"a": 1, "b": 2})
    table = per_prompt_scores(pool, gold).set_index("prompt_id")
    # prompt a: 1 correct of 4. pass@2 = 1 - C(3,2)/C(4,2) = 1/2.
    assert table.loc["a", "pass@1"] == pytest.approx(0.25)
    assert table.loc["a", "pass@2"] == pytest.approx(0.5)
    assert table.loc["a", "pass@4"] == pytest.approx(1.0)
    # maj@2 over the 6 pairs: {1,3}x2 tie 1/2 each, {1,None} wins, {3,3} loses, {3,None}x2 lose -> 2/6
    assert table.loc["a", "maj@2"] == pytest.approx(2 / 6)
    # maj@4: 3 has two votes vs one -> loses
    assert table.loc["a", "maj@4"] == pytest.approx(0.0)
    assert table.loc["b"].filter(like="@").eq(1.0).all()

    summary = summarize(table.reset_index())
    assert summary["overall"]["pass@1"] == pytest.approx((0.25 + 1) / 2)
    se = np.std([0.25, 1.0], ddof=1) / math.sqrt(2)
    assert summary["overall"]["pass@1_se"] == pytest.approx(se, abs=1e-6)
    assert summary["by_level"]["level1"]["pass@1"] == pytest.approx(0.25)
    curve = curve_table(table.reset_index())
    assert list(curve.k) == [1, 2, 4]
    assert curve.loc[curve.k == 2, "pass_at_k"].item() == pytest.approx(0.75)


def test_unequal_pools_are_rejected():
    gold = {"a": "1", "b": "2"}
    pool = _pool({"a": ["1", "3"], "b": ["2"]}, gold, {"a": 1, "b": 1})
    with pytest.raises(ValueError, match="different sample counts"):
        per_prompt_scores(pool, gold)


def test_comparison_against_baseline(tmp_path):
    ids = [f"p{i}" for i in range(40)]
    base = pd.DataFrame({"prompt_id": ids, "level": 1, "pass@1": 0.5, "pass@2": 0.6})
    better = base.copy()
    better["pass@2"] = 0.7  # +0.1 on every prompt: a zero-width interval at +0.1
    table = comparison_table({"base": base, "new": better}, "base", n_resamples=200, confidence=0.95, seed=0)
    row = table[(table.variant == "new") & (table.k == 2)].iloc[0]
    assert row["delta"] == pytest.approx(0.1) and row["delta_low"] == pytest.approx(0.1)
    assert (row["wins"], row["ties"], row["losses"]) == (40, 0, 0)
    tie = table[(table.variant == "new") & (table.k == 1)].iloc[0]
    assert tie["ties"] == 40 and tie["delta"] == 0
    md = markdown_table(table, "pass", "base")
    assert "| new |" in md and "Δ +0.100" in md
    plot_scaling(table, tmp_path / "s.png", "t")
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"


def test_comparison_rejects_different_prompts():
    a = pd.DataFrame({"prompt_id": ["x"], "level": 1, "pass@1": 1.0})
    b = pd.DataFrame({"prompt_id": ["y"], "level": 1, "pass@1": 1.0})
    with pytest.raises(ValueError, match="different prompts"):
        comparison_table({"a": a, "b": b}, "a", n_resamples=10, confidence=0.9, seed=0)


def test_continuous_rewards_get_best_of_n_curves():
    """max@k by hand: rewards (1, 3, 2, 0), k = 2: mean over the 6 pairs of their max = 14/6."""
    from aligntrain.evaluation.curves import strategies_for

    pool = pd.DataFrame(
        {
            "prompt_id": "a",
            "level": 1,
            "sample_index": range(4),
            "answer_class": None,
            "reward": [1.0, 3.0, 2.0, 0.0],
            "correct": [False, True, False, False],
        }
    )
    assert strategies_for(False) == ("max", "pass") and strategies_for(True) == ("pass", "maj")
    table = per_prompt_scores(pool, {"a": None}, strategies_for(False)).iloc[0]
    assert table["max@1"] == pytest.approx(1.5)
    assert table["max@2"] == pytest.approx(14 / 6)
    assert table["max@4"] == pytest.approx(3.0)
    assert table["pass@2"] == pytest.approx(0.5)
    assert "maj@1" not in table
    with pytest.raises(ValueError, match="unknown strategies"):
        per_prompt_scores(pool, {"a": None}, ("best",))


def test_grade_completions_and_the_pool_they_build():
    """The one grading loop: each completion against its row, in the order given."""
    from types import SimpleNamespace

    from aligntrain.problems import get_problem
    from aligntrain.rollouts.pool import POOL_COLUMNS, build_pool, grade_completions

    problem = get_problem("arith")
    rows = problem.generate_splits({"test": 2}, problem.levels, seed=0)["test"]
    texts = [(1, rows[1]["completion"]), (0, "no answer here"), (0, rows[0]["completion"])]
    completions = [
        SimpleNamespace(prompt_index=p, sample_index=s, text=t, logp=-1.0 - s, num_tokens=5, finished=True)
        for s, (p, t) in enumerate(texts)
    ]
    graded = grade_completions(rows, completions, problem)
    assert [g["prompt_id"] for g in graded] == [rows[1]["id"], rows[0]["id"], rows[0]["id"]]
    assert [g["correct"] for g in graded] == [True, False, True]
    assert [g["reward"] for g in graded] == [1.0, 0.0, 1.0]
    assert graded[1]["answer"] is None and graded[1]["answer_class"] is None
    assert graded[0]["answer_class"] == problem.gold_class(rows[1])
    assert all(type(g["level"]) is int and type(g["correct"]) is bool and type(g["reward"]) is float for g in graded)

    pool = build_pool(rows, completions, problem)
    assert list(pool.columns) == POOL_COLUMNS
    for column in ("prompt_id", "correct", "reward"):
        assert pool[column].tolist() == [g[column] for g in graded]
    assert pool["answer_class"].isna().tolist() == [False, True, False]  # None: unparseable
    assert pool["sample_index"].tolist() == [0, 1, 2] and pool["logp"].tolist() == [-1.0, -2.0, -3.0]
