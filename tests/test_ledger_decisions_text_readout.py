"""The D14 decision (ddcl_theory.ledger.decisions.text_readout.decide_d14) on hand-built results."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from ddcl_theory.experiments.text_readout import TITLES, ClusterScore, Comparison
from ddcl_theory.ledger.decisions.text_readout import d14_word, decide_d14
from ddcl_theory.ledger.verdict import Verdict


def _corpus(classes, ddcl, cls, mean, clusters=(0.5, 0.4, 0.45)):
    d, c_tokens, c_mean, kmeans = f"DDCL K={classes}", *clusters
    probe = {"[CLS]": [cls], "mean": [mean], d: [ddcl - 0.01, ddcl + 0.01, ddcl]}
    probe["DDCL K=4"] = [ddcl]                     # the aggregator's K on IMDB
    scores = [ClusterScore(m, classes, [a], [a], [0.1], [0.1])
              for m, a in (("DDCL on tokens", c_tokens), ("DDCL on mean", c_mean),
                           ("k-means on [CLS]", kmeans), ("k-means on mean", kmeans))]
    return SimpleNamespace(num_classes=classes, n_train=2000, n_test=300, max_length=128,
                           probe=probe, clusters=scores)


def _result():
    return SimpleNamespace(corpora={"sst2": _corpus(2, 0.75, 0.72, 0.75),
                                    "imdb": _corpus(2, 0.70, 0.60, 0.70),
                                    "20ng": _corpus(20, 0.39, 0.49, 0.53)})


def test_d14_word_follows_the_count_of_better_comparisons():
    better = Comparison("sst2", "[CLS] probe", "DDCL K=2", 0.05, 0.02)
    worse = Comparison("x", "y", "z", -1.0, 0.1)
    tie = Comparison("x", "y", "z", 0.0, 0.1)
    assert d14_word([better, better]) == "reproduced"
    assert d14_word([better, worse]) == "qualified"
    assert d14_word([better, tie]) == "qualified"
    assert d14_word([worse, tie]) == "not reproduced"


def test_decide_d14_quotes_the_numbers_and_counts_the_outcomes():
    result = _result()
    comps = [Comparison("sst2", "[CLS] probe", "DDCL K=2", 0.03, 0.01),
             Comparison("sst2", "mean probe", "DDCL K=2", 0.0, 0.01),
             Comparison("20ng", "mean probe", "DDCL K=20", -0.14, 0.01)]
    v = decide_d14(result, comps, TITLES)
    assert isinstance(v, Verdict) and v.claim == "D14" and v.word == "qualified"
    assert v.numbers == {"better": 1, "tie": 1, "worse": 1, "comparisons": 3}
    assert "SST-2: DDCL 0.750 vs [CLS] 0.720 vs mean 0.750" in v.evidence
    assert "ACC SST-2 0.500 vs 0.450" in v.evidence
    assert "SST-2: better vs [CLS] probe, tie vs mean probe; IMDB: ; 20 Newsgroups: worse vs " \
           "mean probe; better in 1, tie in 1, worse in 1 of 3." in v.evidence
    assert v.our_value.startswith("acc SST-2 DDCL 0.750 / mean 0.750; IMDB (K=4) DDCL 0.700")
    assert v.n_seeds == 3 and v.tolerance.abs == 0.03 and v.rule


def test_decide_d14_reproduced_and_not_reproduced():
    up = [Comparison("sst2", "[CLS] probe", "DDCL K=2", 0.03, 0.01)]
    down = [Comparison("sst2", "[CLS] probe", "DDCL K=2", -0.03, 0.01)]
    assert decide_d14(_result(), up, TITLES).word == "reproduced"
    assert decide_d14(_result(), down, TITLES).word == "not reproduced"
    with pytest.raises(ValueError, match="comparisons"):
        decide_d14(_result(), [], TITLES)
