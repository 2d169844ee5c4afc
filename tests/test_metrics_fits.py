"""metrics.fits.loglog_slope: the exponent of a power law, and clear errors on bad input."""
from __future__ import annotations

import numpy as np
import pytest

from ddcl_theory.metrics.fits import loglog_slope


@pytest.mark.parametrize("exponent", [-1.0, 0.5, 1.0, 2.0])
def test_slope_of_an_exact_power_law_is_its_exponent(exponent):
    x = np.array([16.0, 64.0, 256.0, 1024.0])
    assert loglog_slope(x, 3.0 * x**exponent) == pytest.approx(exponent, abs=1e-12)


@pytest.mark.parametrize("x,y,match", [([1.0], [1.0], ">= 2 points"),
                                       ([1.0, 2.0], [1.0], "equal shapes"),
                                       ([1.0, 2.0], [1.0, -1.0], "positive")])
def test_bad_input_raises_naming_x_and_y(x, y, match):
    with pytest.raises(ValueError, match=match):
        loglog_slope(x, y)
