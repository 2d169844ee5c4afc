"""ADE20K at paper scale on stand-in archives of its layout: pairs decoded into squares with the
labels kept as class ids, the arrays made once and held to their record, patch targets by
majority of labelled pixels, and a linear probe scored over the labelled pixels only."""
from __future__ import annotations

import io
import json
import os
import zipfile

import numpy as np
import pytest
import torch
from PIL import Image

from ddcl_theory.data import ade20k
from ddcl_theory.data.array_cache import CachedArraysError
from ddcl_theory.experiments import ade20k_probe as probe

ROOT = "ADEChallengeData2016"


def _jpeg(rgb: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def _png(ids: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(ids.astype(np.uint8), mode="L").save(buf, format="PNG")
    return buf.getvalue()


def _halves(h: int, w: int, left: int, right: int) -> np.ndarray:
    ids = np.full((h, w), right, dtype=np.uint8)
    ids[:, : w // 2] = left
    return ids


def test_a_pair_becomes_a_central_square_with_its_labels_kept_as_ids():
    rgb = np.zeros((30, 60, 3), dtype=np.uint8)
    rgb[:, 30:] = 255
    ids = _halves(30, 60, 7, 150)
    ids[:, 29:31] = 0                                  # an unlabelled seam
    image, labels = ade20k.decode_pair(_jpeg(rgb), _png(ids), 20)
    assert image.shape == (20, 20, 3) and labels.shape == (20, 20)
    assert image.dtype == labels.dtype == np.uint8
    assert set(np.unique(labels)) <= {0, 7, 150}        # nearest neighbour: no blended ids
    assert (labels[:, :8] == 7).all() and (labels[:, 12:] == 150).all()   # the centre's halves
    assert image[:, :8].mean() < 30 and image[:, 12:].mean() > 225
    with pytest.raises(ValueError, match="annotation: expected the image's size"):
        ade20k.decode_pair(_jpeg(rgb), _png(ids[:, :40]), 20)
    with pytest.raises(ValueError, match="size: expected a positive int"):
        ade20k.decode_pair(_jpeg(rgb), _png(ids), 0)
    colour = io.BytesIO()
    Image.fromarray(rgb).save(colour, format="PNG")
    with pytest.raises(ValueError, match="one-channel PNG"):
        ade20k.decode_pair(_jpeg(rgb), colour.getvalue(), 20)


def _archive(path, n_train: int = 3, n_val: int = 2, seed: int = 0):
    rng = np.random.default_rng(seed)
    with zipfile.ZipFile(path, "w") as zf:
        for split, n, stem in (("training", n_train, "train"), ("validation", n_val, "val")):
            for i in range(n):
                name = f"ADE_{stem}_{i:08d}"
                h, w = int(rng.integers(24, 40)), int(rng.integers(24, 40))
                zf.writestr(f"{ROOT}/images/{split}/{name}.jpg",
                            _jpeg(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)))
                zf.writestr(f"{ROOT}/annotations/{split}/{name}.png",
                            _png(rng.integers(0, 151, (h, w))))
    return path


def test_the_arrays_are_made_once_and_held_to_their_record(tmp_path):
    archive = _archive(tmp_path / "ADEChallengeData2016.zip")
    folder = tmp_path / "cache"
    seg = ade20k.ade20k_arrays("training", 16, archive=archive, folder=folder)
    assert seg.images.shape == (3, 16, 16, 3) and seg.labels.shape == (3, 16, 16)
    assert len(seg) == 3 and seg.names[0].endswith("ADE_train_00000000.jpg")
    made = folder / "training-16-3.npz"
    stamp = made.stat().st_mtime_ns
    again = ade20k.ade20k_arrays("training", 16, archive=archive, folder=folder)
    assert np.array_equal(again.images, seg.images) and np.array_equal(again.labels, seg.labels)
    assert made.stat().st_mtime_ns == stamp                         # read back, not remade
    first = ade20k.ade20k_arrays("validation", 16, 1, archive=archive, folder=folder)
    assert len(first) == 1 and (folder / "validation-16-1.npz").is_file()

    np.savez(made, images=seg.images, labels=np.zeros_like(seg.labels))
    with pytest.raises(CachedArraysError, match="fail their record's digest"):
        ade20k.ade20k_arrays("training", 16, archive=archive, folder=folder)
    os.utime(archive, ns=(1, 1))
    with pytest.raises(CachedArraysError, match="delete it to rebuild"):
        ade20k.ade20k_arrays("training", 16, archive=archive, folder=folder)
    record = made.with_name(made.name + ".json")
    record.write_text(json.dumps({"source": {}}))
    with pytest.raises(CachedArraysError, match="no usable record"):
        ade20k.ade20k_arrays("training", 16, archive=archive, folder=folder)
    with pytest.raises(ValueError, match="limit: expected None or an int >= 1"):
        ade20k.ade20k_arrays("training", 16, 0, archive=archive, folder=folder)
    with pytest.raises(ValueError, match="split: expected 'training' or 'validation'"):
        ade20k.ade20k_arrays("test", 16, archive=archive, folder=folder)


def test_a_patch_takes_the_class_most_of_its_labelled_pixels_carry():
    labels = np.zeros((1, 4, 4), dtype=np.uint8)
    labels[0, :2, :2] = [[3, 3], [5, 0]]          # majority 3 (id 3 -> class 2)
    labels[0, :2, 2:] = [[9, 4], [4, 9]]          # a tie: the lower id, 4 -> class 3
    labels[0, 2:, 2:] = [[0, 0], [0, 150]]        # one labelled pixel outvotes the unlabelled
    targets = probe.patch_targets(labels, 2)
    assert targets.tolist() == [[2, 3, -1, 149]]  # bottom-left: no labelled pixel
    with pytest.raises(ValueError, match="patch: 3 does not divide"):
        probe.patch_targets(labels, 3)
    with pytest.raises(ValueError, match=r"labels: expected \(N, S, S\)"):
        probe.patch_targets(labels[0], 2)


def test_a_probe_on_features_that_name_the_patch_class_scores_every_labelled_pixel():
    rng = np.random.default_rng(0)
    patch, n = 4, 6
    coarse = rng.integers(1, 6, (n, 3, 3))
    labels = coarse.repeat(patch, 1).repeat(patch, 2).astype(np.uint8)
    labels[:, 0, :] = 0                                     # unlabelled rows are not scored
    targets = probe.patch_targets(labels, patch)
    assert np.array_equal(targets, coarse.reshape(n, 9) - 1)
    feats = torch.nn.functional.one_hot(torch.as_tensor(targets), 8).float()
    feats = feats + 0.01 * torch.randn(feats.shape, generator=torch.Generator().manual_seed(0))
    fitted = probe.fit_probe(feats, targets, steps=300, lr=0.1, seed=0)
    assert np.array_equal(probe.predict_patches(fitted, feats), targets)
    miou, acc = probe.probe_scores(fitted, feats, labels, patch)
    assert miou == acc == 1.0

    wrong = labels.copy()
    wrong[labels == 1] = 2                                  # class 1's pixels now read class 2
    miou_w, acc_w = probe.probe_scores(fitted, feats, wrong, patch)
    share = (labels == 1).sum() / (labels > 0).sum()
    assert acc_w == pytest.approx(1 - share) and miou_w < 1
    with pytest.raises(ValueError, match="no patch holds a labelled pixel"):
        probe.fit_probe(feats, np.full(targets.shape, -1), steps=1, lr=0.1, seed=0)
    with pytest.raises(ValueError, match="features: expected"):
        probe.probe_scores(fitted, feats[:, :4], labels, patch)
