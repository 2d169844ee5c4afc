"""ddcl_theory.ledger.decisions.scales: the path of an estimate over scales and its change from
the smallest scale to the largest (Welch's interval, checked against the formula)."""
from __future__ import annotations

import numpy as np
import pytest

from ddcl_theory.ledger.decisions.scales import scale_change, scale_path, scale_text


def test_scale_path_reads_the_sign_of_every_step():
    assert scale_path([0.9, 1.25, 0.35]) == "rise, then fall"
    assert scale_path([1.0, 0.5, 0.1]) == "fall at every step"
    assert scale_path([0.1, 0.5]) == "rise at every step"
    assert scale_path([0.1, 0.1, 0.3]) == "stay flat, then rise"


def test_scale_change_is_welchs_interval_on_two_sets_of_seeds():
    from scipy import stats as st
    rng = np.random.default_rng(0)
    first, last = rng.normal(0.0, 1.0, 12), rng.normal(1.0, 2.0, 7)
    est, low, high = scale_change(first, last)
    va, vb = first.var(ddof=1) / 12, last.var(ddof=1) / 7
    df = (va + vb) ** 2 / (va ** 2 / 11 + vb ** 2 / 6)
    half = st.t.ppf(0.975, df) * np.sqrt(va + vb)
    assert est == pytest.approx(last.mean() - first.mean())
    assert (low, high) == pytest.approx((est - half, est + half))
    with pytest.raises(ValueError, match="two or more seeds per scale"):
        scale_change(first, last[:1])


def test_scale_change_of_constant_seeds_is_a_point_and_scale_text_names_the_ends():
    assert scale_change(np.full(3, 0.1), np.full(4, 0.3)) == pytest.approx([0.2] * 3)
    text = scale_text([np.full(3, 0.01), np.full(3, 0.03), np.full(3, 0.02)],
                      ["1 images", "2 images", "3 images"])
    assert text == ("the gap's point estimates rise, then fall over the image counts; from "
                    "1 images to 3 images the gap moves +1.00 [+1.00, +1.00] points by Welch's "
                    "interval, which ignores that the counts' runs share seeds and so may run "
                    "wide")
