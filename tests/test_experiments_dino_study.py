"""L10's paired study on the papers' data, at the cpu profile's tiny shapes on random stand-ins
of Imagenette and ADE20K: both arms of a seed start from the same weights and see the same
batches, views and masks; the probe part-way through changes no training step; every run is read
by each probe the rule and its gates need (per image, so intervals can resample images); the
tuning picks a rate per arm on held-out images; the study is reproducible, resumes, and names bad
settings or splits."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ddcl_theory.data import dense_proxy
from ddcl_theory.data.ade20k import NUM_CLASSES, SegmentationSet
from ddcl_theory.experiments import ade20k_probe
from ddcl_theory.experiments import dino_recipe as dr
from ddcl_theory.experiments import dino_study as ds
from ddcl_theory.metrics import segmentation
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir


def _seg(rng, m: int, s: int, split: str) -> SegmentationSet:
    return SegmentationSet(rng.integers(0, 256, (m, s, s, 3), dtype=np.uint8),
                           rng.integers(0, 6, (m, s, s)).astype(np.uint8),
                           tuple(f"{split}{i}" for i in range(m)), split)


def _data(st: ds.DinoStudySettings, seed: int = 0) -> ds.ProbeData:
    rng = np.random.default_rng(seed)
    s = st.recipe.image_size
    images = rng.integers(0, 256, (16, s, s, 3), dtype=np.uint8)
    val = rng.integers(0, 256, (8, s, s, 3), dtype=np.uint8)
    return ds.ProbeData.split(images, np.arange(16) % 10, val, np.arange(8) % 10,
                              _seg(rng, 8, s, "training"), _seg(rng, 4, s, "validation"), st)


def _off(st) -> RunDir:
    return RunDir("dino", st, enabled=False)


@pytest.fixture(scope="module")
def study():
    st = ds.DinoStudySettings(tune_lrs=(5e-4, 2e-3))
    return ds.run(st, data=_data(st), run_dir=_off(st))


def test_every_seed_runs_both_arms_at_the_longest_and_the_trend_seeds_every_length(study):
    st = study.settings
    assert {(r.setting, r.seed, r.epochs) for r in study.runs} == {
        (s, seed, e) for e in st.epochs for seed in st.seeds_at(e) for s in st.head_settings}
    assert st.seeds_at(2) == (0, 1) and st.seeds_at(1) == (0,)
    assert [r.laplacian_heads for r in study.runs if r.seed == 0 and r.epochs == 2] == [0, 4]
    for r in study.runs:
        assert r.lr == study.lrs[r.setting] and len(r.losses) == r.epochs
        assert np.all(np.isfinite(r.losses))
        for v in (r.miou, r.pixel_acc, r.image_acc, r.settle_miou, r.val_miou):
            assert 0.0 <= v <= 1.0
        assert 0.0 <= r.teacher_mean_entropy <= study.log_k + 1e-6
        assert 1.0 <= r.effective_rank <= study.recipe.dim
        # the per-image values behind the readings
        assert r.image_correct.shape == (8,) and r.image_correct.mean() == r.image_acc
        assert r.segment_counts.shape == (4, 3, NUM_CLASSES)
        assert segmentation.miou_of_counts(r.segment_counts) == pytest.approx(r.miou, abs=1e-12)
    assert study.items("all", "segment_counts").shape == (2, 4, 3, NUM_CLASSES)
    assert study.floor_values("all", "pixel_acc").shape == (2,)
    assert study.sizes == {"imagenette_train": 16, "imagenette_fit": 12, "imagenette_val": 8,
                           "ade20k_fit": 6, "ade20k_settle": 2, "ade20k_validation": 4}


def test_the_tuning_scores_each_arm_s_rates_on_held_out_images_and_picks_one(study):
    st = study.settings
    assert {(t.setting, t.lr, t.seed) for t in study.tuning} == {
        (s, lr, 900) for s in st.head_settings for lr in st.tune_lrs}
    assert all(0 <= t.val_miou <= 1 and 0 <= t.val_image_acc <= 1 for t in study.tuning)
    assert set(study.lrs) == {"0", "all"} and set(study.lrs.values()) <= set(st.tune_lrs)
    # the rule: best mean rank of the two scores, then the larger sum, then the smaller rate
    runs = [ds.TuningRun("0", 1e-3, 900, 0.30, 0.50), ds.TuningRun("0", 2e-3, 900, 0.20, 0.60),
            ds.TuningRun("0", 4e-3, 900, 0.10, 0.40)]
    three = ds.DinoStudySettings(head_settings=("0", "all"), tune_lrs=(1e-3, 2e-3, 4e-3))
    runs += [ds.TuningRun("all", lr, 900, 0.1, 0.1) for lr in three.tune_lrs]
    assert ds.tuned_lrs(runs, three) == {"0": 1e-3, "all": 1e-3}
    runs[0] = ds.TuningRun("0", 1e-3, 900, 0.30, 0.40)
    assert ds.tuned_lrs(runs, three)["0"] == 2e-3          # ranks tie; the larger sum
    with pytest.raises(ValueError, match="tuning: no run of '0'"):
        ds.tuned_lrs(runs[1:], three)


def test_both_arms_see_the_same_batches_views_and_masks(monkeypatch):
    st = ds.DinoStudySettings()
    data = _data(st)
    seen = {}
    real = dr.two_views

    def spy(x, gen):
        a, b = real(x, gen)
        seen.setdefault(current[0], []).append((a.clone(), b.clone()))
        return a, b
    monkeypatch.setattr(dr, "two_views", spy)
    current = ["0"]
    dr.pretrain(st.recipe, data.images, "0", 3)
    current[0] = "all"
    dr.pretrain(st.recipe, data.images, "all", 3)
    assert len(seen["0"]) == len(seen["all"]) > 0
    for (a0, b0), (a1, b1) in zip(seen["0"], seen["all"]):
        assert torch.equal(a0, a1) and torch.equal(b0, b1)
    none, lap = (dr.build_pair(st.recipe, s, 3) for s in ("0", "all"))
    for a, b in zip(none.student.state_dict().values(), lap.student.state_dict().values()):
        assert torch.equal(a, b)                # the same initial weights, heads aside


def test_the_probe_part_way_through_changes_no_training_step():
    st = ds.DinoStudySettings()
    data = _data(st)
    r = st.recipe.replace(epochs=2)
    _, plain = dr.pretrain(r, data.images, "all", 5)
    _, probed, settle, _, _ = ds._pretrain_probed(st, data, "all", 5, 2, r.lr, "cpu")
    assert probed == plain and 0 <= settle <= 1


def test_a_run_is_reproducible_and_a_floor_is_its_untrained_twin(study):
    data = _data(study.settings)
    again = ds.run_one(study.settings, data, "all", 1, 2, study.lrs["all"])
    first = study.run("all", 1)
    assert again == first and np.array_equal(again.segment_counts, first.segment_counts)
    untrained = ds.untrained_floor(study.settings, data, "all", 1)
    assert untrained == next(f for f in study.floors if (f.setting, f.seed) == ("all", 1))


def test_the_rank_of_the_collapse_check_reads_the_raw_features(monkeypatch):
    """A collapsed encoder (one vector for every patch, up to noise) has a rank near 1; after
    standardising every dimension it would look full rank, so the check reads the raw ones."""
    st = ds.DinoStudySettings()
    data = _data(st)
    gen = torch.Generator().manual_seed(0)
    one = torch.randn(st.recipe.dim, generator=gen)

    def collapsed(encoder, images, stats, patch, device, chunk=1024):
        n = len(images)
        noise = 1e-4 * torch.randn(n, st.recipe.tokens, st.recipe.dim, generator=gen)
        return one.expand(n, st.recipe.tokens, -1) + noise
    monkeypatch.setattr(ds, "_patch_features", collapsed)
    encoder = dr.build_pair(st.recipe, "all", 0).teacher.eval()
    _, rank = ds._segment(st.recipe, encoder, data, ((0, 0, 0), (1, 1, 1)), 0, "cpu",
                          test=False)
    assert rank < 1.1


def test_per_image_counts_rebuild_the_probe_s_mIoU_and_pixel_accuracy():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 7, (5, 16, 16)).astype(np.uint8)
    pred = rng.integers(0, 6, (5, 16, 16))
    counts = segmentation.image_counts(pred, labels.astype(np.int64) - 1, NUM_CLASSES)
    keep = labels > 0
    conf = segmentation.confusion_matrix(pred[keep], labels[keep].astype(np.int64) - 1,
                                         NUM_CLASSES)
    assert segmentation.miou_of_counts(counts) == pytest.approx(segmentation.miou(conf), abs=1e-12)
    assert counts[:, 0].sum() / counts[:, 2].sum() == pytest.approx(
        segmentation.pixel_accuracy(conf))
    # weights: a row of ones is the plain sum; a row keeping one image is that image's mIoU
    w = np.vstack([np.ones(5), np.eye(5)[2]])
    both = segmentation.miou_of_counts(counts, w)
    assert both[0] == pytest.approx(segmentation.miou_of_counts(counts))
    assert both[1] == pytest.approx(segmentation.miou_of_counts(counts[2:3]))
    with pytest.raises(ValueError, match="pred: expected the target's shape"):
        segmentation.image_counts(pred[:, :8], labels, NUM_CLASSES)
    with pytest.raises(ValueError, match=r"pred: labels must lie in \[0, 150\)"):
        segmentation.image_counts(pred + 200, labels, NUM_CLASSES)
    with pytest.raises(ValueError, match="counts: no class occurs"):
        segmentation.miou_of_counts(np.zeros((2, 3, 4), np.int32))


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


def test_the_held_out_splits_are_seeded_draws_disjoint_from_what_the_probes_fit_on():
    st = ds.DinoStudySettings()
    d = _data(st)
    assert len(d.image_held) == st.image_holdout and len(d.image_fit) == 16 - st.image_holdout
    assert not set(d.image_held) & set(d.image_fit)
    assert not set(d.settle.names) & set(d.fit.names) and len(d.settle) == st.settle_images
    again = _data(st)
    assert np.array_equal(again.image_held, d.image_held) and again.settle.names == d.settle.names
    targets = d.fit_targets(st.recipe.patch)
    assert targets is d.fit_targets(st.recipe.patch)             # made once
    assert np.array_equal(targets, ade20k_probe.patch_targets(d.fit.labels, st.recipe.patch))


def test_a_study_resumes_from_its_run_directory(tmp_path):
    st = ds.DinoStudySettings(seeds=(0,), epochs=(1,))
    data = _data(st)
    first = ds.run(st, data=data, run_dir=RunDir("dino", st, root=tmp_path, enabled=True))
    rd = RunDir("dino", st, root=tmp_path, enabled=True)
    again = ds.run(st, data=data, run_dir=rd)
    assert again.runs == first.runs and again.floors == first.floors
    assert sorted(rd.loaded) == ["0-seed0-1", "all-seed0-1", "tune-0-lr0.0005-seed900",
                                 "tune-all-lr0.0005-seed900", "untrained-0-seed0",
                                 "untrained-all-seed0"]


def test_the_smoke_run_reads_announced_stand_ins_and_only_the_smoke_run(monkeypatch, capsys):
    from ddcl_theory.data import imagenette

    def missing(*a, **k):
        raise FileNotFoundError("imagenette2-160.tgz not in any data directory")
    monkeypatch.setattr(imagenette, "imagenette_arrays", missing)
    monkeypatch.setattr(dense_proxy, "cifar_backgrounds", lambda split: (
        np.random.default_rng(0).uniform(0, 1, (40, 32, 32, 3)).astype(np.float32),
        np.arange(40) % 10))
    st = ds.DinoStudySettings()
    with pytest.raises(FileNotFoundError, match="imagenette2-160"):
        ds.ProbeData.load(st)
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    monkeypatch.setenv(profile.SMOKE_ENV, "1")
    d = ds.ProbeData.load(st)
    assert "NOTICE" in capsys.readouterr().out and d.source.startswith("stand-in")
    assert d.images.shape[1:] == (st.recipe.image_size,) * 2 + (3,)
    assert d.fit.labels.min() >= 1 and d.test.labels.max() <= 11


def test_bad_settings_and_splits_are_named():
    with pytest.raises(ValueError, match="head_settings: expected two settings"):
        ds.DinoStudySettings(head_settings=("all", "half"))
    with pytest.raises(ValueError, match="epochs: expected increasing lengths"):
        ds.DinoStudySettings(epochs=(2, 1))
    with pytest.raises(ValueError, match="tune_seeds: a tuning seed may decide nothing"):
        ds.DinoStudySettings(tune_seeds=(0,))
    with pytest.raises(ValueError, match="epochs: expected one of"):
        ds.DinoStudySettings().seeds_at(3)
    with pytest.raises(ValueError, match=r"settle_images: expected 1 to 7"):
        _data(ds.DinoStudySettings(settle_images=8))
    with pytest.raises(ValueError, match=r"image_holdout: expected 1 to 15"):
        _data(ds.DinoStudySettings(image_holdout=16))
    st = ds.DinoStudySettings(head_settings=("0", "7"))
    with pytest.raises(ValueError, match="name no head count"):
        ds.run(st, data=_data(st))
    d = _data(ds.DinoStudySettings())
    with pytest.raises(ValueError, match=r"labels: expected \(16,\)"):
        ds.ProbeData.split(d.images, d.labels[:3], d.val_images, d.val_labels,
                           d.fit, d.test, ds.DinoStudySettings())


def test_the_paper_study_is_the_rule_s_seeds_on_fresh_seeds_with_a_three_length_trend(
        monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    st = ds.DinoStudySettings.from_profile()
    from ddcl_theory.ledger.rules import PAPER_RULES
    assert len(st.seeds) == PAPER_RULES["L10"].n_seeds and min(st.seeds) == 4000
    assert st.epochs == (25, 50, 100) and len(st.trend) == 4
    assert (st.recipe.dim, st.recipe.depth, st.recipe.patch) == (384, 12, 16)
    assert sum(len(st.seeds_at(e)) * 2 for e in st.epochs) == 68
    assert st.plan().startswith("6 tuning runs and 68 deciding runs of a ViT d=384, 12 blocks, "
                                "6 heads, 16x16 patches at 160 px on every Imagenette training "
                                "image (6,400 epochs in all): 26 seeds at 100 epochs, the "
                                "first 4 also at 25, 50")


def test_the_figures_typed_in_the_chapter_and_the_paper_rule_are_the_code_s(monkeypatch):
    """The chapter's and the paper rule's hand-typed sizes follow from the data modules'
    split sizes and the paper settings."""
    from pathlib import Path

    from ddcl_theory.data.ade20k import SPLIT_SIZES as ADE20K
    from ddcl_theory.data.imagenette import SPLIT_SIZES as IMAGENETTE
    from ddcl_theory.ledger.rules import PAPER_RULES
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    st = ds.DinoStudySettings.from_profile()
    r = st.recipe
    chapter = " ".join((Path(__file__).parents[1] / "notebooks" / "dense_features.md")
                       .read_text().split())
    rule = " ".join(PAPER_RULES["L10"].text.split())
    grid = r.image_size // r.patch
    assert f"Imagenette's {IMAGENETTE['train']:,} images at {r.image_size} px" in chapter
    assert f"for {st.epochs[-1]} epochs" in chapter and f"a {grid}x{grid} grid" in chapter
    assert f"Imagenette's {IMAGENETTE['train']:,} images at {r.image_size} px" in rule
    assert (f"Imagenette's {IMAGENETTE['val']:,} images, ADE20K's "
            f"{ADE20K['validation']:,}") in rule
    assert f"less {st.image_holdout:,} held out" in rule
    assert f"less {st.settle_images:,} held out" in rule
    assert f"on the {st.settle_images:,} held-out training images" in rule
    assert st.tune_lrs == (2.5e-4, 5e-4, 1e-3) and r.lr == 5e-4          # DINO's published
    assert "2.5e-4, 5e-4 (DINO's published rate) and 1e-3 per 256" in rule
    assert f"tuning seed {st.tune_seeds[0]}" in rule and f"{st.epochs[-1]}-epoch run" in rule
