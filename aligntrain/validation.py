"""Argument checks, one home for each: bad input raises ValueError naming the argument.

These guard what a caller passes in. Something the package itself guarantees (an internal
invariant) is a plain ``assert`` instead.

Conventions shared by every check:

- A bool is never a number here: ``True`` is not the integer 1, nor the real number 1.0.
  (One exception, by name: ``check_finite_vector(..., booleans=True)`` takes a vector of
  correctness flags as 0.0/1.0.)
- An integer is anything with ``__index__`` (int, numpy integers); 2.0 is not an integer.
- A real number is a ``numbers.Real`` (int, float, Fraction, numpy scalars), never NaN;
  ±inf passes unless the bounds exclude it. Bounds are compared with the value itself,
  so a Fraction is checked exactly.
- Each check returns the value in the form the caller computes with (int, float, tuple,
  float64 array), and a message always starts with the argument's name.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Collection, Container, Iterable, Mapping
from collections.abc import Set as AbstractSet

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "check_choices",
    "check_finite_vector",
    "check_int",
    "check_int_sequence",
    "check_probability",
    "check_real",
    "is_int",
    "preview",
]


def is_int(value: object) -> bool:
    """True for an integer (int, numpy integer, anything with ``__index__``); False for a bool
    (Python's or numpy's), a float such as 2.0, and everything else."""
    if isinstance(value, (bool, np.bool_)):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def check_int(value: object, name: str, minimum: int) -> int:
    """``value`` as an int >= ``minimum``.

    ValueError "``name`` must be an integer, got ..." for a bool or a non-integer
    (see :func:`is_int`), "``name`` must be >= ``minimum``, got ..." below the minimum.
    """
    if not is_int(value):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    number = operator.index(value)
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {number}")
    return number


def check_int_sequence(values: Iterable[object], name: str, minimum: int, *, item_name: str | None = None) -> list[int]:
    """``values`` as a non-empty list of ints >= ``minimum``, in the given order.

    Accepted containers: lists, tuples, ranges, one-dimensional numpy arrays (read through
    ``tolist``, so a numpy bool is refused like a bool) and other sized, ordered collections;
    a str, a mapping, a set, an iterator or a scalar is refused ("``name`` must be a non-empty
    sequence of integers"). Each element goes through :func:`check_int`; its errors name
    ``item_name`` (default ``name``), e.g. the budget "k" of the budgets "ks".
    """
    items: list | None
    if isinstance(values, np.ndarray):
        items = values.tolist() if values.ndim == 1 else None
    elif isinstance(values, (str, bytes, Mapping, AbstractSet)) or not isinstance(values, Collection):
        items = None
    else:
        items = list(values)
    if not items:
        raise ValueError(f"{name} must be a non-empty sequence of integers, got {values!r}")
    return [check_int(item, item_name or name, minimum) for item in items]


def _interval(low: object, high: object, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f"lie in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f"be {'>' if low_open else '>='} {low}"
    return f"be {'<' if high_open else '<='} {high}"


def check_real(
    value: object,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    finite: bool = False,
) -> float:
    """``value`` as a float: a real number, not a bool, not NaN, within the bounds given.

    ``low``/``high`` are inclusive unless ``low_open``/``high_open``; None means unbounded
    on that side; ``finite`` refuses ±inf. ValueError, each naming ``name``: "must be a
    real number, got ...", "must not be NaN", "must be finite, got ...", and out of bounds
    "must lie in [low, high], got ..." (brackets as the bounds are open or closed) or, with
    one bound, "must be >= low" (> low, <= high, < high). A caller that needs the value
    exactly (a Fraction) keeps its own and ignores the returned float.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    if isinstance(value, (float, np.floating)) and math.isnan(value):  # ints and Fractions are never NaN
        raise ValueError(f"{name} must not be NaN")
    if finite and value in (math.inf, -math.inf):
        raise ValueError(f"{name} must be finite, got {value!r}")
    below = low is not None and (value <= low if low_open else value < low)
    above = high is not None and (value >= high if high_open else value > high)
    if below or above:
        raise ValueError(f"{name} must {_interval(low, high, low_open, high_open)}, got {value!r}")
    return float(value)


def check_probability(value: object, name: str) -> float:
    """``value`` as a float in [0, 1] (:func:`check_real` with those bounds)."""
    return check_real(value, name, low=0, high=1)


def check_finite_vector(values: ArrayLike, name: str, *, booleans: bool = True) -> np.ndarray:
    """``values`` as a non-empty one-dimensional float64 array of finite numbers.

    ``np.asarray``: an array that already is float64 is returned as it is, not copied.
    ValueError "``name`` must be numeric" (strings always: numpy would read ``'1'`` as 1.0;
    booleans too where ``booleans`` is False, as for rewards and scores, where ``True`` is not
    1.0; a vector of correctness flags passes them), "... must be one-dimensional", "... must
    be non-empty" or "... must be finite (found NaN or inf)".
    """
    if _holds_non_numbers(values, booleans):
        kinds = "strings" if booleans else "booleans and strings"
        raise ValueError(f"{name} must be numeric: {kinds} are not numbers here, got {preview(values)}")
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be numeric: {error}") from None
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{name} must be non-empty")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite (found NaN or inf)")
    return array


def _holds_non_numbers(values: object, booleans: bool) -> bool:
    """True when ``values`` holds a string (or, unless ``booleans``, a bool) among its entries."""
    refused = (str, bytes, np.str_, np.bytes_) if booleans else (str, bytes, np.str_, np.bytes_, bool, np.bool_)
    if isinstance(values, np.ndarray):
        if values.dtype.kind in "USV" or (values.dtype.kind == "b" and not booleans):
            return True
        return values.dtype.kind == "O" and any(isinstance(v, refused) for v in values.ravel())
    if isinstance(values, (str, bytes)):
        return True
    # A flat sequence: its entries (nested ones are refused later as not one-dimensional).
    return isinstance(values, Iterable) and any(isinstance(v, refused) for v in values)


def preview(values: object) -> str:
    """``repr(values)``, cut to 80 characters: an offending value quoted in a message."""
    text = repr(values)
    return text if len(text) <= 80 else text[:77] + "..."


def check_choices(values: Iterable[object], name: str, allowed: Container[object]) -> tuple:
    """``values`` as a tuple: not empty, no repeats, each one in ``allowed`` (e.g. a problem's levels).

    ValueError "``name`` must not be empty", "... must not repeat, got ..." or
    "``name`` must be drawn from ``allowed``, got [the unknown ones]".
    """
    values = tuple(values)
    if not values:
        raise ValueError(f"{name} must not be empty")
    if len(set(values)) != len(values):
        raise ValueError(f"{name} must not repeat, got {values}")
    unknown = [value for value in values if value not in allowed]
    if unknown:
        raise ValueError(f"{name} must be drawn from {allowed}, got {unknown}")
    return values
