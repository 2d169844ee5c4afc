"""Decision rules of the two-time-scale chapter (D8, D9) on small hand-built inputs: D9 on
sweeps of hand-made separation curves (the experiment's own result types), on every side of
its rule."""
from __future__ import annotations

import math
from types import SimpleNamespace as NS

import numpy as np
import pytest

from ddcl_theory.experiments import eps_ablation as ea
from ddcl_theory.ledger import rules
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions import timescales as dec
from ddcl_theory.ledger import report
from ddcl_theory.runtime import profile
from ddcl_theory.theory.timescales import Inertia

LIN = NS(model=NS(m=6, n=47), settings=NS(eps_grid=(1e-3, 1.0, 1e3), eta_p=(0.25, 1.0)))
INERTIAS = {"shared": {Inertia(0, 53, 0)}, "merged": {Inertia(2, 51, 0)}}
EPS_C = {0.25: 4.0, 1.0: 1.0}


def test_d8_refuted_by_a_wrong_slope_confirmed_by_a_critical_ratio_in_range_else_qualified():
    kw = dict(inertias=INERTIAS, eps_c_shared=EPS_C)
    v = dec.decide_d8(LIN, slopes={"shared": 2.0, "split": 1.99},
                      crit_cont={"shared": None, "split": None}, **kw)
    assert v.word == "qualified" and "53-parameter" in v.evidence and "2 unstable" in v.evidence
    assert v.our_value.endswith("discrete eps_c = 1.00 at eta_P = 1, 4.00 at eta_P = 0.25")
    assert dec.decide_d8(LIN, slopes={"shared": 2.0}, crit_cont={"split": 0.3}, **kw).word \
        == "confirmed"
    assert dec.decide_d8(LIN, slopes={"shared": 2.0}, crit_cont={"split": 3.0}, **kw).word \
        == "qualified"
    assert dec.decide_d8(LIN, slopes={"shared": 1.5}, crit_cont={"split": 0.3}, **kw).word \
        == "refuted"


EPS = (0.01, 0.1, 0.5, 1.0)
LENGTHS = (3, 6, 12)
N = rules.D9_SEEDS
FLOOR = math.log(dec.COLLAPSE_RATIO)


def _run(eps, seed, log_end, epochs, *, moving=False, diverged=False, ppl=3.0):
    """A run whose log S reaches ``log_end`` at half of its ``epochs`` and stays there (or
    moves all the way to the end, ``moving``); ``diverged``: its last L_q is NaN."""
    t = np.arange(epochs + 1) / epochs
    log_s = log_end * (t if moving else np.minimum(1.0, 2 * t))
    l_q = [1.0] * epochs + [float("nan") if diverged else 0.5]
    return ea.RunHistory(eps=eps, seed=seed, separation=list(np.exp(log_s)), l_q=l_q,
                         perplexity=[4.0] * epochs + [ppl], accuracy=[0.5] * (epochs + 1))


def _sweep(logs, *, optimiser="adam", lr_p=0.01, moving=(), diverged=()):
    """A sweep at three run lengths: ``logs[eps]`` are the per-seed log(S_end / S_start) of
    the longest runs (the shorter ones reach a proportional share); eps in ``moving`` still
    move at the end, eps in ``diverged`` diverge."""
    n = len(next(iter(logs.values())))
    s = ea.AblationSettings(eps_values=tuple(logs), seeds=tuple(range(n)), optimiser=optimiser,
                            lr_p=lr_p, epochs=max(LENGTHS))
    by_length = {}
    for length in LENGTHS:
        runs = [_run(e, seed, v * length / max(LENGTHS), length, moving=e in moving,
                     diverged=e in diverged)
                for e, values in logs.items() for seed, v in enumerate(values)]
        by_length[length] = ea.AblationResult(s.replace(epochs=length), runs, "test")
    return ea.ScaleSweep(s, by_length)


def _jitter(centre, spread=0.05, n=N):
    return [centre + spread * math.sin(1.7 * i + 0.3) for i in range(n)]


GROWS, FLAT = _jitter(0.6), _jitter(0.0)
COLLAPSED = _jitter(-5.0, 0.5)                      # far below the censoring threshold


def _adam(stable=GROWS, small=GROWS, large=COLLAPSED, middle=None, **kw):
    return _sweep({0.01: small, 0.1: stable, 0.5: middle or stable, 1.0: large}, **kw)


def _sgd(lr_p=1.0, failing=(0.5, 1.0)):
    logs = {e: (COLLAPSED if e in failing else GROWS) for e in EPS}
    return _sweep(logs, optimiser="sgd", lr_p=lr_p, diverged=failing)


def test_d9_constants_agree_with_the_experiment_and_its_reference_settings():
    assert dec.COLLAPSE_RATIO == ea.COLLAPSE_SEPARATION_RATIO
    assert rule_of("D9").n_seeds == rules.D9_SEEDS == ea.CONFIRMATORY_SEEDS
    reference = ea.AblationSettings.for_profile(profile.Profile("reference", "cpu"))
    assert len(reference.seeds) == rule_of("D9").n_seeds and min(reference.seeds) >= 1000
    assert reference.scales == (12, 24, 48)
    assert [t.statistic for t in rules.D9_SGD_READING.tests] == \
        [t.statistic.replace("Adam", "SGD, eta_P = 1") for t in rule_of("D9").tests]


def test_a_collapsed_or_diverged_run_enters_at_the_collapse_threshold():
    assert dec.log_growth(_run(0.1, 0, 0.4, 12)) == pytest.approx(0.4)
    assert dec.log_growth(_run(1.0, 0, -9.0, 12)) == pytest.approx(FLOOR)       # two met
    assert dec.log_growth(_run(1.0, 0, 0.3, 12, diverged=True)) == pytest.approx(FLOOR)
    nan_end = _run(1.0, 0, 0.3, 12)
    nan_end.separation[-1] = float("nan")
    assert dec.log_growth(nan_end) == pytest.approx(FLOOR)


def test_d9_reproduced_when_separation_grows_and_collapses_at_eps_1():
    v = dec.decide_d9(_adam(), _sgd(), [_sgd(lr_p=0.3, failing=(1.0,)).longest])
    assert v.word == "reproduced" and v.n_seeds == N and v.rule == rule_of("D9").text
    assert [t.word for t in v.tests] == ["reproduced"] * 3 and v.gates[0].passed
    assert v.tests[2].interval[1] < math.log(0.1) and v.interval == tuple(v.tests[0].interval)
    # censored: collapsed runs at eps = 1 enter at log 0.05, not at their own -5
    assert v.tests[2].estimate == pytest.approx(FLOOR - np.mean(GROWS), abs=1e-9)
    assert list(v.trend) == ["3 epochs", "6 epochs", "12 epochs"]
    contrast = v.numbers["readings"]["adam"].trends[2]
    assert contrast["3 epochs"][0] > contrast["12 epochs"][0]            # the gap opens
    assert len(v.per_seed) == 6 and all(len(x) == N for x in v.per_seed.values())
    assert "smallest detectable" not in v.evidence and "Paper:" in v.evidence


def test_d9_sgd_reading_is_decided_beside_and_never_gives_the_word():
    v = dec.decide_d9(_adam(large=GROWS), _sgd(), [_sgd(lr_p=0.3, failing=(1.0,)).longest])
    sgd = v.numbers["readings"]["sgd"]
    assert v.word == "not reproduced" and sgd.word == "reproduced"
    assert sgd.name == "sgd, eta_P=1" and len(report.tests_rows(sgd)) == 3
    assert sgd.tests[2].estimate == pytest.approx(FLOOR - np.mean(GROWS), abs=1e-9)
    # diverged SGD runs have ended: the gate reads the others only, and passes
    assert sgd.gate.passed and "at eps = 1" not in sgd.gate.detail
    # the critical encoder step: eta_P = 1 fails from eps 0.5, eta_P = 0.3 from eps 1
    assert v.numbers["brackets"] == {"sgd, eta_P=1": (0.1, 0.5), "sgd, eta_P=0.3": (0.15, 0.3)}
    assert v.numbers["overlap"] and v.numbers["eps_moves"]
    assert v.numbers["diverged"]["sgd, eta_P=1"] == {0.01: 0.0, 0.1: 0.0, 0.5: 1.0, 1.0: 1.0}
    assert v.numbers["modes"]["sgd, eta_P=1"] == ["diverged"]
    assert "critical eps moves with eta_P" in v.evidence


def test_d9_not_reproduced_when_eps_1_keeps_its_separation():
    v = dec.decide_d9(_adam(large=GROWS), _sgd())
    assert v.word == "not reproduced" and [t.word for t in v.tests][2] == "not reproduced"
    assert v.interval == tuple(v.tests[2].interval)          # the excluding test binds
    assert "far smaller than tenfold" in v.evidence
    wrong_way = dec.decide_d9(_adam(large=_jitter(1.5)), _sgd())
    assert wrong_way.word == "not reproduced" and "wrong sign (larger" in wrong_way.evidence


def test_d9_not_reproduced_when_separation_shrinks_or_barely_grows_at_small_eps():
    shrinks = dec.decide_d9(_adam(small=_jitter(-0.4)), _sgd())
    assert shrinks.word == "not reproduced" and shrinks.tests[1].word == "not reproduced"
    assert "(2) growth at eps = 0.01 -0.40" in shrinks.evidence and "not reproduced (wrong sign)" in shrinks.evidence
    barely = dec.decide_d9(_adam(stable=_jitter(0.05)), _sgd())
    assert barely.word == "not reproduced" and barely.tests[0].word == "not reproduced"
    assert barely.tests[0].interval[0] > 0                      # real, but below the SESOI
    assert "smaller than the SESOI" in barely.evidence


def test_d9_inconclusive_when_an_interval_holds_margin_and_sesoi():
    straddles = [0.1 + 0.6 * (-1) ** i for i in range(N)]
    v = dec.decide_d9(_adam(stable=straddles), _sgd())
    assert v.word == "inconclusive" and v.tests[0].word == "inconclusive"
    assert v.interval == tuple(v.tests[0].interval)


def test_d9_inconclusive_when_the_separation_has_not_settled():
    v = dec.decide_d9(_adam(moving=(0.1,)), _sgd())
    assert [t.word for t in v.tests] == ["reproduced"] * 3          # intervals still shown
    assert v.word == "inconclusive" and not v.gates[0].passed
    assert "had not settled" in v.evidence and "lower final learning rate" in v.evidence
    collapsing = dec.decide_d9(_adam(moving=(1.0,)), _sgd())   # past the threshold: censored
    assert collapsing.gates[0].passed and collapsing.word == "reproduced"


def test_d9_inconclusive_with_fewer_seeds_than_the_rule():
    few = dec.decide_d9(_adam(stable=GROWS[:10], small=GROWS[:10], large=COLLAPSED[:10]),
                        _sweep({e: GROWS[:10] for e in EPS}, optimiser="sgd", lr_p=1.0))
    assert [t.word for t in few.tests] == ["reproduced"] * 3
    assert few.word == "inconclusive" and f"fewer than the rule's {N}" in few.evidence


def test_d9_refuses_unpaired_seeds():
    sweep = _adam()
    runs = sweep.longest.runs
    runs[:] = [r for r in runs if not (r.eps == 1.0 and r.seed == 0)]
    with pytest.raises(ValueError, match="same seeds"):
        dec.d9_samples(sweep.longest)
