"""The decision of claim D13 (ddcl_theory.ledger.decisions.orbital_debris) on hand-built
inputs: each word of the rule, its two gates, the pairing and the scale trend."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ddcl_theory.ledger.decisions.orbital_debris import (decide_d13, paired_acc,
                                                        paired_interval, scale_trend)
from ddcl_theory.ledger.verdict import Verdict
from ddcl_theory.metrics.convergence import convergence

FLAT = [1.0] * 20
FALLING = list(np.linspace(2.0, 1.0, 20))


def _run(method, seed, acc, n, *, min_v=0.1, curve=None, acc_at=None, config=""):
    trace = None
    if method == "ddcl":
        trace = SimpleNamespace(min_v=min_v, convergence=convergence(curve or FLAT, window=2))
    return SimpleNamespace(method=method, seed=seed, acc=acc, n_objects=n, overlap=True,
                           trace=trace, acc_at=acc_at or ({} if trace is None else {20: acc}),
                           config=config)


class _Result(SimpleNamespace):
    def select(self, method, n=None):
        n = self.settings.n_objects if n is None else n
        return sorted((x for x in self.runs if x.method == method and x.n_objects == n),
                      key=lambda x: x.seed)


def _result(gain, *, seeds=10, scales=(100, 300), min_v=0.1, curve=None, spread=0.02):
    """Head ACC = k-means1 ACC + ``gain`` + a seed-dependent wobble of size ``spread``."""
    settings = SimpleNamespace(seeds=tuple(range(seeds)), n_objects=scales[-1],
                               object_scales=tuple(scales), num_clusters=4, epochs=20,
                               relative_temperature=0.1, kmeans_restarts=10)
    runs = []
    for n in scales:
        for s in range(seeds):
            base = 0.7 + 0.01 * (s % 3)
            wobble = spread * (1 if s % 2 else -1)
            runs += [_run("kmeans1", s, base, n), _run("kmeans", s, base - 0.05, n),
                     _run("gmm", s, base + 0.1, n, config="covariance_type=full (BIC)"),
                     _run("ddcl", s, base + gain + wobble, n, min_v=min_v, curve=curve)]
    return _Result(settings=settings, runs=runs, class_sizes=np.array([70, 8, 12, 10]))


def test_d13_reproduced_when_the_paired_interval_lies_above_zero():
    v = decide_d13(_result(0.05))
    assert isinstance(v, Verdict) and v.claim == "D13" and v.word == "reproduced"
    assert v.n_seeds == 10 and v.interval[0] > 0 and v.rule and v.scale.startswith("300 objects")
    assert "smallest detectable effect" in v.evidence and "0.772" in v.evidence


def test_d13_not_reproduced_when_the_interval_lies_below_zero():
    assert decide_d13(_result(-0.05)).word == "not reproduced"


def test_d13_inconclusive_when_the_interval_straddles_zero():
    v = decide_d13(_result(0.0, spread=0.05))
    assert v.word == "inconclusive" and v.interval[0] < 0 < v.interval[1]


def test_d13_inconclusive_below_the_rules_ten_seeds():
    v = decide_d13(_result(0.05, seeds=5))
    assert v.word == "inconclusive" and "the rule asks for 10" in v.evidence


def test_d13_gate_v_negative_gives_not_reproduced():
    v = decide_d13(_result(0.05, min_v=-1e-9))
    assert v.word == "not reproduced" and not v.numbers["v_ok"]


def test_d13_gate_unfinished_deciding_runs_give_inconclusive():
    v = decide_d13(_result(0.05, curve=FALLING))
    assert v.word == "inconclusive" and v.numbers["unfinished"] == 10
    assert "did not reach its plateau" in v.evidence


def test_d13_pairs_by_seed_and_decides_at_the_largest_scale():
    r = _result(0.05)
    head, km = paired_acc(r)
    assert np.allclose(head - km, 0.05 + 0.02 * np.where(np.arange(10) % 2, 1, -1))
    assert paired_interval(r).n == 10
    r.runs = [x for x in r.runs if not (x.method == "kmeans1" and x.seed == 3)]
    with pytest.raises(ValueError, match="seeds"):
        paired_acc(r)


def test_d13_trend_over_objects_or_over_epochs():
    axis, trend = scale_trend(_result(0.05, scales=(100, 200, 300)))
    assert axis == "objects" and list(trend) == ["100 objects", "200 objects", "300 objects"]
    assert all(lo <= e <= hi for e, lo, hi in trend.values())
    axis, trend = scale_trend(_result(0.05, scales=(300,)))
    assert axis == "epochs" and list(trend) == ["20 epochs"]


def test_d13_shows_the_peers_beside():
    v = decide_d13(_result(0.05))
    assert set(v.numbers["beside"]) == {"kmeans", "gmm"}
    assert "covariance_type=full (BIC)" in v.evidence and "10 restarts" in v.evidence


def test_d13_quotes_the_heads_beside_facts_without_changing_the_word():
    parts = {"monotone": [False] * 10, "leo_clusters": 1.5, "empty": 2}
    v, bare = decide_d13(_result(0.05), parts), decide_d13(_result(0.05))
    assert v.word == bare.word == "reproduced"
    assert "monotone in 0 of 10 seeds" in v.evidence and "monotone in" not in bare.evidence
