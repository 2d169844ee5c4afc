"""ddcl_theory.ledger.decisions.dense_features: the L10 rule on hand-built sweeps."""
from __future__ import annotations

import math
from types import SimpleNamespace as NS

import numpy as np
import pytest
from scipy import stats

from ddcl_theory.ledger.decisions import dense_features as dec

SETTINGS = NS(seeds=(0, 1, 2, 3, 4), steps=(0, 100, 200), n_train=384, dim=32, depth=2, heads=4)


def run(setting, seed, miou, acc=0.3, untrained=0.05, plateau=True, ent=2.0, mean_ent=3.5,
        rank=20.0):
    scores = (NS(miou=untrained, image_acc=0.1), NS(miou=(untrained + miou) / 2, image_acc=acc),
              NS(miou=miou, image_acc=acc))
    return NS(setting=setting, seed=seed, scores=scores, plateau=plateau, teacher_entropy=ent,
              teacher_mean_entropy=mean_ent, effective_rank=rank)


def sweep(lap_gain, acc_gain=0.02, n=5, **kw):
    noise = [0.001, -0.002, 0.0015, -0.001, 0.0005, 0.0, 0.001][:n]
    runs = []
    for seed in range(n):
        runs.append(run("0", seed, 0.30 + 0.01 * seed, acc=0.3, **kw))
        runs.append(run("all", seed, 0.30 + 0.01 * seed + lap_gain + noise[seed],
                        acc=0.3 + acc_gain + noise[seed], **kw))
    return NS(settings=NS(**{**SETTINGS.__dict__, "seeds": tuple(range(n))}), runs=runs,
              raw=NS(miou=0.06), log_k=math.log(64), source="cifar10")


def test_a_clear_gain_on_both_probes_is_reproduced():
    v = dec.decide_l10(sweep(0.02))
    assert v.word == "reproduced" and v.interval[0] > 0 and v.n_seeds == 5
    assert "32.27" in v.evidence and "proxy" in v.evidence
    assert set(v.trend) == {"0", "100", "200"} and v.scale == "200 steps"


def test_a_clear_loss_is_not_reproduced():
    assert dec.decide_l10(sweep(-0.02)).word == "not reproduced"
    assert dec.decide_l10(sweep(0.02, acc_gain=-0.05)).word == "not reproduced"


def test_no_difference_is_inconclusive():
    v = dec.decide_l10(sweep(0.0))
    assert v.word == "inconclusive" and v.interval[0] < 0 < v.interval[1]


def test_gates_make_it_inconclusive():
    assert dec.decide_l10(sweep(0.02, plateau=False)).word == "inconclusive"
    assert dec.decide_l10(sweep(0.02, n=4)).word == "inconclusive"
    assert dec.decide_l10(sweep(0.02, ent=math.log(64))).word == "inconclusive"
    floor = dec.decide_l10(sweep(0.02, untrained=0.9))
    assert floor.word == "inconclusive" and "do not beat" in floor.evidence
    # a mean a hair above each run's own untrained probe is not above the floor: the paired
    # interval of trained - untrained must exclude 0
    hair = dec.decide_l10(sweep(0.02, untrained=0.326))
    assert hair.numbers["floor_interval"][0] < 0 < hair.numbers["floor_interval"][1]
    assert hair.word == "inconclusive" and "cannot move" in hair.evidence
    # above the floor with an interval that excludes 0, but by less than the smallest effect the
    # Laplacian - standard comparison detects: the probe cannot show the effect either
    thin = sweep(0.02)
    for r in thin.runs:
        r.scores = (NS(miou=r.scores[-1].miou - 0.001, image_acc=0.1),) + r.scores[1:]
    v = dec.decide_l10(thin)
    assert v.numbers["floor_interval"][0] > 0 and v.numbers["detectable"] > 0.001
    assert v.word == "inconclusive" and "detectable margin" in v.evidence
    assert dec.decide_l10(sweep(0.02)).numbers["above_floor"] is True     # the control


def test_collapse_checks():
    ok = run("0", 0, 0.3)
    assert not dec.collapsed(ok, math.log(64))
    assert dec.collapsed(run("0", 0, 0.3, mean_ent=0.1), math.log(64))
    assert dec.collapsed(run("0", 0, 0.3, rank=1.5), math.log(64))


def test_paired_interval_is_scipys_paired_t():
    a, b = np.array([1.0, 2.0, 3.5, 4.0]), np.array([0.5, 2.0, 3.0, 3.0])
    ci = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert dec.paired_interval(a, b) == pytest.approx((ci.low, ci.high))
    assert dec.paired_interval(a + 1, a) == (1.0, 1.0)
    with pytest.raises(ValueError, match="ours"):
        dec.paired_interval(a[:1], b[:1])
    assert dec.detectable_effect(a - b) > 0
