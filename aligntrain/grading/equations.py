"""Equations: a lone "v = e" is e's class; any other equation is its normalised polynomial ("eq:...")."""

from __future__ import annotations

import sympy

from aligntrain.grading import scalar
from aligntrain.grading.items import Item, scalar_kind
from aligntrain.grading.lists import plus_minus_item
from aligntrain.grading.scalar import Node, Unparseable, canonical_scalar, check_deadline


def equation(left_nodes: list[Node], right_nodes: list[Node], deadline: float) -> Item:
    """A "v = e" assignment (v one letter not in e) or a general equation."""
    if len(left_nodes) != 1:
        raise Unparseable
    lhs = left_nodes[0].value
    right = [node.value for node in right_nodes]
    if len(right) == 2 and lhs.is_Symbol and not any(lhs in value.free_symbols for value in right):
        return plus_minus_item(right, deadline)  # "x = 1 \\pm \\sqrt{2}": the two values
    if len(right) == 1 and lhs.is_Symbol and lhs not in right[0].free_symbols:
        value_class = canonical_scalar(right[0], deadline)
        value_kind = scalar_kind(right[0], value_class)
        return Item("assignment", f"{lhs}={value_class}", value=value_class, variable=str(lhs), nodes=value_kind)
    if len(right) != 1:
        raise Unparseable
    difference = scalar.add(left_nodes[0], negated(right_nodes[0]))  # the term bounds hold for lhs - rhs
    return Item("equation", "eq:" + _normalisedequation(difference.value, deadline))


def negated(node: Node) -> Node:
    return node._replace(value=-node.value)


def _normalisedequation(difference: sympy.Expr, deadline: float) -> str:
    """The numerator of lhs - rhs, expanded and divided by its leading coefficient [choice].

    Scaling by a non-zero constant does not change the solution set, so
    "2y = 4x + 6" and "y - 2x = 3" share a class; the numerator drops the
    denominators (an equation with a variable in a denominator may gain the
    denominator's zeros: documented as a known limit).
    """
    check_deadline(deadline)
    numerator, _ = sympy.fraction(sympy.together(difference))
    numerator = sympy.expand(numerator)
    symbols = sorted(numerator.free_symbols, key=lambda symbol: symbol.name)
    if not symbols or numerator.has(sympy.I):
        raise Unparseable
    check_deadline(deadline)
    leading = sympy.Poly(numerator, *symbols).LC()
    if leading == 0:
        raise Unparseable
    return canonical_scalar(sympy.expand(numerator / leading), deadline)
