"""Fits to measured curves: the exponent of a power law y ~ x^a."""
from __future__ import annotations

import numpy as np

__all__ = ["loglog_slope"]


def loglog_slope(x, y) -> float:
    """Least-squares slope of log y against log x: x, y (n,) with n >= 2, all entries > 0."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.size < 2:
        raise ValueError(f"x, y: expected equal shapes with >= 2 points, got {x.shape}, {y.shape}")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("x, y: log-log fit needs positive values")
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])
