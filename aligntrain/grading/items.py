"""The parsed item of an answer and the answer kinds (docs/grading.md)."""

from __future__ import annotations

import sympy

KINDS = (
    "number",
    "complex",
    "expression",
    "equation",
    "tuple",
    "interval",
    "set",
    "matrix",
    "base",
    "choice",
    "text",
)
"""The answer kinds (docs/grading.md); "number" is a real number, the original grader's only kind."""
SCALAR_KINDS = ("number", "complex", "expression")


class Item:
    """One parsed item of an answer: its kind, its class string and (scalars, equations) its parts."""

    __slots__ = ("kind", "answer_class", "value", "variable", "nodes")

    def __init__(self, kind: str, answer_class: str, value=None, variable=None, nodes=None) -> None:
        self.kind = kind
        self.answer_class = answer_class
        self.value = value
        self.variable = variable
        self.nodes = nodes


def scalar_kind(value: sympy.Expr, answer_class: str) -> str:
    """ "number" (a real number), "complex" or "expression" (has a variable)."""
    if value.free_symbols:
        return "expression"
    return "complex" if "I" in answer_class else "number"
