"""Decision rules of the decomposition chapter (D3-D6, X1) on small hand-built inputs."""
from __future__ import annotations

from types import SimpleNamespace as NS

from ddcl_theory.ledger.decisions import decomposition as dec

YES, NO = NS(holds=True), NS(holds=False)
TOL = {"float64": 1e-10, "float32": 1e-5}


def test_d3_proved_needs_every_symbolic_check_and_the_float64_tolerance():
    v = dec.decide_d3([YES, YES], {"float64": 1e-15, "float32": 1e-7}, TOL)
    assert v.word == "proved"
    assert v.our_value == "max rel. error < 1e-10 (float64), < 1e-05 (float32)"
    assert dec.decide_d3([YES, NO], {"float64": 1e-15, "float32": 1e-7}, TOL).word == "refuted"
    assert dec.decide_d3([YES], {"float64": 1e-9, "float32": 1e-7}, TOL).word == "refuted"


def test_d4_follows_the_pairwise_proof():
    assert dec.decide_d4(YES).word == "proved"
    assert dec.decide_d4(NO).word == "refuted"


def _grad(rel_fixed, rel_extra):
    return NS(rel_fixed=rel_fixed, rel_extra=rel_extra)


def test_d5_qualified_when_the_softmax_adds_a_term_proved_without_and_refuted_on_failure():
    v = dec.decide_d5([YES], [[_grad(1e-14, 2e-3)], [_grad(1e-14, 300.0)]])
    assert v.word == "qualified" and "ranges 2e-03..3e+02" in v.evidence
    assert dec.decide_d5([YES], [[_grad(1e-14, 1e-6)]]).word == "proved"
    assert dec.decide_d5([YES], [[_grad(1e-9, 1.0)]]).word == "refuted"
    assert dec.decide_d5([NO], [[_grad(1e-14, 1.0)]]).word == "refuted"


def test_d6_refuted_when_v_vanishes_at_collapse():
    assert dec.decide_d6(NS(v_symbolic=0, v_at_collapse=0.0)).word == "refuted"
    assert dec.decide_d6(NS(v_symbolic=0, v_at_collapse=1e-3)).word == "not reproduced"


def test_x1_proved_when_both_limits_are_reached_and_qualified_otherwise():
    rates = [NS(hard_rate=1.005, uniform_rate=2.0), NS(hard_rate=3.0, uniform_rate=1.0002)]
    sweep = NS(l_q=[1.0, 2.0], l_ols=[1.0, 1.5], v=[0.0, 0.5], hard=[1.0005],
               uniform=[2.0, 1.5, 0.5])
    assert dec.decide_x1([YES], rates, sweep).word == "proved"
    assert dec.decide_x1([NO], rates, sweep).word == "qualified"
    far = NS(**{**vars(sweep), "uniform": [2.1, 1.5, 0.5]})
    assert dec.decide_x1([YES], rates, far).word == "qualified"
