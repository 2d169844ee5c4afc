"""The D14 decision (ddcl_theory.ledger.decisions.text_readout.decide_d14) on hand-built results."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ddcl_theory.experiments.text_readout import SCALES, TITLES
from ddcl_theory.ledger import stats
from ddcl_theory.ledger.decisions.text_readout import (
    RULE,
    combine,
    corpus_word,
    decide_d14,
    deciding,
)
from ddcl_theory.ledger.verdict import Verdict


def _run(acc, finished=True):
    return SimpleNamespace(selected_test_acc=acc, finished=finished,
                           stopped="passed optimum" if finished else "max epochs", best_epoch=4)


def _corpus(ddcl, cls, mean, *, seeds=10, spread=0.01, finished=True, classes=2):
    accs = ddcl + spread * np.sin(np.arange(seeds))            # deterministic seed spread
    runs = [_run(float(a), finished) for a in accs]
    return SimpleNamespace(num_classes=classes, n_train=300, n_test=300, n_fit=240, n_val=60,
                           max_length=256, truncated=0.3, runs=runs,
                           ddcl=[float(a) for a in accs],
                           probes={"[CLS]": SimpleNamespace(test_acc=cls, c=0.01),
                                   "mean": SimpleNamespace(test_acc=mean, c=0.001)})


def _intervals(result):
    out = {}
    for name, c in result.corpora.items():
        pair = tuple(stats.paired_t(c.ddcl, [c.probes[b].test_acc] * len(c.ddcl))
                     for b in ("mean", "[CLS]"))
        out[name] = {scale: pair for scale in SCALES}
    return out


def _result(**corpora):
    return SimpleNamespace(encoder="fake", corpora=corpora)


def _decide(result):
    return decide_d14(result, _intervals(result), TITLES, SCALES)


def test_every_data_set_above_both_probes_is_reproduced():
    r = _result(sst2=_corpus(0.85, 0.70, 0.80), imdb=_corpus(0.80, 0.65, 0.75),
                **{"20ng": _corpus(0.70, 0.60, 0.62, classes=20)})
    v = _decide(r)
    assert isinstance(v, Verdict) and v.word == "reproduced"
    assert v.rule == RULE.text and v.n_seeds == 10 and v.scale.startswith(SCALES[-1])
    assert set(v.trend) == set(SCALES) and v.interval[0] > 0
    assert v.numbers["per_corpus"] == {"sst2": "reproduced", "imdb": "reproduced",
                                       "20ng": "reproduced"}
    assert "smallest detectable" in v.evidence.lower() and "Paper" in v.evidence


def test_one_data_set_below_the_mean_probe_is_not_reproduced_and_decides():
    r = _result(sst2=_corpus(0.85, 0.70, 0.80), imdb=_corpus(0.80, 0.65, 0.75),
                **{"20ng": _corpus(0.40, 0.60, 0.62, classes=20)})
    v = _decide(r)
    assert v.word == "not reproduced" and v.numbers["deciding"] == "20ng/mean"
    assert v.interval[1] < 0


def test_an_interval_across_zero_is_inconclusive():
    r = _result(sst2=_corpus(0.80, 0.70, 0.80, spread=0.02), imdb=_corpus(0.80, 0.65, 0.75))
    v = _decide(r)
    assert v.word == "inconclusive" and v.numbers["deciding"] == "sst2/mean"


def test_fewer_seeds_than_the_rule_is_at_best_inconclusive():
    r = _result(sst2=_corpus(0.85, 0.70, 0.80, seeds=3))
    assert _decide(r).word == "inconclusive" and _decide(r).n_seeds == 3


def test_an_unfinished_deciding_run_makes_it_inconclusive():
    r = _result(sst2=_corpus(0.85, 0.70, 0.80, finished=False))
    v = _decide(r)
    assert v.word == "inconclusive" and v.numbers["unfinished"] == 10


def test_corpus_word_and_combine_follow_the_rule():
    up = stats.paired_t([0.8, 0.82, 0.81], [0.7, 0.7, 0.7])
    assert corpus_word([up, up]) == "inconclusive"            # 3 seeds < 10
    assert combine(["reproduced", "reproduced"]) == "reproduced"
    assert combine(["reproduced", "not reproduced", "inconclusive"]) == "not reproduced"
    assert combine(["reproduced", "inconclusive"]) == "inconclusive"
    with pytest.raises(ValueError):
        combine([])
    low = stats.paired_t([0.5, 0.52, 0.51], [0.7, 0.7, 0.7])
    assert deciding({"a": (up, low), "b": (up, up)}, "not reproduced") == ("a", "[CLS]")


def test_the_counts_of_runs_by_stop_rule_carry_their_binomial_allowance():
    from ddcl_theory.ledger.tolerance import compare_text, count_allowance

    r = _result(sst2=_corpus(0.85, 0.70, 0.80, seeds=3), imdb=_corpus(0.80, 0.65, 0.75, seeds=3),
                **{"20ng": _corpus(0.70, 0.60, 0.62, seeds=3, classes=20)})
    r.corpora["sst2"].runs[0].stopped = "plateau"
    v = _decide(r)
    assert "validation plateau 1, early-stopped past the validation optimum 8" in v.evidence
    assert v.tolerance.count_abs == count_allowance(1, 9) == 3
    assert v.tolerance.abs == 0.05 and "count_allowance" in v.tolerance.reason
    moved = v.evidence.replace("plateau 1, early", "plateau 0, early").replace(
        "optimum 8)", "optimum 9)")
    assert compare_text(v.evidence, moved, v.tolerance) == []
    assert compare_text(v.evidence, v.evidence.replace("plateau 1,", "plateau 5,"),
                        v.tolerance) != []
