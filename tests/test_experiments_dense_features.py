"""ddcl_theory.experiments.dense_features: self-distillation on the dense proxy (tiny runs on
noise backgrounds, so no data set is needed): loss decreasing, no collapse, probe shapes, and a
killed run resuming to the same numbers. The verdict rule is tested in
tests/test_ledger_decisions_dense_features.py."""
from __future__ import annotations


import numpy as np
import pytest
import torch

from _killers import Killed, KilledAfter
from ddcl_theory.data import dense_proxy
from ddcl_theory.experiments import dense_features as exp
from ddcl_theory.ledger.decisions.dense_features import collapsed
from ddcl_theory.runtime.rundir import RunDir


@pytest.fixture(autouse=True)
def noise_backgrounds(monkeypatch):
    def fake(split):
        rng = np.random.default_rng(0 if split == "train" else 1)
        images = rng.uniform(0, 1, (50, 32, 32, 3)).astype(np.float32)
        return images, np.arange(50) % 10
    monkeypatch.setattr(dense_proxy, "cifar_backgrounds", fake)


def tiny(**kw) -> exp.DenseSettings:
    base = dict(n_train=48, n_test=16, patch=8, dim=16, depth=1, heads=2, mlp_ratio=2,
                out_dim=16, batch_size=16, steps_per_round=5, probe_at=(0, 2, 4), lr=3e-3,
                weight_decay=0.0, momentum=0.9, probe_steps=10, probe_lr=0.1, seeds=(0,),
                head_settings=("0", "all"))
    return exp.DenseSettings(**{**base, **kw})


def test_views_are_seeded_and_differ():
    x = torch.randn(4, 3, 32, 32)
    a1, b1 = exp.two_views(x, torch.Generator().manual_seed(0))
    a2, b2 = exp.two_views(x, torch.Generator().manual_seed(0))
    assert torch.equal(a1, a2) and torch.equal(b1, b2) and not torch.equal(a1, b1)
    assert a1.shape == x.shape


def test_patches_match_the_data_packages_order():
    from ddcl_theory.data import image_patches
    x = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype(np.float32)
    ours = exp.to_patches(torch.from_numpy(x.transpose(0, 3, 1, 2).copy()), 8)
    assert np.allclose(ours.numpy(), image_patches(x, 8))


def test_probe_shapes_and_scores():
    s = tiny()
    d = exp.prepare(s)
    tr, te = exp.to_patches(d.x_train, 8), exp.to_patches(d.x_test, 8)
    probe = exp.train_probe(tr, d.y_train, steps=5, lr=0.1, seed=0)
    assert probe.weight.shape == (dense_proxy.NUM_CLASSES, 8 * 8 * 3)
    assert probe(tr).shape == (48, 16, dense_proxy.NUM_CLASSES)
    score = exp.probe_features(tr, te, d, s, steps=0, seed=0)
    assert 0 <= score.miou <= 1 and 0 <= score.pixel_acc <= 1 and 0 <= score.image_acc <= 1
    with pytest.raises(ValueError, match="labels"):
        exp.train_probe(tr, d.y_train[:, :3], steps=1, lr=0.1, seed=0)


def test_tiny_run_loss_decreases_without_collapse():
    s = tiny(probe_at=(0, 2, 4))
    r = exp.pretrain(s, "all", 0, exp.prepare(s))
    assert len(r.curve) == 4 and r.curve[-1] < r.curve[0]
    assert [p.steps for p in r.scores] == [0, 10, 20]
    assert not collapsed(r, float(np.log(s.out_dim)))
    assert r.effective_rank > 2 and r.laplacian_heads == 2


def test_a_killed_run_resumes_to_the_same_numbers(tmp_path):
    s = tiny()
    d = exp.prepare(s)
    whole = exp.pretrain(s, "all", 0, d)
    with pytest.raises(Killed):                          # killed after round 2 of 4
        exp.pretrain(s, "all", 0, d,
                     run=KilledAfter("dense-test", s, root=tmp_path, enabled=True, saves=2))
    run = RunDir("dense-test", s, root=tmp_path, enabled=True)
    assert run.state_path("all-seed0").is_file()
    assert exp.pretrain(s, "all", 0, d, run=run) == whole


def test_sweep_pairs_settings_and_seeds():
    s = tiny(seeds=(0, 1), probe_at=(0, 1), steps_per_round=2)
    sweep = exp.run(s, run_dir=RunDir("dense", s, enabled=False))
    assert [(r.setting, r.seed) for r in sweep.runs] == [("0", 0), ("all", 0), ("0", 1),
                                                         ("all", 1)]
    assert sweep.values("all").shape == (2,) and sweep.source == "cifar10"
    assert set(sweep.digests) == {"train", "test"}


def test_plateau_rule_and_settings_validation():
    assert exp.plateaued([5, 4, 3.0, 3.0, 2.99, 2.98])
    assert not exp.plateaued([5, 4, 3, 2, 1, 0.5]) and not exp.plateaued([1, 1, 1])
    for changes, message in [({"probe_at": (2, 1)}, r"probe_at: expected increasing"),
                             ({"probe_at": (-1, 2)}, r"probe_at: expected every value >= 0"),
                             ({"dim": 0}, r"dim: expected >= 1"),
                             ({"patch": 5}, r"patch: expected a divisor of 32"),
                             ({"seeds": ()}, r"seeds: expected at least one value"),
                             ({"head_settings": ("0", "most")}, r"head_settings: .*'most'")]:
        with pytest.raises(ValueError, match=r"DenseSettings\." + message):
            tiny(**changes)
    assert exp.DenseSettings.from_profile().steps[-1] > 0


def test_profiles_cpu_three_seeds_reference_the_rules_five(monkeypatch):
    from ddcl_theory.runtime import profile
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    cpu = exp.DenseSettings.from_profile()
    assert cpu == exp.DenseSettings()                       # the defaults are the cpu values
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    ref = exp.DenseSettings.from_profile()
    assert cpu.seeds == (0, 1, 2) and cpu.n_train == 384
    # the settings the committed reference results were computed with
    assert ref.seeds == (0, 1, 2, 3, 4) and ref.n_train == 1024 and ref.probe_steps == 200
