"""The decision of claim D11 (ddcl_theory.ledger.decisions.soft_vq) on hand-built inputs."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ddcl_theory.ledger.decisions.soft_vq import decide_d11
from ddcl_theory.ledger.verdict import Verdict

FULL, RECON = 0.95, 0.8


class _Result(SimpleNamespace):
    def usage(self, method):
        return np.array(self.usages[method])

    def usage_later(self, method):
        per_run = [np.mean(u[1:]) for u in self.usages[method]]
        return float(np.mean(per_run)), float(np.std(per_run))


def _result(hard=((0.2, 0.3, 0.3), (0.3, 0.3, 0.4))):
    settings = SimpleNamespace(num_codes=64, n_train=640, epochs=3, seeds=(0, 1),
                               main_temperature=0.1)
    return _Result(settings=settings, source="cifar10", image_size=16, tokens_per_image=16,
                   usages={"hard": [list(u) for u in hard],
                           "ema": [[1.0, 0.5, 0.6], [1.0, 0.4, 0.5]]})


def _row(r=0.1, *, reconstructs=True, sustained=False, later=(0.2, 0.05)):
    return {"r": r, "usage_first": (1.0, 0.0), "usage_later": later, "usage_last": (0.2, 0.0),
            "rel_mse": (0.4, 0.02), "rel_mse_codes": (0.4, 0.02), "reconstructs": reconstructs,
            "sustained": sustained}


GRADS = SimpleNamespace(soft=1e-3, hard_without_estimator=0.0)


def _decide(table, grads=GRADS, result=None):
    return decide_d11(result or _result(), grads, table, full_usage=FULL, reconstructs=RECON)


def test_d11_reproduced_when_a_reconstructing_temperature_keeps_the_codebook():
    v = _decide([_row(sustained=True, later=(1.0, 0.0))])
    assert isinstance(v, Verdict) and v.claim == "D11" and v.word == "reproduced"
    assert v.n_seeds == 2 and v.tolerance is not None and v.rule


def test_d11_qualified_when_usage_after_epoch_one_is_clearly_above_hard_vq():
    v = _decide([_row(later=(0.8, 0.05))])
    assert v.word == "qualified"
    assert v.numbers["ahead_and_reconstructing"] == [0.1]


def test_d11_not_reproduced_when_usage_is_within_the_spread_of_hard_vq():
    v = _decide([_row(later=(0.32, 0.05))])
    assert v.word == "not reproduced"
    assert "never full in 3 epochs" in v.evidence


def test_d11_usage_counts_only_where_the_quantiser_reconstructs():
    v = _decide([_row(reconstructs=False, sustained=True, later=(1.0, 0.0))])
    assert v.word == "not reproduced"


def test_d11_needs_the_gradient_without_an_estimator():
    table = [_row(sustained=True, later=(1.0, 0.0))]
    for grads in (SimpleNamespace(soft=0.0, hard_without_estimator=0.0),
                  SimpleNamespace(soft=1e-3, hard_without_estimator=1e-4)):
        assert _decide(table, grads).word == "not reproduced"


def test_d11_evidence_names_the_epoch_at_which_hard_vq_is_full():
    v = _decide([_row()], result=_result(hard=((0.2, 0.96, 1.0), (0.3, 0.97, 1.0))))
    assert "full at epoch 2" in v.evidence
    assert v.our_value == "soft (r=0.1) usage 1.00 -> 0.20; hard 0.25 -> 1.00 over 3 epochs"

