"""The decision of claim D13 (ddcl_theory.ledger.decisions.orbital_debris) on hand-built
results: every side of the registered rule (reproduced; not reproduced by a wrong sign, by a
negligible gain, by a separation that falls; inconclusive), its three gates, too few seeds,
the pairing of the arms' best starts and the scale trend."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions.orbital_debris import (best_gain, decide_d13,
                                                        one_start_gain, per_seed, scale_trend)
from ddcl_theory.ledger.rules import D13_SETTLED_ACC
from ddcl_theory.ledger.verdict import Verdict
from ddcl_theory.metrics.convergence import convergence

RULE = rule_of("D13")
N_SEEDS = RULE.n_seeds
EPOCHS = 20
FLAT = [1.0] * EPOCHS
FALLING = list(np.linspace(2.0, 1.0, EPOCHS))


def _run(method, seed, start, acc, objective, n, *, owned=4, monotone=1.0, min_v=0.1,
         curve=None, settle_move=0.0):
    trace = None
    if method == "ddcl":
        trace = SimpleNamespace(min_v=min_v, convergence=convergence(curve or FLAT, window=2))
    acc_at = {} if trace is None else {EPOCHS - 2: acc - settle_move, EPOCHS: acc}
    return SimpleNamespace(method=method, seed=seed, start=start, acc=acc, objective=objective,
                           n_objects=n, overlap=True, relative_temperature=0.1, trace=trace,
                           acc_at=acc_at, classes_owned=owned,
                           nondecreasing=monotone if trace is not None else float("nan"))


class _Result(SimpleNamespace):
    def starts_of(self, method, seed, n=None):
        n = self.settings.n_objects if n is None else n
        return sorted((x for x in self.runs if x.method == method and x.seed == seed
                       and x.n_objects == n), key=lambda x: x.start)

    def best(self, method, n=None):
        n = self.settings.n_objects if n is None else n
        return [min(self.starts_of(method, s, n), key=lambda x: (x.objective, x.start))
                for s in self.settings.seeds_at(n)]


def _result(gain, *, seeds=N_SEEDS, scales=(100, 300), spread=0.01, monotone=1.0, fill=1,
            min_v=0.1, curve=None, settle_move=0.0, starts=3):
    """Best-start gain ``gain`` + a seed-dependent wobble of size ``spread``; k-means' best
    start by inertia is start 1 (ACC 0.7, 3 classes), its start 0 the class-aligned one; the
    head's best is start 0 (``fill`` more classes than k-means' best)."""
    seed_list = tuple(range(seeds))
    settings = SimpleNamespace(seeds=seed_list, n_objects=scales[-1], object_scales=tuple(scales),
                               num_clusters=4, epochs=EPOCHS, starts=starts,
                               relative_temperature=0.1,
                               seeds_at=lambda n: seed_list if n == scales[-1] else seed_list[:3])
    runs = []
    for n in scales:
        for s in settings.seeds_at(n):
            wobble = spread * (1 if s % 2 else -1)
            for i in range(starts):
                km_acc, km_obj = (0.7, 1.0) if i == 1 else (0.9, 2.0 + i)
                runs.append(_run("kmeans", s, i, km_acc, km_obj, n, owned=3 if i == 1 else 4))
                head_acc = 0.7 + gain + wobble if i == 0 else 0.6
                runs.append(_run("ddcl", s, i, head_acc, 0.5 + i, n, owned=3 + fill if i == 0
                                 else 3, monotone=monotone, min_v=min_v, curve=curve,
                                 settle_move=settle_move))
    return _Result(settings=settings, runs=runs, class_sizes=np.array([70, 8, 12, 10]))


def test_d13_reproduced_when_every_test_clears_its_margin():
    v = decide_d13(_result(0.1))
    assert isinstance(v, Verdict) and v.claim == "D13" and v.word == "reproduced"
    assert [t.word for t in v.tests] == ["reproduced"] * 3 and all(g.passed for g in v.gates)
    assert v.n_seeds == N_SEEDS and v.interval[0] > 0 and v.rule == RULE.text
    assert "own generator" in v.evidence and "0.772" in v.evidence
    assert list(v.per_seed) == [t.statistic for t in RULE.tests]


def test_d13_not_reproduced_for_a_gain_of_the_wrong_sign():
    v = decide_d13(_result(-0.05))
    assert v.word == "not reproduced" and v.tests[0].word == "not reproduced"
    assert v.interval[1] < 0


def test_d13_not_reproduced_for_a_negligible_gain():
    v = decide_d13(_result(0.004, spread=0.002))
    low, high = v.tests[0].interval
    assert v.word == "not reproduced" and 0 < low and high < RULE.tests[0].s


def test_d13_not_reproduced_when_the_separation_does_not_grow_monotonically():
    v = decide_d13(_result(0.1, monotone=0.8))
    assert v.word == "not reproduced" and [t.word for t in v.tests] == [
        "reproduced", "not reproduced", "reproduced"]
    # the deciding sub-claim leads the ledger's line; the accuracy gain stands beside it
    assert v.our_value.startswith("epochs without a fall of the smallest prototype distance "
                                  "0.800") and "(claimed > 0.99)" in v.our_value
    assert "ACC head" in v.our_value
    assert decide_d13(_result(0.1)).our_value.startswith("ACC head")
    assert v.numbers["binding"] == 1 and np.allclose(v.interval, 0.8)


def test_d13_not_reproduced_when_the_head_fills_no_more_classes():
    v = decide_d13(_result(0.1, fill=0))
    assert v.word == "not reproduced" and v.tests[2].word == "not reproduced"


def test_d13_inconclusive_when_an_interval_holds_margin_and_sesoi():
    v = decide_d13(_result(0.01, spread=0.05))
    low, high = v.tests[0].interval
    assert v.word == "inconclusive" and low < 0 and high > RULE.tests[0].s


def test_d13_inconclusive_below_the_registered_seeds():
    v = decide_d13(_result(0.1, seeds=5))
    assert v.word == "inconclusive" and [t.word for t in v.tests] == ["reproduced"] * 3
    assert f"the rule registers {N_SEEDS}" in v.evidence


@pytest.mark.parametrize("broken, gate", [
    (dict(min_v=-1e-9), "V >= 0"),
    (dict(curve=FALLING), "plateau"),
    (dict(settle_move=2 * D13_SETTLED_ACC), "accuracy settled"),
])
def test_d13_a_failed_gate_makes_the_word_inconclusive(broken, gate):
    v = decide_d13(_result(0.1, **broken))
    failed = [g.name for g in v.gates if not g.passed]
    assert v.word == "inconclusive" and failed == [gate]
    assert [t.word for t in v.tests] == ["reproduced"] * 3      # the intervals still shown
    assert f"gate failed ({gate})" in v.evidence


def test_d13_pairs_each_arms_best_start_by_its_own_objective():
    r = _result(0.1)
    # k-means' best start by inertia is start 1 (ACC 0.7), never its start of best ACC (0.9)
    assert np.allclose(best_gain(r), 0.1 + 0.01 * np.where(np.arange(N_SEEDS) % 2, 1, -1))
    head_first = np.array([0.7 + 0.1 + 0.01 * (1 if s % 2 else -1) for s in range(N_SEEDS)])
    expected = ((head_first - 0.9) + (0.6 - 0.7) + (0.6 - 0.9)) / 3
    assert np.allclose(one_start_gain(r), expected)
    values = per_seed(r)
    assert [v.shape for v in values] == [(N_SEEDS,)] * 3 and np.all(values[2] == 1)
    r.runs = [x for x in r.runs if not (x.method == "kmeans" and x.seed == 3)]
    with pytest.raises(ValueError):
        per_seed(r)


def test_d13_trend_over_catalogue_size_uses_the_seeds_that_ran_there():
    r = _result(0.1, scales=(100, 200, 300))
    trend = scale_trend(r)
    assert list(trend) == ["100 objects", "200 objects", "300 objects"]
    assert all(lo <= e <= hi for e, lo, hi in trend.values())
    # three seeds at the smaller sizes: a wider interval than all of them at the largest
    width = {k: hi - lo for k, (e, lo, hi) in trend.items()}
    assert width["100 objects"] > width["300 objects"]


def test_d13_shows_the_one_start_gain_beside_with_the_seeds_it_would_need():
    v = decide_d13(_result(0.1))
    assert "one shared start" in v.evidence and "would take" in v.evidence
    est, low, high = v.numbers["one_start"]
    assert low <= est <= high
