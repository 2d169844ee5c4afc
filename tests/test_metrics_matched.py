"""ddcl_theory.metrics.matched: values of two runs read at the lowest loss both reach."""
from __future__ import annotations

import pytest

from ddcl_theory.metrics.matched import at_level, at_matched_loss


def test_at_level_interpolates_at_the_first_crossing():
    losses, values = [4.0, 3.0, 2.0, 2.5, 1.5], [10.0, 6.0, 2.0, 0.0, -5.0]
    assert at_level(losses, values, 2.5) == pytest.approx(4.0)    # halfway between 3 and 2
    assert at_level(losses, values, 3.0) == 6.0                   # an exact point
    assert at_level(losses, values, 5.0) == 10.0                  # the start is below
    with pytest.raises(ValueError, match="never reaches"):
        at_level(losses, values, 1.0)
    with pytest.raises(ValueError, match="equal length"):
        at_level([1.0], [1.0, 2.0], 1.0)


def test_at_matched_loss_uses_the_worse_runs_best():
    level, a, b = at_matched_loss([3.0, 2.0, 1.0], [3.0, 2.0, 1.0], [3.0, 2.5, 2.0],
                                  [9.0, 8.0, 7.0])
    assert (level, a, b) == (2.0, 2.0, 7.0)
