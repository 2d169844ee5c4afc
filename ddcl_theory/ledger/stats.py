"""Intervals, the three-way decision of an interval, and the power analysis of a design.

The house evidence standard (the book's page :doc:`/book/evidence`): 95% intervals come from
``scipy.stats`` (never hand-rolled t quantiles), and an empirical test is decided by where the
interval of its statistic lies against the claim's margin ``m`` and the smallest effect of
interest ``s`` (on the claimed side of ``m``, or ``m`` itself):

* ``not reproduced``: the interval lies short of ``s`` (any effect is smaller than the smallest
  that matters: a clear effect of the wrong sign, or a real but negligible one);
* ``reproduced``: otherwise, when the interval lies beyond ``m``;
* ``inconclusive``: the interval holds both ``m`` and ``s`` (a statement about power).

The power analysis (:func:`seeds_needed`, :func:`detectable_effect`) uses the noncentral t
distribution of a one-sample (or paired) t design: how many seeds tell ``m`` from ``s`` with 80%
power, and the smallest effect a design of ``n`` seeds detects.

Functions here take plain sequences of per-seed numbers (shape ``(n_seeds,)``) and return
:class:`Interval`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
#: The interval methods a rule may name ("bootstrap over seeds and items": the two-stage
#: percentile bootstrap of :func:`bootstrap_seeds_items`).
METHODS = ("paired t", "one-sample t", "bootstrap", "bootstrap over seeds and items")
#: The power every design is sized for.
POWER = 0.8
#: Seeds beyond this are reported as "beyond reach" by :func:`seeds_needed`.
MAX_SEEDS = 100_000
#: The sides a claim may take: the statistic is claimed above (``">"``) or below (``"<"``)
#: its margin.
SIDES = (">", "<")


@dataclass(frozen=True)
class Interval:
    """A two-sided confidence interval of one statistic.

    Attributes:
        estimate: the point estimate (mean of the per-seed values or of the paired differences).
        low, high: the interval's ends.
        n: the number of seeds (pairs) behind it.
        method: one of :data:`METHODS`.
        confidence: the confidence level (0.95 unless stated).
    """

    estimate: float
    low: float
    high: float
    n: int
    method: str
    confidence: float = CONFIDENCE

    def as_list(self) -> list[float]:
        """``[low, high]`` as JSON-ready floats (the ``interval`` field of a verdict)."""
        return [float(self.low), float(self.high)]


def _values(name: str, values: Sequence[float], minimum: int = 2) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or arr.size < minimum:
        raise ValueError(f"{name}: expected a 1-D sequence of at least {minimum} numbers, "
                         f"got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: expected finite numbers, got {arr.tolist()}")
    return arr


def _confidence(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence: expected a level in (0, 1), got {confidence!r}")
    return float(confidence)


def _degenerate(arr: np.ndarray, method: str, confidence: float) -> Interval | None:
    """A zero-width interval at the mean when the values are equal up to rounding (scipy
    returns NaN ends, or warns of cancellation, there)."""
    mean = float(np.mean(arr))
    if float(np.ptp(arr)) <= 1e-12 * max(1.0, abs(mean)):
        return Interval(mean, mean, mean, arr.size, method, confidence)
    return None


def paired_t(ours: Sequence[float], other: Sequence[float], *,
             confidence: float = CONFIDENCE) -> Interval:
    """Interval of the mean paired difference ``ours - other`` (seed i of each arm paired):
    ``scipy.stats.ttest_rel(ours, other).confidence_interval(confidence)``."""
    a, b = _values("ours", ours), _values("other", other)
    if a.shape != b.shape:
        raise ValueError(f"other: expected as many values as ours ({a.size}), got {b.size}")
    confidence = _confidence(confidence)
    flat = _degenerate(a - b, "paired t", confidence)
    if flat is not None:
        return flat
    ci = stats.ttest_rel(a, b).confidence_interval(confidence_level=confidence)
    return Interval(float(np.mean(a - b)), float(ci.low), float(ci.high), a.size, "paired t",
                    confidence)


def one_sample_t(values: Sequence[float], *, confidence: float = CONFIDENCE) -> Interval:
    """Interval of the mean of ``values``:
    ``scipy.stats.ttest_1samp(values, 0).confidence_interval(confidence)``."""
    arr = _values("values", values)
    confidence = _confidence(confidence)
    flat = _degenerate(arr, "one-sample t", confidence)
    if flat is not None:
        return flat
    ci = stats.ttest_1samp(arr, 0.0).confidence_interval(confidence_level=confidence)
    return Interval(float(np.mean(arr)), float(ci.low), float(ci.high), arr.size, "one-sample t",
                    confidence)


def bootstrap(values: Sequence[float], *, statistic: Callable[..., float] = np.mean,
              confidence: float = CONFIDENCE, n_resamples: int = 9999, seed: int = 0,
              method: str = "BCa") -> Interval:
    """Bootstrap interval of ``statistic(values)`` (default the mean; for a paired design pass
    the per-seed differences): ``scipy.stats.bootstrap`` with ``method`` (``"BCa"``,
    ``"percentile"`` or ``"basic"``), reproducible through ``seed``."""
    arr = _values("values", values)
    confidence = _confidence(confidence)
    flat = _degenerate(arr, "bootstrap", confidence)
    if flat is not None:
        return flat
    if n_resamples < 100:
        raise ValueError(f"n_resamples: expected at least 100, got {n_resamples}")
    res = stats.bootstrap((arr,), statistic, confidence_level=confidence, n_resamples=n_resamples,
                          method=method, vectorized=False, random_state=np.random.default_rng(seed))
    ci = res.confidence_interval
    return Interval(float(statistic(arr)), float(ci.low), float(ci.high), arr.size, "bootstrap",
                    confidence)


def bootstrap_seeds_items(values: Sequence[Sequence[float]], *, confidence: float = CONFIDENCE,
                          n_resamples: int = 9999, seed: int = 0) -> Interval:
    """Two-stage percentile bootstrap of the grand mean of per-item values grouped by seed
    (``values[i]``: the per-test-item values of seed ``i``, e.g. paired differences of two
    models' correctness on the same items): each resample draws seeds with replacement, then
    items with replacement within each drawn seed, so the interval covers both the seed-to-seed
    variation and the sampling of a small test set. The estimate is the mean of the seeds'
    means; reproducible through ``seed``."""
    groups = [_values(f"values[{i}]", v, minimum=1) for i, v in enumerate(values)]
    if len(groups) < 2:
        raise ValueError(f"values: expected at least 2 seeds, got {len(groups)}")
    confidence = _confidence(confidence)
    if n_resamples < 100:
        raise ValueError(f"n_resamples: expected at least 100, got {n_resamples}")
    means = np.array([g.mean() for g in groups])
    rng = np.random.default_rng(seed)
    item_means = np.empty((len(groups), n_resamples))
    for i, g in enumerate(groups):                    # items within each seed, resampled once
        picks = rng.integers(0, g.size, size=(n_resamples, g.size))
        item_means[i] = g[picks].mean(axis=1)
    seeds = rng.integers(0, len(groups), size=(n_resamples, len(groups)))
    boot = item_means[seeds, np.arange(n_resamples)[:, None]].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(boot, [alpha, 1.0 - alpha])
    return Interval(float(means.mean()), float(low), float(high), len(groups),
                    "bootstrap over seeds and items", confidence)


def _check_side(side: str) -> None:
    if side not in SIDES:
        raise ValueError(f"side: expected one of {SIDES}, got {side!r}")


def check_sesoi(side: str, margin: float, sesoi: float | None) -> float:
    """The smallest effect of interest of a test, ``margin`` when None; ``ValueError`` unless it
    lies on the claimed side of the margin (or on it)."""
    _check_side(side)
    if not math.isfinite(margin):
        raise ValueError(f"margin: expected a finite number, got {margin!r}")
    if sesoi is None:
        return float(margin)
    if not math.isfinite(sesoi) or (sesoi < margin if side == ">" else sesoi > margin):
        raise ValueError(f"sesoi: expected a finite number on the claimed side ({side}) of the "
                         f"margin {margin:g}, got {sesoi!r}")
    return float(sesoi)


def decide(low: float, high: float, *, side: str, margin: float = 0.0,
           sesoi: float | None = None) -> str:
    """The word of an interval ``[low, high]`` against a claim that the statistic is ``side``
    (``">"`` or ``"<"``) the ``margin`` m, with smallest effect of interest ``sesoi`` s (default
    m). For ``">"``: ``not reproduced`` when ``high < s``; else ``reproduced`` when
    ``low > m``; else ``inconclusive`` (the interval holds both m and s). Mirrored for ``"<"``.
    """
    sesoi = check_sesoi(side, margin, sesoi)
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        raise ValueError(f"low, high: expected finite numbers with low <= high, got "
                         f"{low!r}, {high!r}")
    if side == ">":
        if high < sesoi:
            return "not reproduced"
        return "reproduced" if low > margin else "inconclusive"
    if low > sesoi:
        return "not reproduced"
    return "reproduced" if high < margin else "inconclusive"


def decide_interval(interval: Interval, *, side: str, margin: float = 0.0,
                    sesoi: float | None = None) -> str:
    """:func:`decide` on an :class:`Interval`."""
    return decide(interval.low, interval.high, side=side, margin=margin, sesoi=sesoi)


def _check_power(n: int | None, power: float, confidence: float) -> float:
    if n is not None and (not isinstance(n, (int, np.integer)) or n < 2):
        raise ValueError(f"n: expected an int >= 2, got {n!r}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power: expected a probability in (0, 1), got {power!r}")
    return _confidence(confidence)


def power(n: int, effect: float, spread: float, *, confidence: float = CONFIDENCE) -> float:
    """The probability that a one-sample (or paired) t interval of ``n`` seeds with per-seed
    standard deviation ``spread`` lies wholly beyond a value ``effect`` away from the truth:
    ``P(T > t_{1-a/2, n-1})`` for T noncentral t with ``n - 1`` degrees of freedom and
    noncentrality ``|effect| sqrt(n) / spread`` (``scipy.stats.nct``)."""
    confidence = _check_power(n, 0.5, confidence)
    if not (math.isfinite(spread) and spread >= 0) or not math.isfinite(effect):
        raise ValueError(f"effect, spread: expected finite numbers, spread >= 0; got {effect!r}, "
                         f"{spread!r}")
    if spread == 0:
        return 1.0 if effect != 0 else 0.0
    df = int(n) - 1
    crit = stats.t.ppf(1.0 - (1.0 - confidence) / 2.0, df)
    return float(stats.nct.sf(crit, df, abs(effect) * math.sqrt(n) / spread))


def seeds_needed(spread: float, effect: float, *, power_wanted: float = POWER,
                 confidence: float = CONFIDENCE) -> int | None:
    """The fewest seeds (at least 2) whose t interval tells two values ``effect`` apart with
    probability ``power_wanted``, for per-seed standard deviation ``spread`` (:func:`power`);
    None when more than :data:`MAX_SEEDS` would be needed (or ``effect`` is 0)."""
    _check_power(None, power_wanted, confidence)
    if effect == 0 or not math.isfinite(effect):
        return None
    if power(2, effect, spread, confidence=confidence) >= power_wanted:
        return 2
    low, high = 2, 4
    while power(high, effect, spread, confidence=confidence) < power_wanted:
        low, high = high, high * 2
        if high > MAX_SEEDS:
            return None
    while high - low > 1:                      # power grows with n: bisect on the integers
        mid = (low + high) // 2
        if power(mid, effect, spread, confidence=confidence) >= power_wanted:
            high = mid
        else:
            low = mid
    return high


def detectable_effect(spread: float, n: int, *, confidence: float = CONFIDENCE,
                      power_wanted: float = POWER) -> float:
    """The smallest true effect (distance from the value tested against) that a t design of
    ``n`` seeds with per-seed standard deviation ``spread`` detects with probability
    ``power_wanted`` (the inverse of :func:`power` in ``effect``)."""
    confidence = _check_power(n, power_wanted, confidence)
    if not (math.isfinite(spread) and spread >= 0):
        raise ValueError(f"spread: expected a finite standard deviation >= 0, got {spread!r}")
    if spread == 0:
        return 0.0
    df = int(n) - 1
    crit = stats.t.ppf(1.0 - (1.0 - confidence) / 2.0, df)
    from scipy.optimize import brentq
    nc = brentq(lambda x: stats.nct.sf(crit, df, x) - power_wanted, 0.0, 100.0 + 10 * crit)
    return float(nc * spread / math.sqrt(n))


def detectable_effect_of(values: Sequence[float], *, confidence: float = CONFIDENCE,
                         power_wanted: float = POWER) -> float:
    """:func:`detectable_effect` with the spread and n observed in ``values`` (per-seed values
    of the deciding statistic, or the paired differences): sample standard deviation (ddof 1)."""
    arr = _values("values", values)
    return detectable_effect(float(np.std(arr, ddof=1)), arr.size, confidence=confidence,
                             power_wanted=power_wanted)
