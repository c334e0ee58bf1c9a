"""Scalar values: the sympy expressions the parser builds, their size bounds and canonical forms.

A scalar is a number (rational, roots of rationals, pi, their sums, products and
quotients), a complex number (the imaginary unit ``i``), or an expression in
one-letter variables with such coefficients (a polynomial or rational
function). The parser (:mod:`aligntrain.grading.parser`) builds every value
from ``sympy.Rational``, ``sympy.pi``, ``sympy.I``, ``sympy.Symbol`` and
``sympy.Pow`` with ``+``, ``*`` and ``/`` on sympy objects; no text reaches
sympy. :func:`canonical_scalar` is the class string (module docstring of
:mod:`aligntrain.grading`, "Equivalence").
"""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import sympy

MAX_EXPONENT = 8
"""Largest |integer exponent|, and largest product of the exponents on any path of the tree."""

MAX_ROOT_INDEX = 8
"""Largest n in ``\\sqrt[n]{x}`` (n >= 2)."""

MAX_EXPANDED_TERMS = 64
"""Most monomials (upper bound) in the expanded numerator or denominator of any sub-expression."""

MAX_COMPLEX_WORK = 64
"""Most ``terms × d²`` of a complex number after ``expand``: its terms, times the square of the
monomials of its largest denominator sum (d = 1 when it has none).

Splitting a complex number into real and imaginary parts multiplies each denominator sum by
its conjugate, so the work grows with the terms over it and the square of the sum's: on a
2.5 GHz Xeon, 0.01 s for ``1/(i+\\sqrt{2})^2`` (1 × 3²), 0.06 s for a 6-term denominator
(1 × 6²), 0.26 s at 3 × 6², 0.54 s at 20 × 4² and 1.7 s at 1 × 36²
(``1/(i+\\sqrt[7]{2}+\\sqrt[5]{3})^7``), against a deadline of 0.5 s then. A bound on the
structure, not on the clock, so that an answer gets the same class on every machine and
under any load; the deadline stays a safety net.
"""

_NOT_REAL_OR_FINITE = (sympy.I, sympy.zoo, sympy.nan, sympy.oo, -sympy.oo)
_NOT_FINITE = (sympy.zoo, sympy.nan, sympy.oo, -sympy.oo)


class Unparseable(Exception):
    """The answer text is outside the grammar or a bound (or divides by zero, or is not a value)."""


class DeadlineExceeded(Exception):
    """Raised out of the cached parser so that a timed-out call is not cached."""


def deadline_after(timeout_s: float) -> float:
    """The ``time.thread_time()`` reading ``timeout_s`` seconds of this thread's CPU time from now.

    CPU time of the grading thread, not wall time: other processes on the machine (a loaded
    CI runner, a second test worker) do not make an answer miss its deadline.
    """
    return time.thread_time() + timeout_s


def check_deadline(deadline: float) -> None:
    """Raise ``DeadlineExceeded`` once ``time.thread_time()`` is past ``deadline`` (works in any thread)."""
    if time.thread_time() > deadline:
        raise DeadlineExceeded


def canonical_scalar(value: sympy.Expr, deadline: float) -> str:
    """The class string of a scalar: real numbers as before, complex numbers, expressions in variables.

    * real number (no symbol, no ``I``): :func:`_canonical_form`, the classes of
      the original grader ("17", "-3/4", "sqrt(2)/2");
    * complex number (``I``, no symbol): real and imaginary parts
      (``as_real_imag``) each in the real form, printed as ``re + im*I``
      ("3 + 4*I"); a zero imaginary part gives the real class;
    * expression in variables: ``expand``, then ``cancel`` when a denominator
      holds a variable (one reduced fraction p/q), printed by sympy
      ("x**2 + 2*x + 1", "(x + 1)/(x - 1)").
    """
    if value.is_Rational:  # the common case: construction already made it exact and reduced
        return str(value)
    if value.has(*_NOT_FINITE):
        raise Unparseable
    if value.free_symbols:
        return _canonical_expression(value, deadline)
    if value.has(sympy.I):
        check_deadline(deadline)
        expanded = sympy.expand(value)
        widest = max((len(power.base.args) for power in _sum_denominators(expanded)), default=1)
        if len(sympy.Add.make_args(expanded)) * widest**2 > MAX_COMPLEX_WORK:
            raise Unparseable  # deterministic: the same answer is refused on every machine
        real, imaginary = expanded.as_real_imag()
        if real.has(sympy.I) or imaginary.has(sympy.I):
            raise Unparseable
        real_form = _canonical_value(real, deadline)
        imaginary_form = _canonical_value(imaginary, deadline)
        if imaginary_form == 0:
            return str(real_form)
        return str(real_form + imaginary_form * sympy.I)
    return str(_canonical_value(value, deadline))


def _canonical_expression(value: sympy.Expr, deadline: float) -> str:
    if value.has(sympy.I):
        raise Unparseable  # [choice] complex coefficients on variables are not graded
    check_deadline(deadline)
    value = sympy.expand(value)
    if any(denominator.base.free_symbols for denominator in _sum_denominators(value)) or any(
        power.exp.is_negative and power.base.is_Symbol for power in value.atoms(sympy.Pow)
    ):
        check_deadline(deadline)
        value = sympy.cancel(sympy.together(value))
    check_deadline(deadline)
    if value.has(*_NOT_FINITE):
        raise Unparseable
    return str(value)


def _canonical_value(value: sympy.Expr, deadline: float) -> sympy.Expr:
    """The canonical form of a real number as a sympy expression (see :func:`_canonical_form`)."""
    if value.is_Rational:
        return value
    for step in (sympy.expand, _rationalise_square_root_denominators, sympy.expand, _cancel_polynomial_denominators):
        if value.has(*_NOT_REAL_OR_FINITE):
            raise Unparseable
        check_deadline(deadline)
        value = step(value)
    if value.has(*_NOT_REAL_OR_FINITE):
        raise Unparseable
    return value


def _canonical_form(value: sympy.Expr, deadline: float) -> str:
    """``str`` of the canonical form of a real number ``value`` (the original grader's classes).

    ``expand`` -> ``radsimp`` on denominators that sum square roots of
    rationals -> ``expand`` -> ``cancel`` when no denominator sum holds a root.
    """
    return str(_canonical_value(value, deadline))


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
    """True when ``value`` has a root, every root is a square root of a rational, and no pi or log."""
    roots = _roots(value)
    return (
        bool(roots)
        and not value.has(sympy.pi, sympy.log)
        and all(root.exp.q == 2 and root.base.is_Rational for root in roots)
    )


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


class Node(NamedTuple):
    """A parsed sub-expression with the sizes that bound the sympy work on it.

    ``degree``: product of the integer exponents on its deepest path;
    ``numerator_terms`` / ``denominator_terms``: upper bounds on the monomials
    of its expanded numerator and denominator (1 for a rational or an atom).
    """

    value: sympy.Expr
    degree: int = 1
    numerator_terms: int = 1
    denominator_terms: int = 1


def sized(value: sympy.Expr, degree: int, numerator_terms: int, denominator_terms: int) -> Node:
    if value.is_Rational:  # sympy folded it: one term whatever the text was
        return Node(value, degree)
    if max(numerator_terms, denominator_terms) > MAX_EXPANDED_TERMS:
        raise Unparseable
    return Node(value, degree, numerator_terms, denominator_terms)


def add(left: Node, right: Node) -> Node:
    # a/b + c/d = (a*d + c*b) / (b*d)
    return sized(
        left.value + right.value,
        max(left.degree, right.degree),
        left.numerator_terms * right.denominator_terms + right.numerator_terms * left.denominator_terms,
        left.denominator_terms * right.denominator_terms,
    )


def multiply(left: Node, right: Node) -> Node:
    return sized(
        left.value * right.value,
        max(left.degree, right.degree),
        left.numerator_terms * right.numerator_terms,
        left.denominator_terms * right.denominator_terms,
    )


def divide(dividend: Node, divisor: Node) -> Node:
    if divisor.value == 0:  # structural zero; a zero sympy cannot see becomes zoo, caught later
        raise Unparseable
    reciprocal = Node(1 / divisor.value, divisor.degree, divisor.denominator_terms, divisor.numerator_terms)
    return multiply(dividend, reciprocal)


def power(base: Node, exponent: int) -> Node:
    degree = base.degree * max(1, abs(exponent))
    if abs(exponent) > MAX_EXPONENT or degree > MAX_EXPONENT:
        raise Unparseable
    if base.value == 0 and exponent < 0:
        raise Unparseable
    # (t terms)^k has at most C(t+k-1, k) monomials; a negative power swaps the parts.
    numerator_terms = math.comb(base.numerator_terms + abs(exponent) - 1, abs(exponent))
    denominator_terms = math.comb(base.denominator_terms + abs(exponent) - 1, abs(exponent))
    if exponent < 0:
        numerator_terms, denominator_terms = denominator_terms, numerator_terms
    return sized(sympy.Pow(base.value, exponent), degree, numerator_terms, denominator_terms)


def root(radicand: Node, index: int) -> Node:
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
            raise Unparseable  # not real
        root = -sympy.Pow(-value, sympy.Rational(1, index))
    else:
        root = sympy.Pow(value, sympy.Rational(1, index))
    return sized(root, radicand.degree, radicand.numerator_terms, radicand.denominator_terms)
