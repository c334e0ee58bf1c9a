"""Curves and comparisons of pools, against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from aligntrain.evaluation.compare import (
    comparison_table,
    family_sentence,
    markdown_table,
    plot_scaling,
    primary_sentence,
)
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
    table = comparison_table({"test": {"base": base, "new": better}}, "base", n_resamples=200, confidence=0.95, seed=0)
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
        comparison_table({"test": {"a": a, "b": b}}, "a", n_resamples=10, confidence=0.9, seed=0)


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


def _seeded(base: pd.DataFrame, **shifts: float) -> pd.DataFrame:
    out = base.copy()
    for column, shift in shifts.items():
        out[column.replace("_at_", "@")] = out[column.replace("_at_", "@")] + shift
    return out


def test_the_primary_endpoint_is_apart_and_the_family_is_holm_corrected():
    """Exact expectations: a difference constant over seeds and prompts sits above 0 in every
    resample, so its p-value is the smallest, 2 / (R + 1); a variant equal to the baseline has p = 1;
    Holm multiplies the smallest of m p-values by m; R is raised to ⌈20m / α⌉ when that is more."""
    rng = np.random.default_rng(0)
    ids = [f"p{i}" for i in range(30)]
    seeds = [
        pd.DataFrame(
            {"prompt_id": ids, "level": 1, "pass@1": rng.uniform(0, 0.6, 30), "pass@2": rng.uniform(0, 0.6, 30)}
        )
        for _ in range(2)
    ]
    per_prompt = {
        "base": seeds,
        "new": [_seeded(t, pass_at_2=0.1) for t in seeds],  # the primary: +0.1 at pass@2, equal at pass@1
        "other": [t.copy() for t in seeds],  # equal everywhere
        "strong": [_seeded(t, pass_at_1=0.2) for t in seeds],  # +0.2 at pass@1, equal at pass@2
    }
    table = comparison_table(
        {"test": per_prompt},
        "base",
        n_resamples=100,
        confidence=0.95,
        seed=0,
        primary=("new", "pass@2", "base", "test"),
    )
    assert table.groupby("role").size().to_dict() == {"baseline": 2, "family": 5, "primary": 1}
    resamples = 2000  # max(100, ⌈20 · 5 / 0.05⌉)
    assert (table.resamples == resamples).all() and (table.seeds == 2).all() and (table.prompts == 30).all()
    primary = table[table.role == "primary"].iloc[0]
    assert (primary.variant, primary.strategy, primary.k) == ("new", "pass", 2)
    assert primary.delta == pytest.approx(0.1) and primary.delta_low == pytest.approx(0.1)
    assert primary.p_value == pytest.approx(2 / (resamples + 1)) and np.isnan(primary.p_holm)
    strong = table[(table.variant == "strong") & (table.k == 1)].iloc[0]
    assert strong.p_value == pytest.approx(2 / 2001) and strong.p_holm == pytest.approx(5 * 2 / 2001)
    equal = table[(table.role == "family") & ~((table.variant == "strong") & (table.k == 1))]
    assert (equal.p_value == 1.0).all() and (equal.p_holm == 1.0).all()
    assert primary_sentence(table, 0.95).startswith(
        "`new` − `base`, pass@2 on the test split: Δ +0.100, 95% interval [+0.100, +0.100]"
    )
    assert "over 2 seeds × 30 prompts" in primary_sentence(table, 0.95) and "lies above 0" in primary_sentence(
        table, 0.95
    )
    said = family_sentence(table, 0.95)
    assert "The other 5 comparisons against `base` are one family" in said
    assert "Holding after the correction (1 of 5): `strong` pass@1 (test) +0.200 [+0.200, +0.200], p̃ 0.005." in said
    md = markdown_table(table, "pass", "base")
    assert "(Δ +0.100 [+0.100, +0.100], primary)" in md and "p̃ 0.005)" in md


def test_a_primary_against_another_baseline_is_a_row_of_its_own():
    ids = [f"p{i}" for i in range(10)]
    base = pd.DataFrame({"prompt_id": ids, "level": 1, "pass@1": 0.5})
    per_prompt = {"base": base, "a": _seeded(base, pass_at_1=0.1), "b": _seeded(base, pass_at_1=0.3)}
    table = comparison_table(
        {"test": per_prompt}, "base", n_resamples=50, confidence=0.9, seed=0, primary=("b", "pass@1", "a", "test")
    )
    primary = table[table.role == "primary"].iloc[0]
    assert (primary.baseline, primary.delta) == ("a", pytest.approx(0.2))
    assert list(table[table.role == "family"].variant) == ["a", "b"], "b − base stays in the family"
    assert primary_sentence(table, 0.9).startswith("`b` − `a`, pass@1 on the test split: Δ +0.200, 90% interval")


@pytest.mark.parametrize(
    ("primary", "message"),
    [
        (("nope", "pass@1", "a", "test"), "compare.primary names 'nope'"),
        (("a", "maj@4", "base", "test"), "compare.primary.score"),
        (("a", "pass@1", "base", "validation"), "compare.primary.split 'validation' has no evaluation"),
    ],
)
def test_a_primary_the_evaluation_cannot_give_is_refused(primary, message):
    base = pd.DataFrame({"prompt_id": ["x"], "level": 1, "pass@1": 1.0})
    with pytest.raises(ValueError, match=message):
        comparison_table(
            {"test": {"base": base, "a": base}}, "base", n_resamples=10, confidence=0.9, seed=0, primary=primary
        )


def test_seeds_must_match_between_variants():
    base = pd.DataFrame({"prompt_id": ["x"], "level": 1, "pass@1": 1.0})
    with pytest.raises(ValueError, match="have 2 and 1 seeds"):
        comparison_table({"test": {"base": [base, base], "a": [base]}}, "base", n_resamples=10, confidence=0.9, seed=0)


def test_the_report_states_the_primary_first_and_reads_the_rest_with_holm():
    """The report's sections from a compare table: the primary's sentence, and "Read:" lines that
    name only what holds after Holm's correction, each with its interval."""
    from pathlib import Path

    import yaml

    from aligntrain.config import parse_params
    from aligntrain.stages.report import primary_section, scaling_section

    raw = yaml.safe_load((Path(__file__).resolve().parents[1] / "params.yaml").read_text())
    raw["study"]["run"] = ["warmup", "ce", "pass_at_n"]
    raw["compare"] = {"baseline": "ce", "primary": {"variant": "pass_at_n", "score": "pass@2"}}
    params = parse_params(raw)
    ids = [f"p{i}" for i in range(20)]
    ce = pd.DataFrame({"prompt_id": ids, "level": 1, "pass@1": 0.4, "pass@2": 0.5})
    per_prompt = {"warmup": _seeded(ce, pass_at_1=-0.3), "ce": ce, "pass_at_n": _seeded(ce, pass_at_2=0.05)}
    table = comparison_table(
        {"test": per_prompt}, "ce", n_resamples=100, confidence=0.95, seed=0, primary=params.primary_endpoint
    )
    page = "\n".join(primary_section(params, table) + scaling_section(params, table, family=3))
    assert page.index("## Primary endpoint") < page.index("## Scaling curves")
    assert "Fixed in `compare.primary` before the run: `pass_at_n` − `ce`, pass@2 on the test split: Δ +0.050" in page
    assert "1 seed; 20 test prompts" in page and "The other 3 comparisons against `ce` are one family" in page
    read = next(line for line in page.splitlines() if line.startswith("Read:"))
    assert read == (
        "Read: against `ce`, with Holm's correction over the family of 3 comparisons: at k = 1, `warmup` below it "
        "(-0.300 [-0.300, -0.300], p̃ 0.005); at k = 2, no variant differs from it."
    )


def test_held_out_splits_join_the_one_family_and_the_primary_may_be_held_out():
    """Each split is compared on its own prompts; every comparison but the primary, on every split, is
    one family: here 2 on test and 1 on validation."""
    test = pd.DataFrame({"prompt_id": [f"t{i}" for i in range(12)], "level": 1, "pass@1": 0.5, "pass@2": 0.6})
    held = pd.DataFrame({"prompt_id": [f"v{i}" for i in range(8)], "level": 1, "pass@1": 0.3, "pass@2": 0.4})
    per_split = {
        "test": {"base": test, "new": _seeded(test, pass_at_1=0.1)},
        "validation": {"base": held, "new": _seeded(held, pass_at_2=0.2)},
    }
    table = comparison_table(
        per_split, "base", n_resamples=100, confidence=0.95, seed=0, primary=("new", "pass@2", "base", "validation")
    )
    assert table.groupby(["split", "role"]).size().to_dict() == {
        ("test", "baseline"): 2,
        ("test", "family"): 2,
        ("validation", "baseline"): 2,
        ("validation", "family"): 1,
        ("validation", "primary"): 1,
    }
    assert (table.resamples == 1200).all(), "3 in the family: max(100, ⌈20 · 3 / 0.05⌉)"
    assert dict(zip(table.split, table.prompts)) == {"test": 12, "validation": 8}
    primary = table[table.role == "primary"].iloc[0]
    assert (primary.split, primary.delta, primary.p_value) == (
        "validation",
        pytest.approx(0.2),
        pytest.approx(2 / 1201),
    )
    gain = table[(table.split == "test") & (table.variant == "new") & (table.k == 1)].iloc[0]
    assert gain.p_holm == pytest.approx(3 * 2 / 1201)
    assert "primary)" in markdown_table(table, "pass", "base", "validation")
    assert "primary)" not in markdown_table(table, "pass", "base", "test")


def test_the_oracle_reading_names_the_closest_rule_at_every_group_size():
    """By hand: at n = 8 b leads a by 0.1 with se 0.01 each (2·√2·0.01 = 0.028 < 0.1: told apart);
    at n = 64 a leads b by 0.02 (within 0.028: not told apart)."""
    from aligntrain.stages.report import closest_by_n

    cosines = pd.DataFrame(
        {
            "variant": ["a", "b", "a", "b"],
            "n": [8, 8, 64, 64],
            "mean": [0.3, 0.4, 0.62, 0.60],
            "stderr": [0.01, 0.01, 0.01, 0.01],
        }
    )
    assert closest_by_n(cosines, [8, 64]) == (
        "n = 8 `b` 0.400 ± 0.010; n = 64 `a` 0.620 ± 0.010 (not told apart from `b` 0.600 ± 0.010)"
    )
