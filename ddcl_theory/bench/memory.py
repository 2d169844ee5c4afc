"""Peak memory of one forward + backward pass, each (method, T) in a fresh process."""
from __future__ import annotations

import dataclasses
import json
import os
import resource
import subprocess
import sys

import torch

from ddcl_theory.bench.cases import make_case
from ddcl_theory.bench.settings import BenchSettings
from ddcl_theory.bench.timing import Timing
from ddcl_theory.runtime.progress import progress

__all__ = ["measure_memory_here", "measure_memory", "run_memory"]


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
