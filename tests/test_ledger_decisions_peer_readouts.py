"""The D17 decision (ddcl_theory.ledger.decisions.peer_readouts.decide_d17) on hand-made study
results: every word of the amended rule (maps' effective rank) and every gate (collapse below
T_c of L_q, a collapse after T_c drifted below tau, tau above it, runs off their plateau, too few
seeds), with the registered rule's word (usage perplexity) beside it."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ddcl_theory.experiments import peer_readouts as pr
from ddcl_theory.ledger.claims import amended_rule_of
from ddcl_theory.ledger.decisions.peer_readouts import (
    d17_gates,
    d17_intervals,
    d17_parts,
    d17_rank_intervals,
    d17_trend,
    decide_d17,
    rank_values,
    usage_values,
)
from ddcl_theory.ledger.verdict import Verdict

S = 4
EPOCHS = 4
PLATEAU = [1.0, 0.51, 0.5, 0.5, 0.5]           # per-epoch cross-entropy, epochs 0..4 (0: nan)
MOVING = [1.0, 0.8, 0.6, 0.4, 0.2]


def _record(epoch, usage, loss, ratio=float("nan"), collapsed=False, rank=None):
    """``rank``: the maps' effective rank / S (default: the usage, so that both rules agree)."""
    from ddcl_theory.metrics import readouts as rm
    vec_rank, distance = (1.0, 0.0) if collapsed else (2.5, 0.3)
    m = rm.CollapseMetrics(distance, distance, vec_rank, 1.0, distance, S)
    maps = rm.CollapseMetrics(distance, distance,
                              1.0 if collapsed else (usage if rank is None else rank) * S,
                              1.0, distance, S)
    return pr.CollapseRecord(epoch, float("nan") if epoch == 0 else loss, 0.5, 0.5, m, m, maps,
                             1.0, 2.0, 2.0, ratio, usage * S)


def _history(kind, usage_end, *, losses=PLATEAU, ratio=0.1, collapsed=False, rank_end=None,
             start_ratio=None):
    """Usage (and the maps' rank / S, rising to ``rank_end`` when given) rising linearly from
    0.5 over the epochs; ``start_ratio``: DDCL's tau / T_c at epoch 0 when not ``ratio``."""
    r = ratio if kind == "ddcl" else float("nan")
    usage = np.linspace(0.5, usage_end, EPOCHS + 1)
    ranks = [None] * (EPOCHS + 1) if rank_end is None else np.linspace(0.5, rank_end, EPOCHS + 1)
    return pr.ReadoutHistory(kind, [_record(e, float(usage[e]), losses[e],
                                            start_ratio if (e == 0 and start_ratio is not None
                                                            and kind == "ddcl") else r,
                                            collapsed and e == EPOCHS, ranks[e])
                                    for e in range(EPOCHS + 1)])


def _fake_result(ddcl=(0.9, 0.92, 0.88, 0.91, 0.89), slot=(0.6, 0.62, 0.58, 0.61, 0.59),
                 perceiver=(0.5, 0.52, 0.48, 0.51, 0.49), *, losses=PLATEAU, ratio=0.1,
                 sweep_collapse_ratio=None, sweep_start_ratio=None, slot_rank=None):
    seeds = tuple(range(len(ddcl)))
    s = pr.StudySettings(tasks=("20ng",), decide_task="20ng", seeds=seeds, epochs=EPOCHS,
                         sweep_seeds=(0,), cost_lengths=(8, 16))
    main = {"20ng": {"ddcl": [_history("ddcl", u, losses=losses, ratio=ratio) for u in ddcl],
                     "slot": [_history("slot", u, rank_end=None if slot_rank is None
                                       else slot_rank[i]) for i, u in enumerate(slot)],
                     "perceiver": [_history("perceiver", u) for u in perceiver]}}
    sweep = [pr.SweepRun(pr.Variant(k, "near", (("bank_init", "near_equal"),)), 0,
                         _history(k, 0.3, collapsed=True)) for k in ("slot", "perceiver")]
    if sweep_collapse_ratio is not None:
        sweep.append(pr.SweepRun(pr.Variant("ddcl", "hot"), 0,
                                 _history("ddcl", 0.3, ratio=sweep_collapse_ratio,
                                          collapsed=True, start_ratio=sweep_start_ratio)))
    flops = {"ddcl": [100, 200], "slot": [300, 400], "perceiver": [120, 210]}
    return pr.StudyResult(s, {}, main, sweep, flops, None)


def _decide(result):
    return decide_d17(result, pr.sweep_rows(result), pr.TASK_TITLES)


def test_ddcl_using_more_of_its_bank_than_both_peers_reproduces_the_claim():
    v = _decide(_fake_result())
    assert isinstance(v, Verdict) and v.claim == "D17" and v.word == "reproduced"
    assert v.rule == amended_rule_of("D17")[0].text and v.n_seeds == 5
    assert v.scale == f"epoch {EPOCHS}" and v.numbers["registered_word"] == "reproduced"
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
    assert above.numbers["drifted"] == 0                  # it started above T_c too


def test_a_ddcl_run_that_started_below_t_c_and_collapsed_after_t_c_drifted_qualifies_it():
    v = _decide(_fake_result(sweep_collapse_ratio=5.0, sweep_start_ratio=0.05))
    assert v.word == "qualified" and v.numbers["drifted"] == 1 and v.numbers["refuting"] == 0
    assert "started below T_c and collapsed" in v.evidence


def test_usage_blind_to_collapse_is_decided_by_the_maps_rank_and_both_words_are_shown():
    """Collapsed-looking Slot Attention: first choices spread evenly (usage 0.99) while its
    maps have rank 0.3 of S: the registered rule says not reproduced, the amended reproduced."""
    v = _decide(_fake_result(slot=(0.99, 0.98, 0.99, 0.97, 0.99),
                             slot_rank=(0.3, 0.32, 0.28, 0.31, 0.29)))
    assert v.word == "reproduced" and v.numbers["registered_word"] == "not reproduced"
    assert "not reproduced by that rule" in v.evidence and "amended because" in v.evidence
    assert v.numbers["usage_intervals"]["slot"][1] < 0 < v.interval[0]


def test_intervals_trend_and_values_follow_the_records():
    result = _fake_result()
    assert usage_values(result, "ddcl") == pytest.approx([0.9, 0.92, 0.88, 0.91, 0.89])
    assert usage_values(result, "slot", 0) == pytest.approx([0.5] * 5)
    first, second = d17_intervals(result)
    assert first.method == "paired t" and first.estimate == pytest.approx(0.3)
    assert second.estimate == pytest.approx(0.4)
    assert [iv.estimate for iv in d17_rank_intervals(result)] == pytest.approx([0.3, 0.4])
    assert rank_values(result, "ddcl") == pytest.approx(usage_values(result, "ddcl"))
    trend = d17_trend(result)
    assert trend[f"epoch {EPOCHS}"][0] == pytest.approx(0.3)
    assert d17_trend(result, statistic="usage") == trend          # the fakes' two agree
    with pytest.raises(ValueError, match="statistic"):
        d17_trend(result, statistic="perplexity")
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


def test_a_gap_widens_or_narrows_only_when_its_intervals_part():
    from ddcl_theory.ledger.decisions.peer_readouts import _direction
    assert _direction([-0.320, -0.39, -0.25], [-0.322, -0.39, -0.25]) == "holds"
    assert _direction([0.05, 0.0, 0.1], [0.3, 0.25, 0.35]) == "widens"
    assert _direction([0.3, 0.25, 0.35], [0.05, 0.0, 0.1]) == "narrows"
