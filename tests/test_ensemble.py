"""Ensembles of K models sharing a budget of k attempts (DCO §5.3, Table 2's ensemble), and DCO_step's step rows.

The estimator is checked against independent references: a brute-force enumeration of every
draw (exact fractions) and a 50-digit Decimal evaluation of 1 − Π_i C(n−c_i, k_i)/C(n, k_i).
"""

from __future__ import annotations

import copy
import math
from decimal import Decimal, localcontext
from fractions import Fraction
from itertools import combinations, product
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from aligntrain.config import ParamsError, load_params, parse_params
from aligntrain.estimators import ensemble_budgets, ensemble_pass_at_k_curve, pass_at_k_curve
from aligntrain.evaluation.compare import ensemble_scores, with_ensembles
from aligntrain.objectives import OBJECTIVES, StepDCO
from aligntrain.problems import get_problem, rewrite

ROOT = Path(__file__).resolve().parents[1]
RAW = yaml.safe_load((ROOT / "params.yaml").read_text())


# ---------------------------------------------------------------------------
# References


def _dealt(k: int, members: int) -> list[int]:
    """Attempts per member when the k attempts are dealt round-robin (attempt j to member j mod K)."""
    attempts = [0] * members
    for j in range(k):
        attempts[j % members] += 1
    return attempts


def _brute_force(n: int, correct: tuple[int, ...], k: int) -> Fraction:
    """Exact P(some attempt succeeds): every k_i-subset of every member's pool, all combinations together."""
    draws = [
        list(combinations([True] * c + [False] * (n - c), k_i))
        for c, k_i in zip(correct, _dealt(k, len(correct)), strict=True)
    ]
    wins = total = 0
    for picks in product(*draws):
        total += 1
        wins += any(any(pick) for pick in picks)
    return Fraction(wins, total)


def _decimal_reference(n: int, correct: tuple[int, ...], k: int) -> Decimal:
    """1 − Π_i C(n−c_i, k_i)/C(n, k_i) to 50 digits (math.comb is exact; math.comb(a, b) = 0 when b > a)."""
    with localcontext() as ctx:
        ctx.prec = 50
        failure = Decimal(1)
        for c, k_i in zip(correct, _dealt(k, len(correct)), strict=True):
            failure *= Decimal(math.comb(n - c, k_i)) / Decimal(math.comb(n, k_i))
        return 1 - failure


# ---------------------------------------------------------------------------
# ensemble_budgets


@pytest.mark.parametrize(
    ("k", "members", "expected"),
    [
        (1, 1, [1]),
        (5, 1, [5]),
        (6, 2, [3, 3]),
        (7, 2, [4, 3]),
        (7, 3, [3, 2, 2]),
        (8, 3, [3, 3, 2]),
        (9, 3, [3, 3, 3]),
        (2, 3, [1, 1, 0]),
        (1, 4, [1, 0, 0, 0]),
        (64, 3, [22, 21, 21]),
    ],
)
def test_budgets_split_k_evenly_and_the_first_members_take_the_remainder(k, members, expected):
    """k//K each, one more for the first k mod K members, in the order given."""
    assert ensemble_budgets(k, members) == expected


def test_budgets_sum_to_k_and_differ_by_at_most_one():
    """For every k and K up to 20: the budgets sum to k, are non-increasing and differ by at most one."""
    for members in range(1, 8):
        for k in range(1, 21):
            budgets = ensemble_budgets(k, members)
            assert len(budgets) == members
            assert sum(budgets) == k
            assert budgets == sorted(budgets, reverse=True)
            assert max(budgets) - min(budgets) <= 1
            assert budgets == _dealt(k, members)


@pytest.mark.parametrize(("k", "members"), [(0, 2), (3, 0), (True, 2), (2.0, 2)])
def test_budgets_refuse_a_bad_k_or_member_count(k, members):
    """k >= 1 and K >= 1, integers (not booleans or floats)."""
    with pytest.raises(ValueError):
        ensemble_budgets(k, members)


# ---------------------------------------------------------------------------
# ensemble_pass_at_k_curve against the references


@pytest.mark.parametrize(
    ("n", "rows"),
    [
        (5, [(1, 3), (0, 0), (5, 0), (2, 2), (4, 1), (0, 5)]),
        (6, [(0, 1, 6), (2, 3, 1), (0, 0, 0), (6, 6, 6), (1, 0, 0)]),
    ],
    ids=["n5-K2", "n6-K3"],
)
def test_ensemble_pass_at_k_equals_brute_force_enumeration(n, rows):
    """Every k from 1 to n·K (k < K, k not divisible by K, k = n·K), c = 0 and c = n, against exhaustive draws."""
    ks = list(range(1, n * len(rows[0]) + 1))
    curve = ensemble_pass_at_k_curve(n, np.array(rows), ks)
    assert curve.shape == (len(rows), len(ks))
    for r, correct in enumerate(rows):
        for j, k in enumerate(ks):
            exact = _brute_force(n, correct, k)
            assert curve[r, j] == pytest.approx(float(exact), abs=1e-12), (correct, k, exact)


def test_brute_force_reference_is_not_vacuous():
    """Hand values of the reference itself: n = 5, c = (1, 3), k = 3 -> budgets (2, 1)."""
    # member 0 fails 2 draws: C(4,2)/C(5,2) = 6/10; member 1 fails 1 draw: 2/5
    assert _brute_force(5, (1, 3), 3) == 1 - Fraction(6, 10) * Fraction(2, 5)
    assert _brute_force(5, (0, 5), 1) == 0  # only member 0 draws, and it has no correct sample
    assert _brute_force(5, (0, 5), 2) == 1


@pytest.mark.parametrize(
    "correct",
    [(1, 0), (0, 1), (1, 1, 2), (3, 0, 0), (2, 5), (0, 0)],
)
def test_ensemble_pass_at_k_at_a_large_pool_matches_50_digit_decimals(correct):
    """n = 1000 with few correct samples: relative error <= 1e-12 against 50-digit Decimal arithmetic."""
    n = 1000
    members = len(correct)
    ks = sorted({1, 2, 3, 7, 10, 100, 333, 999, 1000, 1001, 1500, n * members - 1, n * members})
    curve = ensemble_pass_at_k_curve(n, np.array([correct]), ks)[0]
    for k, got in zip(ks, curve, strict=True):
        reference = _decimal_reference(n, correct, k)
        if reference == 0:
            assert got == 0.0, (correct, k)
        else:
            assert float(abs(Decimal(float(got)) - reference) / reference) <= 1e-12, (correct, k, got, reference)


def test_one_member_is_pass_at_k():
    """K = 1: the member takes every attempt, so the curve is pass_at_k_curve's (to 1e-12 relative)."""
    for n, c in [(5, [0, 1, 2, 3, 4, 5]), (64, [0, 1, 7, 63, 64]), (1000, [0, 1, 2, 500, 999, 1000])]:
        ks = [k for k in (1, 2, 3, 4, 5, 8, 16, 64, 100, 1000) if k <= n]
        ensemble = ensemble_pass_at_k_curve(n, np.array(c)[:, None], ks)
        np.testing.assert_allclose(ensemble, pass_at_k_curve(n, c, ks), rtol=1e-12, atol=0)


def test_one_member_is_pass_at_k_exactly_and_tiny_probabilities_keep_precision():
    """K = 1 equals pass_at_k_curve exactly; at n = 10⁹, c = 1 each, the relative error stays <= 1e-12."""
    n, c, ks = 1000, [0, 1, 2, 500, 1000], [1, 2, 10, 100]
    np.testing.assert_array_equal(ensemble_pass_at_k_curve(n, np.array(c)[:, None], ks), pass_at_k_curve(n, c, ks))
    big = 10**9
    got = ensemble_pass_at_k_curve(big, [[1, 1]], [1, 2])[0]
    for k, value in zip([1, 2], got, strict=True):
        reference = _decimal_reference(big, (1, 1), k)
        assert float(abs(Decimal(float(value)) - reference) / reference) <= 1e-12


def test_a_member_without_attempts_does_not_count():
    """k < K: members past the first k draw nothing, so their counts do not change the score."""
    curve = ensemble_pass_at_k_curve(4, [[1, 4, 4], [1, 0, 0]], [1])
    assert curve[:, 0] == pytest.approx([0.25, 0.25], rel=1e-15)
    assert ensemble_pass_at_k_curve(4, [[0, 4, 4]], [2])[0, 0] == 1.0  # member 1 takes the second attempt


def test_no_prompts_gives_an_empty_curve():
    """Zero prompts x K members: a 0 x len(ks) result, not an error."""
    assert ensemble_pass_at_k_curve(5, np.zeros((0, 2), dtype=int), [1, 3]).shape == (0, 2)


# ---------------------------------------------------------------------------
# ensemble_pass_at_k_curve: refusals


@pytest.mark.parametrize(
    "c",
    [[1, 2], [[[1, 2]]], np.zeros((3, 0), dtype=int), 3],
    ids=["one-dimensional", "three-dimensional", "no-members", "scalar"],
)
def test_counts_must_be_prompts_by_members(c):
    """c is a prompts x K matrix with K >= 1."""
    with pytest.raises(ValueError, match="prompts x members"):
        ensemble_pass_at_k_curve(5, c, [1])


def test_k_above_n_times_members_is_refused():
    """The K members hold n·K samples in all: k = n·K + 1 is refused, naming the limit."""
    with pytest.raises(ValueError, match=r"k must be <= n x members = 10, got 11"):
        ensemble_pass_at_k_curve(5, [[1, 2]], [4, 11])
    with pytest.raises(ValueError, match=r"n x members = 15"):
        ensemble_pass_at_k_curve(5, [[1, 2, 0]], [16])


def test_no_member_is_given_more_attempts_than_its_pool():
    """k <= n·K never gives a member k_i > n: at k = n·K each member takes its whole pool (exactly 1 or 0)."""
    for n, members in [(5, 2), (6, 3), (4, 4)]:
        for k in range(1, n * members + 1):
            assert max(ensemble_budgets(k, members)) <= n
        correct = [[0] * members, [0] * (members - 1) + [1], [n] * members]
        curve = ensemble_pass_at_k_curve(n, correct, [n * members])
        assert curve[:, 0].tolist() == [0.0, 1.0, 1.0]


@pytest.mark.parametrize(
    ("c", "match"),
    [([[1, 6]], "c must be <= n"), ([[-1, 2]], "c must be >= 0"), ([[1.5, 2]], "integer counts")],
)
def test_bad_counts_of_an_attempting_member_are_refused(c, match):
    """Counts above n, negative or fractional are refused (members with attempts, k = 2 gives both one)."""
    with pytest.raises(ValueError, match=match):
        ensemble_pass_at_k_curve(5, c, [2])


@pytest.mark.parametrize("c", [[[1, 99]], [[1, -3]]])
def test_bad_counts_of_a_member_without_attempts_are_refused(c):
    """A count outside 0..n is refused whatever the budgets (here k = 1: member 1 draws nothing)."""
    with pytest.raises(ValueError):
        ensemble_pass_at_k_curve(5, c, [1])


# ---------------------------------------------------------------------------
# ensemble_scores and with_ensembles


def _member_table(counts: dict[str, int], levels: dict[str, int], n: int = 4) -> pd.DataFrame:
    """A member's per-prompt table, rows in the dict's order: prompt_id, level, num_correct, pass@1..n, maj@1."""
    ids = list(counts)
    c = [counts[p] for p in ids]
    ks = [1 << i for i in range(n.bit_length()) if (1 << i) <= n]
    table = pd.DataFrame({"prompt_id": ids, "level": [levels[p] for p in ids], "num_correct": c})
    for j, k in enumerate(ks):
        table[f"pass@{k}"] = pass_at_k_curve(n, c, ks)[:, j]
    table["maj@1"] = 0.5  # a column the ensemble does not score
    return table


LEVELS = {"p1": 1, "p2": 2, "p3": 1, "p4": 3}


def test_ensemble_scores_match_hand_computed_values_and_align_by_prompt_id():
    """Two members (n = 4), the second's rows reversed; pass@1 -> budgets (1, 0), pass@2 -> (1, 1), pass@4 -> (2, 2)."""
    a = _member_table({"p1": 1, "p2": 0, "p3": 4, "p4": 0}, LEVELS)
    b = _member_table({"p4": 3, "p3": 0, "p2": 0, "p1": 2}, LEVELS)
    table = ensemble_scores([a, b])
    assert list(table.columns) == ["prompt_id", "level", "num_correct", "pass@1", "pass@2", "pass@4"]
    assert table["prompt_id"].tolist() == ["p1", "p2", "p3", "p4"]
    assert table["level"].tolist() == [1, 2, 1, 3]
    assert table["num_correct"].tolist() == [3, 0, 4, 3]
    expected = {
        # a alone: c_a / 4
        "pass@1": [1 / 4, 0, 1, 0],
        # 1 − (1 − c_a/4)(1 − c_b/4)
        "pass@2": [1 - (3 / 4) * (2 / 4), 0, 1, 1 - 1 * (1 / 4)],
        # 1 − C(4−c_a, 2)/6 · C(4−c_b, 2)/6
        "pass@4": [1 - (3 / 6) * (1 / 6), 0, 1, 1],
    }
    for column, values in expected.items():
        np.testing.assert_allclose(table[column].to_numpy(), values, rtol=0, atol=1e-15, err_msg=column)


def test_ensemble_scores_member_order_decides_the_remainder():
    """At k = 1 only the first member draws: swapping the members changes pass@1, not pass@2 or pass@4."""
    a = _member_table({"p1": 1, "p2": 0, "p3": 4, "p4": 0}, LEVELS)
    b = _member_table({"p1": 2, "p2": 0, "p3": 0, "p4": 3}, LEVELS)
    ab, ba = ensemble_scores([a, b]), ensemble_scores([b, a])
    assert ba["pass@1"].tolist() == [2 / 4, 0, 0, 3 / 4]
    np.testing.assert_allclose(ab[["pass@2", "pass@4"]], ba[["pass@2", "pass@4"]], rtol=1e-15)


@pytest.mark.parametrize(
    "other",
    [
        {"p1": 1, "p2": 0, "p3": 0},  # one prompt missing
        {"p1": 1, "p2": 0, "p3": 0, "p4": 1, "p5": 2},  # one prompt more
        {"p1": 1, "p2": 0, "p3": 0, "p9": 1},  # one prompt different
    ],
)
def test_ensemble_scores_refuse_members_on_different_prompts(other):
    """Members evaluated on different prompts cannot be paired prompt by prompt."""
    a = _member_table({"p1": 1, "p2": 0, "p3": 4, "p4": 0}, LEVELS)
    b = _member_table(other, {**LEVELS, "p5": 1, "p9": 2})
    with pytest.raises(ValueError, match="different prompts"):
        ensemble_scores([a, b])


def test_ensemble_scores_refuse_members_of_different_sample_counts():
    """A member of n = 8 beside one of n = 4: their counts are of different n, so no single estimate holds."""
    a = _member_table({"p1": 1, "p2": 0, "p3": 4, "p4": 0}, LEVELS, n=4)
    b = _member_table({"p1": 1, "p2": 0, "p3": 8, "p4": 0}, LEVELS, n=8)
    with pytest.raises(ValueError, match=r"different numbers of samples per prompt: \[4, 8\]"):
        ensemble_scores([a, b])


def test_ensemble_scores_refuse_members_that_disagree_on_a_level():
    """The same prompt ids with another level: not the same test set."""
    a = _member_table({"p1": 1, "p2": 0, "p3": 4, "p4": 0}, LEVELS)
    b = _member_table({"p1": 1, "p2": 0, "p3": 4, "p4": 0}, {**LEVELS, "p4": 2})
    with pytest.raises(ValueError, match="different levels"):
        ensemble_scores([a, b])


def test_with_ensembles_pairs_the_members_seed_by_seed():
    """Seed s of the ensemble is scored from every member's table s; the variants' tables are kept."""
    a = [
        _member_table({"p1": 1, "p2": 0, "p3": 4, "p4": 0}, LEVELS),
        _member_table({"p1": 4, "p2": 1, "p3": 0, "p4": 2}, LEVELS),
    ]
    b = [
        _member_table({"p1": 2, "p2": 0, "p3": 0, "p4": 3}, LEVELS),
        _member_table({"p1": 0, "p2": 3, "p3": 1, "p4": 0}, LEVELS),
    ]
    ce = [_member_table({"p1": 0, "p2": 0, "p3": 0, "p4": 0}, LEVELS)] * 2
    per_prompt = {"a": a, "b": b, "ce": ce}
    scored = with_ensembles(per_prompt, {"ab": ["a", "b"]})
    assert list(scored) == ["a", "b", "ce", "ab"]
    assert "ab" not in per_prompt, "the input mapping is left as it was"
    assert scored["a"] is a and scored["ce"] is ce
    assert len(scored["ab"]) == 2
    for s in range(2):
        pd.testing.assert_frame_equal(scored["ab"][s], ensemble_scores([a[s], b[s]]))
    # crossing the seeds would give other numbers: the pairing is visible
    assert scored["ab"][1]["num_correct"].tolist() == [4, 4, 1, 2]
    assert not np.allclose(scored["ab"][1]["pass@2"], ensemble_scores([a[1], b[0]])["pass@2"])
    assert with_ensembles(per_prompt, {}) == per_prompt


def test_with_ensembles_refuses_members_with_different_seed_counts():
    """A member with fewer seeds than another cannot be paired: the error names the ensemble."""
    a = [_member_table({"p1": 1, "p2": 0, "p3": 4, "p4": 0}, LEVELS)] * 2
    b = [_member_table({"p1": 2, "p2": 0, "p3": 0, "p4": 3}, LEVELS)]
    with pytest.raises(ValueError, match="ensemble 'ab'.*different numbers of seeds"):
        with_ensembles({"a": a, "b": b}, {"ab": ["a", "b"]})


# ---------------------------------------------------------------------------
# Config: compare.ensembles, run_ensembles, a primary endpoint naming an ensemble


def _params(edit):
    """params.yaml with ``edit`` applied to a deep copy of its raw mapping, parsed."""
    raw = copy.deepcopy(RAW)
    edit(raw)
    return parse_params(raw)


def _ensembles(ensembles: dict, **compare):
    return lambda raw: raw["compare"].update(ensembles=ensembles, **compare)


def _refusal(edit) -> str:
    """The error message of a refused params edit."""
    with pytest.raises(ParamsError) as err:
        _params(edit)
    return str(err.value)


@pytest.mark.parametrize(
    ("ensembles", "name", "says"),
    [
        ({"ce": ["pass_at_n", "rloo"]}, "ce", "the name of a catalog variant"),
        ({"solo": ["pass_at_n"]}, "solo", "two or more distinct member variants"),
        ({"twice": ["pass_at_n", "pass_at_n"]}, "twice", "two or more distinct member variants"),
        ({"ghost": ["pass_at_n", "nope"]}, "ghost", "['nope'] not in the catalog"),
        ({"ok": ["pass_at_n", "ce"], "bad": ["ce"]}, "bad", "two or more"),
    ],
    ids=["named-like-a-variant", "one-member", "duplicate-member", "unknown-member", "second-of-two"],
)
def test_a_bad_ensemble_is_refused_naming_its_key(ensembles, name, says):
    """The refusal names compare.ensembles.<name> and says why, on one line."""
    message = _refusal(_ensembles(ensembles))
    line = next((line for line in message.splitlines() if f"compare.ensembles.{name}:" in line), None)
    assert line is not None, message
    assert says in line


def test_run_ensembles_keeps_the_ensembles_whose_members_all_run():
    """study.run = [warmup, ce, pass_at_n, rloo, loo_pass_at_k]: an ensemble with pass_at_n_4 is not scored."""
    params = _params(_ensembles({"run": ["pass_at_n", "rloo", "ce"], "half": ["pass_at_n", "pass_at_n_4"]}))
    assert params.compare.ensembles == {"run": ["pass_at_n", "rloo", "ce"], "half": ["pass_at_n", "pass_at_n_4"]}
    assert params.run_ensembles == {"run": ["pass_at_n", "rloo", "ce"]}
    assert _params(lambda raw: None).run_ensembles == {}


def test_a_primary_naming_an_ensemble_scored_by_maj_is_refused():
    """An ensemble has pass@k only: a primary with maj@k on it is refused; maj@64 on a plain variant is fine."""
    message = _refusal(_ensembles({"ens": ["pass_at_n", "rloo"]}, primary={"variant": "ens", "score": "maj@64"}))
    assert "compare.primary.score 'maj@64'" in message and "pass@k only" in message
    assert _params(lambda raw: raw["compare"].update(primary={"variant": "pass_at_n", "score": "maj@64"}))


def test_a_primary_naming_an_ensemble_of_run_variants_is_the_endpoint():
    """primary.variant = an ensemble whose members all run: primary_endpoint carries its name."""
    params = _params(_ensembles({"ens": ["pass_at_n", "rloo"]}, primary={"variant": "ens", "score": "pass@64"}))
    assert params.primary_not_run == []
    assert params.primary_endpoint == ("ens", "pass@64", "ce", "test")
    assert params.run_ensembles == {"ens": ["pass_at_n", "rloo"]}


def test_a_primary_naming_an_ensemble_with_a_member_not_run_is_untested():
    """A member left out of study.run leaves the endpoint untested: primary_not_run names the member."""
    params = _params(_ensembles({"ens": ["pass_at_n", "pass_at_n_4"]}, primary={"variant": "ens", "score": "pass@64"}))
    assert params.primary_not_run == ["pass_at_n_4"]
    assert params.primary_endpoint is None and params.run_ensembles == {}


def test_a_primary_naming_neither_variant_nor_ensemble_is_refused():
    """A primary variant that is neither in the catalog nor an ensemble is refused, listing both."""
    message = _refusal(_ensembles({"ens": ["pass_at_n", "rloo"]}, primary={"variant": "nope", "score": "pass@4"}))
    assert "compare.primary.variant 'nope'" in message and "'ens'" in message


def test_a_primary_baseline_naming_an_ensemble_scored_by_maj_is_refused():
    """The ensemble as the primary's baseline, scored by maj@64: refused like an ensemble variant."""
    _refusal(
        _ensembles(
            {"ens": ["pass_at_n", "rloo"]}, primary={"variant": "pass_at_n", "baseline": "ens", "score": "maj@64"}
        )
    )


def test_the_dco_step_study_names_its_ensemble_as_primary():
    """pipelines/dco_step: the primary is the DCO_step ensemble, and all its members run."""
    params = load_params(ROOT / "pipelines" / "dco_step" / "params.yaml")
    name = params.compare.primary.variant
    assert name in params.compare.ensembles and name in params.run_ensembles
    assert params.primary_endpoint is not None and params.primary_endpoint[0] == name


# ---------------------------------------------------------------------------
# DCO_step trains on step rows


def test_only_dco_step_trains_on_steps():
    """StepDCO.trains_on_steps is True; every other objective's is False."""
    assert StepDCO.trains_on_steps is True
    others = {cls.name: cls.trains_on_steps for cls in OBJECTIVES if cls is not StepDCO}
    assert others and not any(others.values()), others


def test_step_rows_of_proof_rows_are_the_split_in_steps():
    """rewrite's proof rows expand to exactly the train split written as steps, in the same order."""
    problem = get_problem("rewrite")
    proofs = rewrite.generate_split("train", 5, seed=0)
    steps = rewrite.generate_split("train", 5, seed=0, train_rows="steps")
    assert len(steps) > len(proofs)
    assert problem.step_rows_of(proofs) == steps
    assert [r["id"] for r in problem.step_rows_of(proofs)] == [r["id"] for r in steps]


def test_step_rows_pass_through_and_the_expansion_is_idempotent():
    """Step rows (id ending -s<digits>) are kept as they are, so applying step_rows_of twice is once."""
    problem = get_problem("rewrite")
    proofs = rewrite.generate_split("train", 5, seed=0)
    steps = problem.step_rows_of(proofs)
    assert problem.step_rows_of(steps) == steps
    assert problem.step_rows_of(problem.step_rows_of(proofs)) == problem.step_rows_of(proofs)
    mixed = [proofs[0], steps[-1]]  # a proof row, then another goal's last step row
    assert problem.step_rows_of(mixed) == rewrite.step_rows(
        rewrite.parse_prompt(proofs[0]["prompt"])[0], proofs[0]["level"]
    ) + [steps[-1]]
    assert problem.step_rows_of([]) == []


def test_step_rows_of_copies_the_step_rows_it_keeps():
    """A kept step row is a copy: editing the result leaves the caller's rows alone."""
    problem = get_problem("rewrite")
    steps = rewrite.generate_split("train", 2, seed=0, train_rows="steps")
    kept = problem.step_rows_of(steps)
    kept[0]["completion"] = "changed"
    assert steps[0]["completion"] != "changed"


def test_a_dco_step_variant_on_a_problem_without_steps_is_refused():
    """Problem arith has no step_rows_of: a dco_step variant is refused, naming variants.<name>."""
    assert not hasattr(get_problem("arith"), "step_rows_of")
    message = _refusal(lambda raw: raw["variants"].update(stepper={"objective": "dco_step"}))
    line = next((line for line in message.splitlines() if "variants.stepper:" in line), None)
    assert line is not None, message
    assert "'dco_step' trains on proof steps" in line and "'arith'" in line
