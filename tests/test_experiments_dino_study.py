"""L10's paired study at the papers' data, at the cpu profile's tiny shapes on random stand-ins
of Imagenette and ADE20K: both arms of a seed start from the same weights and data order, each
run is read by every probe the rule and its gates need, the study is reproducible and resumes
from its run directory, and bad settings or splits are named."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ddcl_theory.data.ade20k import SegmentationSet
from ddcl_theory.experiments import dino_recipe as dr
from ddcl_theory.experiments import dino_study as ds
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir


def _seg(rng, m: int, s: int, split: str) -> SegmentationSet:
    return SegmentationSet(rng.integers(0, 256, (m, s, s, 3), dtype=np.uint8),
                           rng.integers(0, 6, (m, s, s)).astype(np.uint8),
                           tuple(f"{split}{i}" for i in range(m)), split)


def _data(recipe: dr.DinoRecipe, settle: int = 2, seed: int = 0) -> ds.ProbeData:
    rng = np.random.default_rng(seed)
    s = recipe.image_size
    images = rng.integers(0, 256, (16, s, s, 3), dtype=np.uint8)
    val = rng.integers(0, 256, (8, s, s, 3), dtype=np.uint8)
    return ds.ProbeData.split(images, np.arange(16) % 10, val, np.arange(8) % 10,
                              _seg(rng, 8, s, "training"), _seg(rng, 4, s, "validation"),
                              settle)


@pytest.fixture(scope="module")
def study():
    recipe = dr.DinoRecipe()
    st = ds.DinoStudySettings()
    return ds.run(st, data=_data(recipe), run_dir=RunDir("dino", st, enabled=False))


def test_every_seed_runs_both_arms_at_the_longest_and_the_trend_seeds_every_length(study):
    st = study.settings
    assert {(r.setting, r.seed, r.epochs) for r in study.runs} == {
        (s, seed, e) for e in st.epochs for seed in st.seeds_at(e) for s in st.head_settings}
    assert st.seeds_at(2) == (0, 1) and st.seeds_at(1) == (0,)
    assert [r.laplacian_heads for r in study.runs if r.seed == 0 and r.epochs == 2] == [0, 4]
    for r in study.runs:
        assert len(r.losses) == r.epochs and np.all(np.isfinite(r.losses))
        for v in (r.miou, r.pixel_acc, r.image_acc, r.settle_miou, r.val_miou):
            assert 0.0 <= v <= 1.0
        assert 0.0 <= r.teacher_mean_entropy <= study.log_k + 1e-6
        assert 1.0 <= r.effective_rank <= study.recipe.dim
    assert study.values("all", "miou").shape == (2,)
    assert study.values("0", "image_acc", epochs=1).shape == (1,)
    assert {(f.setting, f.seed) for f in study.floors} == {(s, seed) for s in ("0", "all")
                                                         for seed in (0, 1)}
    assert study.floor_values("all", "pixel_acc").shape == (2,)
    assert study.sizes == {"imagenette_train": 16, "imagenette_val": 8, "ade20k_fit": 6,
                           "ade20k_settle": 2, "ade20k_validation": 4}


def test_a_run_of_one_epoch_reads_its_settling_probe_at_the_end(study):
    # SETTLE_AT of one epoch rounds to the only epoch: the two held-out readings coincide
    one = study.run("all", 0, 1)
    assert one.settle_miou == one.val_miou
    assert ds._settle_epoch(100) == 75 and ds._settle_epoch(2) == 2


def test_a_run_is_reproducible_from_its_seed_and_the_arms_share_their_start(study):
    recipe = dr.DinoRecipe()
    data = _data(recipe)
    again = ds.run_one(study.settings, data, "all", 1, 2)
    assert again == study.run("all", 1)
    none, lap = (dr.build_pair(recipe, s, 1) for s in ("0", "all"))
    for a, b in zip(none.student.state_dict().values(), lap.student.state_dict().values()):
        assert torch.equal(a, b)                # the same initial weights, heads aside
    untrained = ds.untrained_floor(study.settings, data, "all", 1)
    assert untrained == next(f for f in study.floors if (f.setting, f.seed) == ("all", 1))


def test_the_majority_floor_labels_every_pixel_with_the_most_frequent_training_class():
    fit = SegmentationSet(np.zeros((1, 2, 2, 3), np.uint8),
                          np.array([[[3, 3], [3, 0]]], np.uint8), ("a",), "training")
    test = SegmentationSet(np.zeros((1, 2, 2, 3), np.uint8),
                           np.array([[[3, 5], [0, 0]]], np.uint8), ("b",), "validation")
    miou, acc = ds.majority_floor(fit, test)
    # class 3: 1 hit of 2 predicted; class 5: 0 of 1 -> IoUs 1/2 and 0 over the two classes
    assert acc == pytest.approx(0.5) and miou == pytest.approx(0.25)
    with pytest.raises(ValueError, match="fit: no labelled pixel"):
        ds.majority_floor(SegmentationSet(fit.images, 0 * fit.labels, ("a",), "training"), test)


def test_a_study_resumes_from_its_run_directory(tmp_path):
    recipe = dr.DinoRecipe()
    st = ds.DinoStudySettings(seeds=(0,), epochs=(1,))
    data = _data(recipe)
    first = ds.run(st, data=data, run_dir=RunDir("dino", st, root=tmp_path, enabled=True))
    rd = RunDir("dino", st, root=tmp_path, enabled=True)
    again = ds.run(st, data=data, run_dir=rd)
    assert again.runs == first.runs and again.floors == first.floors
    assert sorted(rd.loaded) == ["0-seed0-1", "all-seed0-1", "untrained-0-seed0",
                                 "untrained-all-seed0"]


def test_bad_settings_and_splits_are_named():
    with pytest.raises(ValueError, match="head_settings: expected two settings"):
        ds.DinoStudySettings(head_settings=("all", "half"))
    with pytest.raises(ValueError, match="epochs: expected increasing lengths"):
        ds.DinoStudySettings(epochs=(2, 1))
    with pytest.raises(ValueError, match="epochs: expected one of"):
        ds.DinoStudySettings().seeds_at(3)
    recipe = dr.DinoRecipe()
    with pytest.raises(ValueError, match=r"settle_images: expected 1 to 7"):
        _data(recipe, settle=8)
    with pytest.raises(ValueError, match="name no head count"):
        ds.run(ds.DinoStudySettings(head_settings=("0", "7")), data=_data(recipe))
    d = _data(recipe)
    with pytest.raises(ValueError, match=r"labels: expected \(16,\)"):
        ds.ProbeData.split(d.images, d.labels[:3], d.val_images, d.val_labels,
                           d.fit, d.test, 2)


def test_the_paper_study_is_the_rule_s_seeds_on_fresh_seeds_with_a_three_length_trend(
        monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    st = ds.DinoStudySettings.from_profile()
    assert len(st.seeds) == 26 and st.epochs == (25, 50, 100) and len(st.trend) == 4
    assert (st.recipe.dim, st.recipe.depth, st.recipe.patch) == (384, 12, 16)
    runs = sum(len(st.seeds_at(e)) * 2 for e in st.epochs)
    assert runs == 68 and sum(len(st.seeds_at(e)) * 2 * e for e in st.epochs) == 5800
    from ddcl_theory.ledger.rules import L10_SEEDS
    assert len(st.seeds) == L10_SEEDS


def test_the_plan_counts_the_runs_and_epochs_it_names():
    st = ds.DinoStudySettings.for_profile(profile.Profile("paper", "cuda"))
    assert st.plan().startswith("68 pre-training runs of a ViT d=384, 12 blocks, 6 heads, "
                                "16x16 patches at 160 px on every Imagenette training image "
                                "(5,800 epochs in all): 26 seeds at 100 epochs, the first 4 "
                                "also at 25, 50")
    assert ds.DinoStudySettings(epochs=(3,)).plan().startswith("4 pre-training runs")
