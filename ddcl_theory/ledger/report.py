"""The chapter kit: numbers printed for the goldens (rounded, never the digits of rounding
noise), seed summaries, intervals, tables, settings and verdicts, each formatted one way.

Seed convention, stated once: a spread over seeds is the sample standard deviation (``ddof=1``);
a single seed has none.
"""
from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence

import numpy as np

#: the widest line a chapter prints or holds in a code cell: it fits the book's text column at
#: 1400 px (``_static/layout.css``; measured by ``tests/test_rendered_book.py``)
LINE_WIDTH = 88


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


def _cell(value) -> str:
    text = value if isinstance(value, str) else format(value, ".3g") if isinstance(value, float) \
        else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A Markdown (pipe) table: the way a chapter shows a wide result, as a real table that wraps
    to the page column instead of fixed-width text that runs past it. Floats are printed with
    ``.3g``; format them yourself (e.g. with :func:`below`) for anything else."""
    if not header:
        raise ValueError("header: expected at least one column")
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise ValueError(f"rows[{i}]: expected {len(header)} cells, got {len(row)}")
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def show_table(header: list[str], rows: list[list]):
    """Display :func:`markdown_table` in a notebook (an IPython ``Markdown`` object, rendered as
    an HTML table in the book); returns the Markdown text outside IPython."""
    text = markdown_table(header, rows)
    try:
        from IPython.display import Markdown, display
    except ImportError:                     # the library without the book's extras
        return text
    display(Markdown(text))
    return None


def wrap(text: str, width: int = LINE_WIDTH) -> str:
    """``text`` with every line longer than ``width`` broken at spaces; a broken line's
    continuation keeps the line's own indentation plus two spaces. Explicit line breaks stay.
    Words are never split (a word longer than ``width`` stays whole)."""
    if width < 20:
        raise ValueError(f"width: expected an int >= 20, got {width!r}")
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip(" "))]
        out.append(textwrap.fill(line.strip(" "), width, initial_indent=indent,
                                 subsequent_indent=indent + "  ", break_long_words=False,
                                 break_on_hyphens=False))
    return "\n".join(out)


def say(*parts: object, width: int = LINE_WIDTH) -> None:
    """``print`` for a chapter: the parts joined by spaces, each line wrapped by :func:`wrap` so
    that no printed line runs past the book's text column."""
    print(wrap(" ".join(str(p) for p in parts), width))


def mean_sd(values: Sequence[float], spec: str = ".3f", sd_spec: str | None = None) -> str:
    """``"mean ± sd"`` of per-seed values (sample sd, ddof 1); ``"mean"`` alone for one value,
    ``"–"`` for none. ``spec`` formats the mean, ``sd_spec`` (default ``spec`` without a sign)
    the spread."""
    arr = np.asarray(values, dtype=float).ravel()
    if arr.size == 0:
        return "–"
    mean = format(float(arr.mean()), spec)
    if arr.size == 1:
        return mean
    sd_spec = sd_spec if sd_spec is not None else spec.replace("+", "")
    return f"{mean} ± {format(float(arr.std(ddof=1)), sd_spec)}"


def interval_text(interval, spec: str = "+.3f", scale: float = 1.0,
                  estimate: bool = True) -> str:
    """``"+0.123 [+0.100, +0.146]"`` of an interval: a
    :class:`~ddcl_theory.ledger.stats.Interval`, a :class:`~ddcl_theory.ledger.design.TestResult`
    or ``(estimate, low, high)``; ``scale`` multiplies every number (e.g. 100 for points),
    ``estimate=False`` leaves the estimate out."""
    if isinstance(interval, (tuple, list)):
        est, low, high = interval
    elif hasattr(interval, "interval"):                    # a TestResult
        est, (low, high) = interval.estimate, interval.interval
    else:
        est, low, high = interval.estimate, interval.low, interval.high
    low_text, high_text = format(scale * low, spec), format(scale * high, spec)
    bracket = f"[{low_text}, {high_text}]"
    return f"{format(scale * est, spec)} {bracket}" if estimate else bracket


def _setting_value(value) -> str:
    if isinstance(value, float):
        return format(value, ".4g")
    if isinstance(value, tuple) and len(value) > 8:
        head = ", ".join(_setting_value(v) for v in value[:3])
        return f"({head}, ..., {_setting_value(value[-1])}) [{len(value)}]"
    if isinstance(value, tuple):
        return "(" + ", ".join(_setting_value(v) for v in value) + ")"
    return str(value)


def settings_rows(settings, fields: Sequence[str] | None = None) -> list[list[str]]:
    """``[[field, value], ...]`` of a settings object (nested ones as ``outer.inner``; long
    tuples shortened with their length); only ``fields`` when given."""
    from ddcl_theory.runtime.settings import values
    rows = values(settings)
    if fields is not None:
        known = dict(rows)
        missing = [f for f in fields if f not in known]
        if missing:
            raise ValueError(f"fields: {type(settings).__name__} has no field(s) {missing}")
        rows = [(f, known[f]) for f in fields]
    return [[name, _setting_value(v)] for name, v in rows]


def show_settings(settings, fields: Sequence[str] | None = None):
    """Display a settings object as a small two-column table (:func:`settings_rows`)."""
    return show_table(["setting", "value"], settings_rows(settings, fields))


def tests_rows(verdict) -> list[list[str]]:
    """One row per decided test of a verdict: statistic, claimed side and margin, SESOI,
    interval, seeds run / needed, smallest detectable effect, word."""
    rows = []
    for t in verdict.tests:
        needed = "out of reach" if t.seeds_needed is None else str(t.seeds_needed)
        detect = "–" if t.detectable is None else format(t.detectable, ".3g")
        rows.append([t.statistic, f"{t.side} {t.margin:.4g}", f"{t.sesoi:.4g}",
                     interval_text(t, ".3g"), f"{t.n_seeds} / {needed}", detect, t.word])
    return rows


def show_verdict(verdict) -> None:
    """Print a verdict (claim, word, evidence, wrapped) and, for an empirical claim, display
    its tests as a table and any gate that failed."""
    say(f"{verdict.claim}: {verdict.word}. {verdict.evidence}")
    if verdict.tests:
        show_table(["test", "claim", "SESOI", "95% interval", "seeds run / needed",
                    "detectable", "word"], tests_rows(verdict))
    for gate in verdict.gates:
        if not gate.passed:
            say(f"gate not met ({gate.name}): {gate.detail}")
