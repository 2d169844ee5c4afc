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


@pytest.mark.parametrize("low, high, side, margin, sesoi, word", [
    (0.1, 0.3, ">", 0.0, None, "reproduced"),
    (-0.3, -0.1, ">", 0.0, None, "not reproduced"),
    (-0.1, 0.3, ">", 0.0, None, "inconclusive"),
    (0.0, 0.3, ">", 0.0, None, "inconclusive"),       # touching the margin: not beyond it
    (-0.3, 0.0, ">", 0.0, None, "inconclusive"),      # touching s: s is still in the interval
    (0.02, 0.04, ">", 0.05, None, "not reproduced"),  # above zero but short of the margin
    (0.01, 0.04, ">", 0.0, 0.05, "not reproduced"),   # real but smaller than the SESOI
    (-0.01, 0.04, ">", 0.0, 0.05, "not reproduced"),  # a null excluded by the SESOI
    (-0.01, 0.06, ">", 0.0, 0.05, "inconclusive"),    # holds both m and s
    (0.01, 0.06, ">", 0.0, 0.05, "reproduced"),       # beyond m, reaching s
    (-0.3, -0.1, "<", 0.0, None, "reproduced"),
    (0.1, 0.3, "<", 0.0, None, "not reproduced"),
    (-0.1, 0.1, "<", 0.0, None, "inconclusive"),
    (-0.04, 0.01, "<", 0.0, -0.05, "not reproduced"),
    (-0.06, 0.01, "<", 0.0, -0.05, "inconclusive"),
])
def test_decide_is_three_way_against_margin_and_sesoi(low, high, side, margin, sesoi, word):
    assert stats.decide(low, high, side=side, margin=margin, sesoi=sesoi) == word


def test_decide_rejects_bad_arguments():
    with pytest.raises(ValueError, match="side"):
        stats.decide(0, 1, side=">=")
    with pytest.raises(ValueError, match="low, high"):
        stats.decide(1, 0, side=">")
    with pytest.raises(ValueError, match="margin"):
        stats.decide(0, 1, side=">", margin=float("nan"))
    with pytest.raises(ValueError, match="sesoi: expected a finite number on the claimed side"):
        stats.decide(0, 1, side=">", margin=0.0, sesoi=-0.1)
    with pytest.raises(ValueError, match="sesoi"):
        stats.decide(0, 1, side="<", margin=0.0, sesoi=0.1)


def test_power_is_the_noncentral_t_tail_and_seeds_needed_its_inverse():
    crit = T975_DF9
    from scipy import stats as sps
    assert stats.power(10, 0.5, 1.0) == pytest.approx(sps.nct.sf(crit, 9, 0.5 * math.sqrt(10)))
    n = stats.seeds_needed(1.0, 0.5)
    assert stats.power(n, 0.5, 1.0) >= stats.POWER > stats.power(n - 1, 0.5, 1.0)
    assert n == 34                    # the textbook value for d = 0.5 at 80% power, alpha 0.05
    assert stats.seeds_needed(1.0, 0.0) is None and stats.seeds_needed(1.0, 1e-4) is None
    assert stats.seeds_needed(0.0, 0.1) == 2


def test_detectable_effect_inverts_the_power():
    d = stats.detectable_effect(1.0, 10)
    assert stats.power(10, d, 1.0) == pytest.approx(stats.POWER, abs=1e-9)
    assert stats.detectable_effect(2.0, 10) == pytest.approx(2 * d)
    assert stats.detectable_effect_of([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(
        stats.detectable_effect(math.sqrt(2.5), 5))
    assert stats.seeds_needed(1.0, d) == 10
    with pytest.raises(ValueError, match="n"):
        stats.detectable_effect(1.0, 1)
    with pytest.raises(ValueError, match="spread"):
        stats.detectable_effect(-1.0, 5)


def test_bootstrap_over_seeds_and_items_widens_the_seed_interval():
    rng = np.random.default_rng(0)
    per_seed = [rng.binomial(1, 0.6, size=300).astype(float) - 0.5 + rng.normal(0, 0.002)
                for _ in range(10)]
    seed_only = stats.one_sample_t([v.mean() for v in per_seed])
    both = stats.bootstrap_seeds_items(per_seed, seed=1)
    assert both == stats.bootstrap_seeds_items(per_seed, seed=1)
    assert both.method == "bootstrap over seeds and items" and both.n == 10
    assert both.estimate == pytest.approx(np.mean([v.mean() for v in per_seed]))
    # the item sampling (binomial SE about 0.028 per seed, 0.009 over 10) dominates here
    assert (both.high - both.low) > (seed_only.high - seed_only.low)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        stats.bootstrap_seeds_items([[1.0, 2.0]])


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


@settings(max_examples=200, deadline=None)
@given(finite, st.floats(0, 50), finite, st.floats(0, 50), st.sampled_from(stats.SIDES))
def test_decide_is_one_word_and_mirrors_under_negation(low, width, margin, gap, side):
    high = low + width
    sesoi = margin + gap if side == ">" else margin - gap
    word = stats.decide(low, high, side=side, margin=margin, sesoi=sesoi)
    other = "<" if side == ">" else ">"
    assert word in ("reproduced", "not reproduced", "inconclusive")
    assert stats.decide(-high, -low, side=other, margin=-margin, sesoi=-sesoi) == word
    # inconclusive exactly when the interval holds both the margin and the SESOI
    holds = low <= margin <= high and low <= sesoi <= high
    assert (word == "inconclusive") == holds
