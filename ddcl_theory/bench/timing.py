"""Interleaved timing of the methods over the lengths, skipping calls predicted to be too slow,
and the ratios between methods."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from ddcl_theory.bench.cases import make_case, timed
from ddcl_theory.bench.settings import BenchSettings
from ddcl_theory.runtime.progress import progress

__all__ = ["Timing", "predicted_seconds", "run_timing", "paired_ratio", "ratios"]

_QUADRATIC = {"sdpa"}


@dataclass
class Timing:
    """Per-call wall-clock and CPU seconds of one method at one length (empty if skipped)."""

    method: str
    seq_len: int
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    skipped: str | None = None

    @property
    def wall(self) -> float:
        return statistics.median(self.wall_s) if self.wall_s else math.nan

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpu_s) if self.cpu_s else math.nan


def predicted_seconds(method: str, seq_len: int, last: Timing | None) -> float:
    """Time of one call at ``seq_len`` extrapolated from the last measured length."""
    if last is None or not last.wall_s:
        return 0.0
    power = 2 if method in _QUADRATIC else 1
    return last.wall * (seq_len / last.seq_len) ** power


def run_timing(s: BenchSettings, device: str) -> list[Timing]:
    """Interleaved timing of every method at every length (see the module docstring)."""
    modules: dict = {}
    last: dict[str, Timing] = {}
    out: list[Timing] = []
    for t in progress(s.seq_lens, desc="timing"):
        cases, rows = {}, {}
        for m in s.methods:
            guess = predicted_seconds(m, t, last.get(m))
            if guess > s.max_call_s:
                rows[m] = Timing(m, t, skipped=f"predicted {guess:.0f} s per call > max_call_s="
                                                f"{s.max_call_s:g} (from T={last[m].seq_len})")
                continue
            cases[m] = make_case(m, s, t, device, modules)
            rows[m] = Timing(m, t)
        warm = {m: timed(c, device) for m, c in cases.items()}          # warm-up, not counted
        # a slow method is repeated fewer times, within about max_call_s in all
        reps = {m: max(1, min(s.repeats, int(s.max_call_s // max(warm[m][0], 1e-9))))
                for m in cases}
        names = list(cases)
        for r in range(s.repeats):
            order = names[r % len(names):] + names[:r % len(names)] if names else []
            for m in order:
                if len(rows[m].wall_s) < reps[m]:
                    wall, cpu = timed(cases[m], device)
                    rows[m].wall_s.append(wall)
                    rows[m].cpu_s.append(cpu)
        for m in s.methods:
            out.append(rows[m])
            if rows[m].wall_s:
                last[m] = rows[m]
        del cases
    return out


def paired_ratio(a: list[float], b: list[float]) -> float:
    """Median over repeats of a_r / b_r (the two calls of a repeat ran next to each other)."""
    n = min(len(a), len(b))
    return statistics.median(x / y for x, y in zip(a[:n], b[:n])) if n else math.nan


def ratios(timings: list[Timing]) -> list[dict]:
    """Per length: ddcl / bare and sdpa / ddcl, from the same run.

    ``*_wall`` and ``*_cpu`` are ratios of medians; ``ddcl_over_bare_paired_cpu`` is the median
    of per-repeat ratios of CPU time, the least sensitive to other load on the host.
    """
    by = {(r.method, r.seq_len): r for r in timings}
    rows = []
    for t in sorted({r.seq_len for r in timings}):
        d, b, a = by.get(("ddcl", t)), by.get(("bare", t)), by.get(("sdpa", t))
        row = {"seq_len": t}
        if d and b and d.wall_s and b.wall_s:
            row["ddcl_over_bare_wall"] = d.wall / b.wall
            row["ddcl_over_bare_cpu"] = d.cpu / b.cpu
            row["ddcl_over_bare_paired_cpu"] = paired_ratio(d.cpu_s, b.cpu_s)
        if d and a and d.wall_s and a.wall_s:
            row["sdpa_over_ddcl_wall"] = a.wall / d.wall
            row["sdpa_over_ddcl_cpu"] = a.cpu / d.cpu
        rows.append(row)
    return rows
