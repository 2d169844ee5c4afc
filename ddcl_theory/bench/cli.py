"""The command line: ``python -m ddcl_theory.bench [--quick|--full] [options]``.

Times one forward + backward pass of DDCL-Attention, its bare matrix products, SDPA attention,
mean pooling and VectorQuantize side by side, measures peak memory per pass in fresh
subprocesses, and compares Laplacian heads with standard attention; prints ratios and writes a
JSON file. ``python -m pydoc ddcl_theory.bench`` says what each measure is.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch

from ddcl_theory.bench.harness import run
from ddcl_theory.bench.memory import measure_memory_here
from ddcl_theory.bench.results import report
from ddcl_theory.bench.settings import BenchSettings

__all__ = ["main"]


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
