"""ddcl_theory.experiments.overhead: the L5 cost accounting of Laplacian heads."""
from __future__ import annotations

import pytest

from ddcl_theory.experiments import overhead
from ddcl_theory.runtime import profile


def test_L5_extra_flops_are_one_subtraction_per_value_entry():
    base = overhead.forward_flops(2, 10, 12, 3, 0)
    for k in range(4):
        assert overhead.forward_flops(2, 10, 12, 3, k) - base == 2 * 10 * k * 4


def test_L5_overhead_run_counts_equal_parameters():
    s = overhead.OverheadSettings(batch=1, seq_len=8, dim=8, heads=2, repeats=2, warmup=1)
    result = overhead.run(s)
    assert len(set(result.params.values())) == 1
    assert all(len(v) == 2 for v in result.times.values())
    assert 0 < result.extra_flop_fraction(2) < 0.01


def test_the_smoke_run_times_one_paper_shaped_sequence_once(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    monkeypatch.setenv(profile.SMOKE_ENV, "1")
    s = overhead.OverheadSettings.from_profile()
    assert (s.batch, s.repeats, s.warmup) == (1, 1, 0) and (s.seq_len, s.dim) == (1024, 768)
    with pytest.raises(ValueError, match="dim"):
        overhead.OverheadSettings(dim=10, heads=4)
