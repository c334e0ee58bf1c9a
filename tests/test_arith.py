"""The arith problem: generated traces, levels, disjoint splits, rows, parquet, registry.

Answers are checked with an independent evaluator: Python's ``ast`` over the
(trusted, generated) question with ``fractions.Fraction`` arithmetic. The level
table is restated here by hand from the module docstring, not read from
``LEVEL_SPECS``.
"""

from __future__ import annotations

import ast
import itertools
import operator
import re
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aligntrain.grading import is_correct
from aligntrain.problems import PROBLEMS, Problem, arith, get_problem
from aligntrain.problems.arith import (
    ALPHABET,
    MAX_EXAMPLE_CHARS,
    format_prompt,
    generate_split,
    generate_splits,
    load_rows,
    make_row,
    partition_of,
    pretrain_corpus,
    save_rows,
    solution_steps,
    validate_row,
    worked_completion,
)

# level -> (operand ranges by position, operators, factor range right of "*", max "*")
HAND_LEVEL_TABLE = {
    1: ([(0, 199), (0, 9)], "+-", None, 0),
    2: ([(0, 9)] * 3, "+-*", (2, 9), 2),
    3: ([(0, 99)] * 3, "+-", None, 0),
    4: ([(0, 99)] * 3, "+-*", (2, 9), 1),
    5: ([(0, 99)] * 4, "+-*", (2, 9), 2),
}
EXAMPLE = re.compile(r"Q: (?P<question>-?[0-9+\-*]+)=\?\nA: (?P<trace>[^\n]*) #### (?P<answer>-?[0-9]+)\n")


def ast_value(expression: str) -> Fraction:
    """Independent evaluator of a trusted integer expression (never eval)."""
    binary = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}

    def value(node: ast.AST) -> Fraction:
        if isinstance(node, ast.BinOp):
            return binary[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return Fraction(node.value)
        raise AssertionError(f"unexpected node {ast.dump(node)} in {expression!r}")

    return value(ast.parse(expression, mode="eval").body)


def operator_count(expression: str) -> int:
    return len(re.findall(r"[-+*]", expression.lstrip("-")))


@pytest.fixture(scope="module")
def splits():
    return generate_splits({"train": 1000, "validation": 250, "test": 250}, seed=0)


# ---------------------------------------------------------------------------
# One question


def test_hand_worked_examples():
    assert solution_steps("47+83*6-29") == ["47+498-29", "545-29", "516"]
    assert solution_steps("3-8+4") == ["-5+4", "-1"]
    assert solution_steps("2*3*4") == ["6*4", "24"]
    assert solution_steps("5-2*3*4+1") == ["5-6*4+1", "5-24+1", "-19+1", "-18"]
    assert solution_steps("147+8") == ["155"]
    assert format_prompt("47+83*6-29") == "Q: 47+83*6-29=?\nA: "
    assert worked_completion("47+83*6-29") == "47+498-29=545-29=516 #### 516\n"
    row = make_row("9-3-8", 2)
    assert row == {
        "id": row["id"],
        "level": 2,
        "prompt": "Q: 9-3-8=?\nA: ",
        "completion": "6-8=-2 #### -2\n",
        "answer": "-2",
    }
    assert re.fullmatch(r"arith-L2-[0-9a-f]{16}", row["id"])
    assert make_row("9-3-8", 2)["id"] == row["id"]  # stable
    assert make_row("9-3-7", 2)["id"] != row["id"]


def test_every_trace_is_correct_step_by_step(splits):
    rows = [row for rows in splits.values() for row in rows]
    for row in rows:
        text = row["prompt"] + row["completion"]
        match = EXAMPLE.fullmatch(text)
        assert match, text
        question, steps = match["question"], match["trace"].split("=")
        truth = ast_value(question)
        assert truth.denominator == 1
        assert row["answer"] == match["answer"] == steps[-1] == str(truth.numerator), text
        # every intermediate expression has the question's value, one operation less each time
        assert [ast_value(step) for step in steps] == [truth] * len(steps), text
        assert [operator_count(step) for step in steps] == list(range(operator_count(question) - 1, -1, -1))
        assert is_correct(row["completion"], row["answer"])


def test_questions_follow_the_level_table(splits):
    rows = [row for rows in splits.values() for row in rows]
    for row in rows:
        question = EXAMPLE.fullmatch(row["prompt"] + row["completion"])["question"]
        ranges, operators, factor_range, max_products = HAND_LEVEL_TABLE[row["level"]]
        operands = [int(token) for token in re.findall(r"[0-9]+", question)]
        ops = re.findall(r"[-+*]", question)
        assert len(operands) == len(ranges), question
        assert set(ops) <= set(operators) and ops.count("*") <= max_products, question
        for index, value in enumerate(operands):
            low, high = factor_range if index and ops[index - 1] == "*" else ranges[index]
            assert low <= value <= high, question
    for level in (2, 4, 5):  # the product levels do produce products
        assert any("*" in row["prompt"] for row in rows if row["level"] == level)


def test_level_spread_in_steps_and_length(splits):
    rows = splits["train"]
    mean_steps = [np.mean([operator_count(r["prompt"][3:-6]) for r in rows if r["level"] == lv]) for lv in range(1, 6)]
    mean_chars = [np.mean([len(r["completion"]) for r in rows if r["level"] == lv]) for lv in range(1, 6)]
    assert mean_steps[0] == 1 and mean_steps[1] == mean_steps[2] == mean_steps[3] == 2 and mean_steps[4] == 3
    assert all(a < b for a, b in itertools.pairwise(mean_chars)), mean_chars


def test_lengths_and_alphabet_are_bounded(splits):
    texts = [r["prompt"] + r["completion"] for rows in splits.values() for r in rows]
    texts += pretrain_corpus(2000, seed=3)
    # Worst cases: every operand at an extreme of its hand-table range.
    for ranges, operators, factor_range, max_products in HAND_LEVEL_TABLE.values():
        for ops in itertools.product(operators, repeat=len(ranges) - 1):
            if ops.count("*") > max_products:
                continue
            pools = [ranges[0]] + [factor_range if op == "*" else r for op, r in zip(ops, ranges[1:])]
            for operands in itertools.product(*[{low, min(max(10, low), high), high} for low, high in pools]):
                question = str(operands[0]) + "".join(f"{op}{v}" for op, v in zip(ops, operands[1:]))
                texts.append(format_prompt(question) + worked_completion(question))
    assert max(len(text) for text in texts) <= MAX_EXAMPLE_CHARS
    assert max(len(text) for text in texts) == 53  # "Q: 10-99-99+10=?\nA: -89-99+10=-188+10=-178 #### -178\n"
    assert set("".join(texts)) <= ALPHABET
    assert len(ALPHABET) == 21


# ---------------------------------------------------------------------------
# Splits


def test_splits_are_disjoint_unique_and_balanced(splits):
    questions = {split: [r["prompt"] for r in rows] for split, rows in splits.items()}
    for split, prompts in questions.items():
        assert len(prompts) == len(set(prompts)), split
        assert len({r["id"] for r in splits[split]}) == len(prompts)
        counts = np.bincount([r["level"] for r in splits[split]], minlength=6)[1:]
        assert counts.max() - counts.min() <= 1 and counts.sum() == len(prompts)
    for first, second in itertools.combinations(questions, 2):
        assert not set(questions[first]) & set(questions[second]), (first, second)


def test_splits_are_disjoint_across_seeds():
    by_seed = [generate_splits({"train": 500, "validation": 100, "test": 100}, seed=seed) for seed in (0, 1, 2)]
    owner: dict[str, str] = {}
    for splits in by_seed:
        for split, rows in splits.items():
            for row in rows:
                assert owner.setdefault(row["prompt"], split) == split


def test_generation_is_deterministic_and_seeded(splits):
    again = generate_splits({"train": 1000, "validation": 250, "test": 250}, seed=0)
    assert again == splits
    other = generate_splits({"train": 1000, "validation": 250, "test": 250}, seed=1)
    for split in splits:
        overlap = {r["id"] for r in splits[split]} & {r["id"] for r in other[split]}
        assert len(overlap) < len(splits[split]) / 2, split
    assert generate_split("test", 40, levels=[3], seed=5) == generate_split("test", 40, levels=[3], seed=5)
    assert {r["level"] for r in generate_split("test", 40, levels=[3], seed=5)} == {3}


def test_partition_fractions():
    rng = __import__("random").Random(0)
    questions = {arith.sample_question(level, rng) for level in (3, 4, 5) for _ in range(8000)}
    shares = {split: 0 for split in arith.SPLITS}
    for question in questions:
        shares[partition_of(question)] += 1
    n = len(questions)
    for split, expected in {"train": 0.8, "validation": 0.1, "test": 0.1}.items():
        # within 4 standard deviations of a binomial share
        assert abs(shares[split] / n - expected) < 4 * (expected * (1 - expected) / n) ** 0.5, shares


def test_pretrain_corpus_is_disjoint_from_validation_and_test():
    held_out = set()
    for seed in (0, 1):
        splits = generate_splits({"validation": 300, "test": 300}, seed=seed)
        held_out |= {EXAMPLE.fullmatch(r["prompt"] + r["completion"])["question"] for s in splits.values() for r in s}
    corpus = pretrain_corpus(5000, seed=0)
    questions = []
    for text in corpus:
        match = EXAMPLE.fullmatch(text)
        assert match, text
        assert match["answer"] == str(ast_value(match["question"]).numerator), text
        questions.append(match["question"])
    assert not set(questions) & held_out
    # the small level-1 space is heavily covered, so held-out level-1 questions were dodged, not missed
    level_1 = [q for q in questions if re.fullmatch(r"[0-9]+[-+][0-9]", q)]
    assert len(set(level_1)) > 500
    drills = [q for q in questions if operator_count(q) == 1]
    assert 0.2 < len(drills) / len(corpus) < 0.5  # drills plus genuine level-1 questions
    assert pretrain_corpus(300, seed=0) == corpus[:300]
    assert pretrain_corpus(300, seed=1) != corpus[:300]
    only_drills = pretrain_corpus(200, seed=0, drill_fraction=1.0)
    assert all(operator_count(EXAMPLE.fullmatch(t)["question"]) == 1 for t in only_drills)


def test_generation_argument_errors():
    with pytest.raises(ValueError, match="sizes"):
        generate_splits({"dev": 10})
    with pytest.raises(ValueError, match="sizes"):  # level 1 holds only ~400 test questions
        generate_splits({"test": 2000}, levels=[1])
    with pytest.raises(ValueError, match="levels"):
        generate_split("test", 10, levels=[6])
    with pytest.raises(ValueError, match="levels"):
        generate_split("test", 10, levels=[])
    with pytest.raises(ValueError, match="split"):
        generate_split("dev", 10)
    with pytest.raises(ValueError, match="n must"):
        generate_split("test", -1)
    with pytest.raises(ValueError, match="drill_fraction"):
        pretrain_corpus(10, drill_fraction=1.5)


# ---------------------------------------------------------------------------
# Row validation and parquet


@pytest.fixture()
def good_row():
    return make_row("47+83*6-29", 5)


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("answer", lambda row: row.pop("answer")),
        ("extra", lambda row: row.update(extra=1)),
        ("level", lambda row: row.update(level=7)),
        ("level", lambda row: row.update(level=True)),
        ("level", lambda row: row.update(level="5")),
        ("level", lambda row: row.update(level=1)),  # a level-5 question labelled level 1
        ("prompt", lambda row: row.update(prompt="47+83*6-29=?")),
        ("prompt", lambda row: row.update(prompt="Q: 47+83*6-29+1+1=?\nA: ")),
        ("prompt", lambda row: row.update(prompt=None)),
        ("completion", lambda row: row.update(completion="47+498-29=545-29=517 #### 516\n")),
        ("completion", lambda row: row.update(completion=row["completion"].rstrip("\n"))),
        ("answer", lambda row: row.update(answer="517")),
        ("answer", lambda row: row.update(answer="516.0")),
        ("id", lambda row: row.update(id=row["id"][:-1] + "x")),
    ],
)
def test_validate_row_names_the_id_and_field(good_row, field, change):
    validate_row(good_row)
    identifier = good_row["id"]
    bad = dict(good_row)
    change(bad)
    with pytest.raises(ValueError) as error:
        validate_row(bad)
    message = str(error.value)
    assert repr(bad.get("id", identifier)) in message and repr(field) in message, message


def test_validate_row_without_id_or_mapping(good_row):
    with pytest.raises(ValueError, match="'id'"):
        validate_row({k: v for k, v in good_row.items() if k != "id"})
    with pytest.raises(ValueError, match="row must be a mapping"):
        validate_row([good_row])  # type: ignore[arg-type]
    validate_row({**good_row, "level": np.int64(5)})  # as read back through pandas


def test_parquet_round_trip_is_atomic(tmp_path, splits, monkeypatch):
    path = tmp_path / "test.parquet"
    save_rows(splits["test"], path)
    assert load_rows(path) == splits["test"]
    save_rows(splits["validation"], path)  # replaces
    assert load_rows(path) == splits["validation"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test.parquet"]

    def failing_write(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", failing_write)
    with pytest.raises(OSError):
        save_rows(splits["test"], path)
    monkeypatch.undo()
    assert load_rows(path) == splits["validation"]  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test.parquet"]  # no temp left


def test_malformed_rows_stop_save_and_load(tmp_path, splits):
    rows = [dict(r) for r in splits["test"][:5]]
    rows[3]["answer"] = "0" if rows[3]["answer"] != "0" else "1"
    with pytest.raises(ValueError, match=re.escape(repr(rows[3]["id"]))):
        save_rows(rows, tmp_path / "bad.parquet")
    assert not list(tmp_path.iterdir())
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match=re.escape(repr(rows[3]["id"]))):
        load_rows(tmp_path / "bad.parquet")


# ---------------------------------------------------------------------------
# Registry and problem object


def test_registry():
    problem = get_problem("arith")
    assert isinstance(problem, Problem)
    assert problem.name == "arith" and problem.binary_rewards and problem.levels == (1, 2, 3, 4, 5)
    assert problem.stop_text == "\n"
    assert "arith" in PROBLEMS
    with pytest.raises(ValueError, match="arith"):
        get_problem("hydrox")


def test_problem_scores_completions(good_row):
    problem = get_problem("arith")
    assert problem.reward(good_row["completion"], good_row) == 1.0
    assert problem.reward("47+498-29=545-29=515 #### 515\n", good_row) == 0.0
    assert problem.reward("#### 1032/2\n", good_row) == 1.0  # equivalent form
    assert problem.reward("garbage ####\n", good_row) == 0.0
    assert problem.answer_class(good_row["completion"]) == "516" == problem.gold_class(good_row)
    assert problem.answer_class("no answer") is None
    verdict = problem.grade("#### 515\n", good_row)
    assert (verdict.answer, verdict.answer_class, verdict.correct, verdict.reward) == ("515", "515", False, 0.0)
    with pytest.raises(ValueError, match="answer"):
        problem.gold_class({**good_row, "answer": "x"})
    rows = problem.generate_splits({"train": 10, "test": 5}, levels=[1, 2], seed=0)
    assert [len(rows["train"]), len(rows["test"])] == [10, 5]
    assert len(problem.pretrain_corpus(7, seed=0)) == 7
