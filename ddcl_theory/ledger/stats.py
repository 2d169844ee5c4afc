"""Intervals, the verdict decision of an interval, and the smallest effect a design can detect.

The house evidence standard (``docs/evidence.md``, rule 3 and 4): 95% intervals come from
``scipy.stats`` (never hand-rolled), and an empirical verdict is decided by where the interval of
the deciding statistic lies against the claimed side and margin:

* ``reproduced``: the whole interval lies on the claimed side of the margin;
* ``not reproduced``: the interval excludes the claimed effect (it lies entirely on the other
  side of the margin);
* ``inconclusive``: it does neither (it straddles the margin) at this power and scale.

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
#: The interval methods a rule may name.
METHODS = ("paired t", "one-sample t", "bootstrap")
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


def decide(low: float, high: float, *, side: str, margin: float = 0.0) -> str:
    """The verdict word of an interval ``[low, high]`` against a claim that the statistic is
    ``side`` (``">"`` or ``"<"``) the ``margin`` (evidence.md rule 4).

    ``reproduced`` when the whole interval lies strictly on the claimed side, ``not reproduced``
    when it lies entirely on the other side (the margin itself counts as not the claimed
    effect), ``inconclusive`` when it straddles the margin.
    """
    if side not in SIDES:
        raise ValueError(f"side: expected one of {SIDES}, got {side!r}")
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        raise ValueError(f"low, high: expected finite numbers with low <= high, got "
                         f"{low!r}, {high!r}")
    if not math.isfinite(margin):
        raise ValueError(f"margin: expected a finite number, got {margin!r}")
    if side == ">":
        if low > margin:
            return "reproduced"
        if high <= margin:
            return "not reproduced"
    else:
        if high < margin:
            return "reproduced"
        if low >= margin:
            return "not reproduced"
    return "inconclusive"


def decide_interval(interval: Interval, *, side: str, margin: float = 0.0) -> str:
    """:func:`decide` on an :class:`Interval`."""
    return decide(interval.low, interval.high, side=side, margin=margin)


def detectable_effect(spread: float, n: int, *, confidence: float = CONFIDENCE,
                      power: float = 0.8) -> float:
    """The smallest true mean effect (from the margin) a t design of ``n`` seeds (pairs) with
    per-seed standard deviation ``spread`` would detect: ``(t_{1-a/2, n-1} + t_{power, n-1})
    * spread / sqrt(n)``, the usual normal-approximation-to-power formula with t quantiles
    (``scipy.stats.t.ppf``). With ``power=0.5`` it is the interval's half-width: an effect of
    that size lands the interval's edge on the margin half the time."""
    if not (math.isfinite(spread) and spread >= 0):
        raise ValueError(f"spread: expected a finite standard deviation >= 0, got {spread!r}")
    if not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"n: expected an int >= 2, got {n!r}")
    confidence = _confidence(confidence)
    if not 0.0 < power < 1.0:
        raise ValueError(f"power: expected a probability in (0, 1), got {power!r}")
    df = int(n) - 1
    t_alpha = stats.t.ppf(1.0 - (1.0 - confidence) / 2.0, df)
    t_beta = stats.t.ppf(power, df)
    return float((t_alpha + t_beta) * spread / math.sqrt(n))


def detectable_effect_of(values: Sequence[float], *, confidence: float = CONFIDENCE,
                         power: float = 0.8) -> float:
    """:func:`detectable_effect` with the spread and n observed in ``values`` (per-seed values
    of the deciding statistic, or the paired differences): sample standard deviation (ddof 1)."""
    arr = _values("values", values)
    return detectable_effect(float(np.std(arr, ddof=1)), arr.size, confidence=confidence,
                             power=power)
