"""Benchmarks of DDCL-Attention (claims D2 and L5): ``python -m ddcl_theory.bench [--quick|--full]``.

What runs, side by side in one process (so that ratios share the host's state):

* **time** of one forward + backward pass, for T in ``seq_lens``, of
  ``ddcl`` (:class:`~ddcl_theory.layers.ddcl.DDCLAttention`, loss = sum of the output + L_q + V),
  ``bare`` (the same layer's matrix products alone, with its own weights: input projection,
  per-head z P^T and s P, output projection, nothing else; loss = sum of the result),
  ``sdpa`` (multi-head self-attention of the same width and heads through
  ``scaled_dot_product_attention``: :class:`~ddcl_theory.layers.laplacian.LaplacianAttention`
  with no Laplacian head), ``mean`` (mean pooling of the tokens) and ``vq``
  (vector-quantize-pytorch's ``VectorQuantize`` with as many heads and codes, training mode).
  Calls are interleaved (the order rotates every repeat) and the medians of wall-clock time and
  of process CPU time are reported; ``ddcl / bare`` is the layer's overhead over its own matrix
  products. A method whose next call is predicted (from the previous length, T^2 for ``sdpa``,
  T otherwise) to take longer than ``max_call_s`` is skipped at that length, and the result says
  so.
* **peak memory** of one forward + backward pass, each (method, T) in a fresh subprocess: the
  rise of the peak resident set size (``VmHWM``, reset through ``/proc/self/clear_refs`` just
  before the pass; ``ru_maxrss`` where that is unavailable) over the resident size just before
  the pass, divided by the input's size. The input, the parameters and a warm-up pass at a small
  length are in place before the baseline is read. On CUDA: ``torch.cuda.max_memory_allocated``.
* **Laplacian heads**: forward + backward of ``LaplacianAttention`` with all heads Laplacian
  against standard attention (identical weights, interleaved); the median per-repeat time ratio.
* **eager against compiled**: ``torch.compile(DDCLAttention(...), fullgraph=True)`` against eager
  (first-call compile time and median call times), when enabled.

Results: a table on stdout and a JSON file (``--out``, default ``_build/bench/bench_<mode>.json``)
with the settings, the machine (CPU model, cores, memory, load average), versions (Python,
torch, numpy, vector-quantize-pytorch, the git commit) and torch's thread settings. Times are
never asserted anywhere: the host is shared and noisy, and so are these numbers.

Modes: ``--quick`` (what CI runs, seconds: small T, few repeats, memory at one length) and
``--full`` (the book's sweep, T = 256 ... 65536, compile comparison on). The default follows the
profile (cpu -> quick, paper -> full). ``--seq-lens``, ``--methods``, ``--repeats``, ``--threads``,
``--no-memory``, ``--compile`` adjust either.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as nnf

from ddcl_theory.runtime import profile
from ddcl_theory.runtime.progress import progress

METHODS = ("ddcl", "bare", "sdpa", "mean", "vq")
QUICK_SEQ_LENS = (256, 1024)
FULL_SEQ_LENS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
_QUADRATIC = {"sdpa"}


# --------------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class BenchSettings:
    """What the benchmark runs; :meth:`quick` and :meth:`full` are the two standard modes."""

    mode: str = "quick"
    seq_lens: tuple[int, ...] = QUICK_SEQ_LENS
    methods: tuple[str, ...] = METHODS
    dim: int = 256
    heads: int = 4
    num_prototypes: int = 64
    batch: int = 1
    repeats: int = 3
    threads: int = 1
    max_call_s: float = 20.0
    memory: bool = True
    memory_seq_lens: tuple[int, ...] | None = (1024,)   # None: every length of seq_lens
    memory_methods: tuple[str, ...] = ("ddcl", "sdpa")
    laplacian_seq_len: int = 512
    laplacian_repeats: int = 7
    compile: bool = False
    compile_seq_lens: tuple[int, ...] = (1024,)
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("dim", "heads", "num_prototypes", "batch", "repeats", "threads",
                     "laplacian_seq_len", "laplacian_repeats"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected a positive int, got {v!r}")
        if self.dim % self.heads:
            raise ValueError(f"dim: expected a multiple of heads={self.heads}, got {self.dim}")
        for name in ("seq_lens", "compile_seq_lens"):
            lens = getattr(self, name)
            if any(isinstance(t, bool) or not isinstance(t, int) or t < 1 for t in lens):
                raise ValueError(f"{name}: expected positive ints, got {lens!r}")
        unknown = [m for m in (*self.methods, *self.memory_methods) if m not in METHODS]
        if unknown:
            raise ValueError(f"methods: unknown {unknown}; expected some of {METHODS}")
        if not self.max_call_s > 0:
            raise ValueError(f"max_call_s: expected a positive number, got {self.max_call_s!r}")

    @classmethod
    def quick(cls, **overrides) -> "BenchSettings":
        """CI mode: T in (256, 1024), 3 repeats, memory of ddcl and sdpa at T = 1024, no compile."""
        return cls(**{"mode": "quick", **overrides})

    @classmethod
    def full(cls, **overrides) -> "BenchSettings":
        """The book's sweep: T = 256 ... 65536, memory of every method at every length, compile.

        A call predicted to take over 30 s is skipped (on one CPU thread: SDPA from T = 32768).
        """
        base = dict(mode="full", seq_lens=FULL_SEQ_LENS, repeats=5, max_call_s=30.0,
                    memory_seq_lens=None, memory_methods=METHODS, laplacian_seq_len=2048,
                    laplacian_repeats=9, compile=True, compile_seq_lens=(4096, 16384))
        return cls(**{**base, **overrides})

    @classmethod
    def from_profile(cls) -> "BenchSettings":
        """quick under the cpu profile, full under paper."""
        return profile.current().pick(cpu=cls.quick(), paper=cls.full())

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads


# --------------------------------------------------------------------------------- cases
@dataclass
class Case:
    """One benchmarked computation: ``step()`` runs one forward + backward pass."""

    name: str
    step: Callable[[], None]
    input_bytes: int


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _ddcl_layer(s: BenchSettings, device: str):
    from ddcl_theory.layers.ddcl import DDCLAttention

    return DDCLAttention(s.dim, s.num_prototypes, heads=s.heads).to(device).train()


def bare_products(layer, x: torch.Tensor) -> torch.Tensor:
    """The matrix products of ``layer`` (a DDCLAttention with projections) and nothing else.

    x (B, T, dim) -> (B, T, dim): input projection, per head z_h P_h^T (B*T, K) and then
    (z_h P_h^T) P_h (B*T, hd) on column slices (no copies), heads joined, output projection.
    """
    b, t, _ = x.shape
    hd = layer.head_dim
    z = nnf.linear(x, layer.in_proj.weight, layer.in_proj.bias).reshape(b * t, -1)
    parts = []
    for h in range(layer.heads):
        p = layer.prototypes[h]
        parts.append((z[:, h * hd:(h + 1) * hd] @ p.T) @ p)
    m = torch.cat(parts, dim=1).view(b, t, -1)
    return nnf.linear(m, layer.out_proj.weight, layer.out_proj.bias)


def make_case(method: str, s: BenchSettings, seq_len: int, device: str,
              modules: dict | None = None) -> Case:
    """Build the module (reused through ``modules``) and the input of one method at one length."""
    modules = {} if modules is None else modules
    gen = torch.Generator(device="cpu").manual_seed(s.seed + seq_len)
    x = torch.randn(s.batch, seq_len, s.dim, generator=gen).to(device).requires_grad_(True)

    def zero():
        x.grad = None
        for m in modules.values():
            m.zero_grad(set_to_none=True)

    if method in ("ddcl", "bare"):
        if "ddcl" not in modules:
            modules["ddcl"] = _ddcl_layer(s, device)
        layer = modules["ddcl"]
        if method == "ddcl":
            def step():
                zero()
                out = layer(x)
                (out.output.sum() + out.losses.l_q + out.losses.v).backward()
        else:
            def step():
                zero()
                bare_products(layer, x).sum().backward()
    elif method == "sdpa":
        if "sdpa" not in modules:
            from ddcl_theory.layers.laplacian import LaplacianAttention

            modules["sdpa"] = LaplacianAttention(s.dim, s.heads).to(device).train()
        attn = modules["sdpa"]

        def step():
            zero()
            attn(x).sum().backward()
    elif method == "mean":
        def step():
            zero()
            x.mean(1).sum().backward()
    elif method == "vq":
        if "vq" not in modules:
            from vector_quantize_pytorch import VectorQuantize

            modules["vq"] = VectorQuantize(dim=s.dim, codebook_size=s.num_prototypes,
                                           heads=s.heads, separate_codebook_per_head=True,
                                           ).to(device).train()
        vq = modules["vq"]

        def step():
            zero()
            quantized, _, loss = vq(x)
            (quantized.sum() + loss.sum()).backward()
    else:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    return Case(method, step, x.numel() * x.element_size())


def _timed(case: Case, device: str) -> tuple[float, float]:
    _sync(device)
    w0, c0 = time.perf_counter(), time.process_time()
    case.step()
    _sync(device)
    return time.perf_counter() - w0, time.process_time() - c0


# --------------------------------------------------------------------------------- timing
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
        warm = {m: _timed(c, device) for m, c in cases.items()}          # warm-up, not counted
        # a slow method is repeated fewer times, within about max_call_s in all
        reps = {m: max(1, min(s.repeats, int(s.max_call_s // max(warm[m][0], 1e-9))))
                for m in cases}
        names = list(cases)
        for r in range(s.repeats):
            order = names[r % len(names):] + names[:r % len(names)] if names else []
            for m in order:
                if len(rows[m].wall_s) < reps[m]:
                    wall, cpu = _timed(cases[m], device)
                    rows[m].wall_s.append(wall)
                    rows[m].cpu_s.append(cpu)
        for m in s.methods:
            out.append(rows[m])
            if rows[m].wall_s:
                last[m] = rows[m]
        del cases
    return out


def _paired(a: list[float], b: list[float]) -> float:
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
            row["ddcl_over_bare_paired_cpu"] = _paired(d.cpu_s, b.cpu_s)
        if d and a and d.wall_s and a.wall_s:
            row["sdpa_over_ddcl_wall"] = a.wall / d.wall
            row["sdpa_over_ddcl_cpu"] = a.cpu / d.cpu
        rows.append(row)
    return rows


# --------------------------------------------------------------------------------- memory
def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) of this process; False where not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_bytes(reset_ok: bool) -> int:
    if reset_ok:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure_memory_here(method: str, s: BenchSettings, seq_len: int, device: str) -> dict:
    """Peak memory rise of one forward + backward pass, measured in this process.

    Meant for a fresh process (:func:`measure_memory` starts one): build, warm up at
    min(T, 256), then baseline, reset the peak mark, one pass, read the peak.
    """
    torch.set_num_threads(s.threads)
    modules: dict = {}
    make_case(method, s, min(seq_len, 256), device, modules).step()     # warm-up, lazy init
    case = make_case(method, s, seq_len, device, modules)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        case.step()
        torch.cuda.synchronize()
        peak, how = torch.cuda.max_memory_allocated(), "torch.cuda.max_memory_allocated"
    else:
        base = _rss_bytes()
        reset_ok = _reset_peak()
        case.step()
        peak = _peak_bytes(reset_ok)
        how = "VmHWM after clear_refs" if reset_ok else "ru_maxrss"
    delta = max(peak - base, 0)
    return {"method": method, "seq_len": seq_len, "peak_delta_bytes": delta,
            "input_bytes": case.input_bytes, "ratio": delta / case.input_bytes, "how": how}


def measure_memory(method: str, s: BenchSettings, seq_len: int, device: str,
                   timeout_s: float = 900.0) -> dict:
    """:func:`measure_memory_here` in a fresh Python process (one per method and length)."""
    spec = json.dumps({"method": method, "seq_len": seq_len, "device": device,
                       "settings": dataclasses.asdict(s)})
    env = {**os.environ, "OMP_NUM_THREADS": str(s.threads), "DDCL_PROGRESS": "0"}
    proc = subprocess.run([sys.executable, "-m", "ddcl_theory.bench", "--memory-case", spec],
                          capture_output=True, text=True, timeout=timeout_s, env=env)
    if proc.returncode != 0:
        return {"method": method, "seq_len": seq_len, "error": proc.stderr.strip()[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_memory(s: BenchSettings, device: str, timings: list[Timing]) -> list[dict]:
    """Memory cases for ``memory_methods`` x ``memory_seq_lens`` (skipped as in the timing)."""
    if not s.memory:
        return []
    lens = s.seq_lens if s.memory_seq_lens is None else s.memory_seq_lens
    skipped = {(r.method, r.seq_len): r.skipped for r in timings if r.skipped}
    jobs = [(m, t) for t in lens for m in s.memory_methods]
    out = []
    for m, t in progress(jobs, desc="memory", total=len(jobs)):
        if (m, t) in skipped:
            out.append({"method": m, "seq_len": t, "skipped": skipped[(m, t)]})
            continue
        out.append(measure_memory(m, s, t, device))
    return out


# --------------------------------------------------------------------------------- Laplacian
def run_laplacian(s: BenchSettings, device: str) -> dict:
    """Forward + backward of all-Laplacian heads against standard attention, same weights."""
    from ddcl_theory.layers.laplacian import LaplacianAttention

    torch.manual_seed(s.seed)
    std = LaplacianAttention(s.dim, s.heads, laplacian_heads=0).to(device).train()
    lap = LaplacianAttention(s.dim, s.heads, laplacian_heads=s.heads).to(device).train()
    lap.load_state_dict(std.state_dict())
    gen = torch.Generator().manual_seed(s.seed)
    x = torch.randn(s.batch, s.laplacian_seq_len, s.dim, generator=gen).to(device)
    x.requires_grad_(True)

    def case(layer, name):
        def step():
            x.grad = None
            layer.zero_grad(set_to_none=True)
            layer(x).sum().backward()
        return Case(name, step, x.numel() * x.element_size())

    cases = [case(std, "standard"), case(lap, "laplacian")]
    for c in cases:
        _timed(c, device)
    times = {c.name: [] for c in cases}
    cpu = {c.name: [] for c in cases}
    for r in progress(range(s.laplacian_repeats), desc="laplacian", total=s.laplacian_repeats):
        for c in (cases if r % 2 == 0 else cases[::-1]):
            wall, proc = _timed(c, device)
            times[c.name].append(wall)
            cpu[c.name].append(proc)
    return {"seq_len": s.laplacian_seq_len, "wall_s": times, "cpu_s": cpu,
            "median_ratio": _paired(times["laplacian"], times["standard"]),
            "median_ratio_cpu": _paired(cpu["laplacian"], cpu["standard"]),
            "params_equal": sum(p.numel() for p in lap.parameters())
            == sum(p.numel() for p in std.parameters())}


# --------------------------------------------------------------------------------- compile
def run_compile(s: BenchSettings, device: str) -> list[dict]:
    """Eager against ``torch.compile(layer, fullgraph=True)``, forward + backward."""
    if not s.compile:
        return []
    out = []
    for t in progress(s.compile_seq_lens, desc="compile"):
        torch.manual_seed(s.seed)
        layer = _ddcl_layer(s, device)
        compiled = torch.compile(layer, fullgraph=True, dynamic=False)
        gen = torch.Generator().manual_seed(s.seed + t)
        x = torch.randn(s.batch, t, s.dim, generator=gen).to(device).requires_grad_(True)

        def make(fn, name):
            def step():
                x.grad = None
                layer.zero_grad(set_to_none=True)
                o = fn(x)
                (o.output.sum() + o.losses.l_q + o.losses.v).backward()
            return Case(name, step, x.numel() * x.element_size())

        eager, comp = make(layer, "eager"), make(compiled, "compiled")
        first = _timed(comp, device)[0]                       # includes compilation
        _timed(eager, device)
        times = {"eager": [], "compiled": []}
        for r in range(s.repeats):
            for c in ((eager, comp) if r % 2 == 0 else (comp, eager)):
                times[c.name].append(_timed(c, device)[0])
        out.append({"seq_len": t, "first_call_s": first, "wall_s": times,
                    "compiled_over_eager": statistics.median(times["compiled"])
                    / statistics.median(times["eager"])})
    return out


# --------------------------------------------------------------------------------- provenance
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:  # noqa: BLE001 -- absent package: record None
        return None


def _git() -> dict:
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, timeout=10).stdout
        return {"commit": commit, "dirty": bool(dirty.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def provenance(s: BenchSettings, device: str) -> dict:
    """Machine, versions and torch settings, recorded beside the numbers."""
    from ddcl_theory import __version__

    machine = {"platform": platform.platform(), "machine": platform.machine(),
               "cpu_model": _cpu_model(), "logical_cpus": os.cpu_count(),
               "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else None,
               "memory_total_bytes": _mem_total(), "load_average_1_5_15": list(os.getloadavg())}
    if device == "cuda":
        machine["gpu"] = torch.cuda.get_device_name()
    return {
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": s.mode, "device": device, "profile": profile.current().name,
        "machine": machine,
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "numpy": _version("numpy"),
                     "vector_quantize_pytorch": _version("vector-quantize-pytorch"),
                     "ddcl_theory": __version__, "git": _git()},
        "torch": {"num_threads": torch.get_num_threads(),
                  "num_interop_threads": torch.get_num_interop_threads(),
                  "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                  "mkl": torch.backends.mkl.is_available(),
                  "default_dtype": str(torch.get_default_dtype())},
    }


# --------------------------------------------------------------------------------- run + report
def run(settings: BenchSettings | None = None, device: str | None = None) -> dict:
    """Run everything the settings ask for; return the JSON-ready result."""
    s = settings or BenchSettings.from_profile()
    device = device or profile.current().device
    torch.set_num_threads(s.threads)
    profile.seed_everything(s.seed)
    notes = []
    timings = run_timing(s, device)
    notes += [f"{r.method} at T={r.seq_len} skipped: {r.skipped}" for r in timings if r.skipped]
    memory = run_memory(s, device, timings)
    laplacian = run_laplacian(s, device)
    compiled = run_compile(s, device)
    return {"provenance": provenance(s, device), "settings": dataclasses.asdict(s),
            "timing": [dataclasses.asdict(r) | {"median_wall_s": r.wall, "median_cpu_s": r.cpu}
                       for r in timings],
            "ratios": ratios(timings), "memory": memory, "laplacian": laplacian,
            "compile": compiled, "notes": notes}


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
    """A stored benchmark result (default: the committed full CPU run, ``benchmarks/cpu_full.json``)."""
    if path is None:
        from ddcl_theory.runtime.paths import repo_root
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
    x = np.log([t for t, _ in pairs])
    y = np.log([s for _, s in pairs])
    return float(np.polyfit(x, y, 1)[0])


def memory_ratios(result: dict, method: str) -> tuple[list[int], list[float]]:
    """(sequence lengths, peak memory rise / input size) of ``method`` in a result."""
    rows = [r for r in result["memory"] if r["method"] == method and "ratio" in r]
    return [r["seq_len"] for r in rows], [r["ratio"] for r in rows]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m ddcl_theory.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="CI mode (seconds)")
    mode.add_argument("--full", action="store_true", help="the book's sweep (minutes)")
    ap.add_argument("--seq-lens", type=lambda v: tuple(int(t) for t in v.split(",")))
    ap.add_argument("--methods", type=lambda v: tuple(v.split(",")))
    ap.add_argument("--memory-seq-lens", type=lambda v: tuple(int(t) for t in v.split(",")))
    ap.add_argument("--memory-methods", type=lambda v: tuple(v.split(",")))
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--max-call-s", type=float)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--device", choices=("cpu", "cuda"))
    ap.add_argument("--out", type=Path, help="JSON path (default _build/bench/bench_<mode>.json)")
    ap.add_argument("--memory-case", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.memory_case:                              # child process of measure_memory
        spec = json.loads(args.memory_case)
        st = spec["settings"]
        st = {k: tuple(v) if isinstance(v, list) else v for k, v in st.items()}
        res = measure_memory_here(spec["method"], BenchSettings(**st), spec["seq_len"],
                                  spec["device"])
        print(json.dumps(res))
        return 0
    base = (BenchSettings.quick() if args.quick else BenchSettings.full() if args.full
            else BenchSettings.from_profile())
    over = {k: v for k, v in {"seq_lens": args.seq_lens, "methods": args.methods,
                              "memory_seq_lens": args.memory_seq_lens,
                              "memory_methods": args.memory_methods, "repeats": args.repeats,
                              "threads": args.threads, "max_call_s": args.max_call_s}.items()
            if v is not None}
    if args.no_memory:
        over["memory"] = False
    if args.compile or args.no_compile:
        over["compile"] = bool(args.compile)
    s = dataclasses.replace(base, **over)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    result = run(s, args.device)
    print(report(result))
    out = args.out or Path("_build") / "bench" / f"bench_{s.mode}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("DDCL_PROGRESS", "1")       # a command-line run shows its progress
    raise SystemExit(main())
