"""ddcl_theory.experiments.overhead: the L5 cost accounting of Laplacian heads."""
from __future__ import annotations

from ddcl_theory.experiments import overhead


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
