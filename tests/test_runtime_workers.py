"""ddcl_theory.runtime.workers.map_units: units of a run directory over several processes."""
from __future__ import annotations

import dataclasses
import os
import time

import pytest
import torch

from ddcl_theory.runtime.io import read_json
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.workers import map_units


@dataclasses.dataclass(frozen=True)
class _S:
    k: int = 0


def _weighted(seed: int, x: torch.Tensor) -> dict:
    """A unit: a seeded draw against a tensor argument, and the process that computed it."""
    g = torch.Generator().manual_seed(seed)
    return {"value": float((torch.randn(x.shape, generator=g) * x).sum()), "pid": os.getpid()}


def _fails(seed: int) -> int:
    if seed == 1:
        raise RuntimeError(f"unit {seed} failed")
    return seed


def _sleepy(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def _jobs(n: int = 6):
    x = torch.linspace(0.0, 1.0, 50)
    return [(f"seed={s}", (s, x)) for s in range(n)]


def test_two_workers_give_the_values_of_one_and_compute_only_the_missing_units(tmp_path):
    one = map_units(RunDir("w", _S(1), root=tmp_path / "a", enabled=True), _weighted,
                    _jobs(5), workers=1)
    assert {r["pid"] for r in one} == {os.getpid()}
    first = RunDir("w", _S(1), root=tmp_path / "b", enabled=True)
    map_units(first, _weighted, _jobs(2), workers=1)
    again = RunDir("w", _S(1), root=tmp_path / "b", enabled=True)
    two = map_units(again, _weighted, _jobs(5), workers=2)
    assert [r["value"] for r in two] == [r["value"] for r in one]      # in the jobs' order
    assert [r["pid"] == os.getpid() for r in two] == [True] * 2 + [False] * 3
    assert sorted(again.loaded) == ["seed=0", "seed=1"]
    assert sorted(again.computed) == ["seed=2", "seed=3", "seed=4"]
    assert sorted(again.units_done()) == sorted(k for k, _ in _jobs(5))   # saved by them


@pytest.mark.parametrize("workers", [1, 2])
def test_each_computed_unit_records_its_seconds_and_the_finished_record_lists_them(tmp_path,
                                                                                  workers):
    jobs = [("short", (0.05,)), ("long", (0.6,))]
    first = RunDir("w", _S(2), root=tmp_path, enabled=True)
    map_units(first, _sleepy, jobs[:1], workers=1)
    again = RunDir("w", _S(2), root=tmp_path, enabled=True)
    map_units(again, _sleepy, jobs, workers=workers)
    assert list(again.unit_seconds) == ["long"]                  # "short" was read back
    assert 0.6 <= again.unit_seconds["long"] < 30
    record = read_json(again.finish())
    assert record["unit_seconds"] == {"long": round(again.unit_seconds["long"], 1)}


def test_a_failing_unit_fails_the_map_and_a_disabled_directory_stays_empty(tmp_path):
    off = RunDir("w", _S(), root=tmp_path, enabled=False)
    with pytest.raises(RuntimeError, match="unit 1 failed"):
        map_units(off, _fails, [(f"s{i}", (i,)) for i in range(3)], workers=2)
    assert not (tmp_path / off.key).exists()


def test_bad_arguments_are_named(tmp_path):
    rundir = RunDir("w", _S(), root=tmp_path, enabled=False)
    with pytest.raises(ValueError, match=r"workers: expected an int >= 1, got 0"):
        map_units(rundir, _weighted, _jobs(), workers=0)
    with pytest.raises(ValueError, match=r"jobs\[1\]: expected a \(key, args tuple\) pair"):
        map_units(rundir, _weighted, [("a", (1,)), ("b", 2)])
    with pytest.raises(ValueError, match=r"unit keys must be distinct, got \['a'\]"):
        map_units(rundir, _weighted, [("a", (1,)), ("a", (2,))])
