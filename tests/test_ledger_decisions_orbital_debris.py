"""The decision of claim D13 (ddcl_theory.ledger.decisions.orbital_debris) on hand-built
inputs."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ddcl_theory.ledger.decisions.orbital_debris import decide_d13
from ddcl_theory.ledger.verdict import Verdict


def _run(method, acc, *, leo_clusters=2, min_v=0.1, traced=False):
    trace = SimpleNamespace(min_v=min_v) if traced else None
    fill = SimpleNamespace(majority_clusters=np.array([leo_clusters, 0, 1, 1]))
    return SimpleNamespace(method=method, acc=acc, nmi=acc - 0.1, overlap=True, trace=trace,
                           fill=fill)


class _Result(SimpleNamespace):
    def select(self, method):
        return [x for x in self.runs if x.method == method]


def _result(*, kmeans_leo=2, min_v=0.1):
    settings = SimpleNamespace(seeds=(0, 1), n_objects=300, num_clusters=4, epochs=30,
                               relative_temperature=0.1, kmeans_restarts=10)
    found = [_run("kmeans", a, leo_clusters=kmeans_leo) for a in (0.70, 0.72)]
    found += [_run("ddcl", a, leo_clusters=1, min_v=min_v, traced=True) for a in (0.8, 0.82)]
    return _Result(settings=settings, runs=found, class_sizes=np.array([210, 24, 36, 30]))


def _parts(*, compare=1, monotone=(False, False), fills=True):
    return {"acc": (0.81, 0.01), "nmi": (0.7, 0.01), "ari": (0.6, 0.01), "compare": compare,
            "monotone": list(monotone), "ratio": [0.9, 1.1], "min_v": 0.1,
            "leo_clusters": 1.0, "empty": 0, "fills": fills}


def _decide(head, readout=None, result=None):
    return decide_d13(result or _result(), {"ddcl": head, "readout": readout or
                                            _parts(compare=-1, fills=False)})


def test_d13_reproduced_when_one_variant_has_every_part():
    v = _decide(_parts(monotone=(True, True)))
    assert isinstance(v, Verdict) and v.claim == "D13" and v.word == "reproduced"
    assert v.numbers["parts"]["monotone (ddcl)"] and v.n_seeds == 2 and v.rule


def test_d13_qualified_when_accuracy_beats_kmeans_but_separation_is_not_monotone():
    v = _decide(_parts())
    assert v.word == "qualified"
    assert "failing: ['monotone (ddcl)'" in v.evidence


def test_d13_qualified_within_the_spread_when_the_variant_fills_the_classes():
    assert _decide(_parts(compare=0, fills=True)).word == "qualified"


def test_d13_not_reproduced_within_the_spread_without_filling():
    assert _decide(_parts(compare=0, fills=False)).word == "not reproduced"


def test_d13_filling_counts_only_when_kmeans_piles_onto_leo():
    v = _decide(_parts(compare=0, fills=True), result=_result(kmeans_leo=1))
    assert v.word == "not reproduced" and not v.numbers["parts"]["fills (ddcl)"]


def test_d13_needs_v_nonnegative_in_every_run():
    v = _decide(_parts(monotone=(True, True)), result=_result(min_v=-1e-9))
    assert v.word == "not reproduced" and not v.numbers["parts"]["v"]


def test_d13_leaves_the_parts_it_is_given_unchanged_and_needs_both_variants():
    head = _parts(compare=0, fills=True)
    _decide(head, result=_result(kmeans_leo=1))
    assert head["fills"] is True
    with pytest.raises(ValueError, match="variants"):
        decide_d13(_result(), {"ddcl": head})
