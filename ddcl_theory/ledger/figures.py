"""The one figure every empirical chapter shows: its deciding statistic over scale.

A verdict's ``trend`` maps a scale label (e.g. ``"200 steps"``) to the deciding statistic there,
either a number or ``[estimate, low, high]`` (the 95% interval). :func:`plot_trend` draws it with
its intervals and the claim's margin, so a reader sees the direction of the trend and where the
verdict was taken (the largest scale).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np


def trend_points(trend: Mapping[str, Any]) -> tuple[list[str], np.ndarray, np.ndarray,
                                                     np.ndarray]:
    """``(labels, estimate, low, high)`` from a ``trend`` mapping (shapes ``(n_scales,)``); a
    plain number has ``low == high == estimate``. ``ValueError`` on an empty trend or a value
    that is neither a number nor ``[estimate, low, high]``."""
    if not trend:
        raise ValueError("trend: expected at least one scale, got none")
    labels, est, low, high = [], [], [], []
    for label, value in trend.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            e = lo = hi = float(value)
        elif isinstance(value, (list, tuple)) and len(value) == 3:
            e, lo, hi = (float(v) for v in value)
        else:
            raise ValueError(f"trend[{label!r}]: expected a number or [estimate, low, high], "
                             f"got {value!r}")
        if not all(math.isfinite(v) for v in (e, lo, hi)) or not lo <= e <= hi:
            raise ValueError(f"trend[{label!r}]: expected finite low <= estimate <= high, got "
                             f"{value!r}")
        labels.append(str(label))
        est.append(e)
        low.append(lo)
        high.append(hi)
    return labels, np.array(est), np.array(low), np.array(high)


def plot_trend(ax, trend: Mapping[str, Any], *, ylabel: str, margin: float = 0.0,
               label: str | None = None, color: str | None = None):
    """Draw ``trend`` on ``ax`` (matplotlib axes): estimates joined by a line, 95% intervals as
    error bars, the claim's ``margin`` as a dashed line, scales as categorical x ticks. Returns
    ``ax``."""
    labels, est, low, high = trend_points(trend)
    x = np.arange(len(labels))
    ax.errorbar(x, est, yerr=np.vstack([est - low, high - est]), marker="o", capsize=4,
                label=label, color=color)
    ax.axhline(margin, color="0.4", linestyle="--", linewidth=1)
    ax.set_xticks(x, labels)
    ax.set_xlabel("scale")
    ax.set_ylabel(ylabel)
    return ax
