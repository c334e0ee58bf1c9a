"""aligntrain.validation: the shared argument checks, against exact expectations."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest
import torch

from aligntrain.validation import (
    check_choices,
    check_finite_vector,
    check_int,
    check_int_sequence,
    check_probability,
    check_real,
    is_int,
)


def raises(message: str):
    """ValueError whose message is exactly ``message``."""
    return pytest.raises(ValueError, match=f"^{re.escape(message)}$")


# --------------------------------------------------------------------------- integers


@pytest.mark.parametrize("value", [0, -3, 7, 2**70, np.int64(5), np.int8(-1), np.uint16(3), torch.tensor(4)])
def test_is_int_accepts_integers(value):
    assert is_int(value)


@pytest.mark.parametrize(
    "value",
    [True, False, np.True_, np.bool_(False), 2.0, np.float64(2.0), Fraction(4, 2), "3", None, [1], np.array([1])],
)
def test_is_int_refuses_bools_floats_and_the_rest(value):
    assert not is_int(value)


def test_check_int_returns_a_python_int():
    value = check_int(np.int64(5), "n", minimum=1)
    assert value == 5 and type(value) is int
    assert check_int(0, "n", minimum=0) == 0
    assert check_int(-(2**63), "ignore_index", minimum=-(2**63)) == -(2**63)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "n must be an integer, got True"),
        (False, "n must be an integer, got False"),
        (np.True_, "n must be an integer, got np.True_"),
        (2.0, "n must be an integer, got 2.0"),
        (np.float64(2.0), "n must be an integer, got np.float64(2.0)"),
        ("2", "n must be an integer, got '2'"),
        (None, "n must be an integer, got None"),
        (0, "n must be >= 1, got 0"),
        (np.int64(-4), "n must be >= 1, got -4"),
    ],
)
def test_check_int_messages_name_the_argument(value, message):
    with raises(message):
        check_int(value, "n", minimum=1)


# --------------------------------------------------------------------------- sequences of integers


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1, 2, 4], [1, 2, 4]),
        ((4,), [4]),
        (range(1, 4), [1, 2, 3]),
        (np.array([8, 2]), [8, 2]),  # order kept, not sorted
        ([np.int64(3)], [3]),
    ],
)
def test_check_int_sequence_accepts_ordered_collections(values, expected):
    got = check_int_sequence(values, "ks", minimum=1)
    assert got == expected and all(type(k) is int for k in got)


@pytest.mark.parametrize(
    "values",
    [[], (), np.array([], dtype=int), "12", b"12", {1: 2}, {1, 2}, iter([1]), 3, np.array(3), np.array([[1, 2]])],
)
def test_check_int_sequence_refuses_empty_and_unordered_inputs(values):
    with raises(f"ks must be a non-empty sequence of integers, got {values!r}"):
        check_int_sequence(values, "ks", minimum=1)


def test_check_int_sequence_checks_every_element_under_its_name():
    with raises("ks must be an integer, got True"):
        check_int_sequence([1, True], "ks", minimum=1)
    with raises("ks must be an integer, got True"):  # a numpy bool array is read as Python bools
        check_int_sequence(np.array([True]), "ks", minimum=1)
    with raises("ks must be an integer, got 1.0"):
        check_int_sequence(np.array([1.0, 2.0]), "ks", minimum=1)
    with raises("k must be >= 1, got 0"):
        check_int_sequence([2, 0], "ks", minimum=1, item_name="k")
    with raises("seeds must be >= 0, got -1"):
        check_int_sequence([0, -1], "seeds", minimum=0)


# --------------------------------------------------------------------------- real numbers


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.25, 0.25),
        (3, 3.0),
        (Fraction(1, 4), 0.25),
        (np.float32(0.5), 0.5),
        (np.int64(2), 2.0),
        (-math.inf, -math.inf),
    ],
)
def test_check_real_returns_a_float(value, expected):
    got = check_real(value, "x")
    assert got == expected and type(got) is float


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "x must be a real number, got True"),
        (np.False_, "x must be a real number, got np.False_"),
        ("0.5", "x must be a real number, got '0.5'"),
        (None, "x must be a real number, got None"),
        (1 + 0j, "x must be a real number, got (1+0j)"),
        (math.nan, "x must not be NaN"),
        (np.float32("nan"), "x must not be NaN"),
    ],
)
def test_check_real_refuses_non_numbers_and_nan(value, message):
    with raises(message):
        check_real(value, "x")


@pytest.mark.parametrize(
    ("bounds", "value", "message"),
    [
        ({"low": 0}, -0.1, "eps must be >= 0, got -0.1"),
        ({"low": 0, "low_open": True}, 0.0, "eps must be > 0, got 0.0"),
        ({"high": 1}, 1.5, "eps must be <= 1, got 1.5"),
        ({"high": 1, "high_open": True}, 1, "eps must be < 1, got 1"),
        ({"low": 0, "high": 1}, 1.5, "eps must lie in [0, 1], got 1.5"),
        ({"low": 0, "high": 1, "low_open": True}, 0, "eps must lie in (0, 1], got 0"),
        ({"low": 0, "high": 1, "low_open": True, "high_open": True}, 1.0, "eps must lie in (0, 1), got 1.0"),
        ({"low": 0}, -math.inf, "eps must be >= 0, got -inf"),
        ({"low": 0, "finite": True}, math.inf, "eps must be finite, got inf"),
        ({"finite": True}, -math.inf, "eps must be finite, got -inf"),
    ],
)
def test_check_real_bounds_and_their_messages(bounds, value, message):
    with raises(message):
        check_real(value, "eps", **bounds)


def test_check_real_bounds_are_inclusive_by_default_and_inf_passes_unless_refused():
    assert check_real(0, "x", low=0, high=1) == 0.0
    assert check_real(1, "x", low=0, high=1) == 1.0
    assert check_real(math.inf, "clip", low=0, low_open=True) == math.inf
    assert check_real(0.0, "tol", low=0, finite=True) == 0.0


def test_check_real_compares_a_fraction_exactly():
    just_above_one = Fraction(10**20 + 1, 10**20)  # its float is 1.0
    with raises(f"h_in must lie in [0, 1], got {just_above_one!r}"):
        check_real(just_above_one, "h_in", low=0, high=1)


def test_check_probability_is_the_closed_unit_interval():
    assert check_probability(0, "p") == 0.0
    assert check_probability(Fraction(1, 3), "p") == 1 / 3
    assert check_probability(1.0, "p") == 1.0
    with raises("p must lie in [0, 1], got -0.5"):
        check_probability(-0.5, "p")
    with raises("p must lie in [0, 1], got 1.01"):
        check_probability(1.01, "p")
    with raises("p must not be NaN"):
        check_probability(math.nan, "p")
    with raises("p must be a real number, got True"):
        check_probability(True, "p")


# --------------------------------------------------------------------------- finite vectors


def test_check_finite_vector_returns_float64_and_does_not_copy_a_float64_array():
    array = np.array([1.0, 2.5])
    assert check_finite_vector(array, "rewards") is array
    got = check_finite_vector([1, 2], "rewards")
    assert got.dtype == np.float64 and got.tolist() == [1.0, 2.0]
    assert check_finite_vector(np.array([True, False]), "correct").tolist() == [1.0, 0.0]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([1.0, math.nan], "rewards must be finite (found NaN or inf)"),
        ([1.0, math.inf], "rewards must be finite (found NaN or inf)"),
        ([-math.inf], "rewards must be finite (found NaN or inf)"),
        ([], "rewards must be non-empty"),
        ([[1.0, 2.0]], "rewards must be one-dimensional, got shape (1, 2)"),
        (1.0, "rewards must be one-dimensional, got shape ()"),
    ],
)
def test_check_finite_vector_messages(values, message):
    with raises(message):
        check_finite_vector(values, "rewards")


def test_check_finite_vector_refuses_non_numbers():
    with pytest.raises(ValueError, match="^rewards must be numeric: "):
        check_finite_vector(["high", "low"], "rewards")
    with pytest.raises(ValueError, match="^rewards must be numeric: "):
        check_finite_vector([1.0, {}], "rewards")
    with raises("rewards must be finite (found NaN or inf)"):  # numpy reads None as NaN
        check_finite_vector([1.0, None], "rewards")


# --------------------------------------------------------------------------- choices


def test_check_choices_returns_a_tuple_in_the_given_order():
    assert check_choices([3, 1], "levels", (1, 2, 3)) == (3, 1)
    assert check_choices((np.int64(2),), "levels", (1, 2, 3)) == (2,)
    assert check_choices(iter([2]), "levels", {2: "spec"}) == (2,)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([], "levels must not be empty"),
        ([1, 2, 1], "levels must not repeat, got (1, 2, 1)"),
        ([1, 4, 0], "levels must be drawn from (1, 2, 3), got [4, 0]"),
    ],
)
def test_check_choices_messages(values, message):
    with raises(message):
        check_choices(values, "levels", (1, 2, 3))


@pytest.mark.parametrize(
    "values",
    [
        [True, False],
        np.array([True, False]),
        ["1", "0"],
        np.array(["1"]),
        [0.5, True],
        np.array([0.5, "x"], dtype=object),
    ],
)
def test_a_reward_vector_of_booleans_or_strings_is_not_numeric(values):
    """numpy reads True as 1.0 and '1' as 1.0; the package's rule is that neither is a number."""
    from aligntrain.estimators import max_at_k, mean_and_stderr

    with pytest.raises(ValueError, match=r"^rewards must be numeric: booleans and strings are not numbers here"):
        max_at_k(values, 1)
    with pytest.raises(ValueError, match=r"^scores must be numeric"):
        mean_and_stderr(values)
    assert max_at_k([1, 0.5, np.float32(0.25)], 3) == 1.0 and mean_and_stderr(np.array([1, 3])) == (2.0, 1.0)
    with pytest.raises(ValueError, match=r"^correct must be numeric: strings are not numbers here"):
        check_finite_vector(["1"], "correct")  # flags may be booleans (see above); strings never
