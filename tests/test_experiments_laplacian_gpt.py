"""The Laplacian-head character GPT (L8, L9): tiny runs return finite, reproducible numbers and
resume after a kill to the same numbers. The verdict rules are tested in
test_ledger_decisions_laplacian_experiments."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from ddcl_theory import data
from ddcl_theory.experiments import laplacian_gpt as lg
from ddcl_theory.runtime.rundir import RunDir

from _killers import Killed, KilledAfter


def tiny_gpt() -> lg.GPTSettings:
    return dataclasses.replace(lg.GPTSettings.from_profile(), block_size=8, dim=8, heads=2,
                               depth=1, batch_size=8, steps=5, eval_windows=32, cdnv_min_count=2,
                               seeds=(0,), head_settings=("0", "all"), l9_setting="all")


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


def test_a_killed_gpt_run_resumes_to_the_same_numbers(tmp_path):
    s = dataclasses.replace(tiny_gpt(), steps=23)        # rounds of 2 steps, the last of 1
    text, _ = data.load_text()
    ids, vocab = lg.encode(text)
    cut = int(0.9 * len(ids))
    train_ids, val_ids = torch.from_numpy(ids[:cut]), torch.from_numpy(ids[cut:])
    args = (s, "all", 0, train_ids, val_ids, len(vocab), "cpu")
    whole = lg.train_one(*args)
    with pytest.raises(Killed):
        lg.train_one(*args, KilledAfter("gpt-test", s, root=tmp_path, enabled=True, saves=5))
    run = RunDir("gpt-test", s, root=tmp_path, enabled=True)
    assert lg.train_one(*args, run) == whole
    assert not run.state_path("state-setting=all,seed=0").exists()


def test_settings_validation():
    with pytest.raises(ValueError, match="seeds"):
        dataclasses.replace(lg.GPTSettings.from_profile(), seeds=())
    with pytest.raises(ValueError, match="l9_setting"):
        dataclasses.replace(lg.GPTSettings.from_profile(), l9_setting="3")
