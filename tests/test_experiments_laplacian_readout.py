"""The ViT + DDCL readout model and the X2 experiment on a tiny scale."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from ddcl_theory.experiments import laplacian_readout as lr
from ddcl_theory.experiments import laplacian_vit as lv
from ddcl_theory.ledger.decisions import laplacian_readout as decisions
from ddcl_theory.models.vit_readout import ViTDDCL
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir

from _killers import Killed, KilledAfter


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
    vit = lv.ViTSettings(n_train=64, n_test=32, patch=8, dim=8, depth=1, heads=2, mlp_ratio=2,
                         batch_size=32, epochs=2, lr=3e-3, weight_decay=0.0, seeds=(0, 1),
                         head_settings=lr.SETTINGS)
    vit = dataclasses.replace(vit, **{k: kw.pop(k) for k in list(kw) if hasattr(vit, k)})
    return lr.ReadoutSettings(vit=vit, **{"num_prototypes": 4, "ddcl_heads": 2, **kw})


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
        assert len(r.train_loss) == len(r.acc_path) == len(r.within_path) == 2
        assert r.acc_path[-1] == r.test_acc and r.within_path[-1] == pytest.approx(r.within_seq)
    assert {r.laplacian_heads for r in tiny_sweep.runs} == {0, 2}
    assert np.array_equal(tiny_sweep.paired("test_acc", "all"),
                          [r.test_acc for r in sorted(tiny_sweep.runs, key=lambda r: r.seed)
                           if r.setting == "all"])
    assert tiny_sweep.paired("within_seq", "0", epoch=1).shape == (2,)
    assert tiny_sweep.settings.scales == (1, 2)


def test_x2_experiment_is_deterministic(tiny_sweep):
    again = lr.run(_tiny())
    assert [r.test_acc for r in again.runs] == [r.test_acc for r in tiny_sweep.runs]
    assert [r.separation_min for r in again.runs] == pytest.approx(
        [r.separation_min for r in tiny_sweep.runs], rel=1e-6)


def test_x2_verdict_follows_the_rule_and_its_premise(tiny_sweep):
    v = decisions.decide_x2(tiny_sweep)
    assert v.word == "inconclusive" and v.n_seeds == 2          # fewer seeds than the rule's 5
    holds = v.numbers["premise_holds"]
    assert holds == (v.numbers["premise"][1] < 0)
    assert ("the question is not asked" in v.evidence) == (not holds)


def _same(a: lr.ReadoutRun, b: lr.ReadoutRun) -> bool:
    path_a, path_b = a.separation_path, b.separation_path
    return (dataclasses.replace(a, separation_path={}) == dataclasses.replace(b, separation_path={})
            and all(np.array_equal(path_a[k], path_b[k]) for k in path_a))


def test_a_killed_readout_run_resumes_to_the_same_numbers(tmp_path):
    s = _tiny(epochs=3)
    *tensors, _, num_classes = lv.prepare_patches(s.vit)
    args = (s, "all", 1, tuple(tensors), num_classes, "cpu")
    whole = lr.train_one(*args)
    with pytest.raises(Killed):                          # killed after epoch 1 of 3
        lr.train_one(*args, KilledAfter("x2-test", s, root=tmp_path, enabled=True, saves=1))
    run = RunDir("x2-test", s, root=tmp_path, enabled=True)
    resumed = lr.train_one(*args, run)
    assert _same(resumed, whole) and resumed.separation_path["min"].shape == (4,)


def test_x2_settings_are_checked_and_follow_the_profile(monkeypatch):
    with pytest.raises(ValueError, match=r"ReadoutSettings\.vit\.seeds: expected at least two"):
        _tiny(seeds=(0,))
    with pytest.raises(ValueError, match=r"ViTSettings\.head_settings"):
        _tiny(head_settings=("0", "7"))
    with pytest.raises(ValueError, match=r"ReadoutSettings\.temperature: expected > 0"):
        _tiny(temperature=0.0)
    with pytest.raises(ValueError, match=r"ReadoutSettings\.vit: expected ViTSettings"):
        lr.ReadoutSettings(vit=dataclasses.asdict(lv.ViTSettings()))
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    cpu = lr.ReadoutSettings.from_profile()
    assert cpu == lr.ReadoutSettings()                  # the defaults are the cpu values
    assert cpu.vit == dataclasses.replace(lv.ViTSettings.from_profile(), epochs=10,
                                          head_settings=("0", "all"))
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    assert lr.ReadoutSettings.from_profile() != cpu
    monkeypatch.setenv(profile.SMOKE_ENV, "1")
    smoke = lr.ReadoutSettings.from_profile()
    assert (smoke.vit.n_train, smoke.vit.seeds, smoke.vit.epochs) == (lr.SMOKE_IMAGES, (0, 1), 1)
    monkeypatch.delenv(profile.SMOKE_ENV)
    assert dataclasses.replace(cpu).vit.head_settings == ("0", "all")
    assert np.isfinite(cpu.vit.lr)
