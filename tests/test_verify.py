"""Answer extraction and equivalence on untrusted completions (aligntrain.verify).

References are independent of the parser under test: hand-computed classes,
``fractions.Fraction`` values built alongside generated expressions, and
Python's own ``ast`` grammar for random strings over the whitelist alphabet.
"""

from __future__ import annotations

import ast
import dataclasses
import operator
import time
import types
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aligntrain import verify
from aligntrain.verify import (
    ANSWER_MARKER,
    MAX_ANSWER_CHARS,
    MAX_NUMBER_DIGITS,
    MAX_PAREN_DEPTH,
    Verdict,
    canonical_answer,
    extract_answer,
    grade,
    is_correct,
)

# ---------------------------------------------------------------------------
# Equivalence classes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("17", "17"),
        ("17.0", "17"),
        ("34/2", "17"),
        ("+17", "17"),
        (" 17 ", "17"),
        (" +17 ", "17"),
        ("\t17\n", "17"),
        ("017", "17"),
        ("17.", "17"),
        ("17.000", "17"),
        ("17.5", "35/2"),
        ("35/2", "35/2"),
        ("70/4", "35/2"),
        ("-0.75", "-3/4"),
        ("-3/4", "-3/4"),
        ("3/-4", "-3/4"),
        (".5", "1/2"),
        ("0", "0"),
        ("-0", "0"),
        ("0.0", "0"),
        ("--3", "3"),
        ("-(-3)", "3"),
        ("(1+2)*3", "9"),
        ("1-2*3", "-5"),  # precedence
        ("10-2-3", "5"),  # left associative
        ("12/3/2", "2"),  # left associative
        ("1/3+1/6", "1/2"),
        ("2 * 3 / 4", "3/2"),
        ("0.1+0.2", "3/10"),  # exact, not binary floating point
    ],
)
def test_canonical_classes_match_hand_computed_values(text, expected):
    assert canonical_answer(text) == expected


def test_equal_and_different_answers():
    same = ["17", "17.0", "34/2", "+17", " 17 "]
    assert {canonical_answer(text) for text in same} == {"17"}
    assert canonical_answer("17.5") == canonical_answer("35/2")
    assert canonical_answer("18") != canonical_answer("17")
    assert is_correct("x #### 17.0\n", "34/2")
    assert not is_correct("x #### 18\n", "17")


# ---------------------------------------------------------------------------
# Untrusted input: None, never an exception


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "   ",
        "abc",
        "9**9**9",
        "2**3",
        "2^3",
        "7//2",
        "__import__('os')",
        "__import__('os').system('true')",
        "(lambda: 1)()",
        "1e3",
        "1E3",
        "1,000",
        "1_000",
        "0x11",
        "1j",
        "nan",
        "inf",
        "sqrt(4)",
        "17!",
        "17 18",
        "2(3)",
        "(1)(2)",
        "()",
        "(1",
        "1)",
        "+",
        "1+",
        "*1",
        "1..2",
        "1.2.3",
        ".",
        "\x00",
        "1\x00",
        "١٧",  # Arabic-Indic digits: int() would accept them
        "１７",  # fullwidth digits
        "\u221217",  # unicode minus sign
        "\u200b17",  # zero-width space
        "17\u00a0",  # no-break space (str.strip() would remove it)
        "1/0",
        "0/0",
        "1/0.0",
        "1/(2-2)",
        "5/(1/2-0.5)",
    ],
)
def test_malformed_and_hostile_answers_have_no_class(text):
    assert canonical_answer(text) is None


def test_bounds_are_exact():
    assert canonical_answer("9" * MAX_NUMBER_DIGITS) == "9" * MAX_NUMBER_DIGITS
    assert canonical_answer("9" * (MAX_NUMBER_DIGITS + 1)) is None
    assert canonical_answer("1." + "0" * (MAX_NUMBER_DIGITS - 1)) == "1"
    assert canonical_answer("1." + "0" * MAX_NUMBER_DIGITS) is None
    assert canonical_answer(" " * (MAX_ANSWER_CHARS - 2) + "17") == "17"
    assert canonical_answer(" " * (MAX_ANSWER_CHARS - 1) + "17") is None
    nested = "(" * MAX_PAREN_DEPTH + "1" + ")" * MAX_PAREN_DEPTH
    assert canonical_answer(nested) == "1"
    assert canonical_answer("(" + nested + ")") is None
    assert canonical_answer("-" * (MAX_ANSWER_CHARS - 1) + "1") == "-1"  # 99 signs: odd


def test_huge_and_deep_inputs_return_none_quickly():
    megabyte_digits = "9" * 1_000_000
    deep = "(" * 10_000 + "1" + ")" * 10_000
    start = time.perf_counter()
    assert canonical_answer(megabyte_digits) is None
    assert canonical_answer(deep) is None
    assert extract_answer(f"{ANSWER_MARKER} {megabyte_digits}") is None
    assert not is_correct(f"{ANSWER_MARKER} {megabyte_digits}", "9")
    assert not is_correct("#" * 1_000_000, "1")
    assert not is_correct(f"{ANSWER_MARKER} {deep}", "1")
    # Longest parseable input: every literal at the digit bound, all multiplied.
    product = "*".join(["9" * 19] * 5)  # 99 characters, a 95-digit value
    assert canonical_answer(product) == str((10**19 - 1) ** 5)
    assert time.perf_counter() - start < 0.5


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(text):
    for candidate in (text, f"{ANSWER_MARKER}{text}", f"{text}{ANSWER_MARKER} {text}"):
        answer = extract_answer(candidate)
        assert answer is None or (answer and "\n" not in answer)
        answer_class = canonical_answer(answer)
        if answer_class is not None:  # a class is always a canonical rational
            assert str(Fraction(answer_class)) == answer_class
        assert isinstance(is_correct(candidate, "17"), bool)


# ---------------------------------------------------------------------------
# Differential tests against independent references


def _python_grammar_value(text: str) -> Fraction | None:
    """Value of ``text`` under Python's own expression grammar restricted to the
    whitelist (+ - * / parentheses, decimal literals); None when Python does not
    parse it that way, or it divides by zero."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None
    binary = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}

    def value(node: ast.AST) -> Fraction:
        if isinstance(node, ast.BinOp) and type(node.op) in binary:
            return binary[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
            return value(node.operand)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return Fraction(ast.get_source_segment(text, node))  # exact decimal literal
        raise LookupError(type(node).__name__)

    try:
        return value(tree.body)
    except (LookupError, ZeroDivisionError):
        return None


def _within_bounds(text: str) -> bool:
    depth = deepest = 0
    for char in text:
        depth += (char == "(") - (char == ")")
        deepest = max(deepest, depth)
    digit_runs = "".join(c if c.isdigit() or c == "." else " " for c in text).split()
    return (
        len(text) <= MAX_ANSWER_CHARS
        and deepest <= MAX_PAREN_DEPTH
        and all(len(run) - run.count(".") <= MAX_NUMBER_DIGITS for run in digit_runs)
    )


@settings(max_examples=600, deadline=None)
@given(st.text(alphabet="0123456789+-*/(). ", max_size=24))
def test_agrees_with_python_grammar_on_whitelist_strings(text):
    reference = _python_grammar_value(text)
    if reference is not None and _within_bounds(text):
        assert canonical_answer(text) == str(reference)
    if "**" in text or "//" in text:
        assert canonical_answer(text) is None


def _number(whole: int, fraction_digits: str) -> tuple[str, Fraction]:
    """A decimal literal and its exact value, built without parsing the text."""
    if not fraction_digits:
        return str(whole), Fraction(whole)
    return f"{whole}.{fraction_digits}", whole + Fraction(int(fraction_digits), 10 ** len(fraction_digits))


_NUMBERS = st.builds(_number, st.integers(0, 10**6), st.text(alphabet="0123456789", max_size=3))


def _combine(children):
    def build(left, op, right, spaced):
        (left_text, left_value), (right_text, right_value) = left, right
        gap = " " if spaced else ""
        if op == "neg":
            return (f"-({left_text})", None if left_value is None else -left_value)
        if left_value is None or right_value is None or (op == "/" and right_value == 0):
            value = None
        else:
            value = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}[op](
                left_value, right_value
            )
        return (f"({left_text}){gap}{op}{gap}({right_text})", value)

    return st.builds(build, children, st.sampled_from(["+", "-", "*", "/", "neg"]), children, st.booleans())


@settings(max_examples=300, deadline=None)
@given(st.recursive(_NUMBERS, _combine, max_leaves=6))
def test_generated_expressions_match_fraction_reference(expression):
    text, value = expression
    expected = str(value) if value is not None and _within_bounds(text) else None
    assert canonical_answer(text) == expected


# ---------------------------------------------------------------------------
# Time bound and threads


def test_deadline_gives_none_and_is_not_cached(monkeypatch):
    text, timeout = "12345+54321-1", 0.123  # a key no other test uses
    ticks = iter(range(1000))  # a clock that moves one second per reading
    monkeypatch.setattr(verify, "time", types.SimpleNamespace(monotonic=lambda: float(next(ticks))))
    assert canonical_answer(text, timeout_s=timeout) is None
    monkeypatch.undo()
    assert canonical_answer(text, timeout_s=timeout) == "66665"


def test_works_in_worker_threads():
    texts = [f"{i}/4" for i in range(200)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        classes = list(pool.map(canonical_answer, texts))
    assert classes == [str(Fraction(i, 4)) for i in range(200)]


def test_invalid_arguments_name_the_argument():
    with pytest.raises(ValueError, match="timeout_s"):
        canonical_answer("1", timeout_s=0)
    with pytest.raises(ValueError, match="text"):
        canonical_answer(17)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="completion"):
        extract_answer(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_chars"):
        extract_answer("#### 1", max_chars=0)
    with pytest.raises(ValueError, match="gold"):
        grade("#### 1", "one")
    with pytest.raises(ValueError, match="gold"):
        grade("#### 1", 1)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Extraction


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("3+4=7 #### 7\n", "7"),
        ("#### 3\nmore text #### 5\n", "5"),  # the last marker wins
        ("#### 3 #### 4", "4"),
        ("a #### 12\nQ: 1+1=?\nA: 2", "12"),  # only up to the end of the marker's line
        ("####-3/4", "-3/4"),
        ("#####7", "7"),  # the last "####" starts at the second "#"
        ("no marker", None),
        ("", None),
        ("####", None),
        ("#### \t \n7", None),  # empty answer line
        ("### 7", None),
        ("#### 7\r\n", "7"),
        ("#### 7\u00a0", "7\u00a0"),  # only ASCII whitespace is stripped; the class is then None
    ],
)
def test_extract_answer(completion, expected):
    assert extract_answer(completion) == expected


def test_extract_refuses_over_long_completions():
    completion = "x" * 1990 + "#### 17"
    assert extract_answer(completion, max_chars=len(completion)) == "17"
    assert extract_answer(completion, max_chars=len(completion) - 1) is None


def test_grade_returns_a_frozen_verdict():
    verdict = grade("7*5=35 #### 70/2\n", "35")
    assert verdict == Verdict(answer="70/2", answer_class="35", correct=True)
    assert verdict.reward == 1.0
    assert grade("7*5=36 #### 36\n", "35") == Verdict(answer="36", answer_class="36", correct=False)
    assert grade("no answer", "35") == Verdict(answer=None, answer_class=None, correct=False)
    assert grade("#### 3**2", "9") == Verdict(answer="3**2", answer_class=None, correct=False)
    assert grade("#### 3**2", "9").reward == 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.correct = False  # type: ignore[misc]
