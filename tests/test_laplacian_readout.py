"""The ViT + DDCL readout model and the X2 experiment on a tiny scale."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from ddcl_theory.experiments import laplacian_readout as lr
from ddcl_theory.models.vit_readout import ViTDDCL
from ddcl_theory.runtime import profile


def test_vit_ddcl_shapes_and_pooled_readout():
    model = ViTDDCL(16, 12, 10, dim=8, depth=1, heads=2, laplacian_heads=2, num_prototypes=4,
                    ddcl_heads=2)
    x = torch.randn(3, 16, 12)
    out = model(x)
    assert out.logits.shape == (3, 10) and out.tokens.shape == (3, 16, 8)
    assert out.readout.assignments.shape == (3, 2, 16, 4)
    assert torch.allclose(out.logits, model.head(out.readout.pooled))
    assert model.encoder.laplacian_heads == (2,)


def test_readout_prototypes_are_seeded_from_the_tokens_that_reach_them():
    model = ViTDDCL(4, 6, 3, dim=8, depth=1, heads=2, num_prototypes=3, ddcl_heads=1)
    x = torch.randn(5, 4, 6)
    model.init_prototypes_from(x, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        z = model.readout.in_proj(model.tokens(x)).reshape(-1, 8)
    bank = model.readout.prototypes[0].detach()
    # every prototype is one of the projected tokens (k-means++ picks data points)
    d = torch.cdist(bank, z).min(dim=1).values
    assert torch.all(d < 1e-5)


def test_encoder_classifier_gets_no_gradient():
    model = ViTDDCL(4, 6, 3, dim=8, depth=1, heads=2, num_prototypes=3, ddcl_heads=1)
    model(torch.randn(2, 4, 6)).logits.sum().backward()
    assert model.encoder.head.weight.grad is None
    assert model.readout.prototypes.grad is not None


def _tiny(**kw):
    base = dict(n_train=64, n_test=32, patch=8, dim=8, depth=1, heads=2, mlp_ratio=2,
                batch_size=32, epochs=2, lr=3e-3, weight_decay=0.0, seeds=(0, 1),
                num_prototypes=4, ddcl_heads=2)
    base.update(kw)
    return lr.ReadoutSettings(**base)


@pytest.fixture(scope="module")
def tiny_sweep():
    return lr.run(_tiny())


def test_x2_experiment_measures_every_setting_and_seed(tiny_sweep):
    assert len(tiny_sweep.runs) == 4
    for r in tiny_sweep.runs:
        assert 0 <= r.test_acc <= 1 and 0 < r.fraction_used <= 1
        assert 1 <= r.perplexity <= 4 + 1e-9 and r.v >= 0
        assert r.separation_path["min"].shape == (3,)
        assert r.separation_min == pytest.approx(r.separation_path["min"][-1])
        assert 0 <= r.within_seq <= 1
    assert {r.laplacian_heads for r in tiny_sweep.runs} == {0, 2}


def test_x2_experiment_is_deterministic(tiny_sweep):
    again = lr.run(_tiny())
    assert [r.test_acc for r in again.runs] == [r.test_acc for r in tiny_sweep.runs]
    assert [r.separation_min for r in again.runs] == pytest.approx(
        [r.separation_min for r in tiny_sweep.runs], rel=1e-6)


def test_x2_verdict_follows_the_signs(tiny_sweep):
    v = lr.verdict_x2(tiny_sweep)
    assert set(v.signs) == {name for _, name, _ in lr.MEASURES}
    helps = any(s > 0 for s in v.signs.values())
    hurts = any(s < 0 for s in v.signs.values())
    expected = ("confirmed" if helps and not hurts else "refuted" if hurts and not helps
                else "qualified" if helps and hurts else "not reproduced")
    assert v.verdict == expected


def test_x2_settings_are_checked_and_follow_the_profile(monkeypatch):
    with pytest.raises(ValueError, match="seeds"):
        _tiny(seeds=(0,))
    with pytest.raises(ValueError, match="setting"):
        _tiny(head_settings=("0", "7"))
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    cpu = lr.ReadoutSettings.from_profile()
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    assert lr.ReadoutSettings.from_profile() != cpu
    assert dataclasses.replace(cpu).head_settings == ("0", "all")
    assert np.isfinite(cpu.lr)
