"""The paper profile's DeiT-style ViT recipe (L6-L8 at paper scale): its schedule and weight
decay groups, a stacked seed that trains like its sequential twin (crops, flips and mixing
included), runs read at their validation optimum into the study's records, CIFAR-100's split,
and the paper shapes."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from ddcl_theory.data import paper
from ddcl_theory.experiments import deit_recipe as dr
from ddcl_theory.experiments import laplacian_vit as lv
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.stacked import StackedModels

from _study_images import synthetic_images


def tiny(**changes) -> dr.DeiTRecipe:
    base = dict(image_size=8, patch=4, dim=8, depth=1, heads=2, mlp_ratio=2, batch_size=16,
                epochs=4, warmup_epochs=1, lr=0.2, crop_pad=1, drop_path=0.0, patience=2)
    return dataclasses.replace(dr.DeiTRecipe(), **{**base, **changes})


def test_the_rate_warms_up_linearly_then_decays_to_its_floor():
    f = [dr.lr_factor(k, 100, 10, 0.01) for k in range(101)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)
    assert f[10] == pytest.approx(1.0) and f[100] == pytest.approx(0.01)
    assert all(a >= b for a, b in zip(f[10:], f[11:]))
    assert dr.lr_factor(55, 100, 10, 0.0) == pytest.approx(0.5)
    assert dr.lr_factor(0, 10, 0, 0.0) == pytest.approx(1.0)


def test_weight_decay_falls_on_matrices_only():
    model = tiny().model(10, 0)
    groups = dr.param_groups(model, 0.05)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in groups[0]["params"]}
    plain = {names[id(p)] for p in groups[1]["params"]}
    assert groups[0]["weight_decay"] == 0.05 and groups[1]["weight_decay"] == 0.0
    assert any(n.endswith("q_proj.weight") for n in decayed)
    assert any(n.endswith("patch_embeddings.projection.weight") for n in decayed)
    assert all(n.endswith(("bias", "position_embeddings", "cls_token"))
               or "layernorm" in n for n in plain)
    assert {"hf.vit.embeddings.cls_token", "hf.vit.embeddings.position_embeddings",
            "hf.classifier.bias", "hf.vit.layernorm.weight"} <= plain
    assert "hf.classifier.weight" in decayed
    assert len(decayed) + len(plain) == len(names)
    # the same split on a stack (a leading seed axis on every parameter)
    stack = StackedModels(lambda _s: tiny().model(10, 0), [0, 1])
    stacked = dr.param_groups(stack.stacked, 0.05, stacked=True)
    assert [len(g["params"]) for g in stacked] == [len(g["params"]) for g in groups]


def test_a_stacked_seed_trains_like_its_sequential_twin():
    # float64, so that Adam's near-zero updates do not amplify the rounding of batched kernels;
    # two blocks, so that stochastic depth acts (drawn from each seed's generator)
    recipe = tiny(depth=2, drop_path=0.3)
    images = synthetic_images()
    tensors = {k: v.double() if v.is_floating_point() else v
               for k, v in dr.study_pixels(images, 64).items()}

    def train(seeds):
        return dr.train_deit_stack(lambda _s: recipe.model(10, 1).double(), seeds, recipe,
                                   tensors, 10, "cpu", epochs=3, patience=None)

    models, log = train([0, 1])
    for i, seed in enumerate((0, 1)):
        alone, log1 = train([seed])
        assert np.allclose(log.train_loss[:, i], log1.train_loss[:, 0], rtol=1e-9)
        for p, q in zip(models[i].parameters(), alone[0].parameters()):
            assert torch.allclose(p, q, rtol=1e-7, atol=1e-9)
    assert not np.allclose(log.train_loss[:, 0], log.train_loss[:, 1])


def test_runs_are_read_at_their_optimum_into_the_studys_records():
    recipe = tiny(epochs=8, depth=2, drop_path=0.1)
    images = synthetic_images()
    runs = dr.deit_stack_runs(recipe, images, "sweep", 64, 8, "all", (0, 1), "cpu",
                              n_train_eval=30)
    assert [r.seed for r in runs] == [0, 1]
    for r in runs:
        assert r.laplacian_heads == 2 and r.patience == 2 and r.epochs == 8
        assert 1 <= r.best_epoch <= r.epochs_run <= 8
        assert r.best_epoch == int(np.argmin(r.val_loss)) + 1
        assert len(r.stream) == recipe.depth and 0 <= r.eval_acc <= 1
        assert r.correct_items.shape == (60,) and math.isfinite(r.nc1)
        assert 1 <= r.k99 <= 8 and 1 <= r.pr <= 8
    terminal = dr.deit_stack_runs(recipe, images, "terminal", 30, 8, "0", (0,), "cpu",
                                  n_train_eval=30, epochs=3)
    with pytest.raises(ValueError, match="epochs: expected more than the recipe's warmup"):
        dr.deit_stack_runs(recipe, images, "terminal", 30, 8, "0", (0,), "cpu",
                           n_train_eval=30, epochs=1)
    assert terminal[0].patience is None and terminal[0].best_epoch == 3
    with pytest.raises(ValueError, match="part: expected"):
        dr.deit_stack_runs(recipe, images, "long", 30, 8, "0", (0,), "cpu", n_train_eval=30)


def test_the_fitting_recipe_trains_on_the_images_and_labels_as_they_are():
    recipe = tiny(depth=3, drop_path=0.3, crop_pad=2)
    fit = recipe.fitting()
    x, y = torch.randn(6, 3, 8, 8), torch.arange(6)
    images, targets = dr.augmented_batch(fit, x, y, 10, torch.Generator().manual_seed(0))
    assert torch.equal(images, x)
    assert torch.equal(targets, torch.nn.functional.one_hot(y, 10).float())
    assert fit.model(10, 0).drop_path == [0.0, 0.0, 0.0]
    # the same model, optimiser and schedule
    regularisers = ("crop_pad", "flip", "label_smoothing", "mix_prob", "drop_path")
    assert fit.replace(**{k: getattr(recipe, k) for k in regularisers}) == recipe
    # the recipe itself augments
    changed, soft = dr.augmented_batch(recipe, x, y, 10, torch.Generator().manual_seed(0))
    assert not torch.equal(changed, x) and not torch.equal(soft, targets)


def test_only_the_terminal_part_trains_under_the_fitting_recipe(monkeypatch):
    recipe = tiny()
    seen = {}
    real = dr.train_deit_stack

    def spy(make, seeds, used, *args, name, **kwargs):
        seen[name.split(",")[0]] = used
        return real(make, seeds, used, *args, name=name, **kwargs)

    monkeypatch.setattr(dr, "train_deit_stack", spy)
    images = synthetic_images()
    for part in ("sweep", "terminal", "wide"):
        dr.deit_stack_runs(recipe, images, part, 30, 8, "0", (0,), "cpu", n_train_eval=30,
                           epochs=2)
    assert seen == {"sweep": recipe, "terminal": recipe.fitting(), "wide": recipe}


def test_neural_collapse_is_read_on_the_cls_token_the_classifier_reads():
    from ddcl_theory.metrics import geometry
    torch.manual_seed(0)
    model = tiny().model(10, 1).eval()
    t = dr.study_pixels(synthetic_images(), 40)
    got = dr.cls_collapse(model, t["x_eval"], t["y_eval"], t["x_fit"], t["y_fit"])
    with torch.no_grad():
        _, states = model(t["x_eval"], return_hidden=True)
        cls = model.norm(states[-1])[:, 0].double().numpy()
        mean = model.norm(states[-1]).mean(1).double().numpy()
    labels = t["y_eval"].numpy()
    assert got["nc1"] == pytest.approx(geometry.neural_collapse(cls, labels).nc1, rel=1e-9)
    assert got["nc1"] != pytest.approx(geometry.neural_collapse(mean, labels).nc1, rel=1e-3)


def test_pixels_are_standardised_by_the_training_images_only():
    images = synthetic_images()
    t = dr.study_pixels(images, 40)
    assert t["x_fit"].shape == (40, 3, 8, 8) and t["x_eval"].shape == (60, 3, 8, 8)
    mean = t["x_fit"].double().mean(dim=(0, 2, 3))
    assert torch.allclose(mean, torch.zeros(3, dtype=torch.float64), atol=1e-5)
    assert not torch.allclose(t["x_eval"].double().mean(dim=(0, 2, 3)),
                              torch.zeros(3, dtype=torch.float64), atol=1e-3)
    with pytest.raises(ValueError, match="n_train: expected 0 < n_train <= 96"):
        dr.study_pixels(images, 97)


def test_cifar100_splits_into_fit_pool_validation_and_test_pool(monkeypatch):
    rng = np.random.default_rng(0)
    fake = paper.LabelledImages(rng.integers(0, 256, (50, 32, 32, 3), dtype=np.uint8),
                                rng.integers(0, 100, 50), rng.integers(0, 256, (20, 32, 32, 3),
                                                                      dtype=np.uint8),
                                rng.integers(0, 100, 20), tuple(map(str, range(100))),
                                "cifar100")
    monkeypatch.setattr(paper, "load_cifar100", lambda: fake)
    images = dr.paper_study_images(10, 15)
    assert images.num_classes == 100 and images.source == "cifar100"
    assert len(images.y_fit) == 40 and len(images.y_val) == 10 and len(images.y_eval) == 15
    assert np.array_equal(images.y_val, fake.y_train[40:])
    assert np.array_equal(images.x_eval, fake.x_test[:15] / np.float32(255))
    with pytest.raises(ValueError, match="n_eval: expected 0 < n_eval <= 20"):
        dr.paper_study_images(10, 21)


def test_only_the_smoke_run_stands_the_cifar10_subset_in_for_a_missing_cifar100(monkeypatch,
                                                                               capsys):
    def missing():
        raise FileNotFoundError("CIFAR-100 is in no data directory")

    monkeypatch.setattr(paper, "load_cifar100", missing)
    monkeypatch.setattr(lv, "load_study_images", lambda n_val, n_eval: synthetic_images())
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    monkeypatch.setenv("DDCL_ALLOW_CPU", "1")
    with pytest.raises(FileNotFoundError, match="CIFAR-100"):
        dr.paper_study_images(10, 15)
    monkeypatch.setenv(profile.SMOKE_ENV, "1")
    images = dr.paper_study_images(10, 15)
    assert images.num_classes == 100 and "smoke stand-in for cifar100" in images.source
    assert np.array_equal(images.y_fit, synthetic_images().y_fit)
    assert "NOTICE" in capsys.readouterr().out


def test_the_paper_recipe_is_vit_s_on_4x4_patches(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    monkeypatch.setenv("DDCL_ALLOW_CPU", "1")
    recipe = dr.DeiTRecipe.from_profile()
    assert (recipe.dim, recipe.depth, recipe.heads, recipe.patch) == (384, 12, 6, 4)
    assert (recipe.epochs, recipe.batch_size, recipe.lr) == (400, 512, 5e-4)
    model = recipe.model(100, 6)
    n = sum(p.numel() for p in model.parameters())
    assert 21.0e6 < n < 21.9e6                                   # ViT-S with a 100-way head
    assert model.drop_path[-1] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="patch: expected a divisor of image_size"):
        dataclasses.replace(recipe, patch=5).check()


@pytest.mark.slow
def test_one_epoch_at_the_paper_shapes_trains_and_measures(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    monkeypatch.setenv(profile.SMOKE_ENV, "1")
    monkeypatch.setenv("DDCL_ALLOW_CPU", "1")
    recipe = dr.DeiTRecipe.from_profile()
    assert (recipe.dim, recipe.depth, recipe.epochs, recipe.batch_size) == (384, 12, 1, 8)
    rng = np.random.default_rng(0)

    def draw(n):
        return rng.random((n, 32, 32, 3)).astype(np.float32), rng.integers(0, 100, n)

    images = lv.StudyImages(*draw(8), *draw(4), *draw(4), "stand-in", 100)
    runs = dr.deit_stack_runs(recipe, images, "sweep", 8, recipe.dim, "all", (0,), "cpu",
                              n_train_eval=4)
    assert runs[0].epochs_run == 1 and runs[0].best_epoch == 1
    assert len(runs[0].stream) == 12 and math.isfinite(runs[0].val_loss[0])
