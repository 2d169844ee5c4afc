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


def test_d10_refuted_by_a_rising_f_or_full_collapse_confirmed_otherwise():
    v = dec.decide_d10(0.3, HOT, COLD)
    assert v.word == "refuted" and "S_min < 1e-6 on 1/5 starts with S_mean 0.4" in v.our_value
    assert dec.decide_d10(0.0, HOT, COLD).word == "refuted"            # collapse found
    spread = HOT.copy()
    spread[:, 1:] = 0.3
    assert dec.decide_d10(0.3, spread, COLD).word == "refuted"          # F rises
    assert dec.decide_d10(0.0, spread, COLD).word == "confirmed"
