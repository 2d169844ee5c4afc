"""Argument checks shared by the package, each raising a ``ValueError`` that names the argument
and what was expected.

Numbers (bools are refused by all of them):

* :func:`check_positive_int`, :func:`check_int_range` -- an ``int`` >= 1, or in ``[low, high]``.
* :func:`check_real_range` -- a real number in an interval (open or closed at either end);
  :func:`check_positive_float` (> 0), :func:`check_non_negative_float` (>= 0) and
  :func:`check_probability` (in [0, 1)) are its common cases. All of them refuse NaN and inf.
* :func:`check_divisible` -- an int that is a multiple of another (``dim`` and ``heads``).
* :func:`check_choice` -- one of a fixed set of names.

Tensors:

* :func:`check_shape` -- a tensor of a given shape (fixed or named sizes) and optional dtype.
* :func:`check_tokens` / :func:`valid_tokens` -- a token batch x (B, T, dim) and its optional
  bool mask (B, T) (True = valid token).
* :func:`as_float64` -- a tensor or array-like as a float64 NumPy array of a given rank.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Collection, Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = ["as_float64", "check_choice", "check_divisible", "check_int_range",
           "check_non_negative_float", "check_positive_float", "check_positive_int",
           "check_probability", "check_real_range", "check_shape", "check_tokens",
           "valid_tokens"]


# ------------------------------------------------------------------------------------ numbers
def check_int_range(value: object, name: str, low: int, high: int | None = None) -> int:
    """``value`` if it is an int (not a bool) in ``[low, high]`` (no upper bound when ``high``
    is None); else ``ValueError`` naming ``name``."""
    if (isinstance(value, bool) or not isinstance(value, int) or value < low
            or (high is not None and value > high)):
        expected = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name}: expected an int {expected}, got {value!r}")
    return value


def check_positive_int(value: object, name: str) -> int:
    """``value`` if it is an int >= 1 (not a bool); else ``ValueError`` naming ``name``."""
    return check_int_range(value, name, 1)


def _interval(low: float, high: float, low_open: bool, high_open: bool) -> str:
    """How the messages say the interval: "a finite number > 0", "a number in [0, 1)", ..."""
    if math.isinf(low) and math.isinf(high):
        return "a finite number"
    if math.isinf(high):
        return f"a finite number {'>' if low_open else '>='} {low:g}"
    if math.isinf(low):
        return f"a finite number {'<' if high_open else '<='} {high:g}"
    return (f"a number in {'(' if low_open else '['}{low:g}, {high:g}"
            f"{')' if high_open else ']'}")


def check_real_range(value: object, name: str, low: float = -math.inf, high: float = math.inf,
                     *, low_open: bool = False, high_open: bool = False) -> float:
    """``float(value)`` if ``value`` is a finite real number (not a bool) between ``low`` and
    ``high``, each end excluded when ``low_open`` / ``high_open``; else ``ValueError`` naming
    ``name`` and the interval. NaN and the infinities are always refused."""
    number = math.nan
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:                       # an int beyond the float range
            pass
    inside = math.isfinite(number) and (low < number if low_open else low <= number) and (
        number < high if high_open else number <= high)
    if not inside:
        raise ValueError(f"{name}: expected {_interval(low, high, low_open, high_open)}, "
                         f"got {value!r}")
    return number


def check_positive_float(value: object, name: str) -> float:
    """``float(value)`` if it is a finite real number > 0; else ``ValueError`` naming ``name``."""
    return check_real_range(value, name, 0.0, low_open=True)


def check_non_negative_float(value: object, name: str) -> float:
    """``float(value)`` if it is a finite real number >= 0; else ``ValueError`` naming ``name``."""
    return check_real_range(value, name, 0.0)


def check_probability(value: object, name: str) -> float:
    """``float(value)`` if it is a real number in [0, 1) (a dropout rate, an EMA momentum);
    else ``ValueError`` naming ``name``."""
    return check_real_range(value, name, 0.0, 1.0, high_open=True)


def check_divisible(value: int, name: str, divisor: int, divisor_name: str) -> int:
    """``value`` if it is a multiple of ``divisor`` (both ints >= 1, checked before); else
    ``ValueError`` naming ``name`` and ``divisor_name``."""
    if value % divisor != 0:
        raise ValueError(f"{name}: expected a multiple of {divisor_name}={divisor}, got {value}")
    return value


def check_choice(value: object, name: str, choices: Collection[object]) -> object:
    """``value`` if it is one of ``choices``; else ``ValueError`` naming ``name`` and them."""
    if value not in choices:
        raise ValueError(f"{name}: expected one of {tuple(choices)}, got {value!r}")
    return value


# ------------------------------------------------------------------------------------ tensors
def _shape_words(shape: Sequence[int | str]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + (",)" if len(shape) == 1 else ")")


def check_shape(x: object, name: str, shape: Sequence[int | str], *,
                dtype: torch.dtype | None = None) -> None:
    """``ValueError`` naming ``name`` unless ``x`` is a tensor of ``shape`` (and ``dtype``).

    ``shape`` lists one entry per dimension: an int is a size that must match, a str names a
    size that may be anything (it is only shown in the message): ``("B", 3, "H", "W")``.
    """
    if not isinstance(x, Tensor):
        raise ValueError(f"{name}: expected a tensor of shape {_shape_words(shape)}, got "
                         f"{type(x).__name__}")
    if x.dim() != len(shape) or any(isinstance(s, int) and x.shape[i] != s
                                    for i, s in enumerate(shape)):
        raise ValueError(f"{name}: expected shape {_shape_words(shape)}, got {tuple(x.shape)}")
    if dtype is not None and x.dtype != dtype:
        raise ValueError(f"{name}: expected dtype {dtype}, got {x.dtype}")


def check_tokens(x: Tensor, mask: Tensor | None, dim: int | None = None, *, name: str = "x",
                 require_mask: bool = False) -> Tensor | None:
    """Check x (B, T, dim) floating point and mask (B, T) bool (Python values only, no sync).

    ``dim=None`` accepts any feature size; ``name`` is x's name in the messages; with
    ``require_mask`` a missing mask is an error. Returns the mask on x's device, or ``None``
    when ``mask`` is ``None``.
    """
    check_shape(x, name, ("B", "T", "dim" if dim is None else dim))
    if not x.is_floating_point():
        raise ValueError(f"{name}: expected a floating-point tensor, got {x.dtype}")
    if mask is None:
        if require_mask:
            raise ValueError(f"mask: expected a bool tensor of shape (B, T)={tuple(x.shape[:2])} "
                             "(True = valid token), got None")
        return None
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise ValueError(f"mask: expected a bool tensor (True = valid token), got "
                         f"{mask.dtype if isinstance(mask, Tensor) else type(mask).__name__}")
    if mask.shape != x.shape[:2]:
        raise ValueError(f"mask: expected shape (B, T)={tuple(x.shape[:2])}, "
                         f"got {tuple(mask.shape)}")
    return mask.to(x.device)


def valid_tokens(x: Tensor, mask: Tensor | None, dim: int | None = None) -> Tensor:
    """:func:`check_tokens`, then the (B, T) bool mask of valid tokens (all True without one)."""
    valid = check_tokens(x, mask, dim)
    if valid is None:
        return torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
    return valid


def as_float64(x, name: str, ndim: int, *, finite: bool = False) -> np.ndarray:
    """``x`` (tensor or array-like) as a float64 array with ``ndim`` dimensions.

    Raises ``ValueError`` naming ``name`` on a wrong rank, or on non-finite values if ``finite``.
    """
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {arr.shape}")
    if finite and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains non-finite values")
    return arr
