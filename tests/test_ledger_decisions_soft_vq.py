"""The decision of claim D11 (ddcl_theory.ledger.decisions.soft_vq) on hand-built inputs: every
side of the registered rule and of the other reading shown beside it."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from ddcl_theory.experiments import soft_vq
from ddcl_theory.experiments.soft_vq import Arm
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions.soft_vq import decide_d11, other_reading, size_trend
from ddcl_theory.ledger.rules import RULES
from ddcl_theory.ledger.verdict import Verdict

ARMS = {"soft_uniform": Arm("soft", r=0.03, start="uniform"),
        "soft_data": Arm("soft", r=0.1, start="data"), "hard": Arm("hard"),
        "ema": Arm("ema", decay=0.8, threshold=2.0)}
GRADS = SimpleNamespace(soft=1e-3, hard_without_estimator=0.0)
SIZES = (100, 200, 400)


def _jitter(i: int) -> float:
    """A small spread across seeds that sums to about zero."""
    return 0.01 * ((i % 5) - 2)


def _run(name, seed, n, train, test, rel, expiries, epochs):
    ema = name == "ema"
    return SimpleNamespace(
        seed=seed, n_train=n, usage=[train] * epochs, held_out_usage=[test] * epochs,
        rel_mse=[rel] * epochs, expiries=[expiries if ema else 0] * epochs,
        first_batch_usage=1.0 if name in ("soft_data", "ema") else 0.05,
        tau_over_tc=(ARMS[name].r, 0.5 * ARMS[name].r) if name.startswith("soft")
        else (math.nan, math.nan),
        grad_ratio=[0.01 if name.startswith("soft") else 0.0 if name == "hard" else math.nan]
        * epochs)


class _Result(SimpleNamespace):
    def select(self, name, n_train=None):
        n = self.settings.n_train[-1] if n_train is None else n_train
        return [x for x in self.runs[name] if x.n_train == n]


def _result(soft=0.99, hard=0.2, soft_test=0.2, ema_test=0.99, seeds=10, rel=0.5,
            expiries=5, epochs=3):
    runs = {name: [] for name in ARMS}
    for n in SIZES:
        for i in range(seeds):
            j = _jitter(i)
            runs["soft_uniform"].append(_run("soft_uniform", i, n, min(soft + j, 1.0), 0.3,
                                             rel, 0, epochs))
            runs["hard"].append(_run("hard", i, n, min(hard - j, 1.0), hard, 0.4, 0, epochs))
            runs["soft_data"].append(_run("soft_data", i, n, 1.0, min(soft_test + j, 1.0),
                                          0.5, 0, epochs))
            runs["ema"].append(_run("ema", i, n, 1.0, min(ema_test - j, 1.0), 0.4, expiries,
                                    epochs))
    settings = SimpleNamespace(n_train=SIZES, seeds=tuple(range(seeds)), epochs=epochs,
                               num_codes=64)
    return _Result(settings=settings, runs=runs, soft=ARMS["soft_uniform"],
                   soft_data=ARMS["soft_data"], ema=ARMS["ema"], selection=[],
                   source="cifar10", long_runs=[])


def test_d11_reproduced_when_the_uniform_start_soft_bank_uses_every_code_in_epoch_one():
    v = decide_d11(_result(soft=0.99), GRADS)
    assert isinstance(v, Verdict) and v.claim == "D11" and v.word == "reproduced"
    assert [t.word for t in v.tests[:2]] == ["reproduced", "reproduced"]
    assert [t.binding for t in v.tests] == [True, True, False, False]   # 3, 4 beside
    assert v.n_seeds == 10 and v.rule == rule_of("D11").text and v.tolerance is not None
    assert v.scale == "400 images, epoch 1" and v.interval[0] > 0.95
    assert list(v.trend) == ["100 images", "200 images", "400 images"]
    assert all(g.passed for g in v.gates)
    assert len(v.per_seed[rule_of("D11").tests[0].statistic]) == 10


def test_d11_not_reproduced_when_the_soft_bank_uses_a_fraction_of_the_codes():
    v = decide_d11(_result(soft=0.3), GRADS)
    assert v.word == "not reproduced" and v.tests[0].word == "not reproduced"
    assert v.interval[1] < 0.95                                  # test 1 binds
    assert "soft 0.30" in v.our_value


def test_d11_not_reproduced_when_soft_beats_hard_by_a_negligible_margin():
    # soft at the claimed size, but hard too: the difference is real and below the SESOI
    v = decide_d11(_result(soft=0.99, hard=0.9), GRADS)
    assert v.tests[0].word == "reproduced" and v.tests[1].word == "not reproduced"
    assert v.word == "not reproduced"
    assert 0 < v.interval[0] and v.interval[1] < rule_of("D11").tests[1].sesoi


def test_d11_not_reproduced_when_hard_uses_more_codes():
    v = decide_d11(_result(soft=0.97, hard=1.0), GRADS)
    assert v.word == "not reproduced" and v.interval[1] < 0          # the wrong sign


def test_d11_inconclusive_on_a_straddle_and_below_the_rules_seeds():
    v = decide_d11(_result(soft=0.95), GRADS)                       # interval holds 0.95
    assert v.tests[0].word == "inconclusive" and v.word == "inconclusive"
    few = decide_d11(_result(soft=0.3, seeds=5), GRADS)
    assert few.tests[0].word == "not reproduced" and few.word == "inconclusive"


def test_d11_gates_make_the_word_inconclusive():
    v = decide_d11(_result(soft=0.99, rel=1.02), GRADS)
    assert v.word == "inconclusive" and not v.gates[0].passed
    assert "reconstructs" in v.evidence
    bad = SimpleNamespace(soft=1e-3, hard_without_estimator=1e-4)
    v = decide_d11(_result(soft=0.99), bad)
    assert v.word == "inconclusive" and not v.gates[1].passed
    # a gate never turns a decisive interval into another decisive word
    v = decide_d11(_result(soft=0.3, rel=1.02), GRADS)
    assert v.tests[0].word == "not reproduced" and v.word == "inconclusive"


def test_other_reading_is_decided_beside_and_never_the_claims_word():
    res = _result(soft=0.99, soft_test=0.2, ema_test=0.99)
    word, tests, gates = other_reading(res)
    assert word == "not reproduced" and tests[0].word == "not reproduced"
    assert tests[1].estimate < 0 and all(g.passed for g in gates)
    v = decide_d11(res, GRADS)
    assert v.word == "reproduced" and v.numbers["other_reading"]["word"] == "not reproduced"
    assert RULES["D11"].beside[0].statistic in v.per_seed
    assert [t.word for t in v.tests[2:]] == ["not reproduced", "not reproduced"]
    assert v.numbers["other_reading"]["tests"] == [t.to_dict() for t in v.tests[2:]]
    word, _, _ = other_reading(_result(soft_test=0.99, ema_test=0.5))
    assert word == "reproduced"


def test_other_reading_is_void_when_expiry_never_fires():
    word, tests, gates = other_reading(_result(soft_test=0.99, ema_test=0.5, expiries=0))
    assert [t.word for t in tests] == ["reproduced", "reproduced"]
    assert word == "inconclusive" and not gates[1].passed


def test_trends_over_sizes_for_both_readings():
    res = _result(soft=0.5)
    est, low, high = size_trend(res, 0)["400 images"]
    assert low <= est <= high and est == pytest.approx(0.5, abs=0.01)
    est, low, high = size_trend(res, 1, "other")["400 images"]
    assert high < 0
    with pytest.raises(ValueError, match="reading"):
        size_trend(res, 0, "third")


def test_unpaired_runs_are_refused():
    res = _result()
    res.runs["hard"] = [x for x in res.runs["hard"] if x.seed != 3]
    with pytest.raises(ValueError, match="not paired"):
        decide_d11(res, GRADS)


def test_the_rules_seeds_are_the_reference_profiles():
    assert RULES["D11"].n_seeds == soft_vq.CONFIRMATORY_SEEDS
    assert all(t.s >= t.margin for t in RULES["D11"].tests)
    assert RULES["D11"].tests[0].margin == soft_vq.FULL_USAGE
