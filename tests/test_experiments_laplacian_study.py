"""The paired Laplacian-head study of a ViT (L6-L8): its three parts on tiny synthetic images
(finite, reproducible, each run read at its validation optimum, resumable after a kill to the
same numbers), its settings and their checks per profile. The verdict rules are tested in
test_ledger_decisions_laplacian_experiments."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ddcl_theory.experiments import deit_recipe as dr
from ddcl_theory.experiments import laplacian_study as ls
from ddcl_theory.ledger.decisions import laplacian_experiments as lx
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.runtime.settings import CONFIRMATORY_SEED_BASE, confirmatory_seeds

from _killers import Killed, KilledAfter
from _study_images import synthetic_images


def tiny_vit(**changes) -> ls.ViTStudySettings:
    base = dict(n_train=(40, 80), n_val=48, n_test=60, n_train_eval=30, patch=4, dim=8, depth=1,
                heads=2, batch_size=16, epochs=8, patience=2, lr=3e-2,
                head_settings=("0", "1", "all"), seeds=(0, 1),
                terminal=ls.TerminalSettings(n_train=30, epochs=6, seeds=(0, 1)),
                wide=ls.WidthSettings(dims=(16,), n_train=80, seeds=(0,)))
    return ls.ViTStudySettings(**{**base, **changes})


@pytest.fixture(scope="module")
def vit_study():
    return ls.run_vit(tiny_vit(), synthetic_images())


def test_tiny_vit_study_runs_every_part_and_is_reproducible(vit_study):
    s = vit_study.settings
    assert ls.run_vit(tiny_vit(), synthetic_images()).runs == vit_study.runs
    parts = {(r.part, r.n_train, r.dim, r.setting) for r in vit_study.runs}
    assert parts == ({("sweep", n, 8, h) for n in (40, 80) for h in ("0", "1", "all")}
                     | {("terminal", 30, 8, h) for h in ("0", "all")}
                     | {("wide", 80, 16, h) for h in ("0", "all")})
    assert [r.seed for r in vit_study.by("1", n_train=40)] == [0, 1]
    assert vit_study.counts() == {"0": 0, "1": 1, "all": 2}
    assert vit_study.values("eval_acc", "all").shape == (2,)
    assert vit_study.values("final.within_sequence", "0", part="wide").shape == (1,)
    assert s.scales == ("40 images", "80 images")


def test_each_run_is_read_at_its_optimum_and_measured_on_the_pool(vit_study):
    for r in vit_study.runs:
        assert 1 <= r.best_epoch <= r.epochs_run == len(r.train_loss) <= r.epochs
        if r.part == "terminal":                 # no early stopping: validated at the end
            assert r.patience is None and r.best_epoch == r.epochs_run == 6
            assert len(r.val_loss) == len(r.val_acc) == 1 and not r.past_optimum
        else:
            assert len(r.val_loss) == len(r.val_acc) == r.epochs_run
            assert r.best_epoch == int(np.argmin(r.val_loss)) + 1
            assert r.past_optimum == (r.epochs_run - r.best_epoch >= 2)
        assert r.correct_items.shape == (60,) and r.eval_acc == r.correct_items.mean()
        assert 0 <= r.train_acc <= 1 and 1 <= r.k99 <= r.dim and 1 <= r.pr <= r.dim
        assert len(r.stream) == 1                   # one block
        for split in (*r.stream, r.final):
            assert split.total == pytest.approx(split.within_sequence + split.within_class
                                                + split.between_class, rel=1e-9)
        assert all(math.isfinite(v) for v in (r.nc1, r.nc1_train, r.etf_gap_train))


def test_a_killed_vit_stack_resumes_to_the_same_runs(tmp_path):
    s = tiny_vit()
    images = synthetic_images()
    args = (s, images, "sweep", 40, 8, "all", (0, 1), "cpu")
    whole = ls.train_vit_stack_runs(*args)
    with pytest.raises(Killed):
        ls.train_vit_stack_runs(*args, KilledAfter("study-test", s, root=tmp_path, enabled=True,
                                                   saves=2))
    run = RunDir("study-test", s, root=tmp_path, enabled=True)
    assert ls.train_vit_stack_runs(*args, run) == whole
    with pytest.raises(ValueError, match="part"):
        ls.train_vit_stack_runs(s, images, "long", 40, 8, "all", (0,), "cpu")


def test_extra_seeds_train_at_the_largest_image_count_only(vit_study):
    study = ls.run_vit(tiny_vit(extra_seeds=(5,)), synthetic_images())
    assert [r.seed for r in study.by("1")] == [0, 1, 5]                  # 80 images: the largest
    assert [r.seed for r in study.by("1", n_train=40)] == [0, 1]
    assert [r.seed for r in study.by("0", part="wide")] == [0]
    assert [r.seed for r in study.by("all", part="terminal")] == [0, 1]
    # the shared seeds train as before: a seed's run does not depend on its stack's others
    old = {(r.part, r.n_train, r.setting, r.seed): r for r in vit_study.runs}
    assert all(old[(r.part, r.n_train, r.setting, r.seed)] == r
               for r in study.runs if r.seed != 5)
    for extra in ((0,), (5, 5)):
        with pytest.raises(ValueError, match=r"ViTStudySettings\.extra_seeds: expected seeds "
                                             r"distinct"):
            tiny_vit(extra_seeds=extra)


def test_settings_validation():
    with pytest.raises(ValueError, match=r"ViTStudySettings\.n_train: expected increasing"):
        tiny_vit(n_train=(80, 40))
    with pytest.raises(ValueError, match=r"ViTStudySettings\.head_settings: expected \('0', "
                                         r"'all'\)"):
        tiny_vit(head_settings=("0", "1"))
    with pytest.raises(ValueError, match=r"ViTStudySettings\.head_settings: .*heads=2"):
        tiny_vit(head_settings=("0", "3", "all"))
    with pytest.raises(ValueError, match=r"ViTStudySettings\.wide\.n_train: expected one of"):
        tiny_vit(wide=ls.WidthSettings(dims=(16,), n_train=60, seeds=(0,)))
    with pytest.raises(ValueError, match=r"ViTStudySettings\.wide\.dims: expected a multiple"):
        tiny_vit(wide=ls.WidthSettings(dims=(15,), n_train=80, seeds=(0,)))
    for dims in ((16, 12), (8, 16), (16, 16)):          # increasing, all wider than dim=8
        with pytest.raises(ValueError, match=r"ViTStudySettings\.wide\.dims: expected "
                                             r"increasing widths above dim=8"):
            tiny_vit(wide=ls.WidthSettings(dims=dims, n_train=80, seeds=(0,)))
    with pytest.raises(ValueError, match=r"ViTStudySettings\.n_test: expected a multiple"):
        tiny_vit(n_test=55)
    assert tiny_vit(n_test=55, recipe="deit").n_test == 55       # CIFAR-100's first test images
    with pytest.raises(ValueError, match=r"ViTStudySettings\.patience: expected >= 1"):
        tiny_vit(patience=0)


def test_the_deit_settings_fit_cifar100_and_the_recipes_warmup():
    deit = dict(recipe="deit", n_val=1000)
    assert tiny_vit(**deit, n_train=(10, 49_000), n_test=10_000,
                    wide=ls.WidthSettings(dims=(16,), n_train=10, seeds=(0,))).n_test == 10_000
    with pytest.raises(ValueError, match=r"ViTStudySettings\.n_train: expected at most 49000 "
                                         r"images \(CIFAR-100's 50000 training images less "
                                         r"n_val=1000\), got 49001"):
        tiny_vit(**deit, n_train=(10, 49_001),
                 wide=ls.WidthSettings(dims=(16,), n_train=10, seeds=(0,)))
    with pytest.raises(ValueError, match=r"ViTStudySettings\.terminal\.n_train: expected at "
                                         r"most 49000"):
        tiny_vit(**deit, terminal=ls.TerminalSettings(n_train=49_001, epochs=6, seeds=(0,)))
    with pytest.raises(ValueError, match=r"ViTStudySettings\.n_test: expected at most "
                                         r"CIFAR-100's 10000 test images, got 10001"):
        tiny_vit(**deit, n_test=10_001)
    with pytest.raises(ValueError, match=r"ViTStudySettings\.terminal\.epochs: expected more "
                                         r"than warmup_epochs=3, got 3"):
        tiny_vit(**deit, warmup_epochs=3,
                 terminal=ls.TerminalSettings(n_train=30, epochs=3, seeds=(0,)))
    with pytest.raises(ValueError, match=r"ViTStudySettings\.epochs: expected more than "
                                         r"warmup_epochs=8, got 8"):
        tiny_vit(**deit, warmup_epochs=8)
    assert ls.deit_recipe_of(tiny_vit(**deit, warmup_epochs=3)).warmup_epochs == 3
    # the plain recipe reads the CIFAR-10 subset, with no warm-up: these limits are not its
    assert tiny_vit(warmup_epochs=8, n_test=10_010, patch=3).n_test == 10_010
    with pytest.raises(ValueError, match=r"ViTStudySettings\.patch: expected a divisor of "
                                         r"CIFAR-100's image side 32, got 3"):
        tiny_vit(**deit, patch=3)


def test_the_deit_recipe_trains_each_unit_into_the_same_records():
    # each part on seeds of its own, so that a dispatch handing over the wrong ones fails
    s = tiny_vit(recipe="deit", lr=0.2,
                 terminal=ls.TerminalSettings(n_train=30, epochs=6, seeds=(1, 2)),
                 wide=ls.WidthSettings(dims=(16,), n_train=80, seeds=(2, 3)))
    images = synthetic_images()
    study = ls.run_vit(s, images)
    parts = {(r.part, r.n_train, r.dim, r.setting) for r in study.runs}
    assert parts == {(r.part, r.n_train, r.dim, r.setting) for r in ls.run_vit(
        tiny_vit(), images).runs}
    assert study.tokens == (8 // 4) ** 2 + 1                  # the patches and the CLS token
    recipe = ls.deit_recipe_of(s, image_size=8)
    assert (recipe.dim, recipe.depth, recipe.heads, recipe.patch, recipe.batch_size,
            recipe.epochs, recipe.lr, recipe.patience) == (8, 1, 2, 4, 16, 8, 0.2, 2)
    assert recipe.mixup_alpha > 0 and recipe.label_smoothing > 0        # the profile's own
    # the dispatch hands each unit to the recipe's trainer with the study's budgets
    assert study.by("1", n_train=40) == dr.deit_stack_runs(
        recipe, images, "sweep", 40, 8, "1", s.seeds, "cpu", n_train_eval=30)
    assert study.by("0", part="terminal") == dr.deit_stack_runs(
        recipe, images, "terminal", 30, 8, "0", (1, 2), "cpu", n_train_eval=30, epochs=6)
    # the wide twin's measurements (k99, the streams) come from a model of width 16
    assert study.by("0", part="wide") == dr.deit_stack_runs(
        recipe, images, "wide", 80, 16, "0", (2, 3), "cpu", n_train_eval=30)
    assert all(r.patience is None and r.best_epoch == 6 for r in study.by("all", part="terminal"))
    for decide in (lx.decide_l6, lx.decide_l7, lx.decide_l8):          # they read it
        assert "under a DeiT-style recipe" in decide(study).evidence
    unmixed = "(without crops, flips, label smoothing, mixing or stochastic depth)"
    assert f"runs fitted for 6 epochs {unmixed}." in lx.decide_l7(study).evidence
    assert unmixed not in lx.decide_l7(ls.run_vit(tiny_vit(), images)).evidence
    with pytest.raises(ValueError, match=r"ViTStudySettings\.recipe"):
        tiny_vit(recipe="deit3")


def test_the_paper_profile_trains_vit_s_under_the_deit_recipe_on_cifar100(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    monkeypatch.setenv("DDCL_ALLOW_CPU", "1")
    s = ls.ViTStudySettings.from_profile()
    assert s.recipe == "deit" and (s.dim, s.depth, s.heads, s.patch) == (384, 12, 6, 4)
    assert ls.deit_recipe_of(s) == dr.DeiTRecipe.from_profile()   # the recipe's own ViT-S
    assert s.wide.dims == (768,) and s.n_train[-1] == 50_000 - s.n_val   # all of CIFAR-100
    assert s.n_test == 10_000                                  # CIFAR-100's test images
    # the terminal runs fit 1,000 images for 1,000 steps, past the recipe's warm-up
    steps = s.terminal.epochs * math.ceil(s.terminal.n_train / s.batch_size)
    assert (s.terminal.n_train, steps) == (1000, 1000)
    assert s.terminal.epochs > ls.deit_recipe_of(s).warmup_epochs == s.warmup_epochs == 5
    seen = []
    monkeypatch.setattr(dr, "paper_study_images", lambda *a: seen.append(a) or "cifar100")
    assert ls.study_images(s) == "cifar100" and seen == [(s.n_val, s.n_test)]


def test_the_reference_profile_scales_the_images_and_uses_confirmatory_seeds(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    assert ls.ViTStudySettings.from_profile() == ls.ViTStudySettings()
    assert max(ls.ViTStudySettings().seeds) < CONFIRMATORY_SEED_BASE
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    vit = ls.ViTStudySettings.from_profile()
    assert vit.n_train == (1000, 3000, 9000) and vit.n_test == 10_000
    assert vit.dim == ls.ViTStudySettings().dim and vit.wide.dim >= 128
    assert len((vit.dim, *vit.wide.dims)) >= 3               # three widths: a trend
    # L8's second confirmatory run: the rule's seeds, none of the first run's
    assert len(vit.wide.seeds) == rule_of("L8").n_seeds
    assert not set(vit.wide.seeds) & set(confirmatory_seeds(10, run=1))
    # L6's second confirmatory run: the rule's seeds at the largest count, 22 of them at every
    # count, none of the first run's (1000-1021 at every count)
    assert len(vit.seeds + vit.extra_seeds) == rule_of("L6").n_seeds == ls.DECIDING_SEEDS
    assert len(vit.seeds) == ls.SWEEP_SEEDS
    assert not set(vit.seeds + vit.extra_seeds) & set(confirmatory_seeds(22, run=1))
    assert rule_of("L7").n_seeds <= len(vit.seeds + vit.extra_seeds)
    assert (vit.threads, vit.workers) == (1, 2)             # both cores of a 2-core machine
    for seeds in (vit.seeds, vit.terminal.seeds, vit.wide.seeds):
        assert min(seeds) >= CONFIRMATORY_SEED_BASE and len(seeds) >= 5


@pytest.mark.slow  # spawns two interpreters that import torch
def test_two_worker_processes_give_the_runs_of_one(vit_study):
    assert ls.run_vit(tiny_vit(workers=2), synthetic_images()).runs == vit_study.runs


def test_a_worker_without_images_loads_the_study_images_once(monkeypatch, vit_study):
    loads = []

    def load(n_val, n_test):
        loads.append((n_val, n_test))
        return synthetic_images()

    monkeypatch.setattr(ls.lv, "load_study_images", load)
    ls._worker_images.cache_clear()
    s = tiny_vit()
    runs = [ls._stack_unit(s, None, "sweep", 40, 8, h, s.seeds, "cpu") for h in ("0", "all")]
    ls._worker_images.cache_clear()
    assert loads == [(48, 60)]
    assert runs[0] + runs[1] == vit_study.by("0", n_train=40) + vit_study.by("all", n_train=40)
