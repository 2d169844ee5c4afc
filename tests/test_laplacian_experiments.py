"""The Laplacian-head sweeps (L6-L9): tiny runs return finite, reproducible numbers and resume
after a kill to the same numbers. The verdict rules are tested in
test_ledger_decisions_laplacian_experiments."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from ddcl_theory import data
from ddcl_theory.experiments import laplacian_gpt as lg
from ddcl_theory.experiments import laplacian_vit as lv
from ddcl_theory.runtime.rundir import RunDir


def tiny_vit() -> lv.ViTSettings:
    return dataclasses.replace(lv.ViTSettings.from_profile(), n_train=64, n_test=60, dim=8,
                               heads=2, depth=1, epochs=1, batch_size=32, seeds=(0,),
                               head_settings=("0", "all"))


def tiny_gpt() -> lg.GPTSettings:
    return dataclasses.replace(lg.GPTSettings.from_profile(), block_size=8, dim=8, heads=2,
                               depth=1, batch_size=8, steps=5, eval_windows=32, cdnv_min_count=2,
                               seeds=(0,), head_settings=("0", "all"), l9_setting="all")


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


def test_tiny_gpt_sweep_is_finite_and_reproducible():
    a = lg.run(tiny_gpt())
    b = lg.run(tiny_gpt())
    assert a.runs == b.runs
    for r in a.runs:
        assert math.isfinite(r.val_loss) and 0 < r.val_loss < 2 * math.log(a.vocab_size)
        assert math.isfinite(r.cdnv) and r.cdnv > 0 and 1 <= r.k99 <= 8
        assert 0.0 <= r.within_seq <= 1.0


def test_encode_round_trip():
    ids, vocab = lg.encode("to be, or not to be")
    assert "".join(vocab[i] for i in ids) == "to be, or not to be"
    assert vocab == sorted(vocab)
    with pytest.raises(ValueError, match="text"):
        lg.encode("")


def test_laplacian_count_names():
    assert [lv.laplacian_count(s, 6) for s in lv.HEAD_SETTINGS] == [0, 1, 3, 6]
    assert lv.laplacian_count("5", 12) == 5
    for bad in ("most", "5", "-1"):
        with pytest.raises(ValueError, match="setting"):
            lv.laplacian_count(bad, 4)


def test_settings_validation():
    with pytest.raises(ValueError, match="dim"):
        dataclasses.replace(lv.ViTSettings.from_profile(), dim=0)
    with pytest.raises(ValueError, match="seeds"):
        dataclasses.replace(lg.GPTSettings.from_profile(), seeds=())
    with pytest.raises(ValueError, match="l9_setting"):
        dataclasses.replace(lg.GPTSettings.from_profile(), l9_setting="3")


# ---------------------------------------------------------------- resume after a kill

class _Killed(Exception):
    pass


class _KilledAfter(RunDir):
    """A run directory whose process dies right after its ``saves``-th state save."""

    def __init__(self, *args, saves: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.left = saves

    def save_state(self, *args, **kwargs) -> None:
        super().save_state(*args, **kwargs)
        self.left -= 1
        if self.left == 0:
            raise _Killed


def test_a_killed_vit_run_resumes_to_the_same_numbers(tmp_path):
    s = dataclasses.replace(tiny_vit(), epochs=4)
    *tensors, _, num_classes = lv.prepare_patches(s)
    whole = lv.train_one(s, "half", 0, tuple(tensors), num_classes, "cpu")
    with pytest.raises(_Killed):                          # killed after epoch 2 of 4
        lv.train_one(s, "half", 0, tuple(tensors), num_classes, "cpu",
                     _KilledAfter("vit-test", s, root=tmp_path, enabled=True, saves=2))
    run = RunDir("vit-test", s, root=tmp_path, enabled=True)
    assert run.state_path("state-setting=half,seed=0").is_file()
    assert lv.train_one(s, "half", 0, tuple(tensors), num_classes, "cpu", run) == whole


def test_a_killed_gpt_run_resumes_to_the_same_numbers(tmp_path):
    s = dataclasses.replace(tiny_gpt(), steps=23)        # rounds of 2 steps, the last of 1
    text, _ = data.load_text()
    ids, vocab = lg.encode(text)
    cut = int(0.9 * len(ids))
    train_ids, val_ids = torch.from_numpy(ids[:cut]), torch.from_numpy(ids[cut:])
    args = (s, "all", 0, train_ids, val_ids, len(vocab), "cpu")
    whole = lg.train_one(*args)
    with pytest.raises(_Killed):
        lg.train_one(*args, _KilledAfter("gpt-test", s, root=tmp_path, enabled=True, saves=5))
    run = RunDir("gpt-test", s, root=tmp_path, enabled=True)
    assert lg.train_one(*args, run) == whole
    assert not run.state_path("state-setting=all,seed=0").exists()


def test_compare_is_the_decision_rules_comparison():
    summary = {"a": (1.0, 0.3), "b": (0.5, 0.4), "c": (0.0, 0.0)}
    assert lv.compare(summary, "a", "c") == 1 and lv.compare(summary, "a", "b") == 0
