"""The annealing experiment on real tokens (tiny runs): the first split happens below T_c; a
killed run resumes from its run directory with the same record."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from ddcl_theory.experiments import annealing
from ddcl_theory.runtime.rundir import RunDir


def test_first_split_of_the_annealed_bank_is_just_below_the_critical_temperature():
    s = annealing.AnnealingSettings(n_tokens=300, k=4, n_temperatures=16, max_iters=200,
                                    start_ratio=1.5, end_ratio=0.1)
    result = annealing.run(s)
    t_c = result.critical_temperature
    ratio = result.temperatures[1] / result.temperatures[0]
    split = result.first_split_temperature()
    assert ratio * t_c <= split <= t_c
    assert (result.n_clusters[result.temperatures > t_c] == 1).all()
    assert result.n_clusters.max() >= 2
    assert result.prototypes.shape == (16, 4, s.dim)
    assert np.all(np.diff(result.temperatures) < 0)


def test_a_killed_annealing_run_resumes_to_the_same_record(tmp_path, monkeypatch):
    s = annealing.AnnealingSettings(n_tokens=200, k=3, n_temperatures=6, max_iters=50)
    whole = annealing.run(s)
    monkeypatch.setattr(annealing, "RunDir",
                        functools.partial(RunDir, root=tmp_path, enabled=True))
    real, calls = annealing.em_fixed_point, []

    def em_then_kill(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt                 # killed at the fourth temperature
        return real(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(annealing, "em_fixed_point", em_then_kill)
        with pytest.raises(KeyboardInterrupt):
            annealing.run(s)
    calls.clear()
    monkeypatch.setattr(annealing, "em_fixed_point", lambda *a, **k: (calls.append(1),
                                                                      real(*a, **k))[1])
    resumed = annealing.run(s)
    assert len(calls) == 3                           # only the temperatures not yet saved
    np.testing.assert_array_equal(resumed.prototypes, whole.prototypes)
    np.testing.assert_array_equal(resumed.free_energy, whole.free_energy)
    np.testing.assert_array_equal(resumed.n_clusters, whole.n_clusters)


def test_the_temperature_falls_from_start_to_end():
    with pytest.raises(ValueError, match="end_ratio"):
        annealing.AnnealingSettings(start_ratio=0.5, end_ratio=0.5)
    with pytest.raises(ValueError, match="n_tokens"):
        annealing.AnnealingSettings(n_tokens=1)
