"""ddcl_theory.ledger.decisions.dense_features: the L10 rule on hand-built sweeps, on every side
of it (reproduced; not reproduced by a wrong sign and by a negligible effect; inconclusive; a
failed gate; too few seeds)."""
from __future__ import annotations

import math
from types import SimpleNamespace as NS

import numpy as np
import pytest

from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions import dense_features as dec
from ddcl_theory.ledger.rules import L10_MIOU_SESOI, L10_SETTLED, RULES

N = RULES["L10"].n_seeds
STEPS = (100, 200)
TREND = 8
GRID = (1e-3, 2e-3, 4e-3)
# zero-mean wiggles, one per seed, so each paired interval has a finite width
WIGGLE = np.tile([0.004, -0.004, 0.002, -0.002, 0.0], 20)


class Sweep:
    """The fields of a DenseSweep that the decision reads."""

    def __init__(self, runs, floors, n, tuning):
        seeds = tuple(range(n))
        self.settings = NS(seeds=seeds, steps=STEPS, trend=seeds[:TREND], n_train=1024,
                           n_test=4096, dim=32, depth=2, heads=4, head_settings=("0", "all"),
                           tune_lrs=GRID, tune_seeds=(900, 901))
        self.runs, self.floors = runs, floors
        self.log_k, self.source = math.log(128), "cifar10"
        self.tuning = tuning                 # {setting: (image accuracies, fg mIoUs) by rate}
        self.lrs = {s: GRID[int(np.argmax(np.add(*t)))] for s, t in tuning.items()}

    def values(self, setting, field="miou", steps=None):
        steps = steps or STEPS[-1]
        return np.array([getattr(r.score, field) for r in sorted(self.runs, key=lambda r: r.seed)
                         if r.setting == setting and r.steps == steps])

    def tuning_table(self, setting, field):
        return np.array(self.tuning[setting][0 if field == "val_image_acc" else 1])

    def floor_values(self, which, setting=None, field="miou"):
        if which == "background":
            return np.array([f["background"] for f in self.floors])
        return np.array([f[which][setting][field] for f in self.floors])


def sweep(acc_gain=0.03, fg_gain=0.03, n=N, untrained=0.40, settle_move=0.0, ent=2.0,
          rank=10.0, tuning=None):
    """``n`` paired seeds; the all-Laplacian arm gains ``acc_gain`` (image probe) and
    ``fg_gain`` (foreground mIoU) over none at the longest run, half of that at the shorter
    (run by the first TREND seeds only)."""
    runs, floors = [], []
    for seed in range(n):
        base_fg, base_acc = 0.48 + 0.01 * (seed % 3), 0.20 + 0.01 * (seed % 4)
        for steps, share in zip(STEPS, (0.5, 1.0)):
            if steps != STEPS[-1] and seed >= TREND:
                continue
            for setting, on in (("0", 0.0), ("all", 1.0)):
                fg = base_fg + on * share * (fg_gain + WIGGLE[seed])
                score = NS(image_acc=base_acc + on * share * (acc_gain + WIGGLE[seed]),
                           fg_miou=fg, val_fg_miou=fg, miou=0.056 + on * 0.001 * WIGGLE[seed])
                runs.append(NS(setting=setting, seed=seed, steps=steps, score=score,
                               settle_val_fg_miou=fg - on * settle_move, teacher_entropy=ent,
                               teacher_mean_entropy=3.5, effective_rank=rank))
        floors.append({"background": 0.055,
                       "untrained": {s: {"fg_miou": untrained + 0.005 * (seed % 2)}
                                     for s in ("0", "all")},
                       "ceiling": {s: {"miou": 0.09} for s in ("0", "all")}})
    tuning = tuning or {"0": ((0.20, 0.23, 0.19), (0.51, 0.50, 0.47)),
                        "all": ((0.20, 0.21, 0.22), (0.55, 0.58, 0.60))}
    return Sweep(runs, floors, n, tuning)


def gate(v, name):
    return next(g for g in v.gates if g.name == name)


def test_a_clear_gain_on_both_tests_is_reproduced():
    v = dec.decide_l10(sweep())
    assert v.word == "reproduced" and v.n_seeds == N and v.interval[0] > 0
    # the 11-class probe, decided beside, shows a negligible gain and does not move the word
    assert [t.word for t in v.tests] == ["reproduced", "reproduced", "not reproduced"]
    assert [t.binding for t in v.tests] == [True, True, False]
    assert all(g.passed for g in v.gates) and len(v.gates) == 3
    assert v.scale == "200 steps" and list(v.trend) == ["100 steps", "200 steps"]
    est_short, est_long = v.trend["100 steps"][0], v.trend["200 steps"][0]
    assert est_long == pytest.approx(0.03, abs=1e-3) and est_short == pytest.approx(0.015,
                                                                                   abs=1e-3)
    assert set(v.per_seed) == {t.statistic for t in rule_of("L10").all_tests}
    assert all(len(x) == N for x in v.per_seed.values())
    assert "32.27" in v.evidence and v.rule == rule_of("L10").text


def test_the_interval_is_scipys_paired_t_of_the_differences():
    from scipy import stats
    s = sweep()
    v = dec.decide_l10(s)
    d = s.values("all", "fg_miou") - s.values("0", "fg_miou")
    ci = stats.ttest_1samp(d, 0).confidence_interval(0.95)
    assert v.tests[1].interval == pytest.approx([ci.low, ci.high])
    assert v.per_seed[v.tests[1].statistic] == pytest.approx(d.tolist())


def test_a_clear_loss_is_not_reproduced():
    v = dec.decide_l10(sweep(fg_gain=-0.03))
    assert v.word == "not reproduced" and v.tests[1].word == "not reproduced"
    assert rule_of("L10").binding(v.tests) == 1 and v.interval[1] < 0
    assert dec.decide_l10(sweep(acc_gain=-0.03)).word == "not reproduced"


def test_a_real_but_negligible_gain_is_not_reproduced():
    # a gain the interval shows above 0 but wholly below the SESOI: smaller than matters
    v = dec.decide_l10(sweep(fg_gain=0.3 * L10_MIOU_SESOI))
    assert v.tests[1].interval[0] > 0 and v.tests[1].interval[1] < L10_MIOU_SESOI
    assert v.word == "not reproduced"


def test_an_interval_holding_zero_and_the_sesoi_is_inconclusive():
    s = sweep(fg_gain=0.005)
    for r in s.runs:                                  # widen the spread of the differences
        if r.setting == "all":
            r.score.fg_miou += 8 * WIGGLE[r.seed]
    v = dec.decide_l10(s)
    low, high = v.tests[1].interval
    assert low < 0 < L10_MIOU_SESOI < high
    assert v.word == "inconclusive" and v.tests[1].seeds_needed > N


def test_too_few_seeds_decide_nothing_beyond_inconclusive():
    v = dec.decide_l10(sweep(n=N - 1))
    assert [t.word for t in v.tests[:2]] == ["reproduced", "reproduced"]
    assert v.word == "inconclusive" and f"the rule registers {N}" in v.evidence


def test_each_failed_gate_makes_it_inconclusive():
    collapsed = dec.decide_l10(sweep(ent=math.log(128)))
    assert collapsed.word == "inconclusive" and not gate(collapsed, "no collapse").passed
    # a gap that moved by 2x the allowance and, moved once more, would cross the SESOI
    unsettled = dec.decide_l10(sweep(fg_gain=0.02, settle_move=-0.01))
    assert unsettled.word == "inconclusive" and not gate(unsettled, "settled").passed
    assert "longer schedule" in gate(unsettled, "settled").detail
    # both arms moving together leave the comparison settled, however far each run moved
    together = sweep()
    for r in together.runs:
        r.settle_val_fg_miou -= 0.1
    assert gate(dec.decide_l10(together), "settled").passed
    assert list(dec.settling_moves(together)) == pytest.approx([0.0] * N)
    # a gap still growing away from both boundaries cannot change the word: settled
    growing = dec.decide_l10(sweep(fg_gain=0.06, settle_move=2 * L10_SETTLED))
    assert gate(growing, "settled").passed and growing.tests[1].word == "reproduced"
    assert "'reproduced': it gives 'reproduced'" in gate(growing, "settled").detail
    floor = dec.decide_l10(sweep(untrained=0.49))            # trained = untrained in one arm
    assert floor.word == "inconclusive"
    assert not gate(floor, "above the untrained floor").passed
    # the remedy names the arm that stayed at its initialisation, and its recipe
    detail = gate(floor, "above the untrained floor").detail
    assert "the features of none must beat" in detail and "its rate grid" in detail
    assert "a gate failed" in floor.evidence
    # the intervals are still shown beside the failed gate
    assert floor.tests[1].word == "reproduced"


def test_collapse_checks():
    ok = NS(teacher_entropy=2.0, teacher_mean_entropy=3.5, effective_rank=20.0)
    assert not dec.collapsed(ok, math.log(64))
    assert dec.collapsed(NS(**{**ok.__dict__, "teacher_mean_entropy": 0.1}), math.log(64))
    assert dec.collapsed(NS(**{**ok.__dict__, "effective_rank": 1.5}), math.log(64))
    assert dec.collapsed(NS(**{**ok.__dict__, "teacher_entropy": 4.1}), math.log(64))


def test_the_trend_compares_every_length_on_the_same_trend_seeds():
    s = sweep()
    for r in s.runs:                        # a large gain on the seeds beyond the trend seeds
        if r.setting == "all" and r.seed >= TREND:
            r.score.fg_miou += 0.2
    v = dec.decide_l10(s)
    short, long_ = v.trend["100 steps"][0], v.trend["200 steps"][0]
    assert long_ == pytest.approx(0.03, abs=1e-3) and short == pytest.approx(0.015, abs=1e-3)
    # the verdict's own interval reads every seed at the deciding length
    assert v.tests[1].estimate > 0.1
    assert f"on the same {TREND} seeds" in v.evidence
    acc = dec.scale_trend(s, "image_acc")
    assert acc["200 steps"][0] == pytest.approx(0.03, abs=1e-3)


def test_the_evidence_prints_the_tuning_and_flags_an_edge_and_a_disagreement():
    v = dec.decide_l10(sweep())
    # none: 2e-3 (inside the grid; accuracy and foreground mIoU prefer 2e-3 and 1e-3)
    assert "none: 0.002 (image accuracy alone would pick 0.002, foreground mIoU alone 0.001)" \
        in v.evidence
    # all heads Laplacian: 4e-3, the end of the grid, both scores agree
    assert "all heads Laplacian: 0.004 (at an end of the grid)" in v.evidence
    assert "0.001: 0.200/0.510" in v.evidence and v.numbers["lrs"] == {"0": 0.002,
                                                                      "all": 0.004}


def test_a_split_result_names_each_binding_tests_word_and_interval():
    v = dec.decide_l10(sweep(acc_gain=-0.03))
    assert v.evidence.startswith("A split result: test 1 (image probe) not reproduced, ")
    assert "test 2 (foreground mIoU) reproduced, +0.030 [" in v.evidence
    both = dec.decide_l10(sweep())
    assert both.evidence.startswith("Both binding tests reproduced: test 1 (image probe)")


def test_the_11_class_gain_is_named_real_but_negligible_only_when_it_is():
    real = dec.decide_l10(sweep())                       # +0.001 * wiggle: a tiny gain > 0?
    t = real.tests[2]
    named = "real (its interval excludes 0) but negligible" in real.evidence
    assert named == (t.interval[0] > 0 and t.word == "not reproduced")
    s = sweep()
    for r in s.runs:                                      # a clear 11-class gain
        if r.setting == "all":
            r.score.miou += 0.002 + WIGGLE[r.seed] / 4
    v = dec.decide_l10(s)
    assert v.tests[2].interval[0] > 0 and v.tests[2].word == "not reproduced"
    assert "real (its interval excludes 0) but negligible (short of its SESOI" in v.evidence


def test_the_trend_direction_is_read_from_its_estimates_and_intervals():
    assert dec.trend_direction({"a": [0.01, 0.0, 0.02], "b": [0.03, 0.02, 0.04]}) == "grows"
    assert dec.trend_direction({"a": [0.010, 0.002, 0.019], "b": [0.007, 0.0, 0.015],
                                "c": [0.001, -0.005, 0.008]}) == "shrinks"
    # monotone, but the last estimate inside the first interval: no direction claimed
    assert dec.trend_direction({"a": [0.01, 0.0, 0.02],
                                "b": [0.015, 0.0, 0.03]}) == "shows no clear direction"
    assert dec.trend_direction({"a": [0.01, 0.0, 0.02], "b": [0.0, -0.01, 0.01],
                                "c": [0.03, 0.02, 0.04]}) == "shows no clear direction"
    one = {"a": [0.01, 0.01, 0.01], "b": [0.03, 0.03, 0.03]}
    assert dec.trend_direction(one) == "reads no direction from one seed"
    v = dec.decide_l10(sweep())            # half the gain at the shorter run, 8 trend seeds
    assert "(the gap grows); test 1" in v.evidence


def test_a_chosen_rate_below_an_arms_image_best_is_reported_with_both_scores():
    v = dec.decide_l10(sweep())
    # all heads Laplacian takes 4e-3 (its image best too); none takes 2e-3 (its image best)
    assert "Validation image accuracy:" not in v.evidence
    tuning = {"0": ((0.20, 0.23, 0.19), (0.51, 0.50, 0.47)),
              "all": ((0.222, 0.21, 0.195), (0.57, 0.62, 0.64))}
    v = dec.decide_l10(sweep(tuning=tuning))
    assert ("all heads Laplacian scores 0.195 at its chosen rate against 0.222 at 0.001"
            in v.evidence)
    assert "Each arm's best over the grid: all heads Laplacian 0.222, none 0.230" in v.evidence
    assert "would not have lifted the Laplacian arm by the SESOI" in v.evidence
    tuning["all"] = ((0.26, 0.21, 0.195), (0.57, 0.62, 0.64))
    v = dec.decide_l10(sweep(tuning=tuning))
    assert "could have changed test 1" in v.evidence
