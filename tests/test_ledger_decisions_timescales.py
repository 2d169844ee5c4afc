"""Decision rules of the two-time-scale chapter (D8, D9) on small hand-built inputs."""
from __future__ import annotations

from types import SimpleNamespace as NS

import numpy as np
import pytest

from ddcl_theory.ledger.claims import rule_of
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
    """A hand-built ablation result: per eps the runs' log(S_end / S_start) (one per seed),
    collapse fraction, first failing eps, lr_p; training losses flat unless ``moving``."""

    def __init__(self, fractions, lr_p, modes=None, logs=None, moving=False, epochs=12):
        eps_values = tuple(fractions)
        n = len(next(iter(logs.values()))) if logs else 3
        self.settings = NS(eps_values=eps_values, seeds=tuple(range(n)), lr_p=lr_p,
                           epochs=epochs, scales=(3, 6, 12))
        self.fractions, self.modes = fractions, modes or {"diverged": 0, "separation": 0,
                                                          "perplexity": 0}
        curve = list(np.linspace(1.0, 0.2, epochs)) if moving else [0.5] * epochs
        self.runs = {e: [NS(seed=s, diverged=False, train_loss=curve,
                            separation_ratio=np.exp(np.linspace(0, log, epochs + 1)))
                         for s, log in enumerate((logs or {}).get(e, [0.0] * n))]
                     for e in eps_values}

    def collapse_fraction(self, eps):
        return self.fractions[eps]

    def by_eps(self, eps):
        return self.runs[eps]

    def smallest_collapsing_eps(self):
        return next((e for e, f in sorted(self.fractions.items()) if f >= 0.5), None)

    def stability_boundary(self):
        first = self.smallest_collapsing_eps()
        below = [e for e in sorted(self.fractions) if first is None or e < first]
        return (below[-1] if below else None), first

    def failure_modes(self):
        return self.modes


GROWS = [0.5, 0.4, 0.6, 0.55, 0.45, 0.5, 0.42, 0.58, 0.5, 0.5]


def _results(large, stable=GROWS, moving=False):
    adam = _Sweep({0.1: 0.0, 1.0: 1.0}, 0.01, logs={0.1: stable, 1.0: large}, moving=moving)
    return {"adam, eta_P=0.01": adam,
            "sgd, eta_P=1": _Sweep({0.1: 0.0, 0.3: 1.0, 1.0: 1.0}, 1.0, {"diverged": 3,
                                                                         "separation": 0,
                                                                         "perplexity": 0}),
            "sgd, eta_P=0.3": _Sweep({0.1: 0.0, 0.3: 0.0, 1.0: 1.0}, 0.3)}


COLLAPSED = [-4.0, -3.5, -4.2, -3.8, -4.1, -3.9, -4.0, -3.6, -4.3, -3.7]


def test_d9_reproduced_by_the_rule_with_trend_and_sgd_brackets_beside():
    v = dec.decide_d9(_results(COLLAPSED))
    assert v.word == "reproduced" and v.n_seeds == 10 and v.rule == rule_of("D9").text
    low, high = v.interval
    assert high < np.log(0.1) and v.numbers["words"] == ["reproduced", "reproduced"]
    assert list(v.trend) == ["3 epochs", "6 epochs", "12 epochs"]
    assert v.trend["12 epochs"][0] == pytest.approx(np.mean(COLLAPSED) - np.mean(GROWS), abs=1e-4)
    assert v.trend["3 epochs"][0] > v.trend["12 epochs"][0]      # the gap opens with length
    assert v.numbers["eps_moves"] and v.numbers["modes"]["sgd, eta_P=1"] == ["diverged"]
    assert v.numbers["brackets"] == {"sgd, eta_P=1": (0.1, 0.3), "sgd, eta_P=0.3": (0.09, 0.3)}
    assert v.numbers["overlap"] and "critical encoder step" in v.evidence
    assert "smallest detectable effect" in v.evidence and "Paper:" in v.evidence


def test_d9_not_reproduced_when_the_large_ratio_keeps_its_separation():
    v = dec.decide_d9(_results([g + 0.05 * (-1) ** i for i, g in enumerate(GROWS)]))
    assert v.word == "not reproduced" and v.numbers["words"][1] == "not reproduced"
    assert v.interval == tuple(v.numbers["contrast"][:2])          # the excluding test binds
    shrinking = dec.decide_d9(_results(COLLAPSED, stable=[-g for g in GROWS]))
    assert shrinking.word == "not reproduced" and shrinking.numbers["words"][0] == \
        "not reproduced"


def test_d9_inconclusive_when_straddling_few_seeds_or_runs_still_moving():
    straddles = [-2.3 + 0.8 * (-1) ** i for i in range(10)]
    assert dec.decide_d9(_results(straddles)).word == "inconclusive"
    few = dec.decide_d9(_results(COLLAPSED[:3], stable=GROWS[:3]))
    assert few.word == "inconclusive" and "fewer than the rule's 10" in few.evidence
    moving = dec.decide_d9(_results(COLLAPSED, moving=True))
    assert moving.word == "inconclusive" and moving.numbers["unfinished"] == 20
    assert "had not reached the plateau" in moving.evidence
