"""ddcl_theory.ledger.side_by_side: chapters planned and run side by side on a few cores, the
longest first, never more cores busy than there are, the ledger chapters after the others."""
from __future__ import annotations

import json
import math
import os
import sys
import time

import pytest

from ddcl_theory.ledger import goldens
from ddcl_theory.ledger import side_by_side as sbs
from ddcl_theory.runtime import profile

PROVENANCE = {
    "wide": {"seconds": 100.0, "cpu_seconds": 190.0},     # two workers: 2 cores, 100 s
    "long": {"seconds": 120.0, "cpu_seconds": 118.0},     # one core, 118 s
    "mid": {"seconds": 200.0, "cpu_seconds": 60.0},       # waited on others: one core, 60 s
    "short": {"seconds": 30.0, "cpu_seconds": 29.0},
    "ledger": {"seconds": 10.0, "cpu_seconds": 10.0},
}


def test_a_chapter_is_as_wide_as_its_recorded_workers_and_threads():
    record = {"seconds": 100.0, "cpu_seconds": 120.0,            # 1.2: one core by the clock
              "settings": {"Study": {"workers": 2, "threads": 1, "inner": {"seeds": [1]}}}}
    [job] = sbs.jobs_of(["x"], {"x": record}, 4)
    assert (job.cores, job.seconds) == (2, 100.0)
    record["settings"]["Study"]["threads"] = 2
    assert sbs.jobs_of(["x"], {"x": record}, 4)[0].cores == 4
    assert sbs.jobs_of(["x"], {"x": record}, 3)[0].cores == 3     # never wider than the machine
    record["settings"] = {"Study": {"seeds": [1, 2]}}             # none recorded: by the clock
    assert sbs.jobs_of(["x"], {"x": record}, 4)[0] == sbs.Job("x", 120.0, 1)


def test_jobs_take_their_cores_and_length_from_the_provenance():
    jobs = {j.name: j for j in sbs.jobs_of(list(PROVENANCE) + ["new"], PROVENANCE, 2,
                                           last=["ledger"])}
    assert (jobs["wide"].cores, jobs["wide"].seconds) == (2, 100.0)
    assert (jobs["long"].cores, jobs["long"].seconds) == (1, 118.0)
    assert (jobs["mid"].cores, jobs["mid"].seconds) == (1, 60.0)
    assert jobs["ledger"].last and not jobs["long"].last
    assert jobs["new"].cores == 1 and math.isinf(jobs["new"].seconds)
    # never wider than the machine
    assert sbs.jobs_of(["wide"], PROVENANCE, 1)[0] == sbs.Job("wide", 190.0, 1)
    with pytest.raises(ValueError, match="cores: expected an int >= 1"):
        sbs.Job("x", 1.0, 0)
    with pytest.raises(ValueError, match="seconds: expected >= 0"):
        sbs.Job("x", -1.0)


def test_the_plan_starts_the_longest_first_and_the_ledger_last():
    jobs = sbs.jobs_of(list(PROVENANCE), PROVENANCE, 2, last=["ledger"])
    schedule = sbs.plan(jobs, 2)
    starts = {j.name: t for t, j in schedule}
    assert [j.name for _, j in schedule][0] == "long"            # 118 s, fits 2 free cores
    # long (0-118) beside mid (0-60) then short (60-90); wide needs both cores: after long
    assert starts == {"long": 0.0, "mid": 0.0, "short": 60.0, "wide": 118.0, "ledger": 218.0}
    text = sbs.describe_plan(schedule, 2)
    assert "projected wall time 4 min, one after another 5 min" in text
    assert text.splitlines()[1].split() == ["+", "0", "min", "long", "(1", "core(s),", "2",
                                            "min)"]
    # unknown lengths start first and count as 0 in the plan
    unknown = sbs.plan(sbs.jobs_of(["long", "new"], PROVENANCE, 2), 2)
    assert [j.name for _, j in unknown] == ["new", "long"]


def test_never_more_cores_busy_than_there_are():
    jobs = sbs.jobs_of(list(PROVENANCE), PROVENANCE, 2, last=["ledger"])
    schedule = sbs.plan(jobs, 2)
    ends = [(t, t + j.seconds, j.cores) for t, j in schedule]
    for moment in sorted({t for t, _, _ in ends}):
        assert sum(c for t, e, c in ends if t <= moment < e) <= 2


def _sleeper(tmp_path, fail=()):
    """A command that records its start and end times and sleeps a tenth of its job's length
    (in seconds: the job lengths are in tenths), failing for the names in ``fail``."""
    def command(job):
        code = (f"import json, sys, time; t = time.time(); time.sleep({job.seconds / 100}); "
                f"open(r'{tmp_path / job.name}.json', 'w').write(json.dumps([t, time.time()])); "
                f"sys.exit({1 if job.name in fail else 0})")
        return [sys.executable, "-c", code]
    return command


def test_run_follows_the_plan_and_skips_the_ledger_after_a_failure(tmp_path):
    jobs = [sbs.Job("a", 30.0, 1), sbs.Job("b", 10.0, 1), sbs.Job("c", 20.0, 2),
            sbs.Job("ledger", 5.0, 1, last=True)]
    lines = []
    status = sbs.run(jobs, 2, _sleeper(tmp_path), tmp_path / "logs", poll=0.02,
                     say=lines.append)
    assert status == {"a": 0, "b": 0, "c": 0, "ledger": 0}
    times = {j.name: json.loads((tmp_path / f"{j.name}.json").read_text()) for j in jobs}
    assert times["c"][0] >= max(times["a"][1], times["b"][1])     # both cores: after a and b
    assert times["ledger"][0] >= times["c"][1]
    assert times["b"][0] < times["a"][1]                         # a and b side by side
    assert sum("started" in line for line in lines) == 4
    assert (tmp_path / "logs" / "a.log").is_file()
    failed = sbs.run(jobs, 2, _sleeper(tmp_path, fail=("b",)), tmp_path / "logs", poll=0.02,
                     say=lines.append)
    assert failed == {"a": 0, "b": 1, "c": 0, "ledger": None}
    assert "skipped ledger: a chapter before it failed" in lines
    # each run appends to the chapter's log
    assert (tmp_path / "logs" / "a.log").read_text().count("--- ") == 2


def test_jobs_still_running_are_stopped_when_the_run_is_left_early(tmp_path):
    def command(job):
        code = (f"import os, time; open(r'{tmp_path / job.name}.pid', 'w').write(str(os.getpid()));"
                f" time.sleep(60)")
        return [sys.executable, "-c", code]

    def say(line):
        if line.endswith("started b (1 core(s))"):
            files = [tmp_path / f"{name}.pid" for name in ("a", "b")]
            deadline = time.monotonic() + 30
            while not all(f.is_file() and f.read_text() for f in files):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            raise KeyboardInterrupt("stop")

    jobs = [sbs.Job("a", 2.0, 1), sbs.Job("b", 1.0, 1)]
    with pytest.raises(KeyboardInterrupt):
        sbs.run(jobs, 2, command, tmp_path / "logs", poll=0.02, say=say)
    for name in ("a", "b"):
        pid = int((tmp_path / f"{name}.pid").read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)                            # terminated and reaped


def test_goldens_write_runs_side_by_side_and_fails_when_a_chapter_fails(monkeypatch, capsys,
                                                                       tmp_path):
    seen = {}

    def fake_run(jobs, cores, command, log_dir, say=print):
        seen.update(jobs={j.name: j for j in jobs}, cores=cores, command=command(jobs[0]),
                    log_dir=log_dir)
        return {j.name: 0 for j in jobs}

    monkeypatch.setattr(sbs, "run", fake_run)
    assert goldens.main(["write", "--cores", "2", "--out", str(tmp_path), "ledger",
                         "decomposition"]) == 0
    assert seen["cores"] == 2 and seen["jobs"]["ledger"].last
    assert not seen["jobs"]["decomposition"].last
    first = next(iter(seen["jobs"]))
    assert seen["command"] == [sys.executable, "-m", "ddcl_theory.ledger.goldens", "write",
                               "--out", str(tmp_path.resolve()), first]
    assert seen["log_dir"] == tmp_path.resolve() / "logs"
    assert goldens.main(["write", "--cores", "2", "--force", "decomposition"]) == 0
    assert seen["command"][-2:] == ["--force", "decomposition"]
    assert seen["log_dir"] == goldens.notebooks_dir().parent / "_build" / "logs"
    assert "projected wall time" in capsys.readouterr().out
    monkeypatch.setattr(sbs, "run", lambda jobs, *a, **k: {j.name: 1 for j in jobs})
    assert goldens.main(["write", "--cores", "2", "--out", str(tmp_path), "decomposition"]) == 1
    with pytest.raises(SystemExit, match="--cores: expected >= 1"):
        goldens.main(["write", "--cores", "0"])


def test_goldens_write_plans_the_reference_from_its_committed_rows(monkeypatch, capsys,
                                                                  tmp_path):
    seen = {}
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    monkeypatch.setenv(goldens.ALLOW_DIRTY_ENV, "1")
    monkeypatch.setattr(goldens.reference, "summary", lambda: [
        {"chapter": "decomposition", "seconds": 100.0, "cpu_seconds": 60.0,
         "settings": {"S": {"workers": 2, "threads": 1}}}])
    monkeypatch.setattr(sbs, "run", lambda jobs, *a, **k: seen.update(jobs=jobs) or
                        {j.name: 0 for j in jobs})
    assert goldens.main(["write", "--cores", "2", "--out", str(tmp_path), "decomposition",
                         "ledger"]) == 0
    assert seen["jobs"] == [sbs.Job("decomposition", 100.0, 2),
                            sbs.Job("ledger", math.inf, 1, last=True)]
    assert "+    0 min  decomposition (2 core(s), 2 min)" in capsys.readouterr().out
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    with pytest.raises(SystemExit, match="--cores: chapters side by side share the CPU"):
        goldens.main(["write", "--cores", "2", "--out", str(tmp_path), "decomposition"])
