"""Decision rules of the free-energy chapter (D7, D10) on small hand-built inputs."""
from __future__ import annotations

import numpy as np

from ddcl_theory.ledger.decisions import free_energy as dec


def test_d7_refuted_when_v_only_contracts_and_collapse_is_stable_above_the_trained_threshold():
    kw = dict(t_c=0.5, t_hessian=0.5, t_trained=1.0, t_hessian_trained=1.0)
    v = dec.decide_d7([-1.0, 0.0], [1e-3, 1e-12], **kw)
    assert v.word == "refuted"
    assert "threshold of the trained L_q 4 lambda_max = 1 (CIFAR patches)" in v.our_value
    assert "F's T_c = 0.5, sign change at 1.000000 T_c" in v.our_value
    assert "not descent of the free energy F" in v.evidence
    assert dec.decide_d7([-1.0, 1e-3], [1e-3, 1e-12], **kw).word == "qualified"
    assert dec.decide_d7([-1.0], [1e-3, 1e-2], **kw).word == "qualified"


HOT = np.array([[0.5, 0.0, 0.0, 0.0], [0.6, 1e-9, 1e-9, 1e-12]])
COLD = np.array([[0.0, 0.4, 0.05], [0.2, 0.5, 0.06]])


def test_d10_is_settled_by_reading_g_with_reading_f_shown():
    v = dec.decide_d10(0.3, HOT, COLD, max_g_rise=0.0)
    assert v.word == "refuted"                                   # G holds, but collapse found
    assert "S_min < 1e-6 on 1/2 starts with S_mean 0.4" in v.our_value
    assert "Reading G: G is a Lyapunov function" in v.evidence
    assert "Reading F: F is not a Lyapunov function under cooling (it rises by up to 0.3)" \
        in v.evidence
    assert v.numbers["reading_G_holds"] is False and v.numbers["reading_F_holds"] is False
    spread = HOT.copy()
    spread[:, 1:] = 0.3
    both = dec.decide_d10(0.0, spread, COLD, max_g_rise=0.0)
    assert both.word == "confirmed" and both.numbers["reading_F_holds"]
    only_g = dec.decide_d10(0.3, spread, COLD, max_g_rise=0.0)     # F rises, G does not
    assert only_g.word == "confirmed" and not only_g.numbers["reading_F_holds"]
    assert "the reading fails" in only_g.evidence and "the reading holds" in only_g.evidence
    g_rises = dec.decide_d10(0.0, spread, COLD, max_g_rise=1e-6)
    assert g_rises.word == "refuted" and g_rises.numbers["reading_F_holds"]
