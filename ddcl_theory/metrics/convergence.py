"""Whether a training run reached its plateau: the convergence rule of the evidence standard.

A run that did not converge fails its gate, and a failed gate makes a verdict ``inconclusive``
(the book's page "How a verdict is decided"). The rule, stated once for every experiment: a curve (per-round mean training or
validation loss, shape ``(n_rounds,)``) has reached its plateau when the mean of its last
``window`` rounds is within ``rel`` (relative) of the mean of the ``window`` rounds before.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

#: Default relative change allowed between the last two windows of a plateaued curve.
PLATEAU_REL = 0.05
#: Default number of rounds in each window.
PLATEAU_WINDOW = 2


@dataclass(frozen=True)
class Convergence:
    """The plateau test of one curve.

    Attributes:
        plateau: whether the curve reached its plateau by the rule.
        last, before: means of the last window and of the window before (NaN when too short).
        change: ``(last - before) / |before|`` (NaN when too short).
        rel, window: the rule's parameters.
    """

    plateau: bool
    last: float
    before: float
    change: float
    rel: float
    window: int

    @property
    def text(self) -> str:
        """One phrase for evidence strings, e.g. ``"plateau (change -1.2% < 5%)"``."""
        if math.isnan(self.change):
            return "too short to tell"
        word = "plateau" if self.plateau else "still moving"
        sign = "<=" if self.plateau else ">"
        return f"{word} (change {100 * self.change:+.1f}% {sign} {100 * self.rel:g}%)"


def convergence(curve: Sequence[float], *, rel: float = PLATEAU_REL,
                window: int = PLATEAU_WINDOW) -> Convergence:
    """The plateau test of ``curve`` (shape ``(n_rounds,)``, finite numbers).

    Fewer than ``2 * window`` rounds cannot be judged: ``plateau`` is False.
    """
    if not (isinstance(window, (int, np.integer)) and window >= 1):
        raise ValueError(f"window: expected an int >= 1, got {window!r}")
    if not (math.isfinite(rel) and rel > 0):
        raise ValueError(f"rel: expected a positive relative change, got {rel!r}")
    arr = np.asarray(curve, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"curve: expected shape (n_rounds,), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        return Convergence(False, math.nan, math.nan, math.nan, float(rel), int(window))
    if arr.size < 2 * window:
        return Convergence(False, math.nan, math.nan, math.nan, float(rel), int(window))
    last = float(arr[-window:].mean())
    before = float(arr[-2 * window:-window].mean())
    scale = abs(before) if before != 0 else max(abs(last), 1e-12)
    change = (last - before) / scale
    return Convergence(bool(abs(last - before) <= rel * scale), last, before, float(change),
                       float(rel), int(window))


def plateaued(curve: Sequence[float], *, rel: float = PLATEAU_REL,
              window: int = PLATEAU_WINDOW) -> bool:
    """:func:`convergence` (``curve``).plateau."""
    return convergence(curve, rel=rel, window=window).plateau
