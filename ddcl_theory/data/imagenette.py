"""Imagenette (160 px) as square arrays: the paper-scale pre-training images of L10.

:func:`imagenette_arrays` decodes a split of the verified ``imagenette2-160.tgz``
(:func:`ddcl_theory.data.paper.iter_imagenette`) into uint8 arrays, each image's shorter side
resized to ``size`` and its central square kept (:func:`ddcl_theory.data.ade20k.square`), made
once into the data cache and checked on every read
(:func:`~ddcl_theory.data.array_cache.cached_arrays`).

    >>> images, labels = imagenette_arrays("train", 160)     # (9469, 160, 160, 3), (9469,)
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from ddcl_theory.data.ade20k import DECODER, square
from ddcl_theory.data.array_cache import archive_source, cached_arrays
from ddcl_theory.data.cache import cache_dir
from ddcl_theory.runtime.progress import progress

__all__ = ["SPLIT_SIZES", "decode_image", "imagenette_arrays"]

#: Images of each split of imagenette2-160.
SPLIT_SIZES = {"train": 9_469, "val": 3_925}


def decode_image(jpeg: bytes, size: int) -> np.ndarray:
    """A JPEG as its central square (S, S, 3) uint8 after resizing its shorter side to S."""
    from PIL import Image
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size: expected a positive int, got {size!r}")
    img = Image.open(io.BytesIO(jpeg)).convert("RGB")
    return np.asarray(square(img, size, Image.BILINEAR), dtype=np.uint8)


def imagenette_arrays(split: str = "train", size: int = 160, limit: int | None = None, *,
                      archive: Path | None = None, folder: Path | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, S, S, 3) uint8, labels (N,) int64) of the first ``limit`` images (all when
    None) of ``split`` in archive order, from ``archive`` (default the verified download),
    cached in ``folder`` (default ``<cache>/imagenette``)."""
    from ddcl_theory.data import paper
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 1):
        raise ValueError(f"limit: expected None or an int >= 1, got {limit!r}")
    if split not in ("train", "val"):
        raise ValueError(f"split: expected 'train' or 'val', got {split!r}")
    if archive is None:
        archive = paper.paper_files.find("imagenette")
        if archive is None:
            raise paper.paper_files.missing_error("imagenette", "Imagenette (160 px)")
    folder = Path(folder) if folder is not None else cache_dir() / "imagenette"
    source = archive_source(archive, decoder=DECODER, split=split, size=size, limit=limit)

    def make() -> dict[str, np.ndarray]:
        images, labels = [], []
        for _, jpeg, label in progress(paper.iter_imagenette(split, archive),
                                       desc=f"Imagenette {split}"):
            images.append(decode_image(jpeg, size))
            labels.append(label)
            if limit is not None and len(images) == limit:
                break
        if not images:
            raise ValueError(f"split: {Path(archive).name} holds no {split} image")
        return {"images": np.stack(images), "labels": np.array(labels, dtype=np.int64)}

    arrays = cached_arrays(folder / f"{split}-{size}-{limit or 'all'}.npz", source, make)
    return arrays["images"], arrays["labels"]
