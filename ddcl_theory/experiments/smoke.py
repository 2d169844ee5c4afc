"""The paper profile's smoke test: every experiment at paper settings, a handful of steps, on CPU.

    python -m ddcl_theory.experiments.smoke [NAME ...] [--threads N] [--exitfirst] [--report FILE]
                                            [--flops]
    python -m ddcl_theory.experiments.smoke --list

Runs ``run(Settings.from_profile())`` of every experiment in :data:`EXPERIMENTS`, one after
another, under ``DDCL_PROFILE=paper DDCL_SMOKE=1`` (set by the tool): the paper's model sizes,
shapes and data, with the budgets (epochs, steps, seeds, repeats) that each experiment declares
with ``pick(..., smoke=...)``. A paper-scale shape error, a missing data set or code that only
runs on one device fails here, in seconds, and not on someone's GPU. Checkpoints are written
(so that code runs too) into a temporary results folder, in memory (/dev/shm) where it has
room, that is removed afterwards: a smoke run never resumes from, or leaves, checkpoints.

Each experiment prints its name, its time in seconds and ``ok``; a failing one prints its
traceback under its name, the others still run (``--exitfirst`` stops at the first), and the
tool exits with status 1 naming every failed experiment. An experiment whose paper settings do
not change under ``DDCL_SMOKE=1`` (no ``smoke=`` budget declared) fails without running.

``--device cuda`` runs the same smoke settings on a GPU host (with the paper profile's bf16
autocast): the check for tensors left on the wrong device.

Beside its seconds, each experiment reports the optimiser steps its training loops took (through
:func:`ddcl_theory.runtime.training.fit`; none for the exact computations), the seconds per step,
and its peak memory: on CUDA the peak of allocated device memory during that experiment, on
the CPU the process's peak resident set so far (a bound, not a per-experiment figure). On a GPU
host these are the figures to size a paper run by (``scripts/gpu_check.sh``). ``--flops`` adds
the FLOPs and examples of each experiment's training steps, at the paper's model shapes (the GPU
runbook's counts, :mod:`ddcl_theory.runbook`).

The experiments are those of :data:`ddcl_theory.experiments.registry.EXPERIMENTS` (the run
functions the chapters call), each run on ``Settings.from_profile(**overrides)``.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import resource
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ddcl_theory.experiments.registry import Experiment, entries
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.paths import RESULTS_ENV

@contextlib.contextmanager
def scoped_env(**values: str | None) -> Iterator[None]:
    """Set (a str) or unset (None) environment variables inside the block; restore them after."""
    before = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _device(device: str) -> Iterator[None]:
    """Make ``profile.current()`` report ``device`` (the smoke profile's is always ``cpu``)."""
    if device == "cpu":
        yield
        return
    original = profile.current
    profile.current = lambda: dataclasses.replace(original(), device=device)
    try:
        yield
    finally:
        profile.current = original


#: A memory-backed folder for the smoke run's checkpoints, used when it has this much room: they
#: are thrown away at the end, and GPT-2 small's (model, AdamW, best weights: 2 GB) take most
#: of a minute to write to a slow disk.
MEMORY_SCRATCH, MEMORY_SCRATCH_ROOM = Path("/dev/shm"), 8 * 2**30


def _available_memory() -> int | None:
    """The kernel's MemAvailable in bytes (None where /proc/meminfo does not say)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def scratch_root() -> str | None:
    """Where the smoke run's scratch folder goes: :data:`MEMORY_SCRATCH` when it is a writable
    folder with :data:`MEMORY_SCRATCH_ROOM` bytes free and as much memory available (a tmpfs
    may be larger than the memory behind it), else None (the system's temporary folder)."""
    try:
        free = shutil.disk_usage(MEMORY_SCRATCH).free
    except OSError:
        return None
    memory = _available_memory()
    roomy = free >= MEMORY_SCRATCH_ROOM and memory is not None and memory >= MEMORY_SCRATCH_ROOM
    return str(MEMORY_SCRATCH) if roomy and os.access(MEMORY_SCRATCH, os.W_OK) else None


def check_smoke_budget(entry: Experiment) -> Any:
    """The smoke settings of ``entry``; ``ValueError`` when they equal its paper settings."""
    with scoped_env(**{profile.SMOKE_ENV: None}):
        paper = entry.make_settings()
    smoke = entry.make_settings()
    if entry.fixed_scale:                     # one scale in every profile: run it whole
        return smoke
    if smoke == paper:
        raise ValueError(f"{entry.name}: {entry.settings} declares no smoke budget: its paper "
                         "settings do not change under DDCL_SMOKE=1 (declare setting(..., smoke=...)"
                         " on epochs, steps, seeds or repeats)")
    return smoke


def run_entry(entry: Experiment) -> float:
    """Run one entry under the smoke profile; return the seconds taken."""
    start = time.perf_counter()
    settings = check_smoke_budget(entry)
    entry.run_function()(settings)
    return time.perf_counter() - start


@dataclasses.dataclass(frozen=True)
class Measured:
    """What one smoke entry cost: ``seconds``, optimiser ``steps`` (0 without a training
    loop), ``peak_mib`` (see the module docstring) and where that peak was read."""

    seconds: float
    steps: int
    peak_mib: float
    peak_of: str
    counted: dict | None = None     # --flops: {"flops", "steps", "examples"} of the training steps

    @property
    def seconds_per_step(self) -> float | None:
        return self.seconds / self.steps if self.steps else None

    def line(self, name: str) -> str:
        per = self.seconds_per_step
        per_text = f"{1000 * per:9.1f} ms/step" if per is not None else f"{'-':>9} ms/step"
        return (f"  {name:<40} {self.seconds:7.1f} s {self.steps:6d} steps {per_text} "
                f"{self.peak_mib:8.0f} MiB ({self.peak_of})  ok")

    def record(self, name: str) -> dict:
        per = self.seconds_per_step
        record = {"name": name, "seconds": round(self.seconds, 2), "ok": True,
                  "steps": self.steps,
                  "seconds_per_step": None if per is None else round(per, 5),
                  "peak_mib": round(self.peak_mib, 1), "peak_of": self.peak_of}
        if self.counted is not None:
            record["training"] = dict(self.counted)
        return record


def measure_entry(entry: Experiment, device: str = "cpu", flops: bool = False) -> Measured:
    """:func:`run_entry` with its steps and peak memory (CUDA: allocated on the device during
    the entry; CPU: the process's peak resident set so far); with ``flops``, also the FLOPs,
    steps and examples of its training steps (:func:`ddcl_theory.runtime.training.counting_flops`;
    the seconds then include the counting's overhead)."""
    import torch

    from ddcl_theory.runtime.training import counting_flops, steps_taken
    if flops:
        from ddcl_theory.runbook.cpu_attention import count_cpu_attention
        count_cpu_attention()
    on_cuda = device == "cuda"
    if on_cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    before = steps_taken()
    with counting_flops() if flops else contextlib.nullcontext() as counted:
        seconds = run_entry(entry)
    if on_cuda:
        torch.cuda.synchronize()
        peak, where = torch.cuda.max_memory_allocated() / 2**20, "cuda allocated"
    else:      # ru_maxrss is in KiB on Linux
        peak, where = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "process rss"
    return Measured(seconds, steps_taken() - before, peak, where, counted)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*",
                        help="run only entries whose name starts with one of these")
    parser.add_argument("--list", action="store_true", help="list the registry and exit")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for torch and NumPy's BLAS (default: their own)")
    parser.add_argument("--exitfirst", "-x", action="store_true", help="stop at the first failure")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cpu (default; what CI runs) or cuda on a GPU host")
    parser.add_argument("--flops", action="store_true",
                        help="also count the FLOPs and examples of the training steps (slower)")
    parser.add_argument("--report", default=None,
                        help="also write the times and outcomes as JSON to this file (atomically)")
    args = parser.parse_args(argv)
    todo = entries()
    if args.list:
        for e in todo:
            extra = f" {dict(e.overrides)}" if e.overrides else ""
            print(f"{e.name:<40} {e.module}.{e.settings} -> {e.run}{extra}")
        return 0
    if args.names:
        todo = [e for e in todo if any(e.name.startswith(n) for n in args.names)]
        if not todo:
            raise SystemExit(f"smoke: no experiment matches {args.names}; see --list")
    if args.threads is not None and args.threads < 1:
        raise SystemExit(f"--threads: expected >= 1, got {args.threads}")
    import torch

    from ddcl_theory.runtime.io import write_json
    from ddcl_theory.runtime.provenance import provenance
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("smoke: --device cuda but torch sees no CUDA device")
    threads_before = torch.get_num_threads()
    blas = contextlib.nullcontext()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
        with contextlib.suppress(ImportError):           # NumPy's BLAS threads too
            from threadpoolctl import threadpool_limits
            blas = threadpool_limits(args.threads)
    outcomes: list[dict] = []
    progress = os.environ.get("DDCL_PROGRESS", "0")          # one line per experiment, no bars
    try:
        with blas, tempfile.TemporaryDirectory(prefix="ddcl-smoke-",
                                               dir=scratch_root()) as scratch, \
                scoped_env(**{profile.PROFILE_ENV: "paper", profile.SMOKE_ENV: "1",
                              "DDCL_PROGRESS": progress, RESULTS_ENV: scratch}), \
                _device(args.device):
            print(f"smoke: {len(todo)} experiment(s), {profile.describe()}, "
                  f"{torch.get_num_threads()} thread(s); checkpoints in a scratch folder",
                  flush=True)
            total = time.perf_counter()
            for e in todo:
                start = time.perf_counter()
                try:
                    measured = measure_entry(e, args.device, args.flops)
                except Exception:                            # noqa: BLE001 -- reported by name
                    seconds = time.perf_counter() - start
                    print(f"FAILED {e.name} after {seconds:.1f} s:", flush=True)
                    traceback.print_exc(file=sys.stdout)
                    sys.stdout.flush()
                    outcomes.append({"name": e.name, "seconds": round(seconds, 2), "ok": False})
                    if args.exitfirst:
                        break
                    continue
                print(measured.line(e.name), flush=True)
                outcomes.append(measured.record(e.name))
            elapsed = time.perf_counter() - total
            record = {"experiments": outcomes, "total_seconds": round(elapsed, 2),
                      "threads": torch.get_num_threads(), "provenance": provenance("smoke")}
    finally:
        torch.set_num_threads(threads_before)
    if args.report:
        write_json(args.report, record)
    failed = [o["name"] for o in outcomes if not o["ok"]]
    if failed:
        print(f"smoke: FAILED {len(failed)} of {len(todo)}: {', '.join(failed)} "
              f"({elapsed:.0f} s)", flush=True)
        return 1
    print(f"smoke: all {len(outcomes)} ok in {elapsed:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
