"""Loaders for the real data sets: a search path, verification, a canonical fetcher, fallbacks.

The package re-exports each module's public names; the modules, one job each:

* :mod:`ddcl_theory.data.files`: the catalogue :data:`FILES`, the search path (``$DDCL_DATA_DIR``;
  ``<repo>/data``; ``<repo>/../shared/data``; the user cache), :func:`find` and :func:`verify`
  (sha256, else content digest; a file that verifies under neither raises
  :class:`DataIntegrityError`, it is never used silently);
* :mod:`ddcl_theory.data.cache`: the user cache folder (:func:`cache_dir`);
* :mod:`ddcl_theory.data.fetch`: ``python -m ddcl_theory.data ensure`` downloads the missing data
  sets from their canonical sources (:mod:`ddcl_theory.data.sources`) into the cache and derives
  the files (:mod:`ddcl_theory.data.derive`); the loaders themselves never touch the network;
* :mod:`ddcl_theory.data.cifar10_rest`: the 40,000 CIFAR-10 train images outside the subset and a
  fixed evaluation pool drawn from them;
* this module: the loaders of the subsets and corpora the chapters read.

When a file is missing everywhere, the image and text loaders fall back to data shipped with an
installed package (scikit-learn's digits for images, Python's own documentation text for
characters) and say so with a :class:`FallbackDataWarning` and a printed notice: results on
fallback data are not comparable with the committed goldens. The other loaders raise
``FileNotFoundError`` naming the file and how to fetch it.

Row orders: SST-2 train rows are returned sorted by (sentence, label), whatever the file's row
order (the staged file and GLUE's ``train.tsv`` order them differently); SST-2 dev, IMDB and
20 Newsgroups rows come in file order (the derived files reproduce the staged order).
"""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass

import numpy as np

from ddcl_theory.data import digest
from ddcl_theory.data.cache import CACHE_ENV, cache_dir
from ddcl_theory.data.cifar10_rest import (
    EVAL_POOL_SEED,
    EVAL_POOL_SIZE,
    TrainImages,
    cifar10_eval_pool,
    load_cifar10_rest,
)
from ddcl_theory.data.files import (
    DATA_ENV,
    FILES,
    DataFile,
    DataIntegrityError,
    FallbackDataWarning,
    data_dirs,
    find,
    missing_error,
    notice_fallback,
    search_dirs,
    verify,
)

__all__ = [
    "CACHE_ENV", "DATA_ENV", "EVAL_POOL_SEED", "EVAL_POOL_SIZE", "FILES", "DataFile",
    "DataIntegrityError", "FallbackDataWarning", "ImageData", "TrainImages", "cache_dir",
    "cifar10_eval_pool", "data_dirs", "find", "image_patches", "load_20newsgroups", "load_cifar10",
    "load_cifar10_rest", "load_imdb", "load_sst2", "load_text", "missing_error", "notice_fallback",
    "search_dirs", "verify",
]


@dataclass(frozen=True)
class ImageData:
    """Images as float32 (N, H, W, C) in [0, 1] with int64 labels."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    label_names: tuple[str, ...]
    source: str


def load_cifar10() -> ImageData:
    """The CIFAR-10 subset; falls back to scikit-learn's 8x8 digits (1 channel) with a notice."""
    path = find("cifar10")
    if path is not None:
        with np.load(path) as z:
            return ImageData(z["x_train"].astype(np.float32) / 255.0, z["y_train"].astype(np.int64),
                             z["x_test"].astype(np.float32) / 255.0, z["y_test"].astype(np.int64),
                             tuple(str(s) for s in z["label_names"]), "cifar10")
    from sklearn.datasets import load_digits
    notice_fallback("cifar10", "scikit-learn digits (8x8 grey)")
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., None]
    y = digits.target.astype(np.int64)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(y))
    cut = int(0.8 * len(y))
    tr, te = order[:cut], order[cut:]
    return ImageData(x[tr], y[tr], x[te], y[te], tuple(str(i) for i in range(10)), "digits")


def image_patches(images: np.ndarray, patch: int) -> np.ndarray:
    """Split (N, H, W, C) images into non-overlapping patches: (N, (H/p)*(W/p), p*p*C)."""
    if images.ndim != 4:
        raise ValueError(f"images: expected shape (N, H, W, C), got {images.shape}")
    n, h, w, c = images.shape
    if patch < 1 or h % patch or w % patch:
        raise ValueError(f"patch: expected a divisor of the image size {h}x{w}, got {patch}")
    x = images.reshape(n, h // patch, patch, w // patch, patch, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(n, (h // patch) * (w // patch), patch * patch * c)


def load_text(key: str = "tinyshakespeare") -> tuple[str, str]:
    """(text, source) for the character-level corpus; falls back to Python's docstrings."""
    path = find(key)
    if path is not None:
        return path.read_text(encoding="utf-8"), key
    notice_fallback(key, "the docstrings of Python's standard library")
    import collections
    import functools
    import itertools
    import json as _json
    import pydoc  # noqa: F401  (real English prose that ships with Python)
    import re
    import string
    import textwrap
    mods = [collections, functools, itertools, _json, re, string, textwrap]
    parts = []
    for m in mods:
        for name in sorted(dir(m)):
            doc = getattr(getattr(m, name), "__doc__", None)
            if isinstance(doc, str):
                parts.append(doc)
    return "\n".join(parts), "python-docstrings"


def load_sst2(split: str = "dev") -> tuple[list[str], np.ndarray]:
    """SST-2 sentences (stripped) and int64 labels (N,) for ``split`` in {"train", "dev"}.

    Dev rows come in file order (GLUE's). Train rows come sorted by (sentence, label), so the
    order is the same whichever copy is read (the staged file and GLUE's ``train.tsv`` order the
    67,349 rows differently).
    """
    import csv
    if split not in ("train", "dev"):
        raise ValueError(f"split: expected 'train' or 'dev', got {split!r}")
    key = f"sst2_{split}"
    path = find(key)
    if path is None:
        raise missing_error(key, f"SST-2 {split}")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        rows = [(r[0].strip(), int(r[1])) for r in list(csv.reader(f, delimiter="\t",
                                                                   quoting=csv.QUOTE_NONE))[1:]]
    if split == "train":
        rows.sort()
    return [r[0] for r in rows], np.array([r[1] for r in rows], dtype=np.int64)


def load_imdb(split: str = "train") -> tuple[list[str], np.ndarray]:
    """IMDB subset reviews (text unchanged, ``<br />`` included) and int64 labels (N,), 0 = neg.

    ``split`` in {"train", "test"}: 5,000 rows each (2,500 neg then 2,500 pos, by review id).
    """
    import csv
    import io
    if split not in ("train", "test"):
        raise ValueError(f"split: expected 'train' or 'test', got {split!r}")
    path = find("imdb")
    if path is None:
        raise missing_error("imdb", "IMDB")
    rows = csv.reader(io.StringIO(digest.read_text(path), newline=""), delimiter="\t")
    header = next(rows)
    col = {name: i for i, name in enumerate(header)}
    texts, labels = [], []
    for r in rows:
        if r[col["split"]] == split:
            texts.append(r[col["text"]])
            labels.append(int(r[col["label"]]))
    return texts, np.array(labels, dtype=np.int64)


def load_20newsgroups(split: str = "train") -> tuple[list[str], np.ndarray]:
    """20 Newsgroups bydate texts and int64 labels (N,) for ``split`` in {"train", "test"}."""
    if split not in ("train", "test"):
        raise ValueError(f"split: expected 'train' or 'test', got {split!r}")
    path = find("20newsgroups")
    if path is None:
        raise missing_error("20newsgroups", "20 Newsgroups")
    texts, labels = [], []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            if doc["split"] == split:
                texts.append(doc["text"])
                labels.append(doc["label"])
    return texts, np.array(labels, dtype=np.int64)
