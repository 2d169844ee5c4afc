"""A dense-prediction proxy with exact labels: digits pasted on CIFAR-10 backgrounds.

Each image is a CIFAR-10 image (32x32 RGB, :func:`ddcl_theory.data.load_cifar10`'s file) with
``digits_per_image`` handwritten digits of scikit-learn's 8x8 set (offline, shipped with
scikit-learn) upscaled by ``zoom`` (nearest neighbour) and pasted at random positions as opaque
tiles: a tile of one random colour whose stroke pixels (grey value at least :data:`STROKE`)
take a second random colour; a later tile covers an earlier one. Because the construction is
known, the labels are exact: the pixel label is 0 (background) or ``1 + digit class`` on the
pixels a tile covers (naming the tile's class needs its strokes, i.e. context beyond one patch);
the patch label of a ``patch`` x ``patch`` cell is the most frequent pixel label in it (ties to
the smaller label). Training images use CIFAR-10's
training images and the first 80% of a fixed shuffle of the digits; test images the test images
and the remaining digits, so no background and no digit bitmap is shared between the splits.

Everything is drawn from ``numpy.random.default_rng(seed)``: the same seed gives the same arrays
(:meth:`DenseProxy.digest`).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ddcl_theory.data import files

__all__ = ["NUM_CLASSES", "STROKE", "DenseProxy", "make_dense_proxy", "patch_labels",
           "digit_bitmaps", "cifar_backgrounds"]

#: Background plus the ten digits.
NUM_CLASSES = 11
#: A digit pixel (grey value in [0, 1]) at or above this is stroke (drawn in the stroke colour).
STROKE = 0.25
#: Fraction of the shuffled digits used by the training split.
TRAIN_FRACTION = 0.8


@dataclass(frozen=True)
class DenseProxy:
    """One split of the proxy.

    Attributes:
        images: (N, H, W, 3) float32 in [0, 1].
        pixel_labels: (N, H, W) int64 in [0, NUM_CLASSES).
        patch_labels: (N, H/p, W/p) int64, the majority pixel label of each p x p cell.
        image_labels: (N,) int64, the class of each image's background (CIFAR-10's label; -1
            when the backgrounds came without labels): the target of the image-level probe.
        patch: the cell size p.
        source: where the backgrounds came from.
    """

    images: np.ndarray
    pixel_labels: np.ndarray
    patch_labels: np.ndarray
    image_labels: np.ndarray
    patch: int
    source: str

    def __len__(self) -> int:
        return len(self.images)

    def digest(self) -> str:
        """sha256 (hex) of the four arrays: for each, its dtype, shape and C-order bytes."""
        h = hashlib.sha256()
        for a in (self.images, self.pixel_labels, self.patch_labels, self.image_labels):
            h.update(f"{a.dtype.str}{a.shape}\n".encode())
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()


def patch_labels(pixel_labels: np.ndarray, patch: int) -> np.ndarray:
    """Majority label of each ``patch`` x ``patch`` cell: (N, H, W) -> (N, H/p, W/p), ties to the
    smaller label."""
    if pixel_labels.ndim != 3:
        raise ValueError(f"pixel_labels: expected shape (N, H, W), got {pixel_labels.shape}")
    n, h, w = pixel_labels.shape
    if patch < 1 or h % patch or w % patch:
        raise ValueError(f"patch: expected a divisor of {h}x{w}, got {patch}")
    cells = pixel_labels.reshape(n, h // patch, patch, w // patch, patch).transpose(0, 1, 3, 2, 4)
    cells = cells.reshape(n, h // patch, w // patch, patch * patch)
    counts = (cells[..., None] == np.arange(NUM_CLASSES)).sum(axis=-2)
    return counts.argmax(axis=-1).astype(np.int64)


def digit_bitmaps(split: str) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 8x8 digits of one split: (grey (M, 8, 8) float32 in [0, 1], class (M,))."""
    if split not in ("train", "test"):
        raise ValueError(f"split: expected 'train' or 'test', got {split!r}")
    from sklearn.datasets import load_digits
    digits = load_digits()
    order = np.random.default_rng(0).permutation(len(digits.target))
    cut = int(TRAIN_FRACTION * len(order))
    idx = order[:cut] if split == "train" else order[cut:]
    return (digits.images[idx] / 16.0).astype(np.float32), digits.target[idx].astype(np.int64)


def cifar_backgrounds(split: str) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10 images of one split, ((N, 32, 32, 3) float32 in [0, 1], labels (N,) int64).

    Raises ``FileNotFoundError`` when the CIFAR-10 file is not in a data directory (the proxy has
    no fallback: fetch it with ``make data``)."""
    if split not in ("train", "test"):
        raise ValueError(f"split: expected 'train' or 'test', got {split!r}")
    path = files.find("cifar10")
    if path is None:
        raise FileNotFoundError("the dense proxy needs the CIFAR-10 subset as backgrounds and "
                                "none was found in the data directories; run `make data` "
                                "(python -m ddcl_theory.data ensure cifar10) first")
    with np.load(path) as z:
        return (z[f"x_{split}"].astype(np.float32) / 255.0,
                z[f"y_{split}"].astype(np.int64))


def make_dense_proxy(n: int, *, seed: int, split: str = "train",
                     backgrounds: np.ndarray | None = None,
                     background_labels: np.ndarray | None = None, patch: int = 4,
                     digits_per_image: int = 2, zoom: int = 2,
                     source: str = "cifar10") -> DenseProxy:
    """``n`` proxy images of ``split`` drawn with ``seed``.

    Args:
        n: number of images.
        seed: seeds every draw (backgrounds, digits, positions, colours).
        split: ``"train"`` or ``"test"`` (which backgrounds and which digits).
        backgrounds: (M, H, W, 3) images in [0, 1] to draw backgrounds from; default: CIFAR-10's
            images of ``split`` (:func:`cifar_backgrounds`).
        background_labels: (M,) class of each given background (default: -1 for all).
        patch: cell size of the patch labels.
        digits_per_image: digits pasted on each image.
        zoom: upscaling of the 8x8 digits (nearest neighbour): each covers ``8 * zoom`` pixels.
        source: the name recorded for the backgrounds when ``backgrounds`` is given.
    """
    for name, value in (("n", n), ("patch", patch), ("digits_per_image", digits_per_image),
                        ("zoom", zoom)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    if backgrounds is None:
        (backgrounds, background_labels), source = cifar_backgrounds(split), "cifar10"
    if background_labels is None:
        background_labels = np.full(len(backgrounds), -1, dtype=np.int64)
    if np.shape(background_labels) != (len(backgrounds),):
        raise ValueError(f"background_labels: expected shape ({len(backgrounds)},), got "
                         f"{np.shape(background_labels)}")
    if backgrounds.ndim != 4 or backgrounds.shape[-1] != 3:
        raise ValueError(f"backgrounds: expected shape (M, H, W, 3), got {backgrounds.shape}")
    _, h, w, _ = backgrounds.shape
    side = 8 * zoom
    if side > min(h, w):
        raise ValueError(f"zoom: a digit of {side} pixels does not fit in {h}x{w} images")
    grey, cls = digit_bitmaps(split)
    rng = np.random.default_rng(seed)
    picked = rng.integers(0, len(backgrounds), n)
    images = backgrounds[picked].astype(np.float32, copy=True)
    labels = np.zeros((n, h, w), dtype=np.int64)
    for i in range(n):
        for _ in range(digits_per_image):
            k = int(rng.integers(0, len(cls)))
            top, left = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
            colours = rng.uniform(0.0, 1.0, (2, 3)).astype(np.float32)
            bitmap = np.kron(grey[k], np.ones((zoom, zoom), dtype=np.float32))
            region = images[i, top:top + side, left:left + side]
            region[:] = colours[0]
            region[bitmap >= STROKE] = colours[1]
            labels[i, top:top + side, left:left + side] = 1 + cls[k]
    return DenseProxy(images, labels, patch_labels(labels, patch),
                      np.asarray(background_labels, dtype=np.int64)[picked], patch, source)
