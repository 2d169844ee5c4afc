import math

import pytest
from hypothesis import given, strategies as st

from ddcl_theory.metrics.convergence import convergence, plateaued


def test_flat_tail_is_a_plateau_and_a_falling_one_is_not():
    assert plateaued([5, 4, 3.0, 3.0, 2.99, 2.98])
    assert not plateaued([5, 4, 3, 2, 1, 0.5])
    c = convergence([4.0, 2.0, 1.0, 0.5])
    assert not c.plateau and c.change == pytest.approx((0.75 - 3.0) / 3.0)
    assert "still moving" in c.text


def test_too_short_or_non_finite_curves_are_not_judged():
    assert not plateaued([1.0, 1.0, 1.0])
    assert math.isnan(convergence([1.0]).change)
    assert not plateaued([1.0, 1.0, float("nan"), 1.0])
    assert convergence([1.0]).text == "too short to tell"


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="window"):
        convergence([1, 2, 3, 4], window=0)
    with pytest.raises(ValueError, match="rel"):
        convergence([1, 2, 3, 4], rel=-1)
    with pytest.raises(ValueError, match="curve"):
        convergence([[1, 2], [3, 4]])


@given(st.floats(0.1, 100), st.integers(1, 4), st.integers(4, 12))
def test_a_constant_curve_always_plateaus_and_scaling_does_not_change_the_answer(c, w, n):
    curve = [c] * max(n, 2 * w)
    assert plateaued(curve, window=w)
    falling = [c * 0.5 ** i for i in range(max(n, 2 * w))]
    assert plateaued(falling, window=w) == plateaued([3.0 * x for x in falling], window=w)
