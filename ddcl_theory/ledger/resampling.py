"""A bootstrap interval for a crossed design: every seed scored on the same evaluation items.

When all seeds share one fixed item set (an evaluation pool), an item that favours one arm
favours it for every seed, so the sampling of that set does not average out over seeds.
:func:`bootstrap_crossed` resamples seeds and items independently and keeps each drawn item for
every drawn seed (the "pigeonhole" bootstrap of a crossed seeds x items array), so its interval
covers both sources; it errs on the wide side, as that bootstrap is known to. When each seed has
its own items, :func:`ddcl_theory.ledger.stats.bootstrap_seeds_items` is the matching design.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ddcl_theory.ledger.stats import CONFIDENCE, Interval

__all__ = ["CROSSED", "bootstrap_crossed"]

#: The interval's method name (one of :data:`ddcl_theory.ledger.stats.METHODS`).
CROSSED = "bootstrap over seeds and items"


def bootstrap_crossed(values: Sequence[Sequence[float]], *, confidence: float = CONFIDENCE,
                      n_resamples: int = 9999, seed: int = 0, batch: int = 250) -> Interval:
    """Percentile bootstrap of the grand mean of ``values``, shape (seeds, items): row ``i``
    holds seed ``i``'s value on every item of one shared item set (e.g. the paired difference of
    two arms' correctness on each pool image). Each resample weights the seeds by a draw with
    replacement and, independently, the items by another; the estimate is the grand mean.
    Reproducible through ``seed``; ``batch`` resamples are drawn at a time."""
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 2 or arr.shape[0] < 2 or arr.shape[1] < 1:
        raise ValueError(f"values: expected shape (seeds >= 2, items >= 1), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("values: expected finite numbers")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence: expected a level in (0, 1), got {confidence!r}")
    if n_resamples < 100:
        raise ValueError(f"n_resamples: expected at least 100, got {n_resamples}")
    if batch < 1:
        raise ValueError(f"batch: expected at least 1, got {batch}")
    n_seeds, n_items = arr.shape
    rng = np.random.default_rng(seed)
    boot = np.empty(n_resamples)
    for start in range(0, n_resamples, batch):
        b = min(batch, n_resamples - start)
        seed_w = rng.multinomial(n_seeds, np.full(n_seeds, 1.0 / n_seeds), size=b)
        item_w = rng.multinomial(n_items, np.full(n_items, 1.0 / n_items), size=b)
        boot[start:start + b] = np.einsum("bi,bi->b", seed_w @ arr, item_w)
    boot /= n_seeds * n_items
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(boot, [alpha, 1.0 - alpha])
    return Interval(float(arr.mean()), float(low), float(high), n_seeds, CROSSED,
                    float(confidence))
