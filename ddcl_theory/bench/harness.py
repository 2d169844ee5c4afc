"""Run everything the settings ask for, with the machine's provenance beside the numbers."""
from __future__ import annotations

import dataclasses
import datetime
import platform
import statistics

import torch

from ddcl_theory.bench.cases import Case, _ddcl_layer, timed
from ddcl_theory.bench.memory import run_memory
from ddcl_theory.bench.settings import BenchSettings
from ddcl_theory.bench.timing import paired_ratio, ratios, run_timing
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.progress import progress
from ddcl_theory.runtime.provenance import git_commit, machine, package_version

__all__ = ["run_laplacian", "run_compile", "provenance", "run"]


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
        timed(c, device)
    times = {c.name: [] for c in cases}
    cpu = {c.name: [] for c in cases}
    for r in progress(range(s.laplacian_repeats), desc="laplacian", total=s.laplacian_repeats):
        for c in (cases if r % 2 == 0 else cases[::-1]):
            wall, proc = timed(c, device)
            times[c.name].append(wall)
            cpu[c.name].append(proc)
    return {"seq_len": s.laplacian_seq_len, "wall_s": times, "cpu_s": cpu,
            "median_ratio": paired_ratio(times["laplacian"], times["standard"]),
            "median_ratio_cpu": paired_ratio(cpu["laplacian"], cpu["standard"]),
            "params_equal": sum(p.numel() for p in lap.parameters())
            == sum(p.numel() for p in std.parameters())}


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
        first = timed(comp, device)[0]                       # includes compilation
        timed(eager, device)
        times = {"eager": [], "compiled": []}
        for r in range(s.repeats):
            for c in ((eager, comp) if r % 2 == 0 else (comp, eager)):
                times[c.name].append(timed(c, device)[0])
        out.append({"seq_len": t, "first_call_s": first, "wall_s": times,
                    "compiled_over_eager": statistics.median(times["compiled"])
                    / statistics.median(times["eager"])})
    return out


def provenance(s: BenchSettings, device: str) -> dict:
    """Machine, versions and torch settings, recorded beside the numbers."""
    from ddcl_theory import __version__

    commit, dirty = git_commit()
    return {
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": s.mode, "device": device, "profile": profile.current().name,
        "machine": machine(device),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "numpy": package_version("numpy"),
                     "vector_quantize_pytorch": package_version("vector-quantize-pytorch"),
                     "ddcl_theory": __version__, "git": {"commit": commit, "dirty": dirty}},
        "torch": {"num_threads": torch.get_num_threads(),
                  "num_interop_threads": torch.get_num_interop_threads(),
                  "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                  "mkl": torch.backends.mkl.is_available(),
                  "default_dtype": str(torch.get_default_dtype())},
    }


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
