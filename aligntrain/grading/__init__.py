"""Answer extraction and equivalence for model completions (which are UNTRUSTED).

A completion states its final answer after the last ``ANSWER_MARKER`` ("####"),
up to the end of that line. ``canonical_answer`` maps an answer text to its
*answer class*, a plain string that equal answers share ("17", "17.0", "34/2",
"\\boxed{17}" and "$17$" share "17"). Answer classes are what majority vote
groups by (docs/math.md §1.2, maj@k: class ``None`` = unparseable, drawn but
never a winner) and what correctness compares (the class of the gold answer).
docs/grading.md lists the answer kinds with examples.

Modules, one per answer kind: :mod:`~aligntrain.grading.scalar` (numbers,
complex numbers, expressions in variables: construction bounds and canonical
forms), :mod:`~aligntrain.grading.equations`, :mod:`~aligntrain.grading.intervals`,
:mod:`~aligntrain.grading.lists` (lists and sets of solutions),
:mod:`~aligntrain.grading.text` (text, choices, units), and the shared
:mod:`~aligntrain.grading.items` (the parsed item, the kinds) and
:mod:`~aligntrain.grading.parser` (the tokenizer and the grammar, which also
builds tuples, matrices and base-b numerals).

Answer kinds and their classes:

* real number: ``str`` of the exact canonical sympy expression ("17",
  "-3/4", "sqrt(2)/2", "pi/2", "1/2 + sqrt(5)/2"); rationals print as
  ``str(fractions.Fraction)``. These are the classes of the original grader,
  unchanged (the embedded study's pools keep their classes).
* complex number (``i`` is the imaginary unit): "3 + 4*I".
* expression in one-letter variables: expanded, or one reduced fraction when
  a variable is in a denominator ("x**2 + 2*x + 1" for both "x^2+2x+1" and
  "(x+1)^2").
* equation: a lone "v = e" (v one letter not in e) has e's class ("x=5" and
  "5"; "y = 2x+3" and "2x+3"); any other equation is "eq:" and the expanded
  numerator of lhs - rhs divided by its leading coefficient.
* tuple "(1, -2)": the element classes in order; an open interval with finite
  ends is read as the same pair (the text "(1, 2)" cannot tell them apart).
* interval or union of intervals: ``str`` of sympy's simplified set built
  from the parsed ends ("Interval.Lopen(-oo, 3)", "Union(...)").
* list / set ("1, 2", "\\{1, 2\\}", "1 \\pm \\sqrt{2}", "x = 1, 2"): the sorted
  distinct item classes in braces ("{1, 2}") [choice: a list of two or more
  solutions is unordered].
* matrix / column vector: "matrix[[1], [2]]".
* numeral in base b ("1011_2", "1011_{2}"): "1011_2" [choice: digits and base,
  not the value: "11" is not an answer in base 2].
* multiple choice: a single capital letter alone, "(B)", "\\text{(B)}",
  "\\textbf{(B)}": "choice:B".
* text (only words): "text:" and the letters in lower case ("\\text{Monday}",
  "Monday", "monday" share "text:monday").

Scope "math" only (issue 23; the parser flags them, scope "number" leaves them
None): "\\tfrac12", powers of rationals ("2^{10}" is 1024), fractional
exponents ("x^{1/3}" is "\\sqrt[3]{x}"), "\\infty" ("oo"), "5!", "\\binom{5}{2}",
"{5 \\choose 2}", logarithms of positive rationals ("\\log" base 10, "\\ln" base
e; "\\log_2 8" is 3, "\\log_2 3" is "log(3)/log(2)"), repeating decimals
("0.1\\overline{6}" is 1/6), "x \\in [2, 5]" (the interval) and "\\sqrt{-1}" (i);
values in :mod:`~aligntrain.grading.functions`.

Dropped decorations [choice]: "$...$", one outer "\\boxed{...}",
"\\left"/"\\right", spacing ``\\! \\, \\; \\: \\quad``, a trailing percent
sign ("25\\%" is 25, as MATH graders read it), degree signs ("30^\\circ" is
30), a leading "\\$", a trailing unit in a text group of 1-3 words without a
negation ("5\\text{ cm}") and a trailing unit word ("5 inches"); thousands separators "1,000", "1{,}000" and
"1\\,000" are 1000.

Safety: nothing here calls ``eval``, ``sympify``, ``parse_expr`` or a
LaTeX-to-sympy converter, and no string from the model reaches sympy. The
answer text goes through a whitelist tokenizer and a recursive-descent parser
(grammar in :func:`aligntrain.grading.parser.parse_answer`); the parser builds
every sympy object itself from ``sympy.Rational`` (made from an exact
``fractions.Fraction`` of the digits), ``sympy.pi``, ``sympy.I``,
``sympy.Symbol`` (one ASCII letter), ``sympy.Pow``, ``+``, ``*``, ``/``, and
``sympy.Interval``/``Union`` on values it built.

Equivalence [choice]: sympy decides it through a canonical form, never through
a numeric test (there is no numeric fallback), so that the class is a plain
string majority vote can group by. The forms are sound: two texts share a class
only when the objects the class strings print are equal, so a wrong answer is
never graded right. Real numbers: construction folds rationals exactly and
pulls perfect powers out of roots of rationals; then ``expand`` -> ``radsimp``
on denominators that sum square roots of rationals -> ``expand`` -> ``cancel``
when no denominator sum holds a root. Complex numbers: the real and the
imaginary part (``as_real_imag``) each in that form. Expressions in variables:
``expand`` (canonical for polynomials), then ``cancel`` when a variable is in
a denominator (canonical for rational functions with rational coefficients).
Not complete for nested radicals (sqrt(3+2*sqrt(2)) and 1+sqrt(2) get different
classes), denominators with cube and higher roots or mixing pi and roots,
equations not solved for a lone variable against one that is ("y = 2x+3" and
"y - 2x = 3" differ), a set of one element against the element, and units or
bases written differently: such an answer that equals the gold in an unusual
form is graded wrong.

Why the time is bounded [choice]: the text is at most ``MAX_ANSWER_CHARS``
characters, each number at most ``MAX_NUMBER_DIGITS`` digits, groups nest at
most ``MAX_GROUP_DEPTH`` deep (so the recursion is shallow), there are at most
``MAX_RADICALS`` roots with index at most ``MAX_ROOT_INDEX``, at most
``MAX_ITEMS`` items in a tuple, list or matrix and ``MAX_INTERVALS`` intervals
in a union (sympy's set simplification is the slowest step), exponents are
rational values and the product of the integer exponents of non-rationals on any
path of the parse tree is at most ``MAX_EXPONENT`` (a rational's power, factorial,
binomial and logarithm are checked against size bounds before they are computed:
:mod:`~aligntrain.grading.functions`), and every sub-expression's expanded numerator and
denominator have at most ``MAX_EXPANDED_TERMS`` monomials (an upper bound
tracked while parsing; a variable is one term like pi). So every sympy call
works on a few dozen terms with coefficients of a few hundred digits (the
slowest inputs in tests/test_grading.py take ~0.1 s). The parser backtracks at
most once per bracket (a "(" that does not turn out to be a tuple or interval is
re-read as a group), and tuple and interval items hold scalar expressions only,
so the re-reading cannot nest. ``timeout_s`` is a second line of defence: a
deadline on the grading thread's CPU time (``time.thread_time``, so other
processes' load does not move it) checked at every primary and item the parser
reads and between the sympy steps, so it also works in worker threads, unlike
``signal.alarm`` (a sympy step itself is not interrupted; the bounds keep each
step small). Anything unparseable, over a bound, over the deadline, dividing by
zero or not finite is class ``None`` (a wrong answer), never an exception.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

from aligntrain.grading.parser import (
    KINDS,
    MAX_GROUP_DEPTH,
    MAX_INTERVALS,
    MAX_ITEMS,
    MAX_NUMBER_DIGITS,
    MAX_RADICALS,
    parse_answer,
)
from aligntrain.grading.scalar import (
    MAX_EXPANDED_TERMS,
    MAX_EXPONENT,
    MAX_ROOT_INDEX,
    DeadlineExceeded,
    Unparseable,
    deadline_after,
)
from aligntrain.validation import check_int, check_real

ANSWER_MARKER = "####"
"""The completion's final answer is the text after the last marker, to end of line."""

MAX_ANSWER_CHARS = 160
"""Longer answer texts are class None without being parsed (and never enter the cache)."""

SCOPES = {"number": frozenset({"number"}), "math": frozenset(KINDS)}
"""The answer kinds each ``scope`` of ``canonical_answer`` gives a class to."""

_CACHE_SIZE = 1 << 16
_ASCII_WHITESPACE = " \t\r\n\f\v"


@dataclass(frozen=True)
class Verdict:
    """The grading of one completion against a gold answer.

    ``answer``: the extracted answer text (None: no marker / empty / over-long);
    ``answer_class``: its canonical class (None: unparseable); ``correct``: the
    class equals the gold's class.
    """

    answer: str | None
    answer_class: str | None
    correct: bool

    @property
    def reward(self) -> float:
        """The binary reward: 1.0 if correct else 0.0."""
        return 1.0 if self.correct else 0.0


def extract_answer(completion: str, max_chars: int = 2000) -> str | None:
    """The stripped text after the last ``ANSWER_MARKER`` up to the end of its line.

    Returns None when the completion has no marker, the answer is empty, or the
    completion is longer than ``max_chars`` [choice: refuse rather than truncate,
    since cutting either end could invent or drop the last marker; an over-long
    completion is graded wrong].
    """
    if not isinstance(completion, str):
        raise ValueError(f"completion must be a str, got {type(completion).__name__}")
    check_int(max_chars, "max_chars", minimum=1)
    if len(completion) > max_chars:
        return None
    marker_at = completion.rfind(ANSWER_MARKER)
    if marker_at < 0:
        return None
    answer_line = completion[marker_at + len(ANSWER_MARKER) :].partition("\n")[0]
    answer = answer_line.strip(_ASCII_WHITESPACE)  # as canonical_answer: unicode spaces stay, unparseable
    return answer or None


logger = logging.getLogger(__name__)

#: The safety-net deadline of one answer, in seconds of the grading thread's CPU time. The bounds decide:
#: the slowest answer they let through takes ~0.25 s here (tests/test_grading.py); 2 s leaves a margin
#: that a loaded or slower machine does not use up, so no answer's class depends on the machine.
DEADLINE_S = 2.0


def canonical_answer(text: str | None, timeout_s: float = DEADLINE_S, *, scope: str = "number") -> str | None:
    """The answer class of ``text`` (see the module docstring), or None.

    ``scope`` [choice]: ``"number"`` (the default) gives a class only to real
    numbers, the one kind of the original grader, so problems whose golds are
    numbers (arith, GSM8K, and MATH rows filtered to them) grade exactly as
    before and a tuple, word or variable is None there; ``"math"`` gives a
    class to every kind of docs/grading.md (MATH answers). The class of a real
    number is the same string in both scopes.

    The grammar is :func:`aligntrain.grading.parser.parse_answer`'s. Choices
    kept from the original grader: juxtaposition binds tighter than ``*``/``/``
    ("1/2\\sqrt{3}" is 1/(2*sqrt(3))); a number never follows a factor without
    an operator ("\\pi2", "17 18" are None) and ``\\frac`` never does
    ("2\\frac{1}{2}", a mixed number in LaTeX habit, is None); "-3^2" is -9;
    the odd root of a negative number is the real root; an even root of a
    negative number is None.

    Examples: "17", "17.0", "34/2", "\\boxed{17}", "$17$" -> "17"; "-0.75",
    "-\\frac{3}{4}" -> "-3/4"; "1,000", "1{,}000" -> "1000"; "\\sqrt{8}" ->
    "2*sqrt(2)"; "(x+1)^2" -> "x**2 + 2*x + 1"; "[2,5)" ->
    "Interval.Ropen(2, 5)"; "\\text{(B)}" -> "choice:B". None for: None, text
    over ``MAX_ANSWER_CHARS``, any other character or command, a bound
    exceeded, division by zero, or parsing past ``timeout_s`` seconds.
    """
    check_real(timeout_s, "timeout_s", low=0, low_open=True)
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {sorted(SCOPES)}, got {scope!r}")
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError(f"text must be a str or None, got {type(text).__name__}")
    if len(text) > MAX_ANSWER_CHARS:
        return None
    try:
        parsed = _parse_cached(text, timeout_s)
    except DeadlineExceeded:
        # The bounds should make this unreachable: say so, so that a missing bound is found.
        logger.warning("grading stopped at its %.2g s deadline (the bounds let it through): %.80r", timeout_s, text)
        return None
    if parsed is None or parsed[0] not in SCOPES[scope]:
        return None
    kind, answer_class, math_only = parsed
    if math_only and scope == "number":
        return None  # a form the original grader refused: scope "number" grades exactly as it did
    return answer_class


def is_correct(completion: str, gold: str, *, scope: str = "number") -> bool:
    """True when the completion's answer class equals the gold answer's class (``scope`` as in ``canonical_answer``)."""
    return grade(completion, gold, scope=scope).correct


def grade(completion: str, gold: str, *, scope: str = "number") -> Verdict:
    """Extract, canonicalise and compare the completion's answer with ``gold`` (``scope``: see ``canonical_answer``).

    ``gold`` is trusted data: if it has no answer class the data is broken, so
    this raises ValueError naming ``gold`` instead of grading everything wrong.
    """
    if not isinstance(gold, str):
        raise ValueError(f"gold must be a str, got {type(gold).__name__}")
    gold_class = canonical_answer(gold, scope=scope)
    if gold_class is None:
        raise ValueError(f"gold {gold!r} is not a parseable answer (scope {scope!r})")
    answer = extract_answer(completion)
    answer_class = canonical_answer(answer, scope=scope)
    return Verdict(answer=answer, answer_class=answer_class, correct=answer_class == gold_class)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _parse_cached(text: str, timeout_s: float) -> tuple[str, str, bool] | None:
    # Cached: pools repeat the same answer strings many times. A deadline hit
    # raises through the cache, so only deterministic outcomes are stored.
    deadline = deadline_after(timeout_s)
    try:
        return parse_answer(text, deadline)
    except (Unparseable, ZeroDivisionError, ValueError, TypeError, RecursionError):
        # [choice] sympy raising on a value the bounds admitted (ValueError,
        # TypeError) is a wrong answer too, never an exception out of grading.
        return None


__all__ = [
    "ANSWER_MARKER",
    "MAX_ANSWER_CHARS",
    "MAX_EXPANDED_TERMS",
    "MAX_EXPONENT",
    "MAX_GROUP_DEPTH",
    "MAX_INTERVALS",
    "MAX_ITEMS",
    "MAX_NUMBER_DIGITS",
    "MAX_RADICALS",
    "MAX_ROOT_INDEX",
    "KINDS",
    "SCOPES",
    "Verdict",
    "canonical_answer",
    "extract_answer",
    "grade",
    "is_correct",
]
