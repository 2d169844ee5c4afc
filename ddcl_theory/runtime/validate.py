"""Argument checks shared by the package, each raising a ``ValueError`` that names the argument.

* :func:`check_positive_int` -- an ``int >= 1`` (bools refused).
* :func:`check_tokens` / :func:`valid_tokens` -- a token batch x (B, T, dim) and its optional
  bool mask (B, T) (True = valid token).
* :func:`as_float64` -- a tensor or array-like as a float64 NumPy array of a given rank.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["as_float64", "check_positive_int", "check_tokens", "valid_tokens"]


def check_positive_int(value: object, name: str) -> int:
    """``value`` if it is an int >= 1 (not a bool); else ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
    return value


def check_tokens(x: Tensor, mask: Tensor | None, dim: int) -> Tensor | None:
    """Check x (B, T, dim) floating point and mask (B, T) bool (Python values only, no sync).

    Returns the mask on x's device, or ``None`` when ``mask`` is ``None``.
    """
    if not isinstance(x, Tensor) or x.dim() != 3:
        raise ValueError(f"x: expected shape (B, T, dim={dim}), got "
                         f"{tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__}")
    if x.shape[-1] != dim:
        raise ValueError(f"x: expected feature size dim={dim}, got {x.shape[-1]}")
    if not x.is_floating_point():
        raise ValueError(f"x: expected a floating-point tensor, got {x.dtype}")
    if mask is None:
        return None
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise ValueError(f"mask: expected a bool tensor (True = valid token), got "
                         f"{mask.dtype if isinstance(mask, Tensor) else type(mask).__name__}")
    if mask.shape != x.shape[:2]:
        raise ValueError(f"mask: expected shape (B, T)={tuple(x.shape[:2])}, "
                         f"got {tuple(mask.shape)}")
    return mask.to(x.device)


def valid_tokens(x: Tensor, mask: Tensor | None, dim: int) -> Tensor:
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
