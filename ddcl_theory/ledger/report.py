"""Printing numbers for the goldens: rounded, and never the digits of rounding noise."""
from __future__ import annotations

import math


def below(value: float, bound: float, spec: str = ".3g") -> str:
    """``value`` formatted with ``spec``, or ``"< bound"`` when it is under ``bound``.

    Use it for quantities that are zero up to rounding (residuals of identities, distances
    between merged points): their digits depend on the CPU's kernels, the bound does not.
    """
    if not (bound > 0 and math.isfinite(bound)):
        raise ValueError(f"bound: expected a finite number > 0, got {bound!r}")
    if math.isnan(value):
        raise ValueError("value: got NaN")
    return f"< {bound:.0e}" if abs(value) < bound else format(value, spec)
