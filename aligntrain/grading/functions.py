"""Exact values of the MATH forms beyond arithmetic: powers of rationals, factorials, binomials,
logarithms of rationals and repeating decimals.

Each takes values the parser built (never text) and checks its size bound *before* computing, so
no answer can ask for a huge integer: ``2^{10^{10}}``, ``1000!`` and ``\\binom{10^{9}}{3}`` are
refused (``Unparseable``) in microseconds.
"""

from __future__ import annotations

import math

import sympy

from aligntrain.grading.scalar import Unparseable

MAX_POWER_BITS = 400
"""An integer power (p/q)^n of a rational is computed when |n| × max(bits of p, bits of q) <= this
(about 120 digits: ``2^{100}``, ``10^{100}`` pass; ``2^{1000}`` is refused)."""

MAX_FACTORIAL = 50
"""Largest n in ``n!`` (50! has 65 digits)."""

MAX_BINOMIAL = 100
"""Largest n in ``\\binom{n}{k}`` (C(100, 50) has 30 digits)."""

MAX_LOG_ARGUMENT_BITS = 400
"""Largest numerator or denominator (in bits) of a logarithm's argument or base."""


def rational_power(base: sympy.Rational, exponent: int) -> sympy.Rational:
    """``base ** exponent`` exactly, refused when the result would pass ``MAX_POWER_BITS``."""
    if base == 0:
        if exponent <= 0:
            raise Unparseable
        return sympy.Integer(0)
    width = max(abs(base.p).bit_length(), base.q.bit_length())
    if abs(exponent) * width > MAX_POWER_BITS:
        raise Unparseable
    return base**exponent


def factorial(value: sympy.Expr) -> sympy.Integer:
    """``n!`` of a non-negative integer n <= ``MAX_FACTORIAL``."""
    if not (value.is_Integer and 0 <= value <= MAX_FACTORIAL):
        raise Unparseable
    return sympy.Integer(math.factorial(int(value)))


def binomial(top: sympy.Expr, bottom: sympy.Expr) -> sympy.Integer:
    """C(n, k) of integers 0 <= n <= ``MAX_BINOMIAL`` and k >= 0 (0 when k > n)."""
    if not (top.is_Integer and bottom.is_Integer and 0 <= top <= MAX_BINOMIAL and bottom >= 0):
        raise Unparseable
    return sympy.Integer(math.comb(int(top), int(bottom)))


def repeating_decimal(number: str, repeated: str) -> sympy.Rational:
    """The value of ``number`` (digits with a point, "0.1") followed by ``repeated`` digits forever."""
    whole, point, fixed = number.partition(".")
    if not point or not repeated or any(digit not in "0123456789" for digit in whole + fixed + repeated):
        raise Unparseable
    # x = whole.fixed(repeated)...: 10^|fixed| (10^|repeated| - 1) x = (whole fixed repeated) - (whole fixed)
    with_repeat = int(whole + fixed + repeated)
    without = int(whole + fixed) if whole + fixed else 0
    return sympy.Rational(with_repeat - without, 10 ** len(fixed) * (10 ** len(repeated) - 1))


def logarithm(argument: sympy.Expr, base: sympy.Expr | None) -> sympy.Expr:
    """log_base(argument) of positive rationals (``base`` None: the natural logarithm).

    Exact when rational (``\\log_2 8`` = 3, ``\\log_4 2`` = 1/2, ``\\log_2 \\frac{1}{8}`` = -3,
    ``\\ln 1`` = 0). Otherwise one canonical symbolic form: each rational x is written y^k with
    y > 1 not a perfect power, so log x = k log y (``\\ln 8`` = 3 log(2), ``\\log_8 3`` =
    log(3)/(3 log(2))); logs of different y stay apart (log 6 is not log 2 + log 3: incomplete,
    never wrong).
    """
    value_root, value_power = _perfect_power(argument)
    if base is None:
        return value_power * sympy.log(value_root) if value_power else sympy.Integer(0)
    base_root, base_power = _perfect_power(base)
    if base_power == 0:
        raise Unparseable  # base 1
    if value_power == 0:
        return sympy.Integer(0)
    if value_root == base_root:
        return sympy.Rational(value_power, base_power)
    return value_power * sympy.log(value_root) / (base_power * sympy.log(base_root))


def _perfect_power(value: sympy.Expr) -> tuple[sympy.Rational, int]:
    """(y, k) with value = y^k, y > 1 and not a perfect power, k a non-zero integer; (1, 0) for 1."""
    if not (value.is_Rational and value > 0):
        raise Unparseable
    numerator, denominator = int(value.p), int(value.q)
    if max(numerator.bit_length(), denominator.bit_length()) > MAX_LOG_ARGUMENT_BITS:
        raise Unparseable
    if numerator == denominator:
        return sympy.Integer(1), 0
    sign = 1
    if numerator < denominator:  # log(1/y) = -log(y): keep y > 1
        numerator, denominator, sign = denominator, numerator, -1
    # The largest k with both parts exact k-th powers; at most ~400 integer roots of <= 400-bit numbers.
    for power in range(numerator.bit_length(), 1, -1):
        top, top_exact = sympy.integer_nthroot(numerator, power)
        if not top_exact:
            continue
        bottom, bottom_exact = sympy.integer_nthroot(denominator, power)
        if bottom_exact:
            return sympy.Rational(top, bottom), sign * power
    return sympy.Rational(numerator, denominator), sign
