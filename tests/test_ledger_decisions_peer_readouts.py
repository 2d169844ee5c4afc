"""The D17 decision (ddcl_theory.ledger.decisions.peer_readouts.decide_d17) on hand-made
study results: one random and one near-equal sweep setting per readout."""
from __future__ import annotations

import pytest

from ddcl_theory.experiments import peer_readouts as pr
from ddcl_theory.ledger.decisions.peer_readouts import d17_parts, decide_d17
from ddcl_theory.ledger.verdict import Verdict


def _record(epoch, rank, distance, ratio=float("nan"), acc=0.5):
    from ddcl_theory.metrics import readouts as rm
    m = rm.CollapseMetrics(distance, distance, rank, 1.0, distance, 4)
    return pr.CollapseRecord(epoch, 0.1, acc, acc, m, m, m, 1.0, 2.0, 2.0, ratio)


def _history(kind, collapsed, ratio=float("nan"), start_ratio=0.1):
    end = (1.0, 0.0) if collapsed else (2.5, 0.3)
    return pr.ReadoutHistory(kind, [_record(0, 2.0, 0.2, start_ratio if kind == "ddcl"
                                            else float("nan")),
                                    _record(1, *end, ratio)])


def _fake_result(ddcl_collapse_ratio=100.0, ddcl_stays_below=0.01, peer_collapses=True,
                 ddcl_collapses=True):
    """A StudyResult with hand-made histories: one random and one near-equal setting each."""
    s = pr.StudySettings(tasks=("debris",), seeds=(0,), sweep_seeds=(0,), cost_lengths=(8, 16))
    sweep = []
    for kind in ("slot", "perceiver"):
        sweep.append(pr.SweepRun(pr.Variant(kind, "random"), 0, _history(kind, False)))
        sweep.append(pr.SweepRun(pr.Variant(kind, "near", (("bank_init", "near_equal"),)), 0,
                                 _history(kind, peer_collapses)))
    sweep.append(pr.SweepRun(pr.Variant("ddcl", "near", (("bank_init", "near_equal"),)), 0,
                             _history("ddcl", False, ddcl_stays_below)))
    sweep.append(pr.SweepRun(pr.Variant("ddcl", "hot"), 0,
                             _history("ddcl", ddcl_collapses, ddcl_collapse_ratio)))
    main = {"debris": {k: [_history(k, False, 0.01 if k == "ddcl" else float("nan"))]
                       for k in pr.READOUTS}}
    flops = {"ddcl": [100, 200], "slot": [300, 400], "perceiver": [120, 210]}
    return pr.StudyResult(s, {}, main, sweep, flops, None)


def _decide(result):
    return decide_d17(result, pr.sweep_rows(result), pr.TASK_TITLES)


def test_ddcl_collapsing_only_above_t_c_qualifies_the_claim():
    v = _decide(_fake_result())
    assert isinstance(v, Verdict) and v.claim == "D17"
    assert v.word == "qualified" and all(v.numbers.values())
    assert "more than 10 times" in v.evidence and "less than half of" in v.evidence
    assert "Slot Attention (3 iterations) 3.00, 2.00" in v.evidence
    assert v.our_value.endswith("slot FLOPs x2.00-3.00 of DDCL")
    assert v.rule and v.n_seeds == 1 and v.tolerance.abs == 0.06


def test_no_ddcl_collapse_and_costlier_slots_reproduce_the_claim():
    assert _decide(_fake_result(ddcl_collapses=False)).word == "reproduced"


def test_peers_that_never_collapse_refute_the_claim():
    v = _decide(_fake_result(peer_collapses=False))
    assert v.word == "refuted" and not v.numbers["peers_collapse"]


def test_a_ddcl_collapse_below_t_c_refutes_the_claim():
    below = _decide(_fake_result(ddcl_collapse_ratio=0.5))
    assert not below.numbers["ddcl_threshold"] and below.word == "refuted"


def test_parts_and_sweep_rows_of_the_fake_result():
    result = _fake_result()
    rows = pr.sweep_rows(result)
    assert [r.outcome for r in rows] == ["avoided", "collapsed", "avoided", "collapsed",
                                         "avoided", "collapsed"]
    parts = d17_parts(result, rows)
    assert parts["peers_stay_collapsed"] and parts["ddcl_escapes"] and parts["slot_costs_more"]
    cheap = _fake_result()
    cheap.flops["slot"] = [50, 400]
    assert not d17_parts(cheap, rows)["slot_costs_more"]
    with pytest.raises(KeyError):
        _decide(result) and decide_d17(result, rows, {})
