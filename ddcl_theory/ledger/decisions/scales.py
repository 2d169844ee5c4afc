"""How an estimate moves over a study's scales (image counts, widths): the path of its point
estimates, and its change from the smallest scale to the largest with Welch's interval over the
two scales' independent seeds, so that a trend is stated only as far as an interval supports it.
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
from scipy.stats import ttest_ind

__all__ = ["scale_path", "scale_change", "scale_text"]


def scale_path(values: Sequence[float]) -> str:
    """The shape of the point estimates' path over increasing scales (the verb phrase of a
    plural subject): steady rise or fall, or the steps' signs. Whether a step is resolved is
    for an interval to say, not this path."""
    steps = np.sign(np.diff(np.asarray(values, dtype=float)))
    if np.all(steps > 0):
        return "rise at every step"
    if np.all(steps < 0):
        return "fall at every step"
    return ", then ".join("rise" if d > 0 else "fall" if d < 0 else "stay flat" for d in steps)


def scale_change(first: np.ndarray, last: np.ndarray) -> list[float]:
    """[estimate, low, high]: mean of ``last`` - mean of ``first``, per-seed values of two
    independent sets of runs, shapes (n1,) and (n2,) (Welch's 95% t interval)."""
    first, last = np.asarray(first, dtype=float), np.asarray(last, dtype=float)
    if first.size < 2 or last.size < 2:
        raise ValueError(f"scale_change: need two or more seeds per scale, got {first.size} "
                         f"and {last.size}")
    change = float(last.mean() - first.mean())
    if np.ptp(first) == 0 and np.ptp(last) == 0:
        return [change] * 3
    with warnings.catch_warnings():     # near-constant seeds: scipy warns, the interval is narrow
        warnings.simplefilter("ignore", RuntimeWarning)
        ci = ttest_ind(last, first, equal_var=False).confidence_interval(0.95)
    return [change, float(ci.low), float(ci.high)]


def scale_text(per_seed: Sequence[np.ndarray], labels: Sequence[str], scale: float = 100.0
               ) -> str:
    """The path of the gap's point estimates over the image counts (``per_seed[i]``: per-seed
    gaps at ``labels[i]``, fractions shown as points), and its change from the smallest to the
    largest with Welch's interval (which ignores that the counts' runs share seeds)."""
    est, low, high = (scale * v for v in scale_change(per_seed[0], per_seed[-1]))
    return (f"the gap's point estimates {scale_path([float(v.mean()) for v in per_seed])} over "
            f"the image counts; from {labels[0]} to {labels[-1]} the gap moves {est:+.2f} "
            f"[{low:+.2f}, {high:+.2f}] points by Welch's interval, which ignores that the "
            f"counts' runs share seeds and so may run wide")
