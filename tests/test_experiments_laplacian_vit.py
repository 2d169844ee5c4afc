"""The Laplacian-head ViT sweep (L6-L8): tiny runs return finite, reproducible numbers and resume
after a kill to the same numbers. The verdict rules are tested in
test_ledger_decisions_laplacian_experiments."""
from __future__ import annotations

import dataclasses
import math

import pytest

from ddcl_theory.experiments import laplacian_vit as lv
from ddcl_theory.runtime.rundir import RunDir

from _killers import Killed, KilledAfter


def tiny_vit() -> lv.ViTSettings:
    return dataclasses.replace(lv.ViTSettings.from_profile(), n_train=64, n_test=60, dim=8,
                               heads=2, depth=1, epochs=1, batch_size=32, seeds=(0,),
                               head_settings=("0", "all"))


def test_tiny_vit_sweep_is_finite_and_reproducible():
    a = lv.run(tiny_vit())
    b = lv.run(tiny_vit())
    assert a.runs == b.runs                                   # bit-identical on CPU
    assert [r.laplacian_heads for r in a.runs] == [0, 2]
    for r in a.runs:
        values = [v for v in dataclasses.asdict(r).values() if isinstance(v, float)]
        assert all(math.isfinite(v) for v in values)
        assert 0.0 <= r.test_acc <= 1.0 and 1 <= r.k99 <= 8
        assert r.within_seq + r.between_seq == pytest.approx(1.0)
        assert r.within_class + r.between_class == pytest.approx(r.between_seq)
    assert a.runs[0].lap_sign_balance is None and -1 <= a.runs[0].attn_sign_balance <= 1
    assert a.runs[1].attn_sign_balance is None and -1 <= a.runs[1].lap_sign_balance <= 1
    assert set(a.summary("lap_sign_balance")) == {"all"}


def test_laplacian_count_names():
    assert [lv.laplacian_count(s, 6) for s in lv.HEAD_SETTINGS] == [0, 1, 3, 6]
    assert lv.laplacian_count("5", 12) == 5
    for bad in ("most", "5", "-1"):
        with pytest.raises(ValueError, match="setting"):
            lv.laplacian_count(bad, 4)


def test_a_killed_vit_run_resumes_to_the_same_numbers(tmp_path):
    s = dataclasses.replace(tiny_vit(), epochs=4)
    *tensors, _, num_classes = lv.prepare_patches(s)
    whole = lv.train_one(s, "half", 0, tuple(tensors), num_classes, "cpu")
    with pytest.raises(Killed):                          # killed after epoch 2 of 4
        lv.train_one(s, "half", 0, tuple(tensors), num_classes, "cpu",
                     KilledAfter("vit-test", s, root=tmp_path, enabled=True, saves=2))
    run = RunDir("vit-test", s, root=tmp_path, enabled=True)
    assert run.state_path("state-setting=half,seed=0").is_file()
    assert lv.train_one(s, "half", 0, tuple(tensors), num_classes, "cpu", run) == whole


def test_compare_is_the_decision_rules_comparison():
    summary = {"a": (1.0, 0.3), "b": (0.5, 0.4), "c": (0.0, 0.0)}
    assert lv.compare(summary, "a", "c") == 1 and lv.compare(summary, "a", "b") == 0


def test_settings_validation():
    with pytest.raises(ValueError, match="dim"):
        dataclasses.replace(lv.ViTSettings.from_profile(), dim=0)
