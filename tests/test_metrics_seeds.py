"""Comparing two settings' seed means against their spread."""
from __future__ import annotations

import pytest

from ddcl_theory.metrics.seeds import compare


def test_compare_counts_a_difference_only_beyond_the_spread_of_two_runs():
    summary = {"a": (1.0, 0.3), "b": (0.5, 0.4), "c": (0.0, 0.0)}
    assert compare(summary, "a", "c") == 1 and compare(summary, "c", "a") == -1
    assert compare(summary, "a", "b") == 0             # 0.5 is not beyond hypot(0.3, 0.4)
    with pytest.raises(KeyError, match="'d'"):
        compare(summary, "a", "d")
