"""Chapters run side by side: each in its own process on the cores it keeps busy, longest first,
the ledger chapters (which read every other chapter's verdicts) after the others.

A chapter's cost and width come from its committed reference provenance
(``results/reference/provenance/<chapter>.json``): it keeps busy the ``workers`` x ``threads``
its recorded settings name (the two worker processes of a study that spreads its stacks), else
``round(cpu / wall)`` cores. A one-core chapter takes its CPU seconds when it has its core to
itself (its recorded wall time may include waiting on others); a wider one takes its recorded
wall time (its workers do not overlap perfectly). A chapter with no provenance counts as one
core and starts first (its length is unknown). Whenever cores are idle, the longest pending
chapter that fits them starts. :func:`plan` simulates the order :func:`run` follows, so the
projected wall time is printed before anything starts.

Each chapter's process checks again that the tree is clean when it starts: an edit to a
tracked file during the run stops the chapters that start after it (and the ledger).
"""
from __future__ import annotations

import math
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Job", "jobs_of", "next_job", "plan", "projected_seconds", "describe_plan", "run",
           "goldens_command"]


@dataclass(frozen=True)
class Job:
    """One chapter to execute.

    Attributes:
        name: the chapter's source stem.
        seconds: expected wall seconds with its cores to itself (``inf`` when unknown).
        cores: cores it keeps busy (>= 1).
        last: it reads the other chapters' verdicts, so it starts after every other job ended.
    """

    name: str
    seconds: float
    cores: int = 1
    last: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.cores, bool) or not isinstance(self.cores, int) or self.cores < 1:
            raise ValueError(f"cores: expected an int >= 1, got {self.cores!r}")
        if not self.seconds >= 0:
            raise ValueError(f"seconds: expected >= 0 (inf when unknown), got {self.seconds!r}")


def _recorded(settings: object, key: str) -> list:
    """Every value stored under ``key`` in a nested settings record."""
    if isinstance(settings, Mapping):
        return [v for k, v in settings.items() if k == key] + [
            x for v in settings.values() for x in _recorded(v, key)]
    if isinstance(settings, (list, tuple)):
        return [x for v in settings for x in _recorded(v, key)]
    return []


def _width(record: Mapping, cores: int) -> int:
    """Cores a chapter keeps busy: its settings' ``workers`` x ``threads`` where recorded,
    else its CPU seconds over its wall seconds; between 1 and ``cores``."""
    workers = [w for w in _recorded(record.get("settings"), "workers") if isinstance(w, int)]
    threads = [t for t in _recorded(record.get("settings"), "threads") if isinstance(t, int)]
    if workers:
        width = max(workers) * max(threads or [1])
    else:
        width = round(record["cpu_seconds"] / record["seconds"])
    return min(cores, max(1, width))


def jobs_of(names: Sequence[str], provenance: Mapping[str, Mapping | None], cores: int,
            last: Sequence[str] = ()) -> list[Job]:
    """The :class:`Job` of each chapter in ``names``, from its committed provenance (a dict
    with ``seconds``, ``cpu_seconds`` and optionally ``settings``, or None), at most ``cores``
    wide; ``last``: the chapters that read the others' verdicts."""
    if cores < 1:
        raise ValueError(f"cores: expected >= 1, got {cores}")
    out = []
    for name in names:
        record = provenance.get(name) or {}
        wall, cpu = record.get("seconds"), record.get("cpu_seconds")
        if wall and cpu:
            width = _width(record, cores)
            out.append(Job(name, float(cpu if width == 1 else max(wall, cpu / width)), width,
                           name in last))
        else:
            out.append(Job(name, math.inf, 1, name in last))
    return out


def next_job(pending: Sequence[Job], free: int, others_running: bool) -> Job | None:
    """The job to start on ``free`` idle cores: the longest pending one that fits (unknown
    lengths first); a ``last`` job only when nothing else is pending or running. None when
    none may start now."""
    ordinary = [j for j in pending if not j.last]
    if ordinary:
        fits = [j for j in ordinary if j.cores <= free]
        return max(fits, key=lambda j: j.seconds) if fits else None
    if others_running:
        return None
    return next((j for j in pending if j.cores <= free), None)


def plan(jobs: Sequence[Job], cores: int) -> list[tuple[float, Job]]:
    """(start second, job) of each job when every job lasts its ``seconds`` (unknown ones:
    0), in start order: the schedule :func:`run` follows."""
    pending, running, clock, out = list(jobs), [], 0.0, []
    while pending or running:
        free = cores - sum(j.cores for _, j in running)
        job = next_job(pending, free, bool(running))
        if job is not None:
            pending.remove(job)
            length = job.seconds if math.isfinite(job.seconds) else 0.0
            running.append((clock + length, job))
            out.append((clock, job))
            continue
        if not running:
            raise RuntimeError("plan: a job needs more cores than the machine has")
        clock, done = min(running, key=lambda r: r[0])
        running.remove((clock, done))
    return out


def projected_seconds(schedule: Sequence[tuple[float, Job]]) -> float:
    """When the last job of a :func:`plan` with a known length ends."""
    return max((t + j.seconds for t, j in schedule if math.isfinite(j.seconds)), default=0.0)


def describe_plan(schedule: Sequence[tuple[float, Job]], cores: int) -> str:
    """The plan in lines: each chapter's start, cores and expected minutes, then the projected
    wall time against running them one after another."""
    lines = [f"{len(schedule)} chapter(s) on {cores} core(s), the longest that fits the idle "
             "cores first:"]
    for start, job in schedule:
        minutes = (f"{job.seconds / 60:.0f} min" if math.isfinite(job.seconds)
                   else "length unknown")
        lines.append(f"  +{start / 60:5.0f} min  {job.name} ({job.cores} core(s), {minutes})")
    end = projected_seconds(schedule)
    serial = sum(j.seconds for _, j in schedule if math.isfinite(j.seconds))
    lines.append(f"projected wall time {end / 60:.0f} min, one after another {serial / 60:.0f} "
                 f"min (from the committed provenance; unknown lengths not counted)")
    return "\n".join(lines)


def run(jobs: Sequence[Job], cores: int, command: Callable[[Job], Sequence[str]],
        log_dir: Path, poll: float = 1.0, say: Callable[[str], None] = print
        ) -> dict[str, int | None]:
    """Execute ``command(job)`` for every job, in the order of :func:`plan`, each appending
    its output to ``log_dir/<name>.log``; the ``last`` jobs are skipped (None) when another
    failed. When this function is left early (an error, Ctrl-C, SIGTERM), the jobs still
    running are terminated. Returns ``{name: exit status or None}``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    pending, running, status = list(jobs), {}, {}
    started = time.monotonic()
    stamp = lambda: f"[{(time.monotonic() - started) / 60:4.0f} min]"     # noqa: E731
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        while pending or running:
            free = cores - sum(job.cores for job, _, _ in running.values())
            job = next_job(pending, free, bool(running))
            if job is not None and job.last and any(rc != 0 for rc in status.values()):
                pending.remove(job)
                status[job.name] = None
                say(f"skipped {job.name}: a chapter before it failed")
                continue
            if job is not None:
                pending.remove(job)
                running[job.name] = (job, *_start(command(job), log_dir / f"{job.name}.log"))
                say(f"{stamp()} started {job.name} ({job.cores} core(s))")
                continue
            if not running:
                raise RuntimeError("run: a job needs more cores than the machine has")
            time.sleep(poll)
            for name, (job, proc, log) in list(running.items()):
                if proc.poll() is not None:
                    log.close()
                    del running[name]
                    status[name] = proc.returncode
                    say(f"{stamp()} finished {name}: "
                        + ("ok" if proc.returncode == 0 else
                           f"exit status {proc.returncode}, see {log_dir / (name + '.log')}"))
    finally:
        signal.signal(signal.SIGTERM, previous)
        for name, (job, proc, log) in running.items():
            _stop(proc)
            log.close()
            say(f"stopped {name}")
    return status


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _start(argv: Sequence[str], log_path: Path) -> tuple[subprocess.Popen, object]:
    """A job's process, its output appended to ``log_path`` (closed again if it cannot
    start)."""
    log = open(log_path, "a", encoding="utf-8")
    try:
        log.write(f"--- {' '.join(argv)}\n")
        log.flush()
        return subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT), log
    except BaseException:
        log.close()
        raise


def _stop(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Terminate a job's process, killing it after ``grace`` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def goldens_command(flags: Sequence[str] = ()) -> Callable[[Job], list[str]]:
    """The command that executes one chapter: this interpreter's ``goldens write`` of it."""
    return lambda job: [sys.executable, "-m", "ddcl_theory.ledger.goldens", "write", *flags,
                        job.name]
