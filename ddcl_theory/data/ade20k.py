"""ADE20K scene parsing as square arrays: the paper-scale data of L10's segmentation probe.

:func:`ade20k_arrays` decodes the image and annotation pairs of a split of the verified
``ADEChallengeData2016.zip`` (:func:`ddcl_theory.data.paper.ade20k_pairs`) into uint8 arrays:
each image's shorter side resized to ``size`` (bilinear; its annotation by nearest neighbour, so
every label stays a class id), then the central ``size`` x ``size`` square. Labels keep the
archive's ids: 0 unlabelled (ignored by the benchmark), 1..150 the classes. The arrays are made
once into the data cache (``<cache>/ade20k``) beside a record of the archive they came from and
the arrays' digest, then checked and read back.

    >>> seg = ade20k_arrays("validation", size=224)
    >>> seg.images.shape, seg.labels.shape          # (2000, 224, 224, 3), (2000, 224, 224)
"""
from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ddcl_theory.data.array_cache import archive_source, cached_arrays
from ddcl_theory.data.cache import cache_dir
from ddcl_theory.runtime.progress import progress

__all__ = ["NUM_CLASSES", "SPLIT_SIZES", "SegmentationSet", "square", "decode_pair", "ade20k_arrays"]

#: ADE20K's scene-parsing classes (ids 1..150; 0 is unlabelled).
NUM_CLASSES = 150
#: Image-annotation pairs of each split of ADEChallengeData2016.
SPLIT_SIZES = {"training": 20_210, "validation": 2_000}
#: The decoding's version, in every cache record: raise it when :func:`decode_pair`,
#: :func:`square` or :func:`ddcl_theory.data.imagenette.decode_image` changes, so arrays decoded
#: the old way are refused, not reused.
DECODER = 1


@dataclass(frozen=True)
class SegmentationSet:
    """``images`` (N, S, S, 3) uint8 RGB, ``labels`` (N, S, S) uint8 (0 unlabelled, 1..150),
    ``names`` the archive's image members, in the order of the split's sorted pairs."""

    images: np.ndarray
    labels: np.ndarray
    names: tuple[str, ...]
    split: str

    def __len__(self) -> int:
        return int(self.images.shape[0])


def square(img, size: int, resample):
    """Shorter side to ``size``, then the central ``size`` x ``size`` square (a PIL image)."""
    w, h = img.size
    scale = size / min(w, h)
    w2, h2 = max(size, round(w * scale)), max(size, round(h * scale))
    img = img.resize((w2, h2), resample)
    left, top = (w2 - size) // 2, (h2 - size) // 2
    return img.crop((left, top, left + size, top + size))


def decode_pair(image: bytes, annotation: bytes, size: int) -> tuple[np.ndarray, np.ndarray]:
    """One pair as square arrays: the JPEG (S, S, 3) uint8, resized bilinearly, and the
    annotation PNG (S, S) uint8, resized by nearest neighbour (the same geometry)."""
    from PIL import Image
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size: expected a positive int, got {size!r}")
    img = Image.open(io.BytesIO(image)).convert("RGB")
    lab = Image.open(io.BytesIO(annotation))
    if lab.mode not in ("L", "P"):
        raise ValueError(f"annotation: expected a one-channel PNG of class ids, got mode "
                         f"{lab.mode!r}")
    if lab.size != img.size:
        raise ValueError(f"annotation: expected the image's size {img.size}, got {lab.size}")
    lab = Image.fromarray(np.asarray(lab, dtype=np.uint8))
    return (np.asarray(square(img, size, Image.BILINEAR), dtype=np.uint8),
            np.asarray(square(lab, size, Image.NEAREST), dtype=np.uint8))


def _decode_all(archive: Path, pairs: Sequence[tuple[str, str]], size: int, split: str
                ) -> tuple[np.ndarray, np.ndarray]:
    images = np.empty((len(pairs), size, size, 3), dtype=np.uint8)
    labels = np.empty((len(pairs), size, size), dtype=np.uint8)
    with zipfile.ZipFile(archive) as zf:
        for i, (im, an) in enumerate(progress(pairs, desc=f"ADE20K {split}")):
            images[i], labels[i] = decode_pair(zf.read(im), zf.read(an), size)
    if labels.max(initial=0) > NUM_CLASSES:
        raise ValueError(f"{archive.name}: a label above {NUM_CLASSES}: not ADE20K's 150 "
                          f"classes")
    return images, labels


def ade20k_arrays(split: str = "training", size: int = 224, limit: int | None = None, *,
                  archive: Path | None = None, folder: Path | None = None) -> SegmentationSet:
    """The first ``limit`` pairs (all when None) of ``split`` ("training": 20,210;
    "validation": 2,000) as a :class:`SegmentationSet`, made once into ``folder`` (default
    ``<cache>/ade20k``) from ``archive`` (default the verified download), then read back,
    checked against its record (:func:`~ddcl_theory.data.array_cache.cached_arrays`)."""
    from ddcl_theory.data import paper
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 1):
        raise ValueError(f"limit: expected None or an int >= 1, got {limit!r}")
    archive, pairs = paper.ade20k_pairs(split, archive)
    pairs = pairs[:limit] if limit is not None else pairs
    if not pairs:
        raise ValueError(f"split: {Path(archive).name} holds no {split} pair")
    source = archive_source(archive, decoder=DECODER, split=split, size=size, n=len(pairs))
    folder = Path(folder) if folder is not None else cache_dir() / "ade20k"

    def make() -> dict[str, np.ndarray]:
        images, labels = _decode_all(Path(archive), pairs, size, split)
        return {"images": images, "labels": labels}

    arrays = cached_arrays(folder / f"{split}-{size}-{len(pairs)}.npz", source, make)
    return SegmentationSet(arrays["images"], arrays["labels"], tuple(im for im, _ in pairs),
                           split)
