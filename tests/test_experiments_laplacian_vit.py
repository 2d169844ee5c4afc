"""The ViT of the Laplacian-head studies (L6-L8): its settings per profile and their checks, its
normalised patches, its one training path (reproducible, resumable after a kill to the same
numbers) and the sign balance of its ordinary and Laplacian heads. The studies that train it are
tested in test_experiments_laplacian_study and test_experiments_laplacian_readout."""
from __future__ import annotations

import math

import pytest
import torch

from ddcl_theory.experiments import laplacian_vit as lv
from ddcl_theory.experiments.laplacian_common import SMOKE_HEAD_SETTINGS
from ddcl_theory.models.vit import ViT
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir

from _killers import Killed, KilledAfter


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
