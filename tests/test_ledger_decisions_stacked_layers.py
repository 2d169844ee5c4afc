"""The decision of claim D12 (ddcl_theory.ledger.decisions.stacked_layers) on hand-built runs,
on every side of its registered rule."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats as sps

from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions.stacked_layers import (
    IDENTITY_BOUND,
    counterexamples,
    d12_values,
    decide_d12,
    levels_above_threshold,
)
from ddcl_theory.ledger.rules import D12_RESIDUAL_FLOOR, RULES
from ddcl_theory.ledger.verdict import Verdict

SEEDS = tuple(range(10))


def _thresholds(ratio: float, tau: float = 19.0):
    lq = tau / ratio
    return SimpleNamespace(tau=tau, free_energy=(lq / 2, lq / 2), quantisation=(lq, lq),
                           ratio=(ratio, ratio))


def _trace(residual: float, v_share: float):
    return SimpleNamespace(worst_residual=residual, min_v_share=v_share, v=[2.0, 1.5],
                           sep_min=[3.0, 1.0], sep_mean=[30.0, 28.0])


def _run(scale, seed, residual=1e-14, v1=0.03, v2=0.08, ratio1=0.7, ratio2=0.04, merged=()):
    return SimpleNamespace(
        scale=scale, seed=seed, n_docs=int(800 * scale), n_tokens=int(45000 * scale),
        traces={1: _trace(residual * (1 + seed / 10), v1 + seed * 1e-3),
                2: _trace(residual / 2, v2 + seed * 2e-3)},
        thresholds={1: _thresholds(ratio1), 2: _thresholds(ratio2, tau=0.3)},
        merged={1: list(merged), 2: []})


def _result(seeds=SEEDS, scales=(0.5, 1.0), **largest):
    runs = [_run(sc, s, **(largest if sc == max(scales) else {})) for sc in scales
            for s in seeds]
    settings = SimpleNamespace(seeds=seeds, scales=scales, epochs=12, k1=32, k2=20)
    return SimpleNamespace(settings=settings, runs=runs,
                           at=lambda sc: [r for r in runs if r.scale == sc],
                           largest=[r for r in runs if r.scale == max(scales)])


def test_d12_is_registered_with_two_exact_tests_and_at_least_ten_seeds():
    rule = RULES["D12"]
    assert rule_of("D12") is rule and rule.n_seeds >= 10
    (identity, sign) = rule.tests
    assert (identity.side, identity.margin, identity.s) == ("<", -12.0, -12.0)
    assert (sign.side, sign.margin, sign.s) == (">", 0.0, 0.0)
    assert rule.gates == ()


def test_d12_reproduced_when_the_identity_and_the_sign_hold_in_every_run():
    v = decide_d12(_result())
    assert isinstance(v, Verdict) and v.claim == "D12" and v.word == "reproduced"
    assert [t.word for t in v.tests] == ["reproduced", "reproduced"] and v.gates == ()
    assert "< 1e-12" in v.evidence and "both levels train below it" in v.evidence
    assert v.n_seeds == 10 and v.scale == "800 documents"
    assert list(v.trend) == ["400 documents", "800 documents"]
    # every residual lies under the floor: test 1's interval is the floor's log10
    assert v.interval == pytest.approx((-13.0, -13.0))
    # the intervals are recomputable from the committed per-seed values
    rule = rule_of("D12")
    values = v.per_seed[rule.tests[1].statistic]
    ci = sps.ttest_1samp(values, 0).confidence_interval()
    assert v.tests[1].interval == pytest.approx([ci.low, ci.high])
    assert v.per_seed["seed"] == list(SEEDS)


def test_d12_values_take_the_worst_level_of_each_run():
    residual, v_share = d12_values(_result(residual=5e-13).largest)
    assert residual.shape == v_share.shape == (10,)
    assert residual[0] == pytest.approx(math.log10(5e-13)) and v_share[0] == pytest.approx(0.03)
    with pytest.raises(ValueError, match="runs"):
        d12_values([])


@pytest.mark.parametrize("largest", [{"residual": 1e-9}, {"v1": -0.05}])
def test_d12_not_reproduced_when_the_identity_or_the_sign_fails_in_every_run(largest):
    v = decide_d12(_result(**largest))
    assert v.word == "not reproduced"
    assert "not reproduced" in [t.word for t in v.tests]
    assert "Counterexample" in v.evidence


def test_d12_not_reproduced_by_one_counterexample_at_a_smaller_scale():
    result = _result()
    result.runs[3].traces[2].worst_residual = 2 * IDENTITY_BOUND     # scale 0.5, seed 3
    assert counterexamples(result.runs) == ["scale 0.5, seed 3, level 2"]
    v = decide_d12(result)
    assert v.word == "not reproduced"
    assert [t.word for t in v.tests] == ["reproduced", "reproduced"]   # the intervals agree


def test_d12_inconclusive_when_a_level_s_v_vanishes():
    result = _result()
    for r in result.largest:
        r.traces[1].min_v_share = 0.0 if r.seed else 1e-4
    v = decide_d12(result)                # an interval holding 0: V > 0 not shown
    assert v.word == "inconclusive" and v.tests[1].word == "inconclusive"
    assert not counterexamples(result.runs)


def test_d12_inconclusive_with_fewer_seeds_than_registered():
    v = decide_d12(_result(seeds=(0, 1, 2)))
    assert [t.word for t in v.tests] == ["reproduced", "reproduced"]
    assert v.word == "inconclusive" and "a pilot" in v.evidence


def test_d12_qualified_only_when_every_run_has_a_level_above_its_threshold():
    v = decide_d12(_result(ratio1=1.2))
    assert v.word == "qualified" and "Qualified" in v.evidence
    assert all(levels == [1] for levels in v.numbers["levels_above_threshold"])
    result = _result()
    result.largest[0].thresholds[1] = _thresholds(1.2)      # one run of ten: not a property
    assert levels_above_threshold(result.largest[0]) == [1]
    assert decide_d12(result).word == "reproduced"
    # a counterexample outranks the qualification
    assert decide_d12(_result(ratio1=1.2, residual=1e-9)).word == "not reproduced"


def test_d12_reports_merged_groups_and_their_threshold():
    group = SimpleNamespace(local_tc=0.9 * 19.0, members=(2, 11), tokens=3000, share=0.7)
    v = decide_d12(_result(merged=(group,)))
    assert "merge: 10 of 10" in v.evidence and "1 of the 1 merged groups" not in v.evidence
    assert "the tokens of 10 of the 10 merged groups" in v.evidence
    assert v.numbers["runs_with_merged_level1"] == 10


def test_d12_needs_runs_at_the_largest_scale():
    result = _result()
    result.largest = []
    with pytest.raises(ValueError, match="result"):
        decide_d12(result)


def test_residuals_under_the_rounding_floor_read_as_the_floor():
    for tiny in (0.0, 1e-16, 5e-14):      # the fake scales it by up to 1.9
        residual, _ = d12_values(_result(residual=tiny).largest)
        assert np.all(residual == math.log10(D12_RESIDUAL_FLOOR))
    assert decide_d12(_result(residual=0.0)).word == "reproduced"
