"""Converting tensors or array-likes to float64 NumPy arrays with a clear error."""
from __future__ import annotations

import numpy as np


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
