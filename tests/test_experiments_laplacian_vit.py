"""The ViT of the Laplacian-head studies (L6-L8): its settings per profile and their checks, its
normalised patches, its one training path (reproducible, resumable after a kill to the same
numbers) and the sign balance of its ordinary and Laplacian heads; the head-count study's images
and its stacked training to each seed's validation optimum. The studies that train it are tested
in test_experiments_laplacian_study and test_experiments_laplacian_readout."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ddcl_theory.experiments import laplacian_vit as lv
from ddcl_theory.experiments.laplacian_common import SMOKE_HEAD_SETTINGS
from ddcl_theory.models.vit import ViT
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir

from _killers import Killed, KilledAfter
from _study_images import synthetic_images


def tiny_vit(**changes) -> lv.ViTSettings:
    return lv.ViTSettings(**{**dict(n_train=64, n_test=60, dim=8, heads=2, depth=1, epochs=1,
                                    batch_size=32, seeds=(0,), head_settings=("0", "all")),
                             **changes})


def build(s: lv.ViTSettings, laplacian_heads: int, tokens: int, patch_dim: int) -> ViT:
    profile.seed_everything(0)
    return ViT(tokens, patch_dim, 10, dim=s.dim, depth=s.depth, heads=s.heads,
               laplacian_heads=laplacian_heads, mlp_ratio=s.mlp_ratio, pool="mean")


def train(s: lv.ViTSettings, tensors: tuple, run: RunDir | None = None):
    """A fresh ViT (seed 0, every head Laplacian) trained on ``tensors``: (model, log)."""
    x, y = tensors[0], tensors[1]
    model = build(s, s.heads, x.shape[1], x.shape[2])
    log = lv.train_vit(model, s, x, y, torch.Generator().manual_seed(0), "cpu", run=run,
                       name="state-test")
    return model, log


def test_prepared_patches_are_standardised_tokens_of_the_subset():
    s = tiny_vit()
    p_tr, y_tr, p_te, y_te, _, num_classes = lv.prepare_patches(s)
    assert p_tr.shape[0] == y_tr.shape[0] == 64 and p_te.shape[0] == y_te.shape[0] == 60
    assert p_tr.dim() == 3 and p_tr.shape[1:] == p_te.shape[1:] and p_tr.dtype == torch.float32
    # every channel is centred and scaled by the training images' statistics
    assert abs(float(p_tr.double().mean())) < 1e-4
    assert float(p_tr.double().std()) == pytest.approx(1.0, abs=1e-3)
    assert 0 <= int(y_tr.min()) and int(y_tr.max()) < num_classes


def test_the_training_path_is_finite_and_reproducible():
    s = tiny_vit(epochs=2)
    tensors = lv.prepare_patches(s)
    (a, log_a), (b, log_b) = train(s, tensors), train(s, tensors)
    assert log_a.losses == log_b.losses and len(log_a.losses) == 2     # one round per epoch
    assert len(log_a.losses[0]) == math.ceil(64 / s.batch_size)      # batches of an epoch
    assert all(math.isfinite(v) for r in log_a.losses for v in r)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)                                     # bit-identical on CPU


def test_a_killed_training_resumes_to_the_same_numbers(tmp_path):
    s = tiny_vit(epochs=4)
    tensors = lv.prepare_patches(s)
    whole, log = train(s, tensors)
    with pytest.raises(Killed):                          # killed after epoch 2 of 4
        train(s, tensors, KilledAfter("vit-test", s, root=tmp_path, enabled=True, saves=2))
    run = RunDir("vit-test", s, root=tmp_path, enabled=True)
    assert run.state_path("state-test").is_file()
    resumed, resumed_log = train(s, tensors, run)
    assert resumed_log.losses == log.losses
    for pa, pb in zip(whole.parameters(), resumed.parameters()):
        assert torch.equal(pa, pb)


@pytest.mark.parametrize("laplacian_heads,kinds", [(0, (True, False)), (1, (True, True)),
                                                   (2, (False, True))])
def test_head_sign_balances_average_each_kind_of_head_and_skip_a_missing_kind(laplacian_heads,
                                                                               kinds):
    model = build(tiny_vit(depth=2), laplacian_heads, 16, 12)
    balances = lv.head_sign_balances(model)
    assert tuple(b is not None for b in balances) == kinds
    assert all(-1.0 <= b <= 1.0 for b in balances if b is not None)


def test_the_cpu_values_are_the_defaults_and_the_smoke_test_shrinks_only_the_budget(
        monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    assert lv.ViTSettings.from_profile() == lv.ViTSettings()
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    paper = lv.ViTSettings.from_profile()
    monkeypatch.setenv(profile.SMOKE_ENV, "1")
    smoke = lv.ViTSettings.from_profile()
    assert (smoke.dim, smoke.depth, smoke.heads, smoke.patch) == (192, 6, 6, 4) == (
        paper.dim, paper.depth, paper.heads, paper.patch)
    assert (smoke.epochs, smoke.seeds, smoke.n_train) == (1, (0,), lv.SMOKE_IMAGES)
    assert smoke.head_settings == SMOKE_HEAD_SETTINGS


@pytest.mark.parametrize("changes,message", [
    ({"dim": 0}, r"ViTSettings\.dim: expected >= 1"),
    ({"seeds": ()}, r"ViTSettings\.seeds: expected at least one value"),
    ({"lr": 0.0}, r"ViTSettings\.lr: expected > 0"),
    ({"threads": 0}, r"ViTSettings\.threads: expected >= 1"),
    ({"head_settings": ("0", "3")}, r"ViTSettings\.head_settings: .*heads=2.*\['3'\]"),
])
def test_settings_name_the_field_that_is_out_of_range(changes, message):
    with pytest.raises(ValueError, match=message):
        tiny_vit(**changes)


# ------------------------------------------------------------------ the head-count study's path
def test_study_patches_standardise_by_the_training_images_only():
    images = synthetic_images()
    t = lv.study_patches(images, 40, 4)
    assert t["x_fit"].shape == (40, 4, 48) and t["x_val"].shape == (48, 4, 48)
    assert t["x_eval"].shape == (60, 4, 48) and t["y_eval"].dtype == torch.int64
    assert abs(float(t["x_fit"].double().mean())) < 1e-5
    assert float(t["x_fit"].double().std()) == pytest.approx(1.0, abs=1e-2)
    assert abs(float(t["x_val"].double().mean())) > 1e-3          # not its own statistics
    with pytest.raises(ValueError, match=r"n_train: expected 0 < n_train <= 96"):
        lv.study_patches(images, 97, 4)
    with pytest.raises(ValueError, match="x_val, y_val"):
        lv.StudyImages(images.x_fit, images.y_fit, images.x_val, images.y_val[:3],
                       images.x_eval, images.y_eval, "synthetic", 10)


def _stack_inputs(dtype=torch.float32):
    t = lv.study_patches(synthetic_images(), 64, 4)
    return [t[k].to(dtype) if t[k].is_floating_point() else t[k]
            for k in ("x_fit", "y_fit", "x_val", "y_val")]


def _make(dtype=torch.float32, laplacian_heads=1):
    return lambda _seed: ViT(4, 48, 10, dim=8, depth=1, heads=2,
                             laplacian_heads=laplacian_heads).to(dtype)


def _train_stack(seeds=(3, 7), patience=2, epochs=12, lr=3e-2, dtype=torch.float32, run=None):
    x, y, xv, yv = _stack_inputs(dtype)
    return lv.train_vit_stack(_make(dtype), seeds, x, y, xv, yv, "cpu", epochs=epochs, lr=lr,
                              weight_decay=0.0, batch_size=16, patience=patience, run=run,
                              name="stack-test")


def _val_loss(model, dtype=torch.float32) -> float:
    _, _, xv, yv = _stack_inputs(dtype)
    with torch.no_grad():
        return float(torch.nn.functional.cross_entropy(model(xv), yv))


def test_early_stopping_reads_each_seed_at_its_lowest_validation_loss():
    models, log = _train_stack()
    assert log.val_loss.shape == log.val_acc.shape == log.train_loss.shape
    assert log.epochs_run < 12                     # every seed passed its optimum: stopped
    for i, model in enumerate(models):
        best = int(log.best_epoch[i])
        assert best == int(np.argmin(log.val_loss[:, i])) + 1
        assert log.epochs_run - best >= 2          # waited the patience before the stop
        assert _val_loss(model) == pytest.approx(log.val_loss[best - 1, i], rel=1e-5)
    assert not np.allclose(log.val_loss[:, 0], log.val_loss[:, 1])     # two seeds, two runs


def test_without_patience_every_seed_is_read_at_the_end_of_its_schedule():
    models, log = _train_stack(patience=None, epochs=3)
    assert log.epochs_run == 3 and log.best_epoch.tolist() == [3, 3]
    assert log.val_loss.shape == log.val_acc.shape == (1, 2)         # validated at the end
    assert _val_loss(models[1]) == pytest.approx(log.val_loss[-1, 1], rel=1e-5)
    with pytest.raises(ValueError, match="patience"):
        _train_stack(patience=0)


def test_a_seed_trains_in_a_stack_as_it_trains_alone():
    _, both = _train_stack(seeds=(3, 7), dtype=torch.float64, patience=None, epochs=3)
    _, alone = _train_stack(seeds=(7,), dtype=torch.float64, patience=None, epochs=3)
    np.testing.assert_allclose(both.val_loss[:, 1], alone.val_loss[:, 0], rtol=1e-9)
    np.testing.assert_allclose(both.train_loss[:, 1], alone.train_loss[:, 0], rtol=1e-9)


def test_a_killed_stack_resumes_to_the_same_numbers(tmp_path):
    models, log = _train_stack()
    with pytest.raises(Killed):
        _train_stack(run=KilledAfter("stack-test", tiny_vit(), root=tmp_path, enabled=True,
                                     saves=2))
    run = RunDir("stack-test", tiny_vit(), root=tmp_path, enabled=True)
    resumed, resumed_log = _train_stack(run=run)
    np.testing.assert_array_equal(resumed_log.val_loss, log.val_loss)
    np.testing.assert_array_equal(resumed_log.best_epoch, log.best_epoch)
    for a, b in zip(models, resumed):
        for pa, pb in zip(a.parameters(), b.parameters()):
            assert torch.equal(pa, pb)
