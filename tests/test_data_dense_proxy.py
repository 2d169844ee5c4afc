"""ddcl_theory.data.dense_proxy: exact labels from the construction, seeded digests."""
from __future__ import annotations

import numpy as np
import pytest

from ddcl_theory.data import dense_proxy as dp


def backgrounds(m: int = 20) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(123)
    return rng.uniform(0, 1, (m, 32, 32, 3)).astype(np.float32), np.arange(m) % 10


def make(n: int = 8, seed: int = 0, **kw) -> dp.DenseProxy:
    images, labels = backgrounds()
    return dp.make_dense_proxy(n, seed=seed, backgrounds=images, background_labels=labels,
                               source="noise", **kw)


def test_same_seed_same_digest_other_seed_other_digest():
    a, b, c = make(seed=3), make(seed=3), make(seed=4)
    assert a.digest() == b.digest() != c.digest()
    assert len(a.digest()) == 64


def test_digest_of_the_noise_backgrounds_is_pinned():
    # the generator's draws are part of its contract: a change here changes every result
    assert make(seed=0).digest() == PINNED


def test_shapes_and_label_ranges():
    d = make(n=5, patch=4)
    assert d.images.shape == (5, 32, 32, 3) and d.images.dtype == np.float32
    assert d.pixel_labels.shape == (5, 32, 32) and d.patch_labels.shape == (5, 8, 8)
    assert d.image_labels.shape == (5,) and set(d.image_labels) <= set(range(10))
    assert 0 <= d.pixel_labels.min() and d.pixel_labels.max() < dp.NUM_CLASSES
    assert (d.pixel_labels > 0).any() and (d.pixel_labels == 0).any()


def test_labels_are_exact_where_tiles_cover_and_backgrounds_untouched_elsewhere():
    images, labels = backgrounds()
    d = dp.make_dense_proxy(6, seed=1, backgrounds=images, background_labels=labels)
    for i in range(6):
        bg = images[labels == d.image_labels[i]]
        untouched = d.pixel_labels[i] == 0
        # some background image of that class agrees with the proxy wherever no tile was pasted
        assert any(np.array_equal(b[untouched], d.images[i][untouched]) for b in bg)


def test_one_tile_labels_its_16x16_square_with_its_class():
    d = make(n=4, digits_per_image=1, zoom=2)
    for lab in d.pixel_labels:
        ys, xs = np.nonzero(lab)
        assert ys.max() - ys.min() == 15 and xs.max() - xs.min() == 15
        assert len(set(lab[lab > 0])) == 1 and (lab > 0).sum() == 256


def test_patch_labels_are_the_majority_with_ties_to_the_smaller():
    pix = np.zeros((1, 4, 4), dtype=np.int64)
    pix[0, :2, :2] = [[3, 3], [3, 0]]          # majority 3
    pix[0, :2, 2:] = [[5, 5], [2, 2]]          # tie 2/5 -> 2
    assert dp.patch_labels(pix, 2).tolist() == [[[3, 2], [0, 0]]]
    with pytest.raises(ValueError, match="patch"):
        dp.patch_labels(pix, 3)


def test_splits_use_disjoint_digits():
    train, _ = dp.digit_bitmaps("train")
    test, _ = dp.digit_bitmaps("test")
    assert len(train) + len(test) == 1797
    with pytest.raises(ValueError, match="split"):
        dp.digit_bitmaps("val")


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="n:"):
        make(n=0)
    with pytest.raises(ValueError, match="zoom"):
        make(zoom=5)
    with pytest.raises(ValueError, match="background_labels"):
        dp.make_dense_proxy(2, seed=0, backgrounds=backgrounds()[0],
                            background_labels=np.zeros(3))


def test_missing_cifar_is_a_clear_error(monkeypatch):
    from ddcl_theory.data import files
    monkeypatch.setattr(files, "find", lambda key: None)
    with pytest.raises(FileNotFoundError, match="make data"):
        dp.make_dense_proxy(2, seed=0)


@pytest.mark.skipif(__import__("ddcl_theory.data", fromlist=["find"]).find("cifar10") is None,
                    reason="the CIFAR-10 subset is not fetched (make data)")
def test_cifar_proxy_digest_is_stable():
    a, b = dp.make_dense_proxy(4, seed=0, split="test"), dp.make_dense_proxy(4, seed=0,
                                                                              split="test")
    assert a.source == "cifar10" and a.digest() == b.digest()


PINNED = "be19a4027fc0d84659c2751b5c7a08312bb3b1262c97173fe19c2165687ca2c0"
