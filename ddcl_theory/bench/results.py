"""Reading a benchmark result (a fresh :func:`~ddcl_theory.bench.harness.run` or a stored JSON
file such as ``benchmarks/cpu_full.json``): the report table, medians, slopes, memory ratios."""
from __future__ import annotations

import json
import math
from pathlib import Path

from ddcl_theory.metrics.fits import loglog_slope as _fit_slope
from ddcl_theory.runtime.paths import repo_root

__all__ = ["STORED_RUN", "report", "load", "medians", "loglog_slope", "memory_ratios"]


def _ms(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 1e3:.1f}"


def _x(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def report(result: dict) -> str:
    """The human-readable table of a :func:`run` result."""
    s = result["settings"]
    by = {(r["method"], r["seq_len"]): r for r in result["timing"]}
    rat = {r["seq_len"]: r for r in result["ratios"]}
    mem = {(r["method"], r["seq_len"]): r for r in result["memory"]}
    methods = s["methods"]
    lines = [f"DDCL benchmark ({result['provenance']['mode']}, {result['provenance']['device']}, "
             f"{s['threads']} thread(s)): B={s['batch']} dim={s['dim']} heads={s['heads']} "
             f"K={s['num_prototypes']}, forward+backward, median of up to {s['repeats']} "
             f"interleaved calls; ms wall-clock",
             f"{'T':>6} " + " ".join(f"{m:>9}" for m in methods)
             + f" {'ddcl/bare':>9} {'(cpu)':>6} {'(paired)':>8} {'sdpa/ddcl':>9}"
             + "".join(f" {'mem ' + m:>9}" for m in s["memory_methods"] if s["memory"])]
    for t in s["seq_lens"]:
        cells = [_ms(by[(m, t)]["median_wall_s"]) if not by[(m, t)]["skipped"] else "skip"
                 for m in methods]
        r = rat.get(t, {})
        row = (f"{t:>6} " + " ".join(f"{c:>9}" for c in cells)
               + f" {_x(r.get('ddcl_over_bare_wall')):>9} {_x(r.get('ddcl_over_bare_cpu')):>6}"
               + f" {_x(r.get('ddcl_over_bare_paired_cpu')):>8}"
               + f" {_x(r.get('sdpa_over_ddcl_wall')):>9}")
        if s["memory"]:
            for m in s["memory_methods"]:
                e = mem.get((m, t))
                row += f" {(_x(e['ratio']) + 'x') if e and 'ratio' in e else '-':>9}"
        lines.append(row)
    if s["memory"]:
        how = {e.get("how") for e in result["memory"] if "how" in e}
        lines.append(f"mem: peak memory rise of one pass / input size ({', '.join(sorted(how))},"
                     " one fresh process per cell)")
    lap = result["laplacian"]
    lines.append(f"Laplacian heads (all {s['heads']}) / standard attention, forward+backward at "
                 f"T={lap['seq_len']}: median per-repeat time ratio {lap['median_ratio']:.3f} "
                 f"(CPU time {lap['median_ratio_cpu']:.3f})")
    for c in result["compile"]:
        lines.append(f"compiled / eager DDCL at T={c['seq_len']}: "
                     f"{c['compiled_over_eager']:.2f} (first call, with compilation, "
                     f"{c['first_call_s']:.1f} s)")
    lines += result["notes"]
    return "\n".join(lines)


STORED_RUN = "benchmarks/cpu_full.json"


def load(path: str | Path | None = None) -> dict:
    """A stored benchmark result (default: the committed full CPU run, :data:`STORED_RUN`)."""
    if path is None:
        root = repo_root()
        if root is None:
            raise FileNotFoundError("bench.load: no checkout found; pass the path of a result file")
        path = root / STORED_RUN
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path: no benchmark result at {path.name}; "
                                "write one with python -m ddcl_theory.bench --full --out FILE")
    return json.loads(path.read_text(encoding="utf-8"))


def medians(result: dict, method: str, key: str = "median_wall_s") -> tuple[list[int], list[float]]:
    """(sequence lengths, median seconds) of ``method`` in a result, skipped lengths left out."""
    rows = [r for r in result["timing"] if r["method"] == method and not r["skipped"]]
    if not rows:
        raise ValueError(f"method: {method!r} has no timing in this result; "
                         f"expected one of {sorted({r['method'] for r in result['timing']})}")
    return [r["seq_len"] for r in rows], [r[key] for r in rows]


def loglog_slope(result: dict, method: str, min_len: int = 0, max_len: int | None = None) -> float:
    """Least-squares slope of log(time) against log(T) over ``min_len <= T <= max_len``."""
    lens, secs = medians(result, method)
    pairs = [(t, s) for t, s in zip(lens, secs)
             if t >= min_len and (max_len is None or t <= max_len)]
    if len(pairs) < 2:
        raise ValueError(f"min_len/max_len: fewer than two lengths of {method!r} in range")
    return _fit_slope([t for t, _ in pairs], [s for _, s in pairs])


def memory_ratios(result: dict, method: str) -> tuple[list[int], list[float]]:
    """(sequence lengths, peak memory rise / input size) of ``method`` in a result."""
    rows = [r for r in result["memory"] if r["method"] == method and "ratio" in r]
    return [r["seq_len"] for r in rows], [r["ratio"] for r in rows]
