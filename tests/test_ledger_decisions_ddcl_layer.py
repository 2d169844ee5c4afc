"""Decision rules of the DDCL-layer chapter (D1, D2, D15, D16) on small hand-built inputs."""
from __future__ import annotations

from types import SimpleNamespace as NS

from ddcl_theory.ledger.decisions import ddcl_layer as dec

D1_OK = dict(min_q=0.0, row_error=1e-7, centroid_error=1e-6, rule_error=1e-8, inside_box=True,
             unchanged=True)


def test_d1_confirmed_when_every_check_passes_and_refuted_otherwise():
    v = dec.decide_d1(**D1_OK)
    assert v.claim == "D1" and v.word == "confirmed" and "< 1e-06" in v.our_value
    assert dec.decide_d1(**{**D1_OK, "row_error": 1e-5}).word == "refuted"
    assert dec.decide_d1(**{**D1_OK, "unchanged": False}).word == "refuted"


def _counts(attention):
    return NS(seq_lens=[64, 256, 1024], ddcl=[100, 400, 1600], attention=attention)


STORED = dict(ratio_at={16384: {"sdpa_over_ddcl_wall": 65.0, "ddcl_over_bare_cpu": 1.2}},
              mem_lens=[1024, 65536], mem_ddcl=[6.0, 7.0])


def test_d2_confirmed_for_affine_counts_and_linear_against_quadratic_slopes():
    v = dec.decide_d2(_counts([200, 2000, 22400]), slope_ddcl=1.03, slope_sdpa=2.25, **STORED)
    assert v.word == "confirmed" and "2x at T = 64" in v.evidence and "65x" in v.our_value
    assert dec.decide_d2(_counts([200, 2000, 22400]), slope_ddcl=1.5, slope_sdpa=2.25,
                         **STORED).word == "refuted"
    not_affine = NS(seq_lens=[64, 256, 1024], ddcl=[100, 400, 2000], attention=[200, 2000, 22400])
    assert dec.decide_d2(not_affine, slope_ddcl=1.0, slope_sdpa=2.0, **STORED).word == "refuted"


def _log(acc, v=(0.5, 0.3), finite=True):
    return NS(all_finite=finite, v=list(v), test_acc=[0.1, acc])


def test_d15_reproduced_when_trainable_above_chance_and_not_otherwise():
    settings = NS(epochs=4, n_train=1000, n_test=500)
    good = NS(logs={"ddcl": _log(0.22), "mean": _log(0.3), "block": _log(0.27)}, chance=0.1)
    v = dec.decide_d15(good, settings)
    assert v.word == "reproduced" and v.tolerance is dec.D15_TOLERANCE
    assert "acc readout 0.220, block 0.270, mean pool 0.300, chance 0.10" == v.our_value
    near_chance = NS(logs={**good.logs, "block": _log(0.12)}, chance=0.1)
    assert dec.decide_d15(near_chance, settings).word == "not reproduced"
    blown_up = NS(logs={**good.logs, "ddcl": _log(0.22, finite=False)}, chance=0.1)
    assert dec.decide_d15(blown_up, settings).word == "not reproduced"


def test_d16_qualified_only_for_explained_variance_and_peaked_assignments():
    assert dec.decide_d16(NS(r2=0.8, mean_top2=0.9)).word == "qualified"
    assert dec.decide_d16(NS(r2=0.4, mean_top2=0.9)).word == "not reproduced"
    assert dec.decide_d16(NS(r2=0.8, mean_top2=0.7)).word == "not reproduced"
