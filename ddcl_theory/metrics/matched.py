"""A quantity of two training runs compared at the same loss instead of the same step.

A model that trains faster reaches a lower loss in the same number of steps, and many geometric
measures (e.g. the CDNV of next-token classes) fall as the loss falls; comparing them at the end
of the run confounds the two. :func:`at_matched_loss` reads both runs' curves at the lowest loss
both reach (claim L9 of the Laplacian-heads chapter).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["at_level", "at_matched_loss"]


def at_level(losses: Sequence[float], values: Sequence[float], level: float) -> float:
    """``values`` (shape ``(n_points,)``, measured with ``losses`` at the same points, in
    training order) at the first crossing of ``level`` by the loss curve: linear interpolation
    in the loss between the first point at or below ``level`` and the point before it (the
    first point itself when the curve starts at or below the level). ValueError when the curve
    never reaches the level."""
    loss, value = np.asarray(losses, dtype=float), np.asarray(values, dtype=float)
    if loss.ndim != 1 or loss.shape != value.shape or loss.size == 0:
        raise ValueError(f"losses, values: expected two 1-D curves of equal length, got "
                         f"{loss.shape} and {value.shape}")
    below = np.flatnonzero(loss <= level)
    if below.size == 0:
        raise ValueError(f"level: the curve never reaches {level} (lowest {loss.min()})")
    i = int(below[0])
    if i == 0 or loss[i] == level:
        return float(value[i])
    w = (loss[i - 1] - level) / (loss[i - 1] - loss[i])
    return float(value[i - 1] + w * (value[i] - value[i - 1]))


def at_matched_loss(loss_a: Sequence[float], value_a: Sequence[float], loss_b: Sequence[float],
                    value_b: Sequence[float]) -> tuple[float, float, float]:
    """``(level, value of a, value of b)`` at ``level = max(min(loss_a), min(loss_b))``, the
    lowest loss both runs reach, each read by :func:`at_level` (the worse run is read at its
    best point)."""
    level = float(max(np.min(loss_a), np.min(loss_b)))
    return level, at_level(loss_a, value_a, level), at_level(loss_b, value_b, level)
