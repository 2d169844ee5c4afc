"""Intervals, the rule-4 decision and the detectable effect, against hand computations."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddcl_theory.ledger import stats

T975_DF4 = 2.7764451051977987      # t quantile 0.975, 4 degrees of freedom (tables)
T975_DF9 = 2.2621571627409915
T80_DF9 = 0.8834038449583068


def test_paired_t_matches_the_hand_interval():
    ours, other = [2.0, 4.0, 6.0, 8.0, 10.0], [1.0, 2.0, 3.0, 4.0, 5.0]   # d = 1..5
    iv = stats.paired_t(ours, other)
    half = T975_DF4 * math.sqrt(2.5) / math.sqrt(5)
    assert iv.estimate == pytest.approx(3.0)
    assert (iv.low, iv.high) == pytest.approx((3.0 - half, 3.0 + half), rel=1e-9)
    assert iv.n == 5 and iv.method == "paired t" and iv.as_list() == [iv.low, iv.high]


def test_one_sample_t_matches_the_hand_interval():
    iv = stats.one_sample_t([1.0, 2.0, 3.0, 4.0, 5.0])
    half = T975_DF4 * math.sqrt(2.5) / math.sqrt(5)
    assert (iv.low, iv.high) == pytest.approx((3.0 - half, 3.0 + half), rel=1e-9)


def test_constant_values_give_a_zero_width_interval():
    iv = stats.paired_t([1.0, 1.0, 1.0], [0.5, 0.5, 0.5])
    assert (iv.low, iv.estimate, iv.high) == (0.5, 0.5, 0.5)


def test_bootstrap_is_reproducible_and_brackets_the_mean():
    rng = np.random.default_rng(3)
    x = rng.normal(1.0, 0.5, size=20)
    a, b = stats.bootstrap(x, seed=1), stats.bootstrap(x, seed=1)
    assert a == b and a.method == "bootstrap"
    assert a.low < np.mean(x) < a.high
    t = stats.one_sample_t(x)                # close to the t interval for normal data
    assert a.low == pytest.approx(t.low, abs=0.15) and a.high == pytest.approx(t.high, abs=0.15)


@pytest.mark.parametrize("low, high, side, margin, word", [
    (0.1, 0.3, ">", 0.0, "reproduced"),
    (-0.3, -0.1, ">", 0.0, "not reproduced"),
    (-0.1, 0.3, ">", 0.0, "inconclusive"),
    (0.0, 0.3, ">", 0.0, "inconclusive"),        # touching the margin is not strictly above
    (-0.3, 0.0, ">", 0.0, "not reproduced"),     # at most the margin excludes the effect
    (0.02, 0.04, ">", 0.05, "not reproduced"),   # above zero but below the claimed margin
    (-0.3, -0.1, "<", 0.0, "reproduced"),
    (0.1, 0.3, "<", 0.0, "not reproduced"),
    (-0.1, 0.1, "<", 0.0, "inconclusive"),
])
def test_decide_follows_rule_4(low, high, side, margin, word):
    assert stats.decide(low, high, side=side, margin=margin) == word


def test_decide_rejects_bad_arguments():
    with pytest.raises(ValueError, match="side"):
        stats.decide(0, 1, side=">=")
    with pytest.raises(ValueError, match="low, high"):
        stats.decide(1, 0, side=">")
    with pytest.raises(ValueError, match="margin"):
        stats.decide(0, 1, side=">", margin=float("nan"))


def test_detectable_effect_matches_the_hand_formula():
    assert stats.detectable_effect(1.0, 10) == pytest.approx(
        (T975_DF9 + T80_DF9) / math.sqrt(10), rel=1e-7)
    # power 0.5: the interval's half-width
    iv = stats.one_sample_t([1.0, 2.0, 3.0, 4.0, 5.0])
    assert stats.detectable_effect_of([1.0, 2.0, 3.0, 4.0, 5.0], power=0.5) == pytest.approx(
        (iv.high - iv.low) / 2, rel=1e-9)
    with pytest.raises(ValueError, match="n"):
        stats.detectable_effect(1.0, 1)
    with pytest.raises(ValueError, match="spread"):
        stats.detectable_effect(-1.0, 5)


def test_inputs_are_checked():
    with pytest.raises(ValueError, match="ours"):
        stats.paired_t([1.0], [1.0])
    with pytest.raises(ValueError, match="other"):
        stats.paired_t([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="values"):
        stats.one_sample_t([1.0, float("nan")])
    with pytest.raises(ValueError, match="confidence"):
        stats.one_sample_t([1.0, 2.0], confidence=95)


finite = st.floats(-100, 100, allow_nan=False, allow_infinity=False)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(finite, finite), min_size=2, max_size=12))
def test_paired_t_is_the_one_sample_t_of_the_differences(pairs):
    a, b = np.array(pairs).T
    p, o = stats.paired_t(a, b), stats.one_sample_t(a - b)
    assert p.low == pytest.approx(o.low, abs=1e-6) and p.high == pytest.approx(o.high, abs=1e-6)
    assert p.low <= p.estimate + 1e-9 and p.estimate <= p.high + 1e-9


@settings(max_examples=100, deadline=None)
@given(finite, st.floats(0, 50), finite, st.sampled_from(stats.SIDES))
def test_decide_is_one_word_and_mirrors_under_negation(low, width, margin, side):
    high = low + width
    word = stats.decide(low, high, side=side, margin=margin)
    other = "<" if side == ">" else ">"
    assert word in ("reproduced", "not reproduced", "inconclusive")
    assert stats.decide(-high, -low, side=other, margin=-margin) == word
