"""Argument checks shared by the math modules: bad input raises ValueError naming the argument."""

from __future__ import annotations

import operator


def check_int(value: object, name: str, minimum: int) -> int:
    """``value`` as an int >= ``minimum`` (bools and non-integral numbers rejected)."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {number}")
    return number
