"""Diagnostic stage helpers with known answers (the stages themselves run in test_e2e / test_flows)."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
import pandas as pd
import pytest

from aligntrain.stages.diagnostics import majority_weight_comparison, summarize_efficiency


def _pool(classes_by_prompt: dict[str, list]) -> pd.DataFrame:
    rows = [{"prompt_id": p, "answer_class": c} for p, classes in classes_by_prompt.items() for c in classes]
    return pd.DataFrame(rows)


def test_two_answer_majority_weight_is_exact_at_the_plurality_threshold():
    """Two answers, N odd, k = (N+1)/2: the vote is Bin(N, p) ≥ k, so CAT's weight is the exact one,
    p·P′/P with P′ = N·C(N−1, (N−1)/2)·(p(1−p))^((N−1)/2)."""
    pool = _pool({"a": ["7"] * 3 + ["9"] * 5, "gone": ["9"] * 8, "sure": ["7"] * 8})
    gold = {"a": "7", "gone": "7", "sure": "7"}
    table = majority_weight_comparison(pool, gold, [5], consensus=0.5)
    assert list(table.prompt_id) == ["a"], "no gold sample, or only gold samples: nothing to compare"
    p, n = Fraction(3, 8), 5
    value = sum(comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(3, n + 1))
    slope = n * comb(n - 1, 2) * (p * (1 - p)) ** 2
    expected = float(p * slope / value)
    row = table.iloc[0]
    assert row.p_target == pytest.approx(0.375)
    assert row.exact_weight == pytest.approx(expected, rel=1e-9)
    assert row.diagonal_weight == pytest.approx(expected, rel=1e-9)


def test_a_split_rival_vote_separates_the_weights():
    """Gold 3/8 against 5/8 split over five rivals: gold usually wins the plurality, so the exact
    weight is far below the two-answer (diagonal) one."""
    pool = _pool({"a": ["7"] * 3 + ["1", "2", "3", "4", "5"]})
    row = majority_weight_comparison(pool, {"a": "7"}, [16], consensus=0.5).iloc[0]
    assert row.exact_weight < 0.5 * row.diagonal_weight


def test_tie_conventions_agree_without_ties_and_differ_with_them():
    """Two answers and N odd: no tie can happen, the conventions give one weight. N even: a 2–2
    split is worth ½ (uniform) or 0 (strict), and the exact weights part."""
    pool = _pool({"a": ["7"] * 3 + ["9"] * 5})
    for n, same in ((5, True), (4, False)):
        uniform = majority_weight_comparison(pool, {"a": "7"}, [n], consensus=0.5).iloc[0]
        strict = majority_weight_comparison(pool, {"a": "7"}, [n], consensus=0.5, ties="strict").iloc[0]
        assert strict.diagonal_weight == uniform.diagonal_weight  # CAT's weight has no ties
        assert bool(abs(strict.exact_weight - uniform.exact_weight) <= 1e-12 * uniform.exact_weight) is same
    # N = 4, p = 3/8: strict P = P[Bin ≥ 3], so its exact weight is the two-answer B-weight at k = 3
    p, n = Fraction(3, 8), 4
    value = sum(comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(3, n + 1))
    expected = float(3 * comb(n, 3) * p**3 * (1 - p) / value)
    assert strict.exact_weight == pytest.approx(expected, rel=1e-9)


def test_summarize_efficiency_by_hand():
    table = pd.DataFrame(
        {
            "strategy": ["majority"] * 5,
            "budget": [4, 4, 4, 8, 8],
            "efficiency": [0.2, 0.6, np.nan, 0.9, 0.7],
            "paper_ratio": [0.55, 0.8, np.nan, 0.95, 0.9],
            "ties": ["strict"] * 5,
        }
    )
    summary = summarize_efficiency(table)
    assert summary["majority@4"] == {
        "prompts": 2,
        "median_efficiency": 0.4,
        "share_below_half": 0.5,
        "median_paper_ratio": 0.675,
        "ties": "strict",
    }
    assert summary["majority@8"]["share_below_half"] == 0.0 and summary["majority@8"]["prompts"] == 2
    # a table written before the ties column (or a strategy without ties) names no convention
    assert summarize_efficiency(table.drop(columns="ties"))["majority@4"]["ties"] is None
