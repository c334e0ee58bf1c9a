"""Lists and sets of solutions: unordered, without repeats ("1, 2", "\\{1, 2\\}", "1 \\pm \\sqrt{2}")."""

from __future__ import annotations

import sympy

from aligntrain.grading.items import SCALAR_KINDS, Item
from aligntrain.grading.scalar import canonical_scalar

MAX_ITEMS = 16
"""Most items in one tuple, list, set, union or matrix (all of them together)."""


def plus_minus_item(values: list[sympy.Expr], deadline: float) -> Item:
    classes = sorted({canonical_scalar(value, deadline) for value in values})
    return Item("pm", "{" + ", ".join(classes) + "}", nodes=classes)


def set_class(items: list[Item]) -> str:
    """An unordered list: the sorted distinct classes of its items, in braces.

    A list of "v = e" items for one letter v is the list of the e ("x = 1, x = 2"
    is {1, 2}); "v = 1, 2" (the letter named once, first) too.
    """
    variables = {item.variable for item in items if item.kind == "assignment"}
    classes: set[str] = set()
    if (
        len(variables) == 1
        and (items[0].kind == "assignment")
        and all(item.kind in ("assignment", *SCALAR_KINDS) for item in items)
    ):
        if all(item.kind == "assignment" for item in items) or sum(item.kind == "assignment" for item in items) == 1:
            for item in items:
                classes.add(item.value if item.kind == "assignment" else item.answer_class)
            return "{" + ", ".join(sorted(classes)) + "}"
    for item in items:
        if item.kind == "pm":  # "1 \\pm \\sqrt{2}, 3": the two values are members
            classes.update(item.nodes)
        else:
            classes.add(item.answer_class)
    return "{" + ", ".join(sorted(classes)) + "}"
