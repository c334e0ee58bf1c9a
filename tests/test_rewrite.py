"""The rewrite problem: the step checker, gold proofs, levels, disjoint splits, step and proof rows, grading.

The checker is compared with an independent reference: Python's ``ast`` reads the (trusted, generated)
state, the leftmost matching operation on two numbers is replaced by hand, and the trees are compared.
The level table is restated here from the module docstring, not read from ``LEVEL_SPECS``.
"""

from __future__ import annotations

import ast
import operator
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aligntrain.problems import PROBLEMS, Problem, get_problem, rewrite
from aligntrain.problems.rewrite import (
    Invalid,
    check_proof,
    check_step,
    generate_split,
    generate_splits,
    gold_proof,
    is_proved,
    parse_expression,
    partition_of,
    pretrain_corpus,
    proof_row,
    step_rows,
    valid_tactics,
    validate_row,
)

# level -> (steps of every proof, valid tactics at the start, distinct proofs) from the module's table
LEVEL_TABLE = {1: (1, 1, 1), 2: (3, 2, 2), 3: (3, 1, 1), 4: (7, 4, 80), 5: (7, 1, 1)}
AST_OPS = {"+": (ast.Add, operator.add), "-": (ast.Sub, operator.sub), "*": (ast.Mult, operator.mul)}


@pytest.fixture(scope="module")
def splits_small():
    return generate_splits({"train": 150, "validation": 60, "test": 60}, seed=3)


# ---------------------------------------------------------------------------
# Independent reference of one step


def _value(text: str) -> int:
    """The value of a trusted generated expression, by Python's ast and operator (not the module)."""

    def walk(node):
        if isinstance(node, ast.Constant):
            return node.value
        return next(f for k, f in AST_OPS.values() if isinstance(node.op, k))(walk(node.left), walk(node.right))

    return walk(ast.parse(text, mode="eval").body)


def _reference_step(state: str, op: str, a: int, b: int, c: int) -> str | None:
    """ast.dump of the state with its leftmost ``a op b`` (two number operands) replaced by c; None if no step."""
    if AST_OPS[op][1](a, b) != c:
        return None
    tree = ast.parse(state, mode="eval")
    matches = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.BinOp)
        and isinstance(node.op, AST_OPS[op][0])
        and isinstance(node.left, ast.Constant)
        and isinstance(node.right, ast.Constant)
        and (node.left.value, node.right.value) == (a, b)
    ]
    if not matches:
        return None
    target = min(matches, key=lambda node: node.col_offset)

    class Replace(ast.NodeTransformer):
        def visit_BinOp(self, node):
            return ast.Constant(c) if node is target else self.generic_visit(node)

    return ast.dump(Replace().visit(tree))


def _redexes(state: str) -> list[tuple[str, int, int]]:
    """Operations on two numbers, left to right, distinct (by ast)."""
    found = []
    nodes = [n for n in ast.walk(ast.parse(state, mode="eval")) if isinstance(n, ast.BinOp)]
    for node in sorted(nodes, key=lambda n: n.col_offset):
        if isinstance(node.left, ast.Constant) and isinstance(node.right, ast.Constant):
            op = next(s for s, (k, _) in AST_OPS.items() if isinstance(node.op, k))
            if (op, node.left.value, node.right.value) not in found:
                found.append((op, node.left.value, node.right.value))
    return found


# ---------------------------------------------------------------------------
# The checker, exact cases


@pytest.mark.parametrize(
    ("state", "tactic", "after"),
    [
        ("2*3+4*5", "eval 2*3=6", "6+4*5"),
        ("2*3+4*5", "eval 4*5=20", "2*3+20"),
        ("6+4*5", "eval 4*5=20", "6+20"),
        ("6+20", "eval 6+20=26", "26"),
        ("3*4+3*4", "eval 3*4=12", "12+3*4"),  # the leftmost of two equal operations
        ("1+2+3", "eval 1+2=3", "3+3"),
        ("7-(2+3)", "eval 2+3=5", "7-5"),
        ("(2+3)*4", "eval 2+3=5", "5*4"),
        ("(91-41-24)*9", "eval 91-41=50", "(50-24)*9"),
        ("10-(4-1)-2", "eval 4-1=3", "10-3-2"),
        ("0*7", "eval 0*7=0", "0"),
        ("5-5", "eval 5-5=0", "0"),
    ],
)
def test_a_valid_tactic_rewrites_the_leftmost_operation(state, tactic, after):
    assert check_step(state, tactic) == after
    op = next(o for o in "+-*" if o in tactic.split(" ")[1])
    a, rest = tactic.split(" ")[1].split(op, 1)
    b, c = rest.split("=")
    assert ast.dump(ast.parse(after, mode="eval")) == _reference_step(state, op, int(a), int(b), int(c))


@pytest.mark.parametrize(
    ("state", "tactic", "reason"),
    [
        ("1+2+3", "eval 2+3=5", "no operation 2+3"),  # the tree is (1+2)+3: 2+3 is no operation of it
        ("2*3+4", "eval 3+4=7", "no operation 3+4"),
        ("2*3+4*5", "eval 6+20=26", "no operation 6+20"),
        ("2*3+4*5", "eval 2*3=7", "2*3 is 6, not 7"),
        ("7-(2+3)", "eval 7-2=5", "no operation 7-2"),
        ("26", "eval 6+20=26", "no operation"),  # a proved state has no step left
        ("2*3+4*5", "eval 2*3=06", "no leading zeros"),
        ("2*3+4*5", "eval 02*3=6", "no leading zeros"),
        ("2*3+4*5", "eval 1234567*1=1234567", "at most 6 digits"),
        ("2*3+4*5", "eval 2 * 3=6", "not of the form"),
        ("2*3+4*5", "eval  2*3=6", "not of the form"),
        ("2*3+4*5", "eval 2*3=6 ", "not of the form"),
        ("2*3+4*5", " eval 2*3=6", "not of the form"),
        ("2*3+4*5", "eval 2*3", "not of the form"),
        ("2*3+4*5", "2*3=6", "not of the form"),
        ("2*3+4*5", "evaleval 2*3=6", "not of the form"),
        ("5-7", "eval 5-7=-2", "not of the form"),
        ("2*3+4*5", "EVAL 2*3=6", "outside the tactic alphabet"),
        ("2*3+4*5", "eval 2*3=6\n", "outside the tactic alphabet"),
        ("2*3+4*5", "eval 2*3=6; eval 4*5=20", "outside the tactic alphabet"),
        ("2*3+4*5", "eval ２*3=6", "outside the tactic alphabet"),  # a full-width digit
        ("2*3+4*5", "eval (2*3)=6", "outside the tactic alphabet"),
        ("2*3+4*5", "__import__('os').system('true')", "outside the tactic alphabet"),
        ("2*3+4*5", "eval 2**3=8", "not of the form"),
        ("2*3+4*5", "", "empty"),
        ("2*3+4*5", "eval " + "1" * 70, "longer than 64"),
        ("2*3+4*5", None, "is text"),
        ("2*3+4*5", 6, "is text"),
        ("2*3+4*5", b"eval 2*3=6", "is text"),
    ],
)
def test_an_invalid_tactic_gives_invalid_with_its_reason(state, tactic, reason):
    result = check_step(state, tactic)
    assert isinstance(result, Invalid), result
    assert reason in result.reason


@pytest.mark.parametrize("state", ["", "2*3+", "(2*3)+4", "2+(3*4)", "02+3", "2 + 3", "-2+3", "2+3)", "(2+3", "x"])
def test_a_state_must_be_a_canonical_expression(state):
    with pytest.raises(ValueError):
        check_step(state, "eval 2+3=5")


def test_is_proved_only_at_the_goals_number():
    assert is_proved("26", 26)
    assert not is_proved("26", 25)
    assert not is_proved("6+20", 26)
    assert not is_proved("026", 26)
    assert not is_proved(" 26", 26)
    assert not is_proved(None, 26)
    assert not is_proved(26, 26)


def test_check_proof_stops_at_the_first_invalid_tactic():
    check = check_proof("2*3+4*5", 26, ["eval 2*3=6", "eval 4*5=21", "eval 6+21=27"])
    assert check.states == ("2*3+4*5", "6+4*5") and not check.proved
    assert check.failure == Invalid("4*5 is 20, not 21")
    complete = check_proof("2*3+4*5", 26, ["eval 4*5=20", "eval 2*3=6", "eval 6+20=26"])  # another order
    assert complete.proved and complete.failure is None and complete.states[-1] == "26"
    partial = check_proof("2*3+4*5", 26, ["eval 4*5=20"])
    assert not partial.proved and partial.failure is None
    assert check_proof("1+1", 2, ["eval 1+1=2"] * 65).failure == Invalid("more than 64 tactics")


# ---------------------------------------------------------------------------
# Gold proofs and levels


def test_gold_proofs_check_step_by_step(splits_small):
    for rows_ in splits_small.values():
        for row in rows_:
            expression, value, done = rewrite.parse_prompt(row["prompt"])
            assert done == [] and value == _value(expression) == int(row["answer"])
            state = expression
            for tactic in gold_proof(expression):
                op, a, b = _redexes(state)[0]  # the gold step is the leftmost operation on two numbers
                assert tactic == f"eval {a}{op}{b}={AST_OPS[op][1](a, b)}"
                after = check_step(state, tactic)
                assert ast.dump(ast.parse(after, mode="eval")) == _reference_step(state, op, a, b, AST_OPS[op][1](a, b))
                assert _value(after) == value  # a step keeps the value
                state = after
            assert is_proved(state, value)
            assert check_proof(expression, value, gold_proof(expression)).proved


def test_valid_tactics_are_the_operations_on_two_numbers(splits_small):
    states = set()
    for row in splits_small["train"]:
        expression = rewrite.parse_prompt(row["prompt"])[0]
        states.add(expression)
        for tactic in gold_proof(expression)[:-1]:
            expression = check_step(expression, tactic)
            states.add(expression)
    for state in states:
        expected = [f"eval {a}{op}{b}={AST_OPS[op][1](a, b)}" for op, a, b in _redexes(state)]
        assert valid_tactics(state) == expected
        assert all(isinstance(check_step(state, t), str) for t in expected)


def _count_proofs(state: str) -> int:
    options = valid_tactics(state)
    return 1 if not options else sum(_count_proofs(check_step(state, t)) for t in options)


@pytest.mark.parametrize("level", sorted(LEVEL_TABLE))
def test_levels_have_the_documented_length_width_and_number_of_proofs(level):
    steps, width, proofs = LEVEL_TABLE[level]
    rng = random.Random(level)
    counts = set()
    for _ in range(40):
        expression = rewrite.sample_expression(level, rng)
        assert rewrite.level_of(expression) == level
        assert len(gold_proof(expression)) == steps == sum(expression.count(o) for o in "+-*")
        assert len(valid_tactics(expression)) <= width
        counts.add(_count_proofs(expression))
        if width == 1:  # narrow: one tactic at every state of the proof
            state = expression
            for tactic in gold_proof(expression):
                assert valid_tactics(state) == [tactic]
                state = check_step(state, tactic)
        assert 0 <= _value(expression) <= rewrite.MAX_VALUE
    assert max(counts) == proofs  # fewer only where two operations are equal


def test_the_wide_long_level_has_80_proofs():
    """7!/(7·3·3) orders of a balanced tree of 7 operations (hook-length formula for trees)."""
    assert _count_proofs("1+2+(3+4)+(5+6+(7+8))") == 80
    assert len(valid_tactics("1+2+(3+4)+(5+6+(7+8))")) == 4


# ---------------------------------------------------------------------------
# Splits


def _goals(rows_) -> set[str]:
    return {rewrite.parse_prompt(r["prompt"])[0] for r in rows_}


def test_splits_are_disjoint_unique_and_deterministic(splits_small):
    goals = {split: _goals(rows_) for split, rows_ in splits_small.items()}
    assert {split: len(g) for split, g in goals.items()} == {"train": 150, "validation": 60, "test": 60}
    assert not goals["train"] & goals["validation"]
    assert not goals["train"] & goals["test"]
    assert not goals["validation"] & goals["test"]
    assert generate_splits({"train": 150, "validation": 60, "test": 60}, seed=3) == splits_small
    other = generate_splits({"train": 150, "validation": 60, "test": 60}, seed=4)
    assert _goals(other["train"]) != goals["train"]
    # across seeds too: a goal's split is its hash's, not the seed's
    assert not _goals(other["train"]) & (goals["validation"] | goals["test"])
    assert not (_goals(other["validation"]) | _goals(other["test"])) & goals["train"]
    levels = {r["level"] for r in splits_small["test"]}
    assert levels == set(LEVEL_TABLE)


def test_no_held_out_goal_is_a_state_of_a_train_proof(splits_small):
    held_out = _goals(splits_small["validation"]) | _goals(splits_small["test"])
    train_states = set()
    for expression in _goals(splits_small["train"]):
        train_states.add(expression)
        for tactic in gold_proof(expression):
            expression = check_step(expression, tactic)
            train_states.add(expression)
    assert not held_out & train_states
    for state in train_states:
        if not state.isdigit():
            assert rewrite.splits.partition_of(state, rewrite._SPLIT_SALT) == "train"


def test_partition_ignores_seed_level_and_sizes():
    rows_ = generate_split("validation", 25, levels=[2, 4], seed=11)
    assert {r["level"] for r in rows_} == {2, 4}
    assert all(partition_of(g) == "validation" for g in _goals(rows_))


def test_step_rows_expand_train_only():
    proofs = generate_splits({"train": 20, "test": 10}, seed=5)
    steps = generate_splits({"train": 20, "test": 10}, seed=5, train_rows="steps")
    assert steps["test"] == proofs["test"]
    assert _goals(steps["train"]) == _goals(proofs["train"])
    assert len(steps["train"]) == sum(len(gold_proof(g)) for g in _goals(proofs["train"]))
    with pytest.raises(ValueError, match="train_rows"):
        generate_split("train", 3, train_rows="tactics")
    with pytest.raises(ValueError, match="unknown splits"):
        generate_splits({"dev": 3})


def test_pretraining_corpus_is_train_goals_only(splits_small):
    texts = pretrain_corpus(200, seed=1)
    assert len(texts) == 200
    held_out = _goals(splits_small["validation"]) | _goals(splits_small["test"])
    for text in texts:
        prompt, completion = text.split("Proof: ")
        expression = rewrite.parse_prompt(prompt + "Proof: ")[0]
        assert partition_of(expression) == "train" and expression not in held_out
        assert completion == rewrite.proof_completion(gold_proof(expression))


# ---------------------------------------------------------------------------
# Rows


def test_step_rows_are_prefixes_of_the_proof_row():
    expression = "39*5+(87+64)"
    proof = proof_row(expression, 2)
    assert proof["prompt"] == "Prove: 39*5+(87+64) = 346\nProof: "
    assert proof["completion"] == "eval 39*5=195; eval 87+64=151; eval 195+151=346\n"
    steps = step_rows(expression, 2)
    assert [r["completion"] for r in steps] == ["eval 39*5=195; ", "eval 87+64=151; ", "eval 195+151=346\n"]
    assert [r["id"] for r in steps] == [f"{proof['id']}-s{i}" for i in range(3)]
    for before, after in zip(steps, steps[1:]):
        assert before["prompt"] + before["completion"] == after["prompt"]
    assert steps[-1]["prompt"] + steps[-1]["completion"] == proof["prompt"] + proof["completion"]
    assert steps[0]["prompt"] == proof["prompt"]
    for row in [proof, *steps]:
        validate_row(row)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("level", 3, "level"),
        ("answer", "345", "answer"),
        ("completion", "eval 39*5=195\n", "completion"),
        ("id", "rewrite-L2-0000000000000000", "id"),
        ("prompt", "Prove: 39*5+(87+64) = 345\nProof: ", "prompt"),
        ("prompt", "Prove: 39*5+(87+64) = 346\nProof: eval 87+64=151; ", "prompt"),
        ("prompt", "Prove: (39*5)+(87+64) = 346\nProof: ", "prompt"),
        ("prompt", "Prove: 39+5 = 44\nProof: ", "level"),
    ],
)
def test_validate_row_names_the_bad_field(field, value, says):
    row = {**proof_row("39*5+(87+64)", 2), field: value}
    with pytest.raises(ValueError, match=rf"field '{says}'"):
        validate_row(row)


def test_rows_round_trip_through_parquet(tmp_path):
    problem = get_problem("rewrite")
    rows_ = generate_split("train", 12, seed=2, train_rows="steps")
    problem.save_rows(rows_, tmp_path / "train.parquet")
    assert problem.load_rows(tmp_path / "train.parquet") == rows_


# ---------------------------------------------------------------------------
# Grading and the registry


def test_grade_replays_the_prompt_then_the_completion():
    problem = PROBLEMS.parse("rewrite", {"train_rows": "steps"})
    proof = proof_row("2*3+4*5", 2)
    assert problem.grade(proof["completion"], proof).correct
    assert problem.reward("eval 4*5=20; eval 2*3=6; eval 6+20=26\n", proof) == 1.0  # another order
    assert problem.reward("eval 4*5=20; eval 2*3=6; eval 6+20=26", proof) == 1.0  # cut before the newline
    assert problem.reward("eval 2*3=6; eval 4*5=20; eval 6+20=26\nrubbish", proof) == 1.0
    wrong = problem.grade("eval 2*3=6; eval 4*5=21; eval 6+21=27\n", proof)
    assert (wrong.answer, wrong.answer_class, wrong.correct, wrong.reward) == (None, None, False, 0.0)
    partial = problem.grade("eval 2*3=6; eval 4*5=20\n", proof)
    assert (partial.answer, partial.answer_class, partial.correct) == ("6+20", None, False)
    done = problem.grade(proof["completion"], proof)
    assert (done.answer, done.answer_class) == ("26", "26") and problem.gold_class(proof) == "26"
    step = step_rows("2*3+4*5", 2)[1]  # after "eval 2*3=6; ": the rest of the proof completes it
    assert problem.reward("eval 4*5=20; eval 6+20=26\n", step) == 1.0
    assert problem.reward(step["completion"], step) == 0.0  # one step alone is not a proof
    assert problem.reward("", proof) == 0.0
    with pytest.raises(ValueError, match="grade"):
        problem.answer_class(proof["completion"])


def test_the_problem_is_registered():
    assert "rewrite" in PROBLEMS
    problem = get_problem("rewrite")
    assert isinstance(problem, Problem)
    assert (problem.binary_rewards, problem.levels, problem.stop_text) == (True, (1, 2, 3, 4, 5), "\n")
    assert problem.answer_class_needs_row
    assert problem.check_step("2*3+4*5", "eval 4*5=20") == "2*3+20" and problem.is_proved("26", 26)
    assert isinstance(problem.check_step("2*3+4*5", "eval 3+4=7"), Invalid)
    with pytest.raises(ValueError, match="train_rows"):
        PROBLEMS.parse("rewrite", {"train_rows": "tactics"})
    rows_ = problem.generate_splits({"train": 5, "test": 5}, [1, 3], seed=0)
    for row in rows_["train"] + rows_["test"]:
        problem.validate_row(row)
        assert problem.reward(row["completion"], row) == 1.0
    assert len(problem.pretrain_corpus(7, seed=0)) == 7


# ---------------------------------------------------------------------------
# Properties: random text never raises; every accepted step is sound


TACTIC_LIKE = st.text(alphabet="eval 0123456789+-*=;()\n", max_size=40)
ANY_TEXT = st.text(max_size=120)
STATES = ["2*3+4*5", "74-11+(65-10)-(84+84-18*9)", "(55+76-25-22)*9+1+78+42", "3*4+3*4", "26"]


TACTIC_FORMED = st.builds(
    lambda a, op, b, c: f"eval {a}{op}{b}={c}",
    st.integers(0, 99).map(str),
    st.sampled_from("+-*"),
    st.integers(0, 99).map(str),
    st.one_of(st.integers(0, 120).map(str), st.sampled_from(["195", "1000", "0195"])),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=st.sampled_from(STATES), tactic=st.one_of(ANY_TEXT, TACTIC_LIKE, TACTIC_FORMED))
def test_random_tactic_text_gives_a_state_or_invalid(state, tactic):
    result = check_step(state, tactic)
    assert isinstance(result, str | Invalid)
    if isinstance(result, str):  # accepted: a canonical state one step on, with the same value
        assert parse_expression(result) is not None
        assert _value(result) == _value(state)
        assert result in {check_step(state, t) for t in valid_tactics(state)}


@settings(max_examples=300, deadline=None)
@given(completion=st.one_of(ANY_TEXT, st.lists(TACTIC_LIKE, max_size=8).map("; ".join)))
def test_grading_random_completions_never_raises(completion):
    problem = get_problem("rewrite")
    for row in (proof_row("2*3+4*5", 2), step_rows("74-11+(65-10)-(84+84-18*9)", 4)[3]):
        grade = problem.grade(completion, row)
        assert grade.reward == (1.0 if grade.correct else 0.0)
        assert (grade.answer_class is not None) == grade.correct


@settings(max_examples=200, deadline=None)
@given(text=st.one_of(ANY_TEXT, st.text(alphabet="0123456789+-*() ", max_size=60)))
def test_parse_expression_raises_only_value_error(text):
    try:
        tree = parse_expression(text)
    except ValueError:
        return
    assert rewrite.format_expression(tree) == text


# ---------------------------------------------------------------------------
# max_value: goals whose proofs write only small numbers

# generate_split("test", 6, seed=0) as the code drew it before max_value existed (commit 10ec4af):
# the default must keep every goal, so a study without the option keeps its data.
DEFAULT_TEST_GOALS = [
    "86+43",
    "47-21+17*2+(73*7-(21+55))",
    "(20+36)*6+59",
    "16*3",
    "((71+28)*2-53+67-22)*6-48",
    "73*8+34*2",
]


def _numbers_written(expression: str) -> list[int]:
    """Every literal of the goal and every number its gold proof's tactics write, read as text."""
    numbers = [
        int(n)
        for n in expression.replace("(", " ")
        .replace(")", " ")
        .replace("+", " ")
        .replace("-", " ")
        .replace("*", " ")
        .split()
    ]
    for tactic in gold_proof(expression):
        a, rest = tactic.removeprefix("eval ").split("=")[0], tactic.split("=")[1]
        numbers += [int(x) for x in a.replace("+", " ").replace("-", " ").replace("*", " ").split()] + [int(rest)]
    return numbers


def test_the_default_max_value_keeps_every_goal():
    assert [rewrite.parse_prompt(r["prompt"])[0] for r in generate_split("test", 6, seed=0)] == DEFAULT_TEST_GOALS


@pytest.mark.parametrize("max_value", [18, 30])
def test_max_value_bounds_every_number_a_proof_writes(max_value):
    drawn = generate_splits({"train": 60, "validation": 20, "test": 40}, seed=2, max_value=max_value)
    corpus = pretrain_corpus(100, seed=2, max_value=max_value)
    expressions = [rewrite.parse_prompt(r["prompt"])[0] for rows_ in drawn.values() for r in rows_]
    expressions += [rewrite.parse_prompt(text.split("Proof: ")[0] + "Proof: ")[0] for text in corpus]
    largest = 0
    for expression in expressions:
        numbers = _numbers_written(expression)
        assert min(numbers) >= 0 and max(numbers) <= max_value, expression
        assert _value(expression) <= max_value
        largest = max(largest, *numbers)
        assert rewrite.level_of(expression) in LEVEL_TABLE  # the shapes are the levels' own
    assert largest > max_value // 2  # the bound is approached, not a much smaller one
    # each level's proofs keep their documented length
    for row in drawn["test"]:
        assert len(gold_proof(rewrite.parse_prompt(row["prompt"])[0])) == LEVEL_TABLE[row["level"]][0]
    assert {r["level"] for r in drawn["test"]} == set(LEVEL_TABLE)
    # the split rule holds as at the default: no held-out goal is a state of a train proof
    held_out = _goals(drawn["validation"]) | _goals(drawn["test"])
    for expression in _goals(drawn["train"]):
        while not expression.isdigit():
            assert expression not in held_out
            expression = check_step(expression, gold_proof(expression)[0])


def test_max_value_is_a_problem_option_and_bad_values_are_refused():
    problem = PROBLEMS.parse("rewrite", {"max_value": 30})
    rows_ = problem.generate_splits({"train": 8, "test": 8}, [2, 5], seed=0)
    assert rows_ == generate_splits({"train": 8, "test": 8}, [2, 5], seed=0, max_value=30)
    assert all(
        max(_numbers_written(text.split("\nProof: ")[0].removeprefix("Prove: ").split(" = ")[0])) <= 30
        for text in problem.pretrain_corpus(20, seed=0)
    )
    for bad in (17, 100_000, True, "30"):
        if not isinstance(bad, str):  # params are read as YAML, where "30" is the string a user quoted
            with pytest.raises(ValueError, match="option max_value"):
                PROBLEMS.parse("rewrite", {"max_value": bad})
        with pytest.raises(ValueError, match="max_value"):
            generate_split("test", 2, max_value=bad)
        with pytest.raises(ValueError, match="max_value"):
            pretrain_corpus(2, max_value=bad)


def test_search_starts_where_the_rows_tactics_leave_the_goal():
    """A proof row starts at its goal; step row s at the state after s gold tactics; a bad tactic, nowhere."""
    problem = get_problem("rewrite")
    expression = "2*3+4*5"
    assert problem.search_start(proof_row(expression, 2)) == (expression, 26)
    states = ["2*3+4*5", "6+4*5", "6+20"]  # by hand: the leftmost redex first
    for s, row in enumerate(step_rows(expression, 2)):
        assert problem.search_start(row) == (states[s], 26)
    bad = dict(proof_row(expression, 2), prompt="Prove: 2*3+4*5 = 26\nProof: eval 2*3=7; ")
    assert problem.search_start(bad) is None
