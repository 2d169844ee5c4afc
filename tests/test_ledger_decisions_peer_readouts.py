"""The D17 decision (ddcl_theory.ledger.decisions.peer_readouts.decide_d17) on hand-made study
results: every word of the registry's rule and every gate (collapse below T_c of L_q, tau above
it, runs off their plateau, too few seeds)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ddcl_theory.experiments import peer_readouts as pr
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions.peer_readouts import (
    d17_gates,
    d17_intervals,
    d17_parts,
    d17_trend,
    decide_d17,
    usage_values,
)
from ddcl_theory.ledger.verdict import Verdict

S = 4
EPOCHS = 4
PLATEAU = [1.0, 0.51, 0.5, 0.5, 0.5]           # per-epoch cross-entropy, epochs 0..4 (0: nan)
MOVING = [1.0, 0.8, 0.6, 0.4, 0.2]


def _record(epoch, usage, loss, ratio=float("nan"), collapsed=False):
    from ddcl_theory.metrics import readouts as rm
    rank, distance = (1.0, 0.0) if collapsed else (2.5, 0.3)
    m = rm.CollapseMetrics(distance, distance, rank, 1.0, distance, S)
    return pr.CollapseRecord(epoch, float("nan") if epoch == 0 else loss, 0.5, 0.5, m, m, m,
                             1.0, 2.0, 2.0, ratio, usage * S)


def _history(kind, usage_end, *, losses=PLATEAU, ratio=0.1, collapsed=False):
    """Usage rising linearly from 0.5 to ``usage_end`` over the epochs."""
    r = ratio if kind == "ddcl" else float("nan")
    usage = np.linspace(0.5, usage_end, EPOCHS + 1)
    return pr.ReadoutHistory(kind, [_record(e, float(usage[e]), losses[e], r,
                                            collapsed and e == EPOCHS)
                                    for e in range(EPOCHS + 1)])


def _fake_result(ddcl=(0.9, 0.92, 0.88, 0.91, 0.89), slot=(0.6, 0.62, 0.58, 0.61, 0.59),
                 perceiver=(0.5, 0.52, 0.48, 0.51, 0.49), *, losses=PLATEAU, ratio=0.1,
                 sweep_collapse_ratio=None):
    seeds = tuple(range(len(ddcl)))
    s = pr.StudySettings(tasks=("20ng",), decide_task="20ng", seeds=seeds, epochs=EPOCHS,
                         sweep_seeds=(0,), cost_lengths=(8, 16))
    main = {"20ng": {"ddcl": [_history("ddcl", u, losses=losses, ratio=ratio) for u in ddcl],
                     "slot": [_history("slot", u) for u in slot],
                     "perceiver": [_history("perceiver", u) for u in perceiver]}}
    sweep = [pr.SweepRun(pr.Variant(k, "near", (("bank_init", "near_equal"),)), 0,
                         _history(k, 0.3, collapsed=True)) for k in ("slot", "perceiver")]
    if sweep_collapse_ratio is not None:
        sweep.append(pr.SweepRun(pr.Variant("ddcl", "hot"), 0,
                                 _history("ddcl", 0.3, ratio=sweep_collapse_ratio,
                                          collapsed=True)))
    flops = {"ddcl": [100, 200], "slot": [300, 400], "perceiver": [120, 210]}
    return pr.StudyResult(s, {}, main, sweep, flops, None)


def _decide(result):
    return decide_d17(result, pr.sweep_rows(result), pr.TASK_TITLES)


def test_ddcl_using_more_of_its_bank_than_both_peers_reproduces_the_claim():
    v = _decide(_fake_result())
    assert isinstance(v, Verdict) and v.claim == "D17" and v.word == "reproduced"
    assert v.rule == rule_of("D17").text and v.n_seeds == 5 and v.scale == f"epoch {EPOCHS}"
    assert v.interval[0] > 0 and v.numbers["interval_perceiver"][0] > 0
    assert list(v.trend) == [f"epoch {e}" for e in (1, 2, 3, 4)]
    assert "smallest detectable" in v.evidence and "paired t" in v.evidence
    assert "Slot Attention runs 3 iterations at inference, FLOPs 2.00-3.00" in v.evidence
    assert v.tolerance.abs == 0.06


def test_a_peer_using_more_slots_than_ddcl_is_not_reproduced():
    v = _decide(_fake_result(slot=(0.99, 0.98, 0.99, 0.97, 0.99)))
    assert v.word == "not reproduced" and v.interval[1] < 0


def test_an_interval_across_zero_is_inconclusive():
    v = _decide(_fake_result(slot=(0.95, 0.85, 0.92, 0.86, 0.90)))
    assert v.interval[0] < 0 < v.interval[1] and v.word == "inconclusive"


def test_fewer_seeds_than_the_rule_decide_nothing():
    v = _decide(_fake_result(ddcl=(0.9, 0.92, 0.88), slot=(0.6, 0.62, 0.58),
                             perceiver=(0.5, 0.52, 0.48)))
    assert v.word == "inconclusive" and "3 seeds (the rule asks 5)" in v.evidence


def test_runs_off_their_plateau_make_it_inconclusive():
    result = _fake_result(losses=MOVING)
    assert d17_gates(result)["unfinished"] == [f"ddcl/{i}" for i in range(5)]
    v = _decide(result)
    assert v.word == "inconclusive" and "plateau" in v.evidence and v.numbers["unfinished"] == 5


def test_tau_above_the_critical_temperature_of_l_q_leaves_the_claim_untested():
    v = _decide(_fake_result(ratio=1.2))
    assert v.word == "inconclusive" and v.numbers["above_tc"] == 5


def test_a_ddcl_collapse_below_t_c_of_l_q_refutes_the_claim_and_above_it_does_not():
    below = _decide(_fake_result(sweep_collapse_ratio=0.5))
    assert below.word == "refuted" and below.numbers["refuting"] == 1
    above = _decide(_fake_result(sweep_collapse_ratio=5.0))
    assert above.word == "reproduced" and above.numbers["ddcl_threshold"]


def test_intervals_trend_and_values_follow_the_records():
    result = _fake_result()
    assert usage_values(result, "ddcl") == pytest.approx([0.9, 0.92, 0.88, 0.91, 0.89])
    assert usage_values(result, "slot", 0) == pytest.approx([0.5] * 5)
    first, second = d17_intervals(result)
    assert first.method == "paired t" and first.estimate == pytest.approx(0.3)
    assert second.estimate == pytest.approx(0.4)
    trend = d17_trend(result)
    assert trend[f"epoch {EPOCHS}"][0] == pytest.approx(0.3)
    assert trend["epoch 1"][0] == pytest.approx(0.3 / 4, abs=1e-4)
    with pytest.raises(ValueError, match="no record of epoch 9"):
        usage_values(result, "ddcl", 9)
    assert math.isclose(d17_gates(result)["max_ratio"], 0.1)


def test_parts_beside_the_rule():
    result = _fake_result()
    parts = d17_parts(result, pr.sweep_rows(result))
    assert parts["peers_collapse"] and parts["slot_costs_more"] and not parts["ddcl_collapses"]
    result.flops["slot"] = [50, 400]
    assert not d17_parts(result, pr.sweep_rows(result))["slot_costs_more"]
