"""The shared argument checks: each accepts exactly its range and names the argument and what it
expected when it refuses."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ddcl_theory.runtime.validate import (as_float64, check_choice, check_divisible,
                                          check_int_range, check_non_negative_float,
                                          check_positive_float, check_positive_int,
                                          check_probability, check_real_range, check_shape,
                                          check_tokens, valid_tokens)

BOUNDS = st.floats(-1e6, 1e6, allow_nan=False)
ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True)


# ----------------------------------------------------------------------------------- ints
@given(value=st.integers(-50, 50), low=st.integers(-20, 20), span=st.none() | st.integers(0, 20))
def test_int_range_accepts_exactly_the_ints_between_its_bounds(value, low, span):
    high = None if span is None else low + span
    inside = value >= low and (high is None or value <= high)
    if inside:
        assert check_int_range(value, "n", low, high) == value
    else:
        with pytest.raises(ValueError, match=r"^n: expected an int (>=|in \[)"):
            check_int_range(value, "n", low, high)


@pytest.mark.parametrize("bad", [True, False, 2.0, "3", None, np.int64(3)])
def test_int_checks_refuse_bools_floats_and_other_types(bad):
    with pytest.raises(ValueError, match="heads: expected an int in \\[0, 4\\]"):
        check_int_range(bad, "heads", 0, 4)
    with pytest.raises(ValueError, match="dim: expected an int >= 1"):
        check_positive_int(bad, "dim")


def test_positive_int_is_the_range_from_one():
    assert check_positive_int(1, "k") == 1
    with pytest.raises(ValueError, match=r"^k: expected an int >= 1, got 0$"):
        check_positive_int(0, "k")


# ---------------------------------------------------------------------------------- reals
@given(value=ANY_FLOAT, low=BOUNDS, width=st.floats(0, 1e6), low_open=st.booleans(),
       high_open=st.booleans())
def test_real_range_accepts_exactly_the_finite_numbers_of_the_interval(value, low, width,
                                                                         low_open, high_open):
    high = low + width
    inside = (math.isfinite(value) and (low < value if low_open else low <= value)
              and (value < high if high_open else value <= high))
    if inside:
        assert check_real_range(value, "x", low, high, low_open=low_open,
                                high_open=high_open) == value
    else:
        with pytest.raises(ValueError, match=r"^x: expected a number in [\[(].*[\])], got"):
            check_real_range(value, "x", low, high, low_open=low_open, high_open=high_open)


@given(value=ANY_FLOAT)
def test_positive_float_is_finite_and_above_zero(value):
    if math.isfinite(value) and value > 0:
        assert check_positive_float(value, "temperature") == value
    else:
        with pytest.raises(ValueError, match="temperature: expected a finite number > 0"):
            check_positive_float(value, "temperature")


@given(value=ANY_FLOAT)
def test_probability_is_in_zero_included_one_excluded(value):
    if 0.0 <= value < 1.0:
        assert check_probability(value, "dropout") == value
    else:
        with pytest.raises(ValueError, match=r"dropout: expected a number in \[0, 1\)"):
            check_probability(value, "dropout")


def test_non_negative_float_takes_zero_and_refuses_negatives_and_inf():
    assert check_non_negative_float(0, "beta") == 0.0
    for bad in (-1e-12, math.inf, math.nan):
        with pytest.raises(ValueError, match="beta: expected a finite number >= 0"):
            check_non_negative_float(bad, "beta")


def test_real_checks_return_a_python_float_and_refuse_non_numbers():
    value = check_positive_float(np.float32(0.5), "tau")
    assert type(value) is float and value == 0.5
    assert type(check_positive_float(3, "tau")) is float
    for bad in (True, "1.0", None, torch.tensor(1.0), 10 ** 400):
        with pytest.raises(ValueError, match="tau: expected a finite number > 0"):
            check_positive_float(bad, "tau")


def test_real_range_words_its_open_and_closed_ends():
    with pytest.raises(ValueError, match=r"decay: expected a number in \(0, 1\), got 1"):
        check_real_range(1, "decay", 0, 1, low_open=True, high_open=True)
    with pytest.raises(ValueError, match=r"t: expected a number in \(0, 0\.1\], got 0\.2"):
        check_real_range(0.2, "t", 0, 0.1, low_open=True)
    with pytest.raises(ValueError, match=r"t: expected a finite number <= 2, got 3"):
        check_real_range(3, "t", high=2)
    with pytest.raises(ValueError, match=r"t: expected a finite number, got nan"):
        check_real_range(math.nan, "t")


# -------------------------------------------------------------------- divisible, choices
@given(value=st.integers(1, 200), divisor=st.integers(1, 20))
def test_divisible_accepts_exactly_the_multiples(value, divisor):
    if value % divisor == 0:
        assert check_divisible(value, "dim", divisor, "heads") == value
    else:
        with pytest.raises(ValueError, match=f"^dim: expected a multiple of heads={divisor}, "
                                             f"got {value}$"):
            check_divisible(value, "dim", divisor, "heads")


def test_choice_names_the_argument_and_the_choices():
    assert check_choice("cls", "pool", ("mean", "cls")) == "cls"
    with pytest.raises(ValueError, match=r"^pool: expected one of \('mean', 'cls'\), got 'max'$"):
        check_choice("max", "pool", ("mean", "cls"))


# -------------------------------------------------------------------------------- tensors
def test_shape_checks_fixed_sizes_ranks_dtypes_and_types():
    check_shape(torch.zeros(2, 3, 8, 8), "images", ("B", 3, "H", "W"))
    check_shape(torch.zeros(5, dtype=torch.long), "segments", (5,), dtype=torch.long)
    cases = [
        (torch.zeros(2, 4, 8, 8), ("B", 3, "H", "W"), None,
         r"images: expected shape \(B, 3, H, W\), got \(2, 4, 8, 8\)"),
        (torch.zeros(3, 8, 8), ("B", 3, "H", "W"), None,
         r"images: expected shape \(B, 3, H, W\), got \(3, 8, 8\)"),
        (torch.zeros(4), (5,), None, r"images: expected shape \(5,\), got \(4,\)"),
        (torch.zeros(2, 3), ("B", "T"), torch.long,
         r"images: expected dtype torch.int64, got torch.float32"),
        ([[1.0]], ("N", "d"), None, r"images: expected a tensor of shape \(N, d\), got list"),
    ]
    for x, shape, dtype, message in cases:
        with pytest.raises(ValueError, match=message):
            check_shape(x, "images", shape, dtype=dtype)


def test_tokens_check_shape_dtype_and_mask_and_return_the_mask():
    x = torch.randn(2, 5, 4)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    assert check_tokens(x, None, 4) is None
    assert torch.equal(check_tokens(x, mask, 4), mask)
    assert torch.equal(check_tokens(x, mask), mask)                   # any feature size
    assert torch.equal(valid_tokens(x, None, 4), torch.ones(2, 5, dtype=torch.bool))
    assert torch.equal(valid_tokens(x, mask), mask)
    cases = [
        (dict(x=torch.randn(5, 4), mask=None, dim=4), r"^x: expected shape \(B, T, 4\)"),
        (dict(x=x, mask=None, dim=3), r"^x: expected shape \(B, T, 3\), got \(2, 5, 4\)"),
        (dict(x=x.long(), mask=None, dim=4), r"^x: expected a floating-point tensor"),
        (dict(x=x, mask=mask.float(), dim=4), r"^mask: expected a bool tensor"),
        (dict(x=x, mask=mask[:, :4], dim=4), r"^mask: expected shape \(B, T\)=\(2, 5\)"),
        (dict(x=x, mask=None, dim=None, require_mask=True), r"^mask: expected a bool tensor .*"
                                                            r"got None"),
        (dict(x=x.long(), mask=None, dim=4, name="z"), r"^z: expected a floating-point"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            check_tokens(**kwargs)


def test_as_float64_checks_rank_and_finiteness():
    arr = as_float64(torch.ones(2, 3, dtype=torch.float32), "h", 2)
    assert arr.dtype == np.float64 and arr.shape == (2, 3)
    with pytest.raises(ValueError, match=r"h: expected 3 dimensions, got shape \(2, 3\)"):
        as_float64(arr, "h", 3)
    with pytest.raises(ValueError, match="h: contains non-finite values"):
        as_float64([1.0, math.inf], "h", 1, finite=True)
