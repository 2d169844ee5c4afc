"""ddcl_theory.ledger.decisions.laplacian_theory: the rules of L1-L5 and L11, both outcomes."""
from __future__ import annotations

from ddcl_theory.ledger.decisions import laplacian_theory as dec


def test_l1():
    assert dec.decide_l1(True, 1e-12, 1e-15).word == "proved"
    assert dec.decide_l1(False, 0.0, 0.0).word == "refuted"
    assert dec.decide_l1(True, 1e-6, 0.0).word == "refuted"
    assert dec.decide_l1(True, 0.0, 1e-9).word == "refuted"


def test_l2():
    v = dec.decide_l2(True, 1e-15, 1.04)
    assert v.word == "qualified" and v.our_value.startswith("Euler order 1.04;")
    assert dec.decide_l2(True, 1e-15, 1.2).word == "refuted"
    assert dec.decide_l2(True, 1e-9, 1.0).word == "refuted"
    assert dec.decide_l2(False, 0.0, 1.0).word == "refuted"


def test_l3():
    assert dec.decide_l3(True, 1e-15, 1e-15, 0.2).word == "qualified"
    assert dec.decide_l3(True, 1e-15, 1e-15, 0.001).word == "refuted"   # no counterexample
    assert dec.decide_l3(True, 1e-6, 1e-15, 0.2).word == "refuted"


def _gains(**changes):
    gains = {"symmetric": {"variance": 1.0, "energy": 0.9},
             "doubly stochastic": {"variance": 0.99, "energy": 1.5},
             "reversible": {"variance": 1.6, "energy": 1.1, "pi-variance": 1.0,
                            "pi-energy": 1.0},
             "general softmax": {"variance": 2.0, "energy": 3.0}}
    for key, value in changes.items():
        kind, measure = key.split("__")
        gains[kind.replace("_", " ")][measure.replace("_", "-")] = value
    return gains


def test_l4():
    assert dec.decide_l4(_gains(), (3 / 16, 1 / 4)).word == "qualified"
    assert dec.decide_l4(_gains(symmetric__energy=1.01), (3 / 16, 1 / 4)).word == "refuted"
    assert dec.decide_l4(_gains(reversible__pi_energy=1.2), (3 / 16, 1 / 4)).word == "refuted"
    assert dec.decide_l4(_gains(general_softmax__variance=1.0), (3 / 16, 1 / 4)
                         ).word == "refuted"
    assert dec.decide_l4(_gains(), (1 / 4, 3 / 16)).word == "refuted"


def test_l11():
    assert dec.decide_l11(True, 1e-12, True, True, 0.0).word == "proved"
    assert dec.decide_l11(True, 1e-12, True, False, 0.0).word == "refuted"
    assert dec.decide_l11(True, 1e-6, True, True, 0.0).word == "refuted"
    assert dec.decide_l11(True, 1e-12, True, True, 1e-3).word == "refuted"


def test_l5():
    shape = {"batch": 8, "seq_len": 128, "dim": 64, "heads": 4}
    stored = {"median_ratio": 1.01, "median_ratio_cpu": 1.0, "seq_len": 512}
    v = dec.decide_l5({0: 100, 4: 100}, {0: 0.0, 4: 0.0005}, shape, stored)
    assert v.word == "confirmed" and v.our_value == "+0 parameters, +0.05% FLOPs"
    assert "1.010x standard attention's wall-clock time (1.000x CPU time) at T = 512" \
        in v.evidence
    assert dec.decide_l5({0: 100, 4: 101}, {0: 0.0, 4: 0.0005}, shape, stored).word == "refuted"
    assert dec.decide_l5({0: 100, 4: 100}, {0: 0.0, 4: 0.002}, shape, stored).word == "refuted"
