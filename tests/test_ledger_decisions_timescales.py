"""Decision rules of the two-time-scale chapter (D8, D9) on small hand-built inputs."""
from __future__ import annotations

from types import SimpleNamespace as NS

import numpy as np

from ddcl_theory.ledger.decisions import timescales as dec
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


class _Sweep:
    """A hand-built ablation result: collapse fraction per eps, first failing eps, lr_p."""

    def __init__(self, fractions, lr_p, modes=None, grew=True):
        self.settings = NS(eps_values=tuple(fractions), seeds=(0, 1, 2), lr_p=lr_p)
        self.fractions, self.modes = fractions, modes or {"diverged": 0, "separation": 0,
                                                          "perplexity": 0}
        self.grew = grew

    def collapse_fraction(self, eps):
        return self.fractions[eps]

    def by_eps(self, eps):
        return [NS(separation_ratio=np.array([1.0, 1.5 if self.grew else 0.9]))] * 3

    def smallest_collapsing_eps(self):
        return next((e for e, f in sorted(self.fractions.items()) if f >= 0.5), None)

    def stability_boundary(self):
        first = self.smallest_collapsing_eps()
        below = [e for e in sorted(self.fractions) if first is None or e < first]
        return (below[-1] if below else None), first

    def failure_modes(self):
        return self.modes


def _results(adam, grew=True):
    return {"adam, eta_P=0.01": _Sweep(adam, 0.01, grew=grew),
            "sgd, eta_P=1": _Sweep({0.1: 0.0, 0.3: 1.0, 1.0: 1.0}, 1.0, {"diverged": 3,
                                                                         "separation": 0,
                                                                         "perplexity": 0}),
            "sgd, eta_P=0.3": _Sweep({0.1: 0.0, 0.3: 0.0, 1.0: 1.0}, 0.3)}


def test_d9_reproduced_qualified_and_not_reproduced():
    pattern = {0.1: 0.0, 0.3: 0.0, 1.0: 1.0}
    v = dec.decide_d9(_results(pattern))
    assert v.word == "reproduced" and v.n_seeds == 3
    assert v.numbers["eps_moves"] and v.numbers["modes"]["sgd, eta_P=1"] == ["diverged"]
    assert v.numbers["brackets"] == {"sgd, eta_P=1": (0.1, 0.3), "sgd, eta_P=0.3": (0.09, 0.3)}
    assert v.numbers["overlap"] and "critical encoder step" in v.evidence
    assert dec.decide_d9(_results(pattern, grew=False)).word == "qualified"   # Adam: no growth
    quiet = {0.1: 0.0, 0.3: 0.0, 1.0: 0.0}
    assert dec.decide_d9(_results(quiet)).word == "qualified"                 # SGD shows it
    results = _results(quiet)
    results["sgd, eta_P=0.3"] = _Sweep({0.1: 0.5, 0.3: 1.0, 1.0: 1.0}, 0.3)
    results["sgd, eta_P=1"] = _Sweep({0.1: 0.5, 0.3: 1.0, 1.0: 1.0}, 1.0)
    v = dec.decide_d9(results)
    assert v.word == "not reproduced" and not v.numbers["eps_moves"]
