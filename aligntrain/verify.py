"""Answer extraction and equivalence for model completions (which are UNTRUSTED).

A completion states its final answer after the last ``ANSWER_MARKER`` ("####"),
up to the end of that line. ``canonical_answer`` maps an answer text to its
*answer class*, a string that equal values share ("17", "17.0", "34/2",
"\\boxed{17}" and "$17$" share "17"). Answer classes are what majority vote
groups by (docs/math.md §1, maj@k: class ``None`` = unparseable, drawn but never a
winner) and what correctness compares (the class of the gold answer).

Class format: for a rational value, ``str`` of the exact rational, which is the
same string as ``str(fractions.Fraction)`` ("17", "-3/4"); for an irrational
value (square and small roots, pi), ``str`` of the sympy expression after the
canonicalisation below ("sqrt(2)/2", "pi/2", "1/2 + sqrt(5)/2").

Safety: nothing here calls ``eval``, ``sympify`` or ``parse_expr``, and no
string from the model reaches sympy. The answer text goes through a whitelist
tokenizer and a small recursive-descent parser (grammar in
``canonical_answer``); the parser builds the sympy expression itself from
``sympy.Rational`` (made from an exact ``fractions.Fraction`` of the digits),
``sympy.pi``, ``sympy.Pow``, ``+``, ``*`` and ``/`` on sympy objects.

Equivalence [choice]: sympy decides it through a canonical form, not through a
numeric test, so that the class is a plain string majority vote can group by.
Construction already folds rationals exactly and pulls perfect powers out of
roots of rationals (sqrt(8) -> 2*sqrt(2), 1/sqrt(3) -> sqrt(3)/3); then
``expand`` -> ``radsimp`` on denominators that sum square roots of rationals
(rationalise them) -> ``expand`` -> ``cancel`` when no denominator sum holds
a root (one reduced fraction for pi in a denominator). This form is sound
(two texts share a class only when sympy's expressions are equal, so a wrong
answer is never graded right) and complete for the answers data sets write:
rationals, square roots of rationals, pi and their sums, products and
quotients. It is not complete for nested radicals (sqrt(3+2*sqrt(2)) and 1+sqrt(2) get
different classes), denominators with cube and higher roots, or denominators
mixing pi and roots (see ``_rationalise_square_root_denominators``): such an
answer that equals the gold in an unusual form is graded wrong.

Why the time is bounded [choice]: the text is at most ``MAX_ANSWER_CHARS``
characters, each number at most ``MAX_NUMBER_DIGITS`` digits, groups nest at
most ``MAX_GROUP_DEPTH`` deep (so the recursion is shallow), there are at most
``MAX_RADICALS`` roots with index at most ``MAX_ROOT_INDEX``, exponents are
integer literals and the product of the exponents on any path of the parse tree
is at most ``MAX_EXPONENT`` (so no number has more than ~8x100 digits), and
every sub-expression's expanded numerator and denominator have at most
``MAX_EXPANDED_TERMS`` monomials (an upper bound tracked while parsing). So
every sympy call works on a few dozen terms with coefficients of a few hundred
digits: the slowest inputs found take ~0.1 s, a typical root or pi answer
~1-5 ms, a plain number ~15-40 us, a cached call under 1 us (measured on a
loaded 2-core machine; tests/test_verify.py holds the slowest inputs). Roots
of rationals go through sympy's perfect-power extraction, whose trial
division sympy itself limits (2**15).
``timeout_s`` is a second line of defence: a deadline (``time.monotonic``)
checked at every primary the parser reads and between the sympy steps, so it
also works in worker threads, unlike ``signal.alarm`` (a sympy step itself is
not interrupted; the bounds above keep each step small). Anything
unparseable, over a bound, over the deadline, dividing by zero or not real is
class ``None`` (a wrong answer), never an exception.
"""

from __future__ import annotations

import functools
import math
import re
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

import sympy

from aligntrain.validation import check_int, check_real

ANSWER_MARKER = "####"
"""The completion's final answer is the text after the last marker, to end of line."""

MAX_ANSWER_CHARS = 100
"""Longer answer texts are class None without being parsed (and never enter the cache)."""

MAX_NUMBER_DIGITS = 40
"""Digits (both sides of the decimal point together, separators not counted) in one number."""

MAX_GROUP_DEPTH = 20
"""Deepest nesting of groups ( ``(...)``, ``\\left(...\\right)``, ``{...}`` arguments ) accepted."""

MAX_EXPONENT = 8
"""Largest |integer exponent|, and largest product of the exponents on any path of the tree."""

MAX_RADICALS = 4
"""Most ``\\sqrt`` in one answer (each adds a generator that expansion and radsimp multiply out)."""

MAX_ROOT_INDEX = 8
"""Largest n in ``\\sqrt[n]{x}`` (n >= 2)."""

MAX_EXPANDED_TERMS = 64
"""Most monomials (upper bound) in the expanded numerator or denominator of any sub-expression."""

_CACHE_SIZE = 1 << 16

_ASCII_WHITESPACE = " \t\r\n\f\v"
# One token: a number, a LaTeX command, or one symbol. A number is decimal
# ("17", "17.", "17.5", ".5") or has strict thousands grouping ("1,000",
# "12,345,678.5": first group 1-3 digits not starting with 0, then groups of
# exactly 3). Explicit [0-9] and [A-Za-z]: the \d and \w classes, str.isdigit
# and int() accept other scripts' digits ("١٧").
_TOKEN = re.compile(
    r"[ \t\r\n\f\v]*(?:"
    r"([1-9][0-9]{0,2}(?:,[0-9]{3})+(?![0-9])(?:\.[0-9]*)?|[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"|(\\[A-Za-z]+|\\%)"
    r"|(\*\*|[-+*/^()\[\]{}$%])"
    r")"
)
_FRACTION_COMMANDS = frozenset({"\\frac", "\\dfrac", "\\tfrac"})
_PRODUCT_OPERATORS = frozenset({"*", "/", "\\cdot", "\\times"})
_COMMANDS = _FRACTION_COMMANDS | {"\\sqrt", "\\pi", "\\cdot", "\\times", "\\left", "\\right", "\\boxed", "\\%"}
_IMPLICIT_FACTOR_STARTS = frozenset({"\\sqrt", "\\pi"})
_PERCENT_SIGNS = frozenset({"%", "\\%"})
_NOT_REAL_OR_FINITE = (sympy.I, sympy.zoo, sympy.nan, sympy.oo, -sympy.oo)


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


class _Unparseable(Exception):
    """The answer text is outside the grammar or a bound (or divides by zero, or is not real)."""


class _DeadlineExceeded(Exception):
    """Raised out of the cached parser so that a timed-out call is not cached."""


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


def canonical_answer(text: str | None, timeout_s: float = 0.5) -> str | None:
    """The answer class of ``text`` (see the module docstring), or None.

    Accepted grammar (ASCII whitespace allowed between tokens)::

        answer   := "$" inner "$" | inner
        inner    := "\\boxed" "{" body "}" | body
        body     := expr ["%" | "\\%"]             # a trailing percent sign is dropped
        expr     := term (("+" | "-") term)*
        term     := signed (("*" | "/" | "\\cdot" | "\\times") signed)*
        signed   := ("+" | "-")* product
        product  := power power_r*                 # juxtaposition: "2\\sqrt{3}", "3\\pi"
        power_r  := power starting with "\\sqrt" or "\\pi"
        power    := primary [("^" | "**") exponent]
        exponent := int | "{" int "}" | "(" int ")"      # |value| <= MAX_EXPONENT
        int      := ("+" | "-")* [0-9]+
        primary  := number | "\\pi" | "(" expr ")" | "\\left" "(" expr "\\right" ")"
                  | ("\\frac" | "\\dfrac" | "\\tfrac") "{" expr "}" "{" expr "}"
                  | "\\sqrt" ["[" [0-9]+ "]"] "{" expr "}"  # index 2..MAX_ROOT_INDEX
        number   := [0-9]+ ("." [0-9]*)? | "." [0-9]+
                  | [1-9][0-9]{0,2} ("," [0-9]{3})+ ("." [0-9]*)?

    Choices: a percent sign is dropped ("50\\%" is class "50", as MATH graders
    strip it; GSM8K golds carry no sign); juxtaposition binds tighter than
    ``*``/``/`` ("1/2\\sqrt{3}" is 1/(2*sqrt(3))) and only a ``\\sqrt`` or
    ``\\pi`` factor may follow without an operator ("2(3)" and "2\\frac{1}{2}",
    a mixed number in LaTeX habit, are None); "-3^2" is -9; the odd root of a
    negative number is the real root ("\\sqrt[3]{-8}" is -2); an even root of
    a negative number, or any non-real value, is None.

    Examples: "17", "17.0", "34/2", " +17 ", "\\boxed{17}", "$17$" -> "17";
    "-0.75", "-\\frac{3}{4}" -> "-3/4"; "1,000" -> "1000"; "\\sqrt{8}",
    "2\\sqrt{2}" -> "2*sqrt(2)"; "\\frac{\\pi}{2}" -> "pi/2". None for: None,
    text over ``MAX_ANSWER_CHARS``, any other character or command (letters,
    "1e3", "1,00", non-ASCII digits), a bound exceeded (see the module
    docstring), division by zero, or parsing past ``timeout_s`` seconds.
    """
    check_real(timeout_s, "timeout_s", low=0, low_open=True)
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError(f"text must be a str or None, got {type(text).__name__}")
    if len(text) > MAX_ANSWER_CHARS:
        return None
    try:
        return _canonical_answer_cached(text, timeout_s)
    except _DeadlineExceeded:
        return None


def is_correct(completion: str, gold: str) -> bool:
    """True when the completion's answer class equals the gold answer's class."""
    return grade(completion, gold).correct


def grade(completion: str, gold: str) -> Verdict:
    """Extract, canonicalise and compare the completion's answer with ``gold``.

    ``gold`` is trusted data: if it has no answer class the data is broken, so
    this raises ValueError naming ``gold`` instead of grading everything wrong.
    """
    if not isinstance(gold, str):
        raise ValueError(f"gold must be a str, got {type(gold).__name__}")
    gold_class = canonical_answer(gold)
    if gold_class is None:
        raise ValueError(f"gold {gold!r} is not a parseable answer")
    answer = extract_answer(completion)
    answer_class = canonical_answer(answer)
    return Verdict(answer=answer, answer_class=answer_class, correct=answer_class == gold_class)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _canonical_answer_cached(text: str, timeout_s: float) -> str | None:
    # Cached: pools repeat the same answer strings many times. A deadline hit
    # raises through the cache, so only deterministic outcomes are stored.
    deadline = time.monotonic() + timeout_s
    try:
        tokens = _tokenize(text)
        value = _Parser(tokens, deadline).parse().value
        return _canonical_form(value, deadline)
    except _Unparseable:
        return None


def _canonical_form(value: sympy.Expr, deadline: float) -> str:
    """``str`` of the canonical form of ``value`` (module docstring: Equivalence)."""
    if value.is_Rational:  # the common case: construction already made it exact and reduced
        return str(value)
    for step in (sympy.expand, _rationalise_square_root_denominators, sympy.expand, _cancel_polynomial_denominators):
        if value.has(*_NOT_REAL_OR_FINITE):
            raise _Unparseable
        if time.monotonic() > deadline:
            raise _DeadlineExceeded
        value = step(value)
    if value.has(*_NOT_REAL_OR_FINITE):
        raise _Unparseable
    return str(value)


def _rationalise_square_root_denominators(value: sympy.Expr) -> sympy.Expr:
    """``radsimp`` applied to each denominator that sums square roots of rationals.

    [choice] Only these: radsimp removes such square roots (up to 4 radical
    terms) in milliseconds, but denominators with pi, higher or nested roots
    make it (and ``cancel`` after it) take up to seconds, so they stay as they
    are (equal values written that way may get different classes).
    """
    rationalised = {
        denominator: sympy.radsimp(denominator)
        for denominator in _sum_denominators(value)
        if _sums_square_roots_of_rationals(denominator.base)
    }
    return value.xreplace(rationalised) if rationalised else value


def _sums_square_roots_of_rationals(value: sympy.Expr) -> bool:
    """True when ``value`` has a root, every root is a square root of a rational, and no pi."""
    roots = _roots(value)
    return bool(roots) and not value.has(sympy.pi) and all(root.exp.q == 2 and root.base.is_Rational for root in roots)


def _cancel_polynomial_denominators(value: sympy.Expr) -> sympy.Expr:
    """``cancel`` (one reduced fraction) when every sum in a denominator is free of roots.

    [choice] That is a polynomial in pi with rational coefficients, where
    ``cancel`` is cheap and gives one form for equal values; with roots left
    in a denominator it can take seconds, so the expanded form stays.
    """
    if any(_roots(denominator.base) for denominator in _sum_denominators(value)):
        return value
    return sympy.cancel(value)


def _sum_denominators(value: sympy.Expr) -> list[sympy.Pow]:
    """The ``(sum)**(-k)`` factors of ``value``."""
    return [power for power in value.atoms(sympy.Pow) if power.exp.is_negative and power.base.is_Add]


def _roots(value: sympy.Expr) -> list[sympy.Pow]:
    """The powers with a non-integer exponent in ``value``."""
    return [power for power in value.atoms(sympy.Pow) if not power.exp.is_Integer]


def _tokenize(text: str) -> list[str]:
    stripped = text.strip(_ASCII_WHITESPACE)  # str.strip() would also strip unicode spaces
    tokens: list[str] = []
    position = 0
    while position < len(stripped):
        match = _TOKEN.match(stripped, position)
        if match is None:
            raise _Unparseable
        number, command, symbol = match.groups()
        if number is not None and len(number) - number.count(".") - number.count(",") > MAX_NUMBER_DIGITS:
            raise _Unparseable
        if command is not None and command not in _COMMANDS:
            raise _Unparseable
        tokens.append(number or command or symbol)
        position = match.end()
    if tokens.count("\\sqrt") > MAX_RADICALS:
        raise _Unparseable
    return tokens


class _Node(NamedTuple):
    """A parsed sub-expression with the sizes that bound the sympy work on it.

    ``degree``: product of the integer exponents on its deepest path;
    ``numerator_terms`` / ``denominator_terms``: upper bounds on the monomials
    of its expanded numerator and denominator (1 for a rational or an atom).
    """

    value: sympy.Expr
    degree: int = 1
    numerator_terms: int = 1
    denominator_terms: int = 1


def _sized(value: sympy.Expr, degree: int, numerator_terms: int, denominator_terms: int) -> _Node:
    if value.is_Rational:  # sympy folded it: one term whatever the text was
        return _Node(value, degree)
    if max(numerator_terms, denominator_terms) > MAX_EXPANDED_TERMS:
        raise _Unparseable
    return _Node(value, degree, numerator_terms, denominator_terms)


def _add(left: _Node, right: _Node) -> _Node:
    # a/b + c/d = (a*d + c*b) / (b*d)
    return _sized(
        left.value + right.value,
        max(left.degree, right.degree),
        left.numerator_terms * right.denominator_terms + right.numerator_terms * left.denominator_terms,
        left.denominator_terms * right.denominator_terms,
    )


def _multiply(left: _Node, right: _Node) -> _Node:
    return _sized(
        left.value * right.value,
        max(left.degree, right.degree),
        left.numerator_terms * right.numerator_terms,
        left.denominator_terms * right.denominator_terms,
    )


def _divide(dividend: _Node, divisor: _Node) -> _Node:
    if divisor.value == 0:  # structural zero; a zero sympy cannot see becomes zoo, caught later
        raise _Unparseable
    reciprocal = _Node(1 / divisor.value, divisor.degree, divisor.denominator_terms, divisor.numerator_terms)
    return _multiply(dividend, reciprocal)


def _power(base: _Node, exponent: int) -> _Node:
    degree = base.degree * max(1, abs(exponent))
    if abs(exponent) > MAX_EXPONENT or degree > MAX_EXPONENT:
        raise _Unparseable
    if base.value == 0 and exponent < 0:
        raise _Unparseable
    # (t terms)^k has at most C(t+k-1, k) monomials; a negative power swaps the parts.
    numerator_terms = math.comb(base.numerator_terms + abs(exponent) - 1, abs(exponent))
    denominator_terms = math.comb(base.denominator_terms + abs(exponent) - 1, abs(exponent))
    if exponent < 0:
        numerator_terms, denominator_terms = denominator_terms, numerator_terms
    return _sized(sympy.Pow(base.value, exponent), degree, numerator_terms, denominator_terms)


def _root(radicand: _Node, index: int) -> _Node:
    """The real ``index``-th root (sympy pulls perfect powers out of a rational's).

    The radicand's sign is exact for a rational and sympy's low-precision
    numeric sign test otherwise (None when undecided: then sympy's principal
    root stands, which only costs completeness). The root keeps the radicand's
    sizes [choice: an over-estimate for an atom, but sympy turns
    sqrt((pi+1)**2) back into the sum pi+1].
    """
    value = radicand.value
    if value.is_extended_negative:
        if index % 2 == 0:
            raise _Unparseable  # not real
        root = -sympy.Pow(-value, sympy.Rational(1, index))
    else:
        root = sympy.Pow(value, sympy.Rational(1, index))
    return _sized(root, radicand.degree, radicand.numerator_terms, radicand.denominator_terms)


class _Parser:
    """Recursive descent over the whitelist grammar of ``canonical_answer``."""

    def __init__(self, tokens: list[str], deadline: float) -> None:
        self._tokens = tokens
        self._position = 0
        self._depth = 0
        self._deadline = deadline

    def parse(self) -> _Node:
        in_dollars = self._accept("$")
        if self._accept("\\boxed"):
            self._expect("{")
            node = self._body()
            self._expect("}")
        else:
            node = self._body()
        if in_dollars:
            self._expect("$")
        if self._position != len(self._tokens):
            raise _Unparseable
        return node

    def _peek(self) -> str | None:
        return self._tokens[self._position] if self._position < len(self._tokens) else None

    def _take(self) -> str:
        token = self._peek()
        if token is None:
            raise _Unparseable
        self._position += 1
        return token

    def _accept(self, token: str) -> bool:
        if self._peek() != token:
            return False
        self._position += 1
        return True

    def _expect(self, token: str) -> None:
        if not self._accept(token):
            raise _Unparseable

    def _enclosed(self, closing: tuple[str, ...]) -> _Node:
        """An expression inside a group already opened, then the ``closing`` tokens."""
        self._depth += 1
        if self._depth > MAX_GROUP_DEPTH:
            raise _Unparseable
        node = self._expr()
        for token in closing:
            self._expect(token)
        self._depth -= 1
        return node

    def _braced(self) -> _Node:
        self._expect("{")
        return self._enclosed(("}",))

    def _body(self) -> _Node:
        node = self._expr()
        if self._peek() in _PERCENT_SIGNS:
            self._take()
        return node

    def _expr(self) -> _Node:
        node = self._term()
        while self._peek() in ("+", "-"):
            negate = self._take() == "-"
            operand = self._term()
            node = _add(node, operand._replace(value=-operand.value) if negate else operand)
        return node

    def _term(self) -> _Node:
        node = self._signed()
        while self._peek() in _PRODUCT_OPERATORS:
            operator = self._take()
            operand = self._signed()
            node = _divide(node, operand) if operator == "/" else _multiply(node, operand)
        return node

    def _signed(self) -> _Node:
        negative = False
        while self._peek() in ("+", "-"):
            negative ^= self._take() == "-"
        node = self._product()
        return node._replace(value=-node.value) if negative else node

    def _product(self) -> _Node:
        node = self._power()
        while self._peek() in _IMPLICIT_FACTOR_STARTS:
            node = _multiply(node, self._power())
        return node

    def _power(self) -> _Node:
        base = self._primary()
        if self._peek() in ("^", "**"):
            self._take()
            return _power(base, self._exponent())
        return base

    def _exponent(self) -> int:
        closing = {"{": "}", "(": ")"}.get(self._peek() or "")
        if closing is not None:
            self._take()
        exponent = self._integer(allow_sign=True)
        if closing is not None:
            self._expect(closing)
        return exponent

    def _integer(self, allow_sign: bool) -> int:
        negative = False
        while allow_sign and self._peek() in ("+", "-"):
            negative ^= self._take() == "-"
        token = self._take()
        if not ("0" <= token[0] <= "9") or "." in token or "," in token:
            raise _Unparseable
        return -int(token) if negative else int(token)

    def _primary(self) -> _Node:
        if time.monotonic() > self._deadline:
            raise _DeadlineExceeded
        token = self._take()
        if token == "(":
            return self._enclosed((")",))
        if token == "\\left":
            self._expect("(")
            return self._enclosed(("\\right", ")"))
        if token in _FRACTION_COMMANDS:
            numerator = self._braced()
            return _divide(numerator, self._braced())
        if token == "\\sqrt":
            index = 2
            if self._accept("["):
                index = self._integer(allow_sign=False)
                self._expect("]")
                if not 2 <= index <= MAX_ROOT_INDEX:
                    raise _Unparseable
            return _root(self._braced(), index)
        if token == "\\pi":
            return _Node(sympy.pi)
        if token[0] in "0123456789.":
            # Fraction("17.5") is exact (stdlib parsing of a token the number regex matched).
            value = Fraction(token.replace(",", "").removesuffix("."))
            return _Node(sympy.Rational(value.numerator, value.denominator))
        raise _Unparseable
