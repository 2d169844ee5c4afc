"""Replay every golden under each kernel set this CPU can emulate, each with fresh caches.

A golden must pass on any x86-64 machine, not only the one that wrote it. This CPU can stand
in for others: ATen picks its vector kernels from ``ATEN_CPU_CAPABILITY`` and MKL its code path
from ``MKL_CBWR``. For each kernel set (:func:`kernel_sets`) the chapters are executed afresh
(``goldens write --out``, several at a time, the ledger last), with an empty embedding cache
(``DDCL_CACHE_DIR``: the MiniLM embeddings are computed under those kernels too) and a scratch
results folder (holding the committed verdicts of the chapters not replayed, which the ledger
reads), and each executed copy is compared with its golden under the cells' declared
tolerances (:func:`ddcl_theory.ledger.goldens.compare`, the rules of the nbval plugin); when
every chapter ran, the verdicts they wrote are compared with the committed ones as ``make
check-results`` does (:func:`ddcl_theory.ledger.results_check.check`). The
report gives, per kernel set and chapter, the number that moved most as a fraction of its
allowance: the measured spread that a declared tolerance should follow.

    python -m ddcl_theory.ledger.portable                 # every kernel set, every chapter
    python -m ddcl_theory.ledger.portable --sets avx2 text_readout ledger

Exit status 1 when any executed copy differs from its golden beyond its tolerance.
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ddcl_theory.ledger import goldens, results_check
from ddcl_theory.ledger.nbval_numeric import HEAVY_FIRST
from ddcl_theory.ledger.tolerance import largest_move
from ddcl_theory.runtime.kernels import probe
from ddcl_theory.runtime.paths import repo_root

#: name -> the environment that selects it (added to this process's)
KERNEL_SETS = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"},
    "default": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
}
#: the ATen capability each set must show (None: whatever the CPU has)
EXPECTED_ATEN = {"native": None, "avx2": "AVX2", "default": "DEFAULT"}


def kernel_sets(native_aten: str | None = None) -> list[str]:
    """The kernel sets this CPU can run: its own, AVX2 where it has AVX-512, and the scalar
    ``default`` set (with MKL's generic path) everywhere."""
    native_aten = native_aten or probe()["aten"]
    names = ["native"]
    if native_aten == "AVX512":
        names.append("avx2")
    names.append("default")
    return names


def _execute(source: Path, out: Path, env: dict[str, str]) -> tuple[str, int, float, str]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ddcl_theory.ledger.goldens", "write",
                           "--out", str(out), source.stem], env=env, capture_output=True,
                          text=True, check=False)
    return source.stem, proc.returncode, time.monotonic() - start, proc.stdout + proc.stderr


def replay(kernel_set: str, names: list[str] | None, folder: Path, jobs: int) -> dict:
    """Execute the chapters under one kernel set into ``folder`` and compare them with their
    goldens: {"problems": [...], "moves": {chapter: (fraction, where)}, "seconds": s}."""
    extra = KERNEL_SETS[kernel_set]
    seen = probe(extra)
    want = EXPECTED_ATEN[kernel_set]
    if want is not None and seen["aten"] != want:
        raise RuntimeError(f"{kernel_set}: ATen runs {seen['aten']}, not {want}")
    folder.mkdir(parents=True, exist_ok=True)
    if names is not None:
        # the ledger reads every chapter's verdicts: those not replayed are the committed ones
        committed = repo_root() / "results" / "verdicts"
        shutil.copytree(committed, folder / "results" / "verdicts", dirs_exist_ok=True)
    env = {**os.environ, **extra,
           "DDCL_CACHE_DIR": str(folder / "cache"), "DDCL_RESULTS_DIR": str(folder / "results"),
           "DDCL_PROFILE": "cpu"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    todo = goldens.sources(names)
    ledger = [s for s in todo if s.stem == "ledger"]
    # the slowest first, so that no worker is left with one of them at the end
    chapters = sorted((s for s in todo if s.stem != "ledger"),
                      key=lambda s: HEAVY_FIRST.index(s.stem) if s.stem in HEAVY_FIRST
                      else len(HEAVY_FIRST))
    start = time.monotonic()
    runs = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        runs += list(pool.map(lambda s: _execute(s, folder, env), chapters))
    runs += [_execute(s, folder, env) for s in ledger]
    problems, moves = [], {}
    for stem, rc, seconds, log in runs:
        print(f"  {kernel_set}: {stem} executed in {seconds:.0f} s"
              + ("" if rc == 0 else f" (exit {rc})"), flush=True)
        if rc != 0:
            problems.append(f"{stem}: execution failed\n{log[-2000:]}")
            continue
        source = next(s for s in todo if s.stem == stem)
        executed, golden = folder / goldens.golden_path(source).name, goldens.golden_path(source)
        problems += goldens.compare(executed, golden)
        moves[stem] = chapter_moves(executed, golden)
    if names is None and not any(rc for _, rc, _, _ in runs):
        # every chapter ran: the verdicts they wrote, against the committed ones (make
        # check-results), each claim's numbers under that claim's own tolerance
        problems += results_check.check(folder / "results")
    return {"problems": problems, "moves": moves, "seconds": time.monotonic() - start,
            "kernels": seen}


def chapter_moves(executed: Path, golden: Path) -> tuple[float, str]:
    """The largest move of a number in a chapter's text outputs, as a fraction of its cell's
    allowance, and where (see :func:`ddcl_theory.ledger.tolerance.largest_move`)."""
    worst, where = 0.0, ""
    for i, tol, want_texts, got_texts in goldens.text_pairs(executed, golden):
        for wt, gt in zip(want_texts, got_texts):
            used, at = largest_move(wt, gt, tol)
            if math.isnan(used) or used > worst:
                worst, where = used, f"cell {i} [{tol.describe()}] {at}"
                if math.isnan(used):
                    return worst, where
    return worst, where


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="chapter stems (default: all)")
    parser.add_argument("--sets", default=None,
                        help="comma-separated kernel sets (default: all this CPU can emulate: "
                             + ", ".join(KERNEL_SETS) + ")")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="chapters executed at once (default: one per CPU)")
    parser.add_argument("--out", type=Path, default=None,
                        help="keep the executed copies here (default: a temporary folder)")
    args = parser.parse_args(argv)
    sets = args.sets.split(",") if args.sets else kernel_sets()
    unknown = [s for s in sets if s not in KERNEL_SETS]
    if unknown:
        raise SystemExit(f"--sets: unknown {unknown}; expected some of {list(KERNEL_SETS)}")
    failed = False
    with tempfile.TemporaryDirectory(prefix="ddcl-portable-") as tmp:
        base = args.out or Path(tmp)
        for name in sets:
            print(f"portable: replaying under {name} kernels ({KERNEL_SETS[name] or 'as found'})",
                  flush=True)
            report = replay(name, args.names or None, base / name, args.jobs)
            for stem, (used, where) in sorted(report["moves"].items()):
                print(f"  {name}: {stem}: largest move {used:.2f} of its allowance"
                      + (f" ({where})" if where else ""))
            for p in report["problems"]:
                print(f"  {name}: {p}")
            print(f"portable: {name} ({report['kernels']['aten']}): "
                  f"{len(report['problems'])} difference(s) in {report['seconds']:.0f} s",
                  flush=True)
            failed |= bool(report["problems"])
    print("portable: every golden agrees under every kernel set" if not failed
          else "portable: FAILED")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
