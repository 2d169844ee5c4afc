"""The D14 decision (ddcl_theory.ledger.decisions.text_readout.decide_d14) on hand-built results:
every side of the registered rule, its gates, its binding test and its per-seed values."""
from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import numpy as np
import pytest

from ddcl_theory.experiments.text_readout import TITLES
from ddcl_theory.ledger.decisions.text_readout import (
    BASELINES,
    CORPORA,
    RULE,
    Cell,
    binding,
    cells,
    decide_d14,
    pilot,
)
from ddcl_theory.ledger.design import TestResult
from ddcl_theory.ledger.verdict import Verdict

decide_d14 = partial(decide_d14, n_resamples=999)     # the tests' intervals need no more


def _items(effect: float, n: int, disagree: float, seed: int) -> np.ndarray:
    """n per-item differences (-1, 0, 1) with mean ``effect`` and a share ``disagree`` of
    items on which the arms differ."""
    plus = round(n * (disagree + effect) / 2)
    minus = round(n * (disagree - effect) / 2)
    values = np.array([1] * plus + [-1] * minus + [0] * (n - plus - minus))
    return np.random.default_rng(seed).permutation(values)


class _Run:
    def __init__(self, seed, effects, n, disagree, finished=True):
        self.seed = seed
        self.items = {b: _items(effects[b], n, disagree, 100 * seed + i)
                      for i, b in enumerate(BASELINES)}
        self.ddcl = SimpleNamespace(finished=finished,
                                    stopped="passed optimum" if finished else "max epochs",
                                    selected_test_acc=0.8)
        self.probes = {b: SimpleNamespace(converged=True, test_acc=0.8 - effects[b])
                       for b in BASELINES}

    def paired(self, baseline):
        return self.items[baseline]


def _corpus(effects, *, seeds=10, n=300, disagree=0.2, stronger="mean", finished=True):
    runs = {share: [_Run(s, effects, n, disagree, finished) for s in range(seeds)]
            for share in (0.5, 1.0)}
    tuning = SimpleNamespace(stronger=stronger, chosen=SimpleNamespace(label="K=16, H=4"),
                             chosen_c=lambda b: 0.01)
    return SimpleNamespace(n_train=1000, n_test=n * seeds, max_length=256, tuning=tuning,
                           scales=runs, seeds=runs[1.0])


def _result(effects=None, **kw):
    effects = effects or {}
    corpora = {}
    for name in CORPORA:
        e = effects.get(name, {"mean": 0.1, "[CLS]": 0.1})
        corpora[name] = _corpus(e, **kw.get(name, {}))
    return SimpleNamespace(encoder="fake", corpora=corpora)


def test_every_test_above_its_margin_is_reproduced_and_reports_its_design():
    v = decide_d14(_result(), TITLES)
    assert isinstance(v, Verdict) and v.word == "reproduced"
    assert len(v.tests) == 6 and all(t.word == "reproduced" for t in v.tests)
    assert [t.statistic for t in v.tests] == [t.statistic for t in RULE.tests]
    assert v.rule == RULE.text and v.n_seeds == 10 and v.interval[0] > 0
    assert all(t.method == "bootstrap over seeds and items" for t in v.tests)
    assert set(v.trend) == {"50% of the training draw", "100% of the training draw"}
    assert all(g.passed for g in v.gates) and "MiniLM" in v.evidence


def test_a_clear_effect_of_the_wrong_sign_is_not_reproduced_and_binds():
    v = decide_d14(_result({"20ng": {"mean": -0.2, "[CLS]": -0.15}}), TITLES)
    assert v.word == "not reproduced" and v.numbers["binding"] == "20ng/mean"
    assert v.interval[1] < 0 and v.numbers["words"]["sst2/mean"] == "reproduced"


def test_a_real_but_negligible_gain_is_not_reproduced():
    # +0.005 on 10,000 items: the interval excludes 0 yet lies below the SESOI of 0.02
    effects = {"imdb": {"mean": 0.005, "[CLS]": 0.1}}
    v = decide_d14(_result(effects, imdb={"n": 1000, "disagree": 0.02}), TITLES)
    test = v.tests[CORPORA.index("imdb") * 2]
    assert test.interval[0] > 0 and test.interval[1] < RULE.tests[2].s
    assert test.word == "not reproduced" and v.word == "not reproduced"


def test_an_interval_holding_both_the_margin_and_the_sesoi_is_inconclusive():
    effects = {"sst2": {"mean": 0.01, "[CLS]": 0.1}}
    v = decide_d14(_result(effects, sst2={"n": 100, "disagree": 0.3}), TITLES)
    test = v.tests[0]
    assert test.interval[0] < 0 < RULE.tests[0].s < test.interval[1]
    assert v.word == "inconclusive" and v.numbers["binding"] == "sst2/mean"


def test_a_pilot_keeps_the_intervals_and_words_of_a_run_with_the_rule_seeds():
    row = TestResult("s", ">", 0.0, 0.02, [0.05, 0.1], 0.075, "m", 3, 10, 0.01, "reproduced")
    full = TestResult("s", ">", 0.0, 0.02, [0.05, 0.1], 0.075, "m", RULE.n_seeds, 10, 0.01,
                      "reproduced")
    assert [r.word for r in pilot([row, full])] == ["inconclusive", "reproduced"]
    assert pilot([row])[0].interval == row.interval


def test_a_failed_gate_makes_a_decisive_result_inconclusive_and_keeps_the_interval():
    v = decide_d14(_result(imdb={"finished": False}), TITLES)
    assert v.word == "inconclusive" and all(t.word == "reproduced" for t in v.tests)
    gate = next(g for g in v.gates if not g.passed)
    assert "epoch cap" in gate.detail and v.interval[0] > 0


def test_fewer_seeds_than_the_rule_registers_is_a_pilot_that_decides_nothing():
    few = {name: {"seeds": 3} for name in CORPORA}
    effects = {"20ng": {"mean": -0.2, "[CLS]": -0.2}}
    v = decide_d14(_result(effects, **few), TITLES)
    assert v.word == "inconclusive" and v.n_seeds == 3 and "A pilot" in v.evidence
    assert all(t.word == "inconclusive" for t in v.tests)    # each test too
    assert v.tests[4].interval[1] < 0                         # its interval is kept
    # nothing is decided, so the binding test is the first against a stronger probe
    assert v.numbers["binding"] == "sst2/mean"


def test_the_binding_test_prefers_the_stronger_probe_named_on_validation():
    # both probes are beaten by the same margin on 20NG: the stronger one binds, not the
    # first in order
    effects = {"20ng": {"mean": -0.2, "[CLS]": -0.2}}
    v = decide_d14(_result(effects, **{"20ng": {"stronger": "[CLS]"}}), TITLES)
    assert v.numbers["binding"] == "20ng/[CLS]"
    v = decide_d14(_result(effects, **{"20ng": {"stronger": "mean"}}), TITLES)
    assert v.numbers["binding"] == "20ng/mean"


def test_binding_picks_the_lowest_interval_among_the_tests_that_give_the_word():
    def row(word, low, high):
        return TestResult("s", ">", 0.0, 0.02, [low, high], (low + high) / 2, "m", 10, 10,
                          0.01, word)

    results = [row("reproduced", 0.05, 0.1), row("reproduced", 0.03, 0.1),
               row("not reproduced", -0.1, -0.05), row("not reproduced", -0.3, -0.2),
               row("reproduced", 0.05, 0.1), row("reproduced", 0.05, 0.1)]
    stronger = {"sst2": "mean", "imdb": "mean", "20ng": "mean"}
    assert binding(results, stronger) == 2                # the stronger probe first
    assert binding(results, {**stronger, "imdb": "[CLS]"}) == 3
    every = [row("reproduced", low, 0.2) for low in (0.05, 0.03, 0.04, 0.06, 0.07, 0.08)]
    assert binding(every, stronger) == 2                  # the weakest against the stronger
    open_ = [row("inconclusive", -0.01, high) for high in (0.1, 0.05, 0.09, 0.03, 0.2, 0.2)]
    assert binding(open_, {**stronger, "sst2": "[CLS]"}) == 1      # the first, in order


def test_per_seed_values_carry_every_item_and_recompute_the_estimate():
    v = decide_d14(_result(), TITLES)
    first = RULE.tests[0].statistic
    per_item = v.per_seed[f"{first} (per item)"]
    assert len(per_item) == 10 and all(len(x) == 300 for x in per_item)
    assert v.per_seed[first] == pytest.approx([np.mean(x) for x in per_item])
    assert v.tests[0].estimate == pytest.approx(np.mean(v.per_seed[first]))


def test_cells_need_every_corpus_and_a_cell_of_one_seed_is_a_point():
    result = _result()
    del result.corpora["imdb"]
    with pytest.raises(ValueError, match="imdb"):
        cells(result)
    cell = Cell("sst2", "mean", [np.array([1, 0, 0, 1])])
    iv = cell.interval()
    assert iv.low == iv.high == 0.5 and np.isnan(cell.spread)
    with pytest.raises(ValueError, match="items"):
        Cell("sst2", "mean", [])


def test_the_counts_of_runs_by_stop_rule_carry_their_binomial_allowance():
    from ddcl_theory.ledger.tolerance import count_allowance

    result = _result()
    result.corpora["sst2"].scales[1.0][0].ddcl.stopped = "plateau"
    v = decide_d14(result, TITLES)
    assert "plateau 1, past the validation optimum 59, of 60" in v.evidence
    assert v.tolerance.count_abs == max(count_allowance(1, 60), count_allowance(59, 60))
    assert v.tolerance.abs == 0.05 and "count_allowance" in v.tolerance.reason
