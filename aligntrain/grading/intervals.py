"""Intervals and unions of intervals, simplified by sympy's set algebra on ends the parser built."""

from __future__ import annotations

import sympy

from aligntrain.grading import scalar
from aligntrain.grading.items import Item
from aligntrain.grading.scalar import Unparseable, canonical_scalar, check_deadline

MAX_INTERVALS = 4
"""Most intervals in one union (sympy's set simplification compares every pair of ends)."""


def interval_union(parts, deadline: float) -> Item:
    """A union of real intervals, simplified by sympy's set algebra (objects built here, not parsed)."""
    sets = []
    for (opener, closer), nodes in parts:
        if len(nodes) != 2:
            raise Unparseable
        ends = []
        for node in nodes:
            value = node.value
            if value.free_symbols or value.has(sympy.I, sympy.zoo, sympy.nan):
                raise Unparseable
            if value in (sympy.oo, -sympy.oo):
                pass
            elif value.has(sympy.oo, -sympy.oo):
                raise Unparseable
            else:
                value = scalar._canonical_value(value, deadline)
            ends.append(value)
        low, high = ends
        if (
            (low == sympy.oo or high == -sympy.oo)
            or (opener == "[" and low == -sympy.oo)
            or (closer == "]" and high == sympy.oo)
        ):
            raise Unparseable
        check_deadline(deadline)
        sets.append(sympy.Interval(low, high, opener == "(", closer == ")"))
    check_deadline(deadline)
    union = sympy.Union(*sets)
    if not isinstance(union, (sympy.Interval, sympy.Union)):
        raise Unparseable  # empty or a single point: not an interval answer
    if isinstance(union, sympy.Interval) and union.left_open and union.right_open:
        if union.start.is_finite and union.end.is_finite:  # an open interval (a, b) reads like the pair (a, b)
            return Item(
                "tuple", f"({canonical_scalar(union.start, deadline)}, {canonical_scalar(union.end, deadline)})"
            )
    return Item("interval", str(union))
