"""The paired Laplacian-head studies (L6-L9): tiny runs are finite and reproducible, record a
validation curve with a plateau flag and a point per checkpoint, and resume after a kill to the
same numbers. The verdict rules are tested in test_ledger_decisions_laplacian_experiments."""
from __future__ import annotations

import dataclasses
import math

import pytest

from ddcl_theory.experiments import laplacian_gpt as lg
from ddcl_theory.experiments import laplacian_study as ls
from ddcl_theory.experiments import laplacian_vit as lv
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir

from _killers import Killed, KilledAfter


def tiny_vit(epochs=2, checkpoints=(1, 2)) -> ls.ViTStudySettings:
    vit = lv.ViTSettings(n_train=64, n_test=60, dim=8, heads=2, depth=1, epochs=epochs,
                         batch_size=32, seeds=(0,), head_settings=("0", "all"))
    return ls.ViTStudySettings(vit=vit, n_val=32, checkpoints=checkpoints, n_train_eval=32)


def tiny_gpt() -> ls.GPTStudySettings:
    return ls.GPTStudySettings(block_size=8, dim=8, heads=4, depth=1, batch_size=8, steps=6,
                               rounds=3, checkpoints=(1, 3), eval_windows=32, cdnv_min_count=2,
                               seeds=(0,), l9_setting="2")


def test_tiny_vit_study_is_finite_reproducible_and_measured_at_each_checkpoint():
    a, b = ls.run_vit(tiny_vit()), ls.run_vit(tiny_vit())
    assert a.runs == b.runs
    assert a.settings.scales == ("1 ep", "2 ep")
    for r in a.runs:
        assert len(r.curve) == 2 and len(r.train_curve) == 2
        assert [p.epoch for p in r.points] == [1, 2]
        assert r.final.val_loss == r.curve[-1]
        for p in r.points:
            assert 0 <= p.test_acc <= 1 and 0 <= p.train_acc <= 1 and 1 <= p.k99 <= 8
            assert 1.0 <= p.pr <= 8.0 and 1.0 <= p.pr_stream <= 8.0
            assert all(math.isfinite(v) for v in (p.nc1, p.nc1_train, p.within_seq))
        assert r.plateau is False                  # two rounds cannot show a plateau
    assert a.counts() == {"0": 0, "all": 2}
    assert a.values("all", "test_acc").shape == (1,)


def test_tiny_gpt_study_is_finite_reproducible_and_starts_untrained():
    a, b = ls.run_gpt(tiny_gpt()), ls.run_gpt(tiny_gpt())
    assert a.runs == b.runs
    assert a.settings.head_settings == ("0", "2") and a.settings.scales == ("2 steps", "6 steps")
    for r in a.runs:
        assert [p.step for p in r.points] == [0, 2, 4, 6] and len(r.curve) == 3
        assert all(math.isfinite(p.val_loss) and p.cdnv > 0 and p.pr >= 1 for p in r.points)
        assert r.points[0].val_loss == pytest.approx(math.log(a.vocab_size), rel=0.1)


def test_a_killed_vit_study_run_resumes_to_the_same_numbers(tmp_path):
    s = tiny_vit(epochs=4, checkpoints=(2, 4))
    *tensors, _, classes = ls._vit_tensors(s)
    whole = ls.train_vit_run(s, "all", 0, tuple(tensors), classes, "cpu")
    with pytest.raises(Killed):
        ls.train_vit_run(s, "all", 0, tuple(tensors), classes, "cpu",
                         KilledAfter("study-test", s, root=tmp_path, enabled=True, saves=3))
    run = RunDir("study-test", s, root=tmp_path, enabled=True)
    assert ls.train_vit_run(s, "all", 0, tuple(tensors), classes, "cpu", run) == whole


def test_a_killed_gpt_study_run_resumes_to_the_same_numbers(tmp_path):
    s = tiny_gpt()
    train_ids, val_ids, vocab, _ = lg.text_splits()
    args = (s, "2", 0, train_ids, val_ids, len(vocab), "cpu")
    whole = ls.train_gpt_run(*args)
    with pytest.raises(Killed):
        ls.train_gpt_run(*args, KilledAfter("gpt-study", s, root=tmp_path, enabled=True,
                                            saves=1))
    assert ls.train_gpt_run(*args, RunDir("gpt-study", s, root=tmp_path,
                                          enabled=True)) == whole


def test_settings_validation():
    with pytest.raises(ValueError, match=r"ViTStudySettings\.checkpoints"):
        tiny_vit(epochs=2, checkpoints=(1,))
    with pytest.raises(ValueError, match=r"ViTStudySettings\.vit\.head_settings"):
        ls.ViTStudySettings(vit=lv.ViTSettings(head_settings=("1", "all")))
    with pytest.raises(ValueError, match=r"ViTStudySettings\.n_val: expected >= 1"):
        dataclasses.replace(tiny_vit(), n_val=0)
    with pytest.raises(ValueError, match=r"GPTStudySettings\.checkpoints"):
        dataclasses.replace(tiny_gpt(), checkpoints=(3, 1))
    with pytest.raises(ValueError, match=r"GPTStudySettings\.rounds"):
        dataclasses.replace(tiny_gpt(), steps=7)
    with pytest.raises(ValueError, match=r"GPTStudySettings\.l9_setting"):
        dataclasses.replace(tiny_gpt(), l9_setting="9")
    with pytest.raises(ValueError, match=r"GPTStudySettings\.seeds"):
        dataclasses.replace(tiny_gpt(), seeds=())


def test_the_reference_profile_lengthens_the_runs_and_pairs_five_seeds(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    assert ls.ViTStudySettings.from_profile() == ls.ViTStudySettings()
    assert ls.GPTStudySettings.from_profile() == ls.GPTStudySettings()
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    vit, gpt = ls.ViTStudySettings.from_profile(), ls.GPTStudySettings.from_profile()
    assert (vit.vit.epochs, vit.vit.seeds, vit.checkpoints) == (20, (0, 1, 2, 3, 4), (5, 10, 20))
    assert vit.vit.dim == lv.ViTSettings().dim                  # the cpu model, trained longer
    assert (gpt.steps, gpt.seeds, gpt.scales) == (600, (0, 1, 2, 3, 4),
                                                  ("150 steps", "300 steps", "600 steps"))
