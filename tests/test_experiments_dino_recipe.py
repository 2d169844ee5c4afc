"""L10's paper-scale recipe at the cpu profile's tiny shapes: Imagenette decoded from a stand-in
archive of its layout, a seeded pre-training that trains and is reproducible, the teacher's
momentum schedule, and the ADE20K probe's numbers in range; the paper shapes are ViT-S/16."""
from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest
import torch
from PIL import Image

from ddcl_theory.data import imagenette, paper
from ddcl_theory.data.ade20k import SegmentationSet
from ddcl_theory.experiments import dino_recipe as dr
from ddcl_theory.runtime import profile


def _tgz(path, n_per_class: int = 2):
    rng = np.random.default_rng(0)
    with tarfile.open(path, "w:gz") as tar:
        for split in ("train", "val"):
            for label, wnid in enumerate(paper.IMAGENETTE_WNIDS[:3]):
                for i in range(n_per_class):
                    buf = io.BytesIO()
                    h, w = int(rng.integers(20, 40)), int(rng.integers(20, 40))
                    rgb = np.full((h, w, 3), 40 * label, dtype=np.uint8)
                    Image.fromarray(rgb).save(buf, format="JPEG", quality=95)
                    info = tarfile.TarInfo(f"imagenette2-160/{split}/{wnid}/{wnid}_{i}.JPEG")
                    info.size = len(buf.getvalue())
                    tar.addfile(info, io.BytesIO(buf.getvalue()))
    return path


def test_imagenette_is_decoded_into_squares_with_its_labels_and_cached(tmp_path):
    archive = _tgz(tmp_path / "imagenette2-160.tgz")
    images, labels = imagenette.imagenette_arrays("train", 16, archive=archive,
                                                  folder=tmp_path / "cache")
    assert images.shape == (6, 16, 16, 3) and images.dtype == np.uint8
    assert labels.tolist() == [0, 0, 1, 1, 2, 2]
    assert np.allclose(images.reshape(6, -1).mean(1), 40 * labels, atol=3)   # flat colours
    made = tmp_path / "cache" / "train-16-all.npz"
    stamp = made.stat().st_mtime_ns
    again, _ = imagenette.imagenette_arrays("train", 16, archive=archive, folder=tmp_path / "cache")
    assert np.array_equal(again, images) and made.stat().st_mtime_ns == stamp
    first, first_labels = imagenette.imagenette_arrays("val", 16, 3, archive=archive,
                                                       folder=tmp_path / "cache")
    assert len(first) == 3 and first_labels.tolist() == [0, 0, 1]
    with pytest.raises(ValueError, match="split: expected 'train' or 'val'"):
        imagenette.imagenette_arrays("test", 16, archive=archive)
    with pytest.raises(ValueError, match="size: expected a positive int"):
        imagenette.decode_image(b"", 0)


def _data(recipe, n: int = 16, seed: int = 0):
    rng = np.random.default_rng(seed)
    s = recipe.image_size
    images = rng.integers(0, 256, (n, s, s, 3), dtype=np.uint8)

    def seg(m):
        return SegmentationSet(rng.integers(0, 256, (m, s, s, 3), dtype=np.uint8),
                               rng.integers(0, 6, (m, s, s)).astype(np.uint8),
                               tuple(f"x{i}" for i in range(m)), "training")
    return images, (seg(8), seg(4))


def test_an_arm_trains_reproducibly_and_its_probe_scores_lie_in_range():
    recipe = dr.DinoRecipe(epochs=2)
    images, sets = _data(recipe)
    arm = dr.run_arm(recipe, "all", 0, images=images, probe_sets=sets)
    assert arm.laplacian_heads == recipe.heads and len(arm.losses) == 2
    assert all(np.isfinite(arm.losses)) and 0 <= arm.miou <= 1 and 0 <= arm.pixel_accuracy <= 1
    twin = dr.run_arm(recipe, "all", 0, images=images, probe_sets=sets)
    assert twin == arm                                               # seeded, nothing global
    other = dr.run_arm(recipe, "all", 1, images=images, probe_sets=sets)
    assert other.losses != arm.losses
    none = dr.run_arm(recipe, "0", 0, images=images, probe_sets=sets)
    assert none.laplacian_heads == 0 and none.losses != arm.losses


def test_the_teacher_follows_the_student_with_a_momentum_rising_to_one():
    assert dr.momentum_at(0, 100, 0.996) == pytest.approx(0.996)
    assert dr.momentum_at(50, 100, 0.996) == pytest.approx(0.998)
    assert dr.momentum_at(100, 100, 0.996) == pytest.approx(1.0)
    recipe = dr.DinoRecipe()
    images, _ = _data(recipe)
    start = dr.build_pair(recipe, "all", 0)
    pair, _ = dr.pretrain(recipe, images, "all", 0)
    assert pair.momentum == pytest.approx(1.0)                       # the schedule's end
    teachers = list(zip(start.teacher.parameters(), pair.teacher.parameters()))
    assert any(not torch.equal(a, b) for a, b in teachers)           # the EMA moved it
    lagging = [not torch.equal(t, s) for t, s in zip(pair.teacher.parameters(),
                                                      pair.student.parameters())]
    assert any(lagging)                                              # behind the student


def test_the_head_has_the_recipe_s_sizes_and_the_teacher_a_frozen_copy():
    recipe = dr.DinoRecipe(head_hidden=24, head_bottleneck=12)
    pair = dr.build_pair(recipe, "all", 3)
    assert pair.student_head.mlp[0].out_features == 24 and pair.student_head.last.in_features == 12
    for s, t in zip(pair.student_head.parameters(), pair.teacher_head.parameters()):
        assert torch.equal(s, t) and s.requires_grad and not t.requires_grad
    state = torch.random.get_rng_state()
    dr.build_pair(recipe, "all", 3)
    assert torch.equal(torch.random.get_rng_state(), state)          # no global draw


def test_bad_shapes_are_named():
    recipe = dr.DinoRecipe()
    with pytest.raises(ValueError, match=r"images: expected \(N, 32, 32, 3\)"):
        dr.pretrain(recipe, np.zeros((16, 16, 16, 3), np.uint8), "all", 0)
    with pytest.raises(ValueError, match="at least batch_size=8"):
        dr.pretrain(recipe, np.zeros((4, 32, 32, 3), np.uint8), "all", 0)
    with pytest.raises(ValueError, match="DinoRecipe.image_size: expected a multiple of patch=5"):
        dr.DinoRecipe(patch=5)


def test_the_paper_shapes_are_a_vit_s_16_at_160_px(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    r = dr.DinoRecipe.from_profile()
    assert (r.dim, r.depth, r.heads, r.patch, r.image_size) == (384, 12, 6, 16, 160)
    assert r.tokens == 100 and r.epochs == 100 and r.pretrain_images is None
