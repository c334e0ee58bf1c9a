"""Answer extraction and equivalence for model completions (which are UNTRUSTED).

A completion states its final answer after the last ``ANSWER_MARKER`` ("####"),
up to the end of that line. ``canonical_answer`` maps an answer text to its
*answer class*: the exact rational value written as ``str(Fraction)`` ("17",
"-3/4"), so "17", "17.0", "34/2", " +17 " share one class. Answer classes are
what majority vote groups by (FORMULAS §1, maj@k: class ``None`` = unparseable,
drawn but never a winner).

Safety: nothing here calls ``eval``/``sympify``. The answer text goes through a
whitelist tokenizer (ASCII digits, one optional decimal point per number,
``+ - * /``, parentheses, ASCII whitespace) and a tiny recursive-descent parser
that computes with ``fractions.Fraction`` (exact rationals; the standard
library's, so no symbolic engine with its own parsing runs on model output).

Why the time is bounded [choice]: there is no exponent operator, the text is at
most ``MAX_ANSWER_CHARS`` characters, each number at most ``MAX_NUMBER_DIGITS``
digits, and parentheses nest at most ``MAX_PAREN_DEPTH`` deep (so the recursion
is shallow). Every intermediate numerator and denominator therefore divides a
product of the literals' numerators and denominators: well under 10^(2·100),
i.e. under ~700 bits, and there are fewer than 100 operations on such integers —
microseconds. ``timeout_s`` is a second line of defence: a deadline checked
(``time.monotonic``) at every number the parser reads, so it also works in
worker threads, unlike ``signal.alarm``. Anything unparseable, over-long, over
the deadline or dividing by zero is class ``None`` (a wrong answer), never an
exception.
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass
from fractions import Fraction

ANSWER_MARKER = "####"
"""The completion's final answer is the text after the last marker, to end of line."""

MAX_ANSWER_CHARS = 100
"""Longer answer texts are class None without being parsed (and never enter the cache)."""

MAX_NUMBER_DIGITS = 40
"""Digits (both sides of the decimal point together) allowed in one number."""

MAX_PAREN_DEPTH = 20
"""Deepest parenthesis nesting accepted; bounds the parser's recursion."""

_CACHE_SIZE = 1 << 16

# One token: a decimal number ("17", "17.", "17.5", ".5") or one operator/paren.
# Explicit [0-9]: str.isdigit/int() would accept other scripts' digits ("١٧").
_ASCII_WHITESPACE = " \t\r\n\f\v"
_TOKEN = re.compile(r"[ \t\r\n\f\v]*(?:([0-9]+(?:\.[0-9]*)?|\.[0-9]+)|([-+*/()]))")


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
    """The answer text is outside the whitelist grammar (or divides by zero)."""


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
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    if len(completion) > max_chars:
        return None
    marker_at = completion.rfind(ANSWER_MARKER)
    if marker_at < 0:
        return None
    answer_line = completion[marker_at + len(ANSWER_MARKER) :].partition("\n")[0]
    answer = answer_line.strip(_ASCII_WHITESPACE)  # as canonical_answer: unicode spaces stay, unparseable
    return answer or None


def canonical_answer(text: str | None, timeout_s: float = 0.5) -> str | None:
    """The answer class of ``text``: its exact value as ``str(Fraction)``, or None.

    Accepted grammar (whitespace allowed between tokens)::

        expr   := term (("+" | "-") term)*
        term   := unary (("*" | "/") unary)*
        unary  := ("+" | "-")* primary
        primary:= number | "(" expr ")"
        number := [0-9]+ ("." [0-9]*)? | "." [0-9]+

    Examples: "17", "17.0", "34/2", " +17 " -> "17"; "17.5", "35/2" -> "35/2";
    "-0.75" -> "-3/4". None for: None, text over ``MAX_ANSWER_CHARS``, any other
    character (exponents "**", letters, "1e3", "1,000", non-ASCII digits), a
    number over ``MAX_NUMBER_DIGITS`` digits, nesting over ``MAX_PAREN_DEPTH``,
    division by zero, or parsing past ``timeout_s`` seconds.
    """
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
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
    try:
        tokens = _tokenize(text)
        value = _Parser(tokens, deadline=time.monotonic() + timeout_s).parse()
    except _Unparseable:
        return None
    return str(value)


def _tokenize(text: str) -> list[str]:
    stripped = text.strip(_ASCII_WHITESPACE)  # str.strip() would also strip unicode spaces
    tokens: list[str] = []
    position = 0
    while position < len(stripped):
        match = _TOKEN.match(stripped, position)
        if match is None:
            raise _Unparseable
        number, symbol = match.groups()
        if number is not None and len(number) - number.count(".") > MAX_NUMBER_DIGITS:
            raise _Unparseable
        tokens.append(number if number is not None else symbol)
        position = match.end()
    return tokens


class _Parser:
    """Recursive descent over the whitelist grammar, exact ``Fraction`` arithmetic."""

    def __init__(self, tokens: list[str], deadline: float) -> None:
        self._tokens = tokens
        self._position = 0
        self._depth = 0
        self._deadline = deadline

    def parse(self) -> Fraction:
        value = self._expr()
        if self._position != len(self._tokens):
            raise _Unparseable
        return value

    def _peek(self) -> str | None:
        return self._tokens[self._position] if self._position < len(self._tokens) else None

    def _take(self) -> str:
        token = self._peek()
        if token is None:
            raise _Unparseable
        self._position += 1
        return token

    def _expr(self) -> Fraction:
        value = self._term()
        while self._peek() in ("+", "-"):
            value = value + self._term() if self._take() == "+" else value - self._term()
        return value

    def _term(self) -> Fraction:
        value = self._unary()
        while self._peek() in ("*", "/"):
            operator = self._take()
            operand = self._unary()
            if operator == "*":
                value *= operand
            elif operand == 0:
                raise _Unparseable
            else:
                value /= operand
        return value

    def _unary(self) -> Fraction:
        negative = False
        while self._peek() in ("+", "-"):
            negative ^= self._take() == "-"
        value = self._primary()
        return -value if negative else value

    def _primary(self) -> Fraction:
        if time.monotonic() > self._deadline:
            raise _DeadlineExceeded
        token = self._take()
        if token == "(":
            self._depth += 1
            if self._depth > MAX_PAREN_DEPTH:
                raise _Unparseable
            value = self._expr()
            if self._take() != ")":
                raise _Unparseable
            self._depth -= 1
            return value
        if token[0] in "0123456789.":
            # Fraction("17.5") is exact; the token matched the number regex.
            return Fraction(token if not token.endswith(".") else token[:-1])
        raise _Unparseable
