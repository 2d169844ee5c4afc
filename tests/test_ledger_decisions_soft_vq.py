"""The decision of claim D11 (ddcl_theory.ledger.decisions.soft_vq) on hand-built inputs."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ddcl_theory.experiments.soft_vq import Arm, Candidate
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions.soft_vq import decide_d11, epoch_trend, size_trend
from ddcl_theory.ledger.verdict import Verdict

SOFT, EMA = Arm("soft", r=0.1), Arm("ema", decay=0.8, threshold=2.0)
GRADS = SimpleNamespace(soft=1e-3, hard_without_estimator=0.0)
JITTER = np.array([0.0, 0.01, -0.01, 0.02, -0.02, 0.015, -0.015])


def _run(method, seed, n, usage, rel=0.5, expiries=5):
    return SimpleNamespace(seed=seed, n_train=n, held_out_usage=list(usage),
                           rel_mse=[rel] * len(usage), usage=list(usage),
                           expiries=[expiries if method == "ema" else 0] * len(usage),
                           plateau=True)


class _Result(SimpleNamespace):
    def select(self, method, n_train=None):
        n = self.settings.n_train[-1] if n_train is None else n_train
        return [x for x in self.runs[method] if x.n_train == n]


def _result(soft=0.99, ema=0.6, seeds=5, rel=0.5, expiries=5, epochs=3):
    sizes = (100, 200, 400)
    runs = {m: [] for m in ("soft", "ema", "hard")}
    for n in sizes:
        for i in range(seeds):
            j = JITTER[i] * 0.5
            runs["soft"].append(_run("soft", i, n, [min(soft + j, 1.0)] * epochs, rel))
            runs["ema"].append(_run("ema", i, n, [ema - j] * epochs, 0.4, expiries))
            runs["hard"].append(_run("hard", i, n, [0.2] * epochs, 0.4))
    settings = SimpleNamespace(n_train=sizes, seeds=tuple(range(seeds)), epochs=epochs,
                               num_codes=64)
    selection = [Candidate(SOFT, 0.9, 0.5, 0, True, True),
                 Candidate(EMA, 0.8, 0.4, expiries, expiries > 0, True)]
    return _Result(settings=settings, runs=runs, soft=SOFT, ema=EMA, selection=selection,
                   source="cifar10")


def test_d11_reproduced_when_soft_keeps_the_codebook_and_beats_vq():
    v = decide_d11(_result(soft=0.99), GRADS)
    assert isinstance(v, Verdict) and v.claim == "D11" and v.word == "reproduced"
    assert v.n_seeds == 5 and v.rule == rule_of("D11").text and v.tolerance is not None
    assert v.scale == "400 images, epoch 1"
    assert list(v.trend) == ["100 images", "200 images", "400 images"]
    assert v.interval[0] > 0.95


def test_d11_not_reproduced_when_soft_usage_after_epoch_one_is_low():
    v = decide_d11(_result(soft=0.2), GRADS)
    assert v.word == "not reproduced"
    assert v.interval[1] < 0.95                                 # test 1 decides
    assert "after epoch 1 0.20" in v.our_value


def test_d11_not_reproduced_when_vq_uses_more_codes():
    v = decide_d11(_result(soft=0.97, ema=1.0), GRADS)
    assert v.word == "not reproduced"
    assert v.interval[1] <= 0                                   # test 2 decides


def test_d11_inconclusive_below_the_rules_seeds_or_on_a_straddle():
    assert decide_d11(_result(soft=0.2, seeds=3), GRADS).word == "inconclusive"
    v = decide_d11(_result(soft=0.95), GRADS)                    # interval straddles 0.95
    assert v.word == "inconclusive"


def test_d11_requires_reconstruction_and_no_estimator():
    assert decide_d11(_result(soft=0.99, rel=1.02), GRADS).word == "not reproduced"
    bad = SimpleNamespace(soft=1e-3, hard_without_estimator=1e-4)
    v = decide_d11(_result(soft=0.99), bad)
    assert v.word == "not reproduced" and "estimator" in v.evidence
    # below the rule's seeds a failed requirement is at best inconclusive
    assert decide_d11(_result(soft=0.99, rel=1.02, seeds=3), GRADS).word == "inconclusive"


def test_d11_void_when_expiry_never_fires():
    v = decide_d11(_result(soft=0.99, expiries=0), GRADS)
    assert v.word == "inconclusive" and v.numbers["void"]
    assert "void" in v.evidence


def test_trends_over_sizes_and_epochs():
    res = _result(soft=0.5, epochs=4)
    assert list(epoch_trend(res, 0)) == ["epoch 1", "epoch 2", "epoch 3", "epoch 4"]
    est, low, high = size_trend(res, 1)["400 images"]
    assert low <= est <= high and est < 0
