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


def forest_position(value: float, *, side: str, margin: float, sesoi: float,
                    scale: float | None = None) -> float:
    """Where ``value`` of a test's statistic sits on the common axis of :func:`plot_forest`:
    0 at the margin, 1 at the SESOI, positive on the claimed side. A test whose SESOI is its
    margin is measured in units of ``scale`` (default 1)."""
    sign = 1.0 if side == ">" else -1.0
    unit = abs(sesoi - margin) or (scale if scale else 1.0)
    return sign * (value - margin) / unit


def forest_rows(ledger: list[dict]) -> list[dict]:
    """One row per decided test of every empirical claim in ``ledger`` (rows of
    :func:`ddcl_theory.ledger.claims.build_ledger`), confirmatory and exploratory: label,
    phase, word and the interval's ends and estimate on the :func:`forest_position` axis."""
    rows = []
    for entry in ledger:
        for phase, tests in (("confirmatory", entry.get("tests")),
                             ("exploratory", entry.get("exploratory_tests"))):
            for i, t in enumerate(tests or [], 1):
                low, high = t["interval"]
                scale = None
                if t["sesoi"] == t["margin"]:
                    scale = max(abs(low - t["margin"]), abs(high - t["margin"])) or 1.0
                pos = [forest_position(v, side=t["side"], margin=t["margin"], sesoi=t["sesoi"],
                                       scale=scale) for v in (low, t["estimate"], high)]
                rows.append({"label": f"{entry['id']} ({i})", "phase": phase, "word": t["word"],
                             "low": min(pos[0], pos[2]), "estimate": pos[1],
                             "high": max(pos[0], pos[2]), "has_sesoi": scale is None})
    return rows


#: The window of :func:`plot_forest` on its axis: an interval reaching beyond it is cut at the
#: edge, and an estimate beyond it is drawn as a triangle pointing away.
FOREST_LIMITS = (-4.0, 5.0)


def plot_forest(ax, rows: list[dict]):
    """Every test's 95% interval on one axis (:func:`forest_rows`): the claim's margin at 0,
    its smallest effect of interest at 1 (the claimed side to the right); confirmatory
    intervals in black, exploratory ones in grey below them; cut to :data:`FOREST_LIMITS`.
    Returns ``ax``."""
    if not rows:
        raise ValueError("rows: expected at least one decided test")
    colours = {"confirmatory": "0.1", "exploratory": "0.6"}
    lo, hi = FOREST_LIMITS
    y = np.arange(len(rows))[::-1]
    for yi, row in zip(y, rows):
        colour = colours[row["phase"]]
        ends = np.clip([row["low"], row["high"]], lo, hi)
        ax.plot(ends, [yi, yi], color=colour, lw=2)
        est = row["estimate"]
        marker = ">" if est > hi else "<" if est < lo else "o"
        ax.plot(float(np.clip(est, lo, hi)), yi, marker, color=colour, ms=4)
    ax.set_xlim(lo - 0.3, hi + 0.3)
    ax.axvline(0.0, color="0.3", lw=1)
    ax.axvline(1.0, color="tab:blue", lw=1, ls="--")
    ax.set_yticks(y, [f"{r['label']} {'' if r['phase'] == 'confirmatory' else '(expl.)'}"
                      for r in rows])
    ax.set_xlabel("0 = the claim's margin, 1 = its smallest effect of interest "
                  "(claimed side to the right)")
    return ax
