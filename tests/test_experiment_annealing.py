"""The annealing experiment on real tokens (a tiny run): the first split happens below T_c."""
from __future__ import annotations

import numpy as np

from ddcl_theory.experiments import annealing


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
