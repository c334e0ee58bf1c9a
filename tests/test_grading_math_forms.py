"""The MATH answer forms added for issue 23 (item 6): shorthand fractions, braced and fractional
exponents, infinity, factorials, binomials, logarithms, repeating decimals, "x \\in S" and square
roots of negative numbers; their size guards; and scope "number" left as it was.

Every expected verdict is decided from the mathematics, by hand.
"""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aligntrain.grading import MAX_NUMBER_DIGITS, MAX_RADICALS, canonical_answer, functions, grade
from aligntrain.grading.parser import MAX_LOGARITHMS


def _math(text: str) -> str | None:
    return canonical_answer(text, timeout_s=30.0, scope="math")


def _equal(left: str, right: str) -> bool:
    left_class, right_class = _math(left), _math(right)
    return left_class is not None and left_class == right_class


PAIRS = [
    # shorthand fractions: LaTeX reads one character per unbraced argument
    (r"\tfrac12", r"\frac{1}{2}", True),
    (r"\dfrac34", "0.75", True),
    (r"\frac34", r"\frac{3}{4}", True),
    (r"\tfrac{1}{2}", "0.5", True),
    (r"\frac 1 2", r"\dfrac12", True),
    (r"\frac1x", "x^{-1}", True),
    (r"\frac34", r"\frac{4}{3}", False),
    (r"\frac12", "12", False),
    (r"\tfrac12", r"\frac{1}{12}", False),
    # exponents
    ("2^{10}", "1024", True),
    ("2^{10}", "1000", False),
    ("2^{10}", "2^10", True),
    ("x^{2}", "x^2", True),
    ("x^{2}", "2x", False),
    ("2^{-3}", r"\frac18", True),
    ("(2^3)^3", "512", True),
    ("(2^3)^3", "2^{27}", False),
    ("10^{2}", "100", True),
    ("3^{2^{2}}", "81", True),
    ("2^{1.5}", r"2\sqrt{2}", True),
    ("2^{1.5}", "3", False),
    # infinity
    (r"\infty", r"+\infty", True),
    (r"\infty", r"-\infty", False),
    (r"-\infty", r"\boxed{-\infty}", True),
    (r"(-\infty, 3]", r"\left(-\infty, 3\right]", True),
    (r"(-\infty, 3]", r"(-\infty, 3)", False),
    (r"(-\infty, 3]", r"(-\infty, 3] \cup [3, 3]", True),
    # n-th roots and fractional powers
    (r"\sqrt[3]{8}", "2", True),
    (r"\sqrt[3]{8}", "8^{1/3}", True),
    (r"\sqrt[3]{x}", "x^{1/3}", True),
    (r"\sqrt{x}", "x^{0.5}", True),
    ("8^{2/3}", "4", True),
    ("(-8)^{1/3}", "-2", True),
    (r"\sqrt[3]{x}", "x^{1/2}", False),
    (r"\sqrt[3]{9}", "3", False),
    ("4^{1/2}", "-2", False),
    # factorials
    ("5!", "120", True),
    ("5!", "24", False),
    ("0!", "1", True),
    (r"\frac{6!}{4!\,2!}", "15", True),
    (r"\frac{6!}{4!2!}", r"\binom{6}{2}", True),
    ("(2+1)!", "6", True),
    ("3!^2", "36", True),
    ("3!^2", "720", False),
    # binomials
    (r"\binom{5}{2}", "10", True),
    (r"\dbinom{5}{2}", r"\binom52", True),
    (r"{5 \choose 2}", "10", True),
    (r"\binom{5}{2}", r"\binom{5}{3}", True),
    (r"\tbinom{6}{3}", "20", True),
    (r"\binom{5}{2}", "20", False),
    (r"\binom{5}{7}", "0", True),
    (r"2\binom{4}{2}", "12", True),
    # logarithms: \log is base 10, \ln base e
    (r"\log_2 8", "3", True),
    (r"\log_{2}{8}", "3", True),
    (r"\log_2(8)", r"\log_28", True),
    (r"\ln 1", "0", True),
    (r"\log 100", "2", True),
    (r"\log_{10} 1000", r"\log 1000", True),
    (r"\log_4 2", r"\frac12", True),
    (r"\log_2 \frac{1}{8}", "-3", True),
    (r"\log_2 3", r"\frac{\ln 3}{\ln 2}", True),
    (r"\ln 8", r"3\ln 2", True),
    (r"\log_8 3", r"\frac{\log_2 3}{3}", True),
    (r"\log_2 8", "4", False),
    (r"\log 100", r"\ln 100", False),
    (r"\log_2 3", r"\log_3 2", False),
    (r"\log_2 3", "1.585", False),
    (r"\ln 2", r"\log 2", False),
    # repeating decimals
    (r"0.\overline{3}", r"\frac13", True),
    (r"0.\overline{3}", "0.33", False),
    (r"0.\overline{3}", "0.3", False),
    (r"0.1\overline{6}", r"\frac{1}{6}", True),
    (r"0.1\overline{6}", "0.16", False),
    (r"0.\overline{142857}", r"\frac17", True),
    (r"1.\overline{27}", r"\frac{14}{11}", True),
    (r"0.\overline{9}", "1", True),
    (r"0.\overline{3}", r"0.\overline{33}", True),
    # membership
    (r"x \in [2, 5]", "[2, 5]", True),
    (r"x \in [2, 5]", "[2, 5)", False),
    (r"x \in (-\infty, 3]", r"(-\infty, 3]", True),
    (r"x \in \{1, 2\}", r"\{2, 1\}", True),
    (r"\boxed{t \in [0, 1)}", "[0,1)", True),
    # square roots of negative numbers
    (r"\sqrt{-1}", "i", True),
    (r"\sqrt{-4}", "2i", True),
    (r"1+\sqrt{-1}", "1+i", True),
    ("(-4)^{1/2}", "2i", True),
    (r"\sqrt{-1}", "-i", False),
    (r"\sqrt{-1}", "1", False),
    (r"\sqrt{-1}\sqrt{-1}", "-1", True),
]


@pytest.mark.parametrize(("left", "right", "expected"), PAIRS, ids=[f"{a}|{b}" for a, b, _ in PAIRS])
def test_new_forms_are_graded_by_their_value(left, right, expected):
    assert _math(left) is not None, f"{left!r} has no class"
    assert _equal(left, right) is expected
    assert _equal(right, left) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"\tfrac12", "1/2"),
        ("2^{10}", "1024"),
        (r"\infty", "oo"),
        (r"-\infty", "-oo"),
        (r"\sqrt[3]{x}", "x**(1/3)"),
        ("5!", "120"),
        (r"\binom{5}{2}", "10"),
        (r"\log_2 8", "3"),
        (r"\log_2 3", "log(3)/log(2)"),
        (r"\ln 8", "3*log(2)"),
        (r"\log 2", "log(2)/log(10)"),
        (r"\ln\frac{1}{4}", "-2*log(2)"),
        (r"0.1\overline{6}", "1/6"),
        (r"x \in [2, 5]", "Interval(2, 5)"),
        (r"\sqrt{-1}", "I"),
    ],
)
def test_class_strings_of_the_new_forms(text, expected):
    assert _math(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        r"\frac123",  # LaTeX: (1/2)*3; refused rather than guessed (1/23? 12/3?)
        r"\frac{1}23",
        r"\frac1.5",
        r"\binom{x}{2}",  # binomials and factorials of numbers only
        "x!",
        "(2.5)!",
        "(-1)!",
        "5!!",  # double factorial or (5!)!: ambiguous
        "3!2",  # a number after a factorial is a factor only when it is a factorial too ("4!2!")
        r"\binom{5}{-1}",
        "2^n",
        r"2^{\pi}",
        r"e^{i\pi}",
        r"\log_2 0",
        r"\log_2 (-8)",
        r"\log_1 5",
        r"\log_b 8",
        r"\ln x",
        r"\ln e",  # e is a letter here, not Euler's number
        r"\log^2 3",
        r"\ln 2\pi",  # ln(2pi) or pi ln 2: ambiguous
        r"\log_2 8x",
        r"\ln 2 \sqrt{3}",
        r"1\overline{3}",  # an integer cannot repeat after a point it does not have
        r"\overline{3}",
        r"0.\overline{x}",
        r"0.\overline{33}3",
        r"\overline{AB}",
        r"x \in 5",  # membership of a set only
        r"x \in y \in [1, 2]",
        r"\infty + 1",
        r"2\infty",
        r"\sqrt[4]{-16}",  # principal even roots above 2 of negatives are not graded
        r"(-16)^{1/4}",
        r"\sqrt{i}",
        r"i^{1/2}",
        "x^{1/9}",
        "{5}",
        "{5 \\choose}",
    ],
)
def test_malformed_or_unsupported_forms_have_no_class(text):
    assert _math(text) is None


# Inputs that would ask for huge integers, deep roots or many log generators: each is refused by a
# bound checked before any big computation, so in a few milliseconds whatever the machine.
GUARDS = [
    "1000!",
    f"{functions.MAX_FACTORIAL + 1}!",
    "(10^{10})!",
    "(5!)!",  # 120! is over the factorial bound
    "2^{10^{10}}",
    "10^{10^{10}}",
    "2^{2^{2^{2^{2^{2}}}}}",
    "2^{1000}",
    "2^{-1000}",
    "(-1)^{10^{10}}",
    f"2^{{{functions.MAX_POWER_BITS // 2 + 1}}}",
    "((((9^8)^8)^8)^8)",
    r"\binom{1000}{500}",
    r"\binom{10^{9}}{3}",
    f"\\binom{{{functions.MAX_BINOMIAL + 1}}}{{2}}",
    r"\sqrt{\sqrt{\sqrt{\sqrt{\sqrt{2}}}}}",
    "((((2^{1/2})^{1/2})^{1/2})^{1/2})^{1/2}",
    r"\sqrt[3]{\sqrt[3]{\sqrt[3]{\sqrt[3]{2^{1/3}}}}}",
    "2^{1/1000}",
    r"\log_2 \log_2 \log_2 \log_2 \log_2 2",
    r"\ln 2 + \ln 3 + \ln 5 + \ln 7 + \ln 11",
    r"\log_2 (10^{100} \cdot 10^{100})",
    "0.\\overline{" + "3" * MAX_NUMBER_DIGITS + "}",
    "x^{10^{10}}",
]


@pytest.mark.parametrize("text", GUARDS)
def test_size_guards_refuse_quickly(text):
    start = time.thread_time()
    assert canonical_answer(text, timeout_s=57.5, scope="math") is None  # a cache key no other test uses
    assert time.thread_time() - start < 0.05


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"{functions.MAX_FACTORIAL}!", str(math.factorial(functions.MAX_FACTORIAL))),
        (f"2^{{{functions.MAX_POWER_BITS // 2}}}", str(2 ** (functions.MAX_POWER_BITS // 2))),
        ("10^{100}", str(10**100)),
        (f"\\binom{{{functions.MAX_BINOMIAL}}}{{50}}", str(math.comb(functions.MAX_BINOMIAL, 50))),
        ("(-1)^{101}", "-1"),
        ("0.\\overline{" + "3" * (MAX_NUMBER_DIGITS - 1) + "}", "1/3"),
        (r"\ln (10^{100}+1)", f"log({10**100 + 1})"),  # a long perfect-power search: 333 bits, no power
        (r"\log_{2^{100}} 2^{150}", "3/2"),
        (" + ".join([r"\ln 2"] * MAX_LOGARITHMS), f"{MAX_LOGARITHMS}*log(2)"),
        (r"\sqrt[8]{2}^{1/2}", "2**(1/16)"),
        ("(" * (MAX_RADICALS - 1) + "2" + "^{1/2})" * (MAX_RADICALS - 1) + r"\sqrt{3}", None),
    ],
)
def test_bounds_are_exact_and_fast(text, expected):
    start = time.thread_time()
    answer_class = canonical_answer(text, timeout_s=56.5, scope="math")
    assert time.thread_time() - start < 0.2
    if expected is not None:
        assert answer_class == expected


@pytest.mark.parametrize(
    "text",
    [r"\tfrac12", "2^{10}", "(2^3)^3", "2^{(1)}", r"\infty", "5!", r"\binom{5}{2}", r"\log_2 8", r"0.\overline{3}"]
    + [r"\sqrt{-4}\sqrt{-1}", r"x \in [2, 5]", "4^{1/2}", r"\frac{6!}{4!2!}"],
)
def test_scope_number_leaves_the_new_forms_without_a_class(text):
    """Scope "number" (arith, GSM8K) grades exactly as before the new forms: they stay None there."""
    assert _math(text) is not None
    assert canonical_answer(text) is None


@pytest.mark.parametrize(
    ("text", "expected"), [(r"\tfrac{1}{2}", "1/2"), ("2^{3}", "8"), ("2^{-1}", "1/2"), (r"\sqrt[3]{-8}", "-2")]
)
def test_scope_number_keeps_the_original_forms(text, expected):
    assert canonical_answer(text) == expected == _math(text)


def test_grade_with_a_new_form_as_gold():
    assert grade(r"#### \frac{1}{6}", r"0.1\overline{6}", scope="math").correct
    assert not grade("#### 0.17", r"0.1\overline{6}", scope="math").correct
    assert grade("#### 10", r"\dbinom{5}{2}", scope="math").correct


_PIECES = [
    *"0123456789.+-*/^(){}[],!_ x",
    "10",
    "0.",
    "\\frac",
    "\\tfrac",
    "\\binom",
    "\\choose",
    "\\log",
    "\\ln",
    "\\overline",
    "\\infty",
    "\\in",
    "\\sqrt",
    "\\sqrt[3]",
    "\\pi",
    "i",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=30).map("".join))
def test_arbitrary_strings_of_the_new_tokens_never_raise_and_stay_fast(text):
    start = time.thread_time()
    for scope in ("math", "number"):
        answer_class = canonical_answer(text, scope=scope)
        assert answer_class is None or isinstance(answer_class, str)
    assert time.thread_time() - start < 0.5
