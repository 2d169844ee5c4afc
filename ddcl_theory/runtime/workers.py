"""Units of a run directory computed by several processes: a chapter on every core.

A sweep whose units are independent (each seeds itself and writes nothing but its own unit and
training state) can spread them over ``workers`` processes::

    runs = map_units(ckpt, train_one, [(key, (s, tensors, n, seed, ckpt)) for ...], workers=2)

returns ``[train_one(*args) for key, args in jobs]`` in the order of ``jobs``. Finished units are
read back from ``ckpt`` as :meth:`RunDir.unit` would; the others run in a pool of spawned
processes (``torch.multiprocessing``: tensors among the arguments travel through shared memory),
and each worker saves its unit itself, atomically, so a killed sweep resumes at the next missing
unit whatever process was computing it. ``workers=1`` computes in this process, in order: the
same code path as before (the cpu profile).

Each unit gives the same numbers in a worker as in this process: a worker is a fresh
interpreter with the same environment (profile, results folder, resume flag), and ``fn`` sets
its own seeds and threads. ``fn`` must be importable (a module-level function); its progress
bars are off in the workers (this process shows one bar over the units instead).
"""
from __future__ import annotations

import concurrent.futures as cf
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ddcl_theory.runtime.progress import progress
from ddcl_theory.runtime.rundir import RunDir

__all__ = ["map_units"]

T = TypeVar("T")


def _check_jobs(jobs: Sequence[tuple[str, tuple]]) -> list[tuple[str, tuple]]:
    rows = list(jobs)
    for i, job in enumerate(rows):
        if (not isinstance(job, tuple) or len(job) != 2 or not isinstance(job[0], str)
                or not isinstance(job[1], tuple)):
            raise ValueError(f"jobs[{i}]: expected a (key, args tuple) pair, got {job!r}")
    keys = [k for k, _ in rows]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"jobs: unit keys must be distinct, got {twice} more than once")
    return rows


def _in_worker(rundir: RunDir, key: str, fn: Callable[..., T], args: tuple
               ) -> tuple[T, float]:
    """One unit in a worker: computed and saved there (``rundir`` arrives already opened);
    returns its value and the seconds it took."""
    os.environ["DDCL_PROGRESS"] = "0"
    start = time.perf_counter()
    value = fn(*args)
    seconds = time.perf_counter() - start
    rundir.save_unit(key, value)
    return value, seconds


def map_units(rundir: RunDir, fn: Callable[..., T], jobs: Sequence[tuple[str, tuple]],
              workers: int = 1, desc: str = "units",
              costs: Sequence[float] | None = None) -> list[T]:
    """``[fn(*args) for key, args in jobs]``, each a unit ``key`` of ``rundir``, over
    ``workers`` processes (see the module docstring). ``costs``: an estimate per job (e.g.
    images times seeds); the pool starts the costliest first, so that the last unit to finish
    is a short one. The results keep the order of ``jobs`` whatever the costs."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: expected an int >= 1, got {workers!r}")
    rows = _check_jobs(jobs)
    if costs is not None and len(costs) != len(rows):
        raise ValueError(f"costs: expected one per job ({len(rows)}), got {len(costs)}")
    if workers == 1:
        return [rundir.unit(key, lambda args=args: fn(*args)) for key, args in rows]
    results: dict[str, Any] = {}
    todo = []
    for key, args in rows:
        found, value = rundir.load_unit(key)       # opens the directory here, once
        if found:
            results[key] = value
            rundir.loaded.append(key)
        else:
            todo.append((key, args))
    if costs is not None:
        cost_of = {key: c for (key, _), c in zip(rows, costs)}
        todo.sort(key=lambda job: -cost_of[job[0]])
    if todo:
        import torch.multiprocessing as mp
        with cf.ProcessPoolExecutor(max_workers=min(workers, len(todo)),
                                    mp_context=mp.get_context("spawn")) as pool:
            futures = {pool.submit(_in_worker, rundir, key, fn, args): key for key, args in todo}
            try:
                for future in progress(cf.as_completed(futures), desc=desc, total=len(futures)):
                    key = futures[future]
                    results[key], rundir.unit_seconds[key] = future.result()
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
        rundir.computed.extend(key for key, _ in todo)
    return [results[key] for key, _ in rows]
