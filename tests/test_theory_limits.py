"""Temperature limits of the soft assignment (X1): hard VQ as tau -> 0, uniform as tau -> oo."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ddcl_theory import functional as F
from ddcl_theory.theory import decomposition as D
from ddcl_theory.theory import limits as L


def test_zero_temperature_limit_is_argmin_symbolic_k2():
    r = L.zero_temperature_limit_k2()
    assert r.holds is True
    assert r.details["V"] == 0


def test_zero_temperature_limit_is_argmin_symbolic_k3():
    assert L.zero_temperature_limit_k3().holds is True


def test_infinite_temperature_limit_is_uniform_symbolic_k2():
    assert L.infinite_temperature_limit_k2().holds is True


def test_high_temperature_rate_is_one_over_tau():
    assert L.high_temperature_rate_k2().holds is True


def test_squeeze_bounds_general_k():
    assert L.squeeze_bounds_general_k().holds is True


def test_zero_temperature_limit_is_argmin():
    z, p, _ = D.random_instance(1.0, 1.0, 0)
    q = F.soft_assign(z, p, 1e-4)
    nearest = F.squared_distances(z, p).argmin(1)
    hard = torch.nn.functional.one_hot(nearest, p.shape[0]).double()
    assert torch.allclose(q, hard, atol=1e-12)
    assert torch.allclose(F.soft_centroid(q, p), p[nearest], atol=1e-10)
    l_q, l_ols, v = F.loss_terms(z, p, q)
    distortion = F.squared_distances(z, p).min(1).values.mean()
    assert float(v) < 1e-10
    assert abs(float(l_q - distortion)) < 1e-10


def test_zero_temperature_rate_is_exp_minus_gap_over_tau():
    z, p, _ = D.random_instance(1.0, 1.0, 0)
    rows = L.limit_rates(z, p, [3e-2, 1e-2])
    assert all(r.hard_dev > 0 for r in rows)
    assert abs(rows[-1].hard_rate - 1.0) < abs(rows[0].hard_rate - 1.0)
    assert abs(rows[-1].hard_rate - 1.0) < 0.01


def test_infinite_temperature_limit_is_uniform():
    z, p, _ = D.random_instance(1.0, 1.0, 0)
    k = p.shape[0]
    q = F.soft_assign(z, p, 1e6)
    assert float((q - 1.0 / k).abs().max()) < 1e-5
    assert torch.allclose(F.soft_centroid(q, p), p.mean(0).expand_as(z), atol=1e-5)
    rows = L.limit_rates(z, p, [1e2, 1e3, 1e4])
    rates = [r.uniform_rate for r in rows]
    assert abs(rates[-1] - 1.0) < 1e-3
    assert abs(rates[-1] - 1.0) < abs(rates[0] - 1.0)


def test_limit_rates_reject_ties():
    z = torch.tensor([[0.0, 0.0]], dtype=torch.float64)
    p = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    with pytest.raises(ValueError, match="tie"):
        L.limit_rates(z, p, [1.0])


def test_temperature_sweep_reaches_both_limits():
    z, p, _ = D.random_instance(1.0, 1.0, 4, n=50, k=5, d=3)
    sweep = L.temperature_sweep(z, p, np.logspace(-4, 6, 11))
    np.testing.assert_allclose(sweep.l_q, sweep.l_ols + sweep.v, rtol=1e-10)
    np.testing.assert_allclose([sweep.l_q[0], sweep.l_ols[0], sweep.v[0]], sweep.hard, atol=1e-8)
    np.testing.assert_allclose([sweep.l_q[-1], sweep.l_ols[-1], sweep.v[-1]], sweep.uniform,
                               rtol=1e-4)
    assert sweep.hard_fraction[0] == 1.0 and sweep.hard_fraction[-1] == 0.0
    assert abs(sweep.perplexity[-1] - 5.0) < 1e-4
    assert np.all(np.diff(sweep.perplexity) >= -1e-9)   # entropy grows with temperature


def test_temperature_sweep_rejects_empty():
    z, p, _ = D.random_instance(1.0, 1.0, 0)
    with pytest.raises(ValueError, match="temperatures"):
        L.temperature_sweep(z, p, [])
