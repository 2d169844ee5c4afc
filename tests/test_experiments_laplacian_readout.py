"""The ViT + DDCL readout model and the X2 experiment on a tiny scale (synthetic images)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from ddcl_theory.experiments import laplacian_readout as lr
from ddcl_theory.experiments import laplacian_vit as lv
from ddcl_theory.metrics.prototypes import separation
from ddcl_theory.models.vit_readout import ViTDDCL
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir

from _killers import Killed, KilledAfter


def _images(n_fit=96, n_val=48, n_eval=60, seed=0) -> lv.StudyImages:
    """8x8 images whose brightness carries the label for half of them (the rest: labels at
    random, which a model can only memorise, so its validation loss turns up)."""
    rng = np.random.default_rng(seed)

    def draw(n):
        y = rng.integers(0, 10, n).astype(np.int64)
        x = rng.random((n, 8, 8, 3)) * 0.5 + y[:, None, None, None] / 20
        noisy = rng.random(n) < 0.5
        y[noisy] = rng.integers(0, 10, int(noisy.sum()))
        return x.astype(np.float32), y

    return lv.StudyImages(*draw(n_fit), *draw(n_val), *draw(n_eval), "synthetic", 10)


def _tiny(**kw) -> lr.ReadoutSettings:
    base = dict(n_train=(48, 96), n_val=48, n_test=60, patch=4, dim=8, depth=1, heads=2,
                mlp_ratio=2, num_prototypes=4, ddcl_heads=2, batch_size=32, epochs=6,
                patience=2, seeds=(0, 1))
    return lr.ReadoutSettings(**{**base, **kw})


@pytest.fixture(scope="module")
def images():
    return _images()


@pytest.fixture(scope="module")
def tiny_study(images):
    return lr.run(_tiny(), images)


# ------------------------------------------------------------------------------- the model
def test_vit_ddcl_reads_the_final_layernorm_of_the_stream_and_classifies_the_pooled_summary():
    model = ViTDDCL(16, 12, 10, dim=8, depth=1, heads=2, laplacian_heads=2, num_prototypes=4,
                    ddcl_heads=2)
    x = torch.randn(3, 16, 12)
    out = model(x)
    assert out.logits.shape == (3, 10) and out.tokens.shape == out.stream.shape == (3, 16, 8)
    assert out.readout.assignments.shape == (3, 2, 16, 4)
    assert torch.allclose(out.tokens, model.encoder.norm(out.stream))
    assert torch.allclose(out.logits, model.head(out.readout.pooled))
    assert model.encoder.laplacian_heads == (2,)


def test_readout_prototypes_are_seeded_from_the_tokens_that_reach_them():
    model = ViTDDCL(4, 6, 3, dim=8, depth=1, heads=2, num_prototypes=3, ddcl_heads=1)
    x = torch.randn(5, 4, 6)
    model.init_prototypes_from(x, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        z = model.readout.in_proj(model.tokens(x)).reshape(-1, 8)
    bank = model.readout.prototypes[0].detach()
    assert torch.all(torch.cdist(bank, z).min(dim=1).values < 1e-5)   # k-means++ picks tokens


def test_encoder_classifier_gets_no_gradient():
    model = ViTDDCL(4, 6, 3, dim=8, depth=1, heads=2, num_prototypes=3, ddcl_heads=1)
    model(torch.randn(2, 4, 6)).logits.sum().backward()
    assert model.encoder.head.weight.grad is None
    assert model.readout.prototypes.grad is not None


# ------------------------------------------------------------------------------- measures
def test_relative_separation_is_the_distance_over_the_tokens_spread_and_scale_free():
    g = torch.Generator().manual_seed(0)
    bank = torch.randn(2, 5, 3, generator=g, dtype=torch.float64)
    z = torch.randn(40, 2, 3, generator=g, dtype=torch.float64) * torch.tensor([1.0, 3.0])[
        None, :, None]
    rel = lr.relative_separation(bank, z)
    spread = torch.stack([((z[:, h] - z[:, h].mean(0)) ** 2).sum(-1).mean().sqrt()
                          for h in range(2)])
    assert torch.allclose(rel, separation(bank, "min") / spread)
    assert torch.allclose(lr.relative_separation(7 * bank, 7 * z, "mean"),
                          lr.relative_separation(bank, z, "mean"))
    assert not torch.allclose(lr.relative_separation(7 * bank, z), rel)
    with pytest.raises(ValueError, match="z: expected"):
        lr.relative_separation(bank, z[:, :1])


def test_best_state_keeps_the_lowest_loss_and_restores_its_weights():
    model = torch.nn.Linear(3, 2)
    best = lr.BestState(model)
    first = {k: v.clone() for k, v in model.state_dict().items()}
    assert best.update(model, 1.0, 1)
    with torch.no_grad():
        model.weight.add_(1.0)
    assert not best.update(model, 1.5, 2)             # worse: the first state stays
    assert int(best.best_epoch) == 1 and float(best.best_loss) == 1.0
    best.restore(model)
    assert all(torch.equal(model.state_dict()[k], first[k]) for k in first)


# ------------------------------------------------------------------------------- the study
def test_every_image_count_setting_and_seed_is_trained_and_paired(tiny_study):
    s = tiny_study.settings
    assert len(tiny_study.runs) == len(s.n_train) * 2 * len(s.seeds)
    for n in s.n_train:
        for setting in lr.SETTINGS:
            assert [r.seed for r in tiny_study.by(setting, n)] == [0, 1]
    assert {r.laplacian_heads for r in tiny_study.runs} == {0, 2}
    assert tiny_study.by("all") == tiny_study.by("all", 96)          # default: the largest
    np.testing.assert_array_equal(tiny_study.values("final.within_sequence", "0", 48),
                                  [r.final.within_sequence for r in tiny_study.by("0", 48)])
    assert tiny_study.tokens == 4 and s.scales == ("48 images", "96 images")


def test_each_run_is_read_at_its_lowest_validation_loss_and_stops_by_patience(tiny_study):
    s = tiny_study.settings
    for r in tiny_study.runs:
        assert len(r.val_loss) == len(r.val_acc) == r.epochs_run <= s.epochs
        assert r.best_epoch == int(np.argmin(r.val_loss)) + 1
        if r.epochs_run < s.epochs:                        # stopped early: by the patience
            assert r.past_optimum and r.epochs_run - r.best_epoch == s.patience
    assert any(r.past_optimum for r in tiny_study.runs)


def test_the_measures_lie_in_their_ranges(tiny_study):
    for r in tiny_study.runs:
        assert 0 <= r.eval_acc <= 1 and r.correct_items.shape == (r.n_eval,) == (60,)
        assert r.eval_acc == pytest.approx(r.correct_items.mean())
        for split in (r.final, r.stream):
            assert split.total == pytest.approx(split.within_sequence + split.between_sequence)
            assert split.within_sequence > 0
        assert 0 < r.fraction_used <= 1 and 1 <= r.perplexity <= 4 + 1e-9
        assert r.relative_min > 0 and r.relative_mean >= r.relative_min
        assert r.separation_mean >= r.separation_min > 0 and r.v >= 0 and r.l_q >= r.v


def test_the_study_is_deterministic(tiny_study, images):
    again = lr.run(_tiny(n_train=(96,)), images)
    for a, b in zip(again.runs, tiny_study.by("0") + tiny_study.by("all")):
        assert (a.eval_acc, a.best_epoch, a.correct) == (b.eval_acc, b.best_epoch, b.correct)
        assert a.final.within_sequence == pytest.approx(b.final.within_sequence, rel=1e-9)


def test_a_killed_run_resumes_to_the_same_numbers(tmp_path, images):
    s = _tiny(epochs=4, patience=4)
    tensors = lv.study_patches(images, 96, s.patch)
    args = (s, tensors, 96, "all", 1, 10, "cpu")
    whole = lr.train_one(*args)
    with pytest.raises(Killed):                           # killed after epoch 2 of 4
        lr.train_one(*args, KilledAfter("x2-test", s, root=tmp_path, enabled=True, saves=2))
    resumed = lr.train_one(*args, RunDir("x2-test", s, root=tmp_path, enabled=True))
    assert resumed == whole and resumed.epochs_run == 4


# ------------------------------------------------------------------------------- settings
def test_x2_settings_are_checked_and_follow_the_profile(monkeypatch):
    with pytest.raises(ValueError, match=r"ReadoutSettings\.seeds: expected at least two"):
        _tiny(seeds=(0,))
    with pytest.raises(ValueError, match=r"ReadoutSettings\.n_train: expected increasing"):
        _tiny(n_train=(96, 48))
    with pytest.raises(ValueError, match=r"ReadoutSettings\.temperature: expected > 0"):
        _tiny(temperature=0.0)
    with pytest.raises(ValueError, match=r"ReadoutSettings\.dim: expected a multiple"):
        _tiny(dim=9)
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    cpu = lr.ReadoutSettings.from_profile()
    assert cpu == lr.ReadoutSettings() and max(cpu.seeds) < 1000       # exploratory seeds
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    ref = lr.ReadoutSettings.from_profile()
    assert ref.n_train == (1000, 3000, 9000) and ref.n_test == 10_000
    assert (ref.threads, ref.workers) == (1, 2) and cpu.workers == 1
    assert min(ref.seeds) >= 1000 and len(ref.seeds) == lr.CONFIRMATORY_SEEDS
    assert ref.n_train[-1] + ref.n_val <= 10_000         # the subset holds both
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    monkeypatch.setenv(profile.SMOKE_ENV, "1")
    smoke = lr.ReadoutSettings.from_profile()
    assert (smoke.n_train, smoke.seeds, smoke.epochs) == ((lr.SMOKE_IMAGES,), (0, 1), 1)
    assert dataclasses.replace(smoke, epochs=2).epochs == 2


def test_float64_runs_train_in_float64_and_leave_the_default_dtype_as_it_was(images):
    s = _tiny(n_train=(48,), epochs=2, patience=2)
    tensors = lv.study_patches(images, 48, s.patch)
    wide = lr.train_one(s, tensors, 48, "all", 0, images.num_classes, "cpu")
    assert torch.get_default_dtype() == torch.float32
    narrow = lr.train_one(dataclasses.replace(s, float64=False), tensors, 48, "all", 0,
                          images.num_classes, "cpu")
    assert torch.get_default_dtype() == torch.float32
    # the same seed in two precisions: weights drawn in each, so two different runs, both
    # near the loss of a uniform guess over 10 classes after 2 epochs on 48 images
    assert wide.val_loss != narrow.val_loss
    assert np.allclose(wide.val_loss + narrow.val_loss, np.log(10), atol=0.3)
    assert lr.ReadoutSettings().float64 and not _reference_settings().float64


def _reference_settings() -> lr.ReadoutSettings:
    import os
    old = os.environ.get(profile.PROFILE_ENV)
    os.environ[profile.PROFILE_ENV] = "reference"
    try:
        return lr.ReadoutSettings.from_profile()
    finally:
        if old is None:
            del os.environ[profile.PROFILE_ENV]
        else:
            os.environ[profile.PROFILE_ENV] = old


@pytest.mark.slow  # spawns two interpreters that import torch
def test_two_worker_processes_give_the_runs_of_one(tiny_study, images):
    spread = lr.run(_tiny(workers=2), images)
    assert [(r.n_train, r.setting, r.seed) for r in spread.runs] == \
        [(r.n_train, r.setting, r.seed) for r in tiny_study.runs]
    for a, b in zip(spread.runs, tiny_study.runs):
        assert (a.eval_acc, a.best_epoch, a.val_loss) == (b.eval_acc, b.best_epoch, b.val_loss)
