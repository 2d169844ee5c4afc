"""The decision design: tests with a SESOI, their results, gates and the combined word."""
from __future__ import annotations

import numpy as np
import pytest

from ddcl_theory.ledger import stats
from ddcl_theory.ledger.design import Gate, Rule, Test, combine

GAIN = Test("accuracy, ours - theirs", ">", sesoi=0.02, why="a practitioner's two points")
RATIO = Test("log ratio", "<", margin=-2.302585, design="one-sample", method="one-sample t")
RULE = Rule((GAIN, RATIO), n_seeds=10, scales="images", power="pilot sd 0.01 asks 8",
            gates=("every run early-stopped at its validation optimum",))


def test_a_test_needs_a_reason_for_its_sesoi_and_a_sesoi_on_the_claimed_side():
    with pytest.raises(ValueError, match="why: the SESOI"):
        Test("x", ">", sesoi=0.1)
    with pytest.raises(ValueError, match="sesoi: expected a finite number on the claimed side"):
        Test("x", ">", sesoi=-0.1, why="r")
    with pytest.raises(ValueError, match="method"):
        Test("x", ">", method="z test")
    assert RATIO.s == RATIO.margin and GAIN.s == 0.02


def test_evaluate_gives_the_t_interval_word_and_power_of_each_test():
    rng = np.random.default_rng(0)
    gain = rng.normal(0.05, 0.01, size=10)
    ratio = rng.normal(-3.0, 0.3, size=10)
    res = RULE.evaluate([gain, ratio])
    iv = stats.one_sample_t(gain)
    assert res[0].interval == [iv.low, iv.high] and res[0].method == "paired t"
    assert res[0].word == "reproduced" and res[0].reaches_sesoi
    assert res[0].seeds_needed == stats.seeds_needed(float(np.std(gain, ddof=1)), 0.02)
    assert res[0].detectable == pytest.approx(stats.detectable_effect(np.std(gain, ddof=1), 10))
    # where the SESOI is the margin, the power is read at the observed estimate
    assert res[1].seeds_needed == stats.seeds_needed(float(np.std(ratio, ddof=1)),
                                                     abs(ratio.mean() - RATIO.margin))
    assert RULE.word(res) == "reproduced" and RULE.binding(res) == 0
    assert set(res[1].to_dict()) >= {"statistic", "side", "margin", "sesoi", "interval",
                                     "n_seeds", "seeds_needed", "word"}


def test_a_negligible_effect_is_not_reproduced_and_binds():
    small = np.full(10, 0.005) + np.linspace(-1e-3, 1e-3, 10)
    res = RULE.evaluate([small, np.full(10, -3.0) + np.linspace(-0.1, 0.1, 10)])
    assert res[0].word == "not reproduced" and RULE.word(res) == "not reproduced"
    assert RULE.binding(res) == 0


def test_gates_and_too_few_seeds_leave_the_word_inconclusive():
    res = RULE.evaluate([np.linspace(0.04, 0.06, 10), np.linspace(-3.1, -2.9, 10)])
    assert RULE.word(res, [Gate("converged", True, "10 of 10")]) == "reproduced"
    assert RULE.word(res, [Gate("converged", False, "3 of 10 still moving")]) == "inconclusive"
    few = RULE.evaluate([np.linspace(0.04, 0.06, 3), np.linspace(-3.1, -2.9, 3)])
    assert few[0].word == "reproduced" and RULE.word(few) == "inconclusive"


def test_a_ready_bootstrap_interval_is_taken_with_its_spread():
    boot = stats.Interval(0.03, 0.025, 0.035, 10, "bootstrap over seeds and items")
    rule = Rule((Test("acc", ">", method="bootstrap over seeds and items"),), 10, "items")
    res = rule.evaluate([(boot, 0.01)])
    assert res[0].interval == [0.025, 0.035] and res[0].word == "reproduced"
    with pytest.raises(ValueError, match="names a paired t interval"):
        RULE.evaluate([(boot, 0.01), [1.0, 2.0]])


def test_combine_and_rule_checks():
    assert combine(["reproduced", "inconclusive"]) == "inconclusive"
    assert combine(["inconclusive", "not reproduced"]) == "not reproduced"
    with pytest.raises(ValueError, match="words"):
        combine(["proved"])
    with pytest.raises(ValueError, match="at least 5 seeds"):
        Rule((GAIN,), n_seeds=3, scales="x")
    assert "SESOI 0.02" in RULE.text and "Gates" in RULE.text and "10 seeds" in RULE.text


def test_tests_beside_the_rule_are_decided_and_shown_but_not_combined():
    blind = Test("usage", ">", sesoi=0.05, why="one vector's worth")
    rule = Rule((GAIN,), n_seeds=5, scales="s", beside=(blind,))
    res = rule.evaluate([np.linspace(0.04, 0.06, 5), np.linspace(-0.31, -0.29, 5)])
    assert [r.binding for r in res] == [True, False] and res[1].word == "not reproduced"
    assert rule.word(res) == "reproduced" and rule.binding(res) == 0
    assert "Decided beside, not combined: (2) usage > 0" in rule.text
    with pytest.raises(ValueError, match="samples: expected 2"):
        rule.evaluate([np.linspace(0.04, 0.06, 5)])
