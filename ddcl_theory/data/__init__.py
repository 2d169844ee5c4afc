"""Loaders for the real data sets, with a data directory, sha256 checks and offline fallbacks.

The data directory is, in order: ``$DDCL_DATA_DIR``; ``<repo>/data``; ``<repo>/../shared/data``.
When a file is missing everywhere, the loader falls back to data shipped with an installed
package (scikit-learn's digits for images, Python's own documentation text for characters) and
says so with a :class:`FallbackDataWarning` and a printed notice: results on fallback data are
not comparable with the committed goldens.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..paths import repo_root

DATA_ENV = "DDCL_DATA_DIR"


class FallbackDataWarning(UserWarning):
    """Raised (as a warning) when a loader substitutes bundled fallback data."""


@dataclass(frozen=True)
class DataFile:
    name: str
    sha256: str
    description: str


FILES = {
    "cifar10": DataFile("cifar10_subset.npz",
                        "cdba3356cb18e7b178d698027eddbaf83d4d3636f12d4408f8a6a68ddec747f2",
                        "CIFAR-10, 10,000 train (1,000/class) + first 1,000 test images"),
    "tinyshakespeare": DataFile("tinyshakespeare.txt",
                                "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
                                "Tiny Shakespeare, 1,115,394 characters"),
    "sst2_train": DataFile("sst2_train.tsv.gz",
                           "7ed611143c88cb290c4fe68049202f2ca4e214c83089ecf0313511327d86f758",
                           "GLUE SST-2 train"),
    "sst2_dev": DataFile("sst2_dev.tsv",
                         "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0",
                         "GLUE SST-2 dev"),
    "imdb": DataFile("imdb_subset.tsv.gz",
                     "b4dd52c925b19181d0c3484800d315ea4fc993a62eb536b63e222cc32b53b56f",
                     "IMDB balanced 10k subset"),
    "20newsgroups": DataFile("20newsgroups_bydate.jsonl.gz",
                             "e967403cb466624d430c23383e500fb64e1e813fd4301e68c98be73bcad3ff4b",
                             "20 Newsgroups bydate"),
}


def data_dirs() -> list[Path]:
    """The candidate data directories, in search order (existing ones only)."""
    candidates: list[Path] = []
    env = os.environ.get(DATA_ENV)
    if env:
        candidates.append(Path(env))
    root = repo_root()
    if root is not None:
        candidates += [root / "data", root.parent / "shared" / "data"]
    return [c for c in candidates if c.is_dir()]


@lru_cache(maxsize=None)
def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def find(key: str) -> Path | None:
    """Path of data set ``key`` (a key of :data:`FILES`) after a sha256 check, or None.

    A file whose checksum does not match raises ``ValueError`` (never silently used).
    """
    if key not in FILES:
        raise ValueError(f"key: unknown data set {key!r}; expected one of {sorted(FILES)}")
    spec = FILES[key]
    for d in data_dirs():
        path = d / spec.name
        if path.is_file():
            digest = _sha256(path.resolve())
            if digest != spec.sha256:
                raise ValueError(f"{path.name}: sha256 {digest[:12]}... does not match the "
                                 f"expected {spec.sha256[:12]}...; the file is corrupt or another version")
            return path
    return None


def notice_fallback(key: str, substitute: str) -> None:
    msg = (f"NOTICE: {FILES[key].name} not found (set {DATA_ENV}); using {substitute} instead. "
           "Numbers will differ from the book's.")
    print(msg)
    warnings.warn(msg, FallbackDataWarning, stacklevel=3)


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
    import pydoc  # noqa: F401  (real English prose that ships with Python)
    import collections, functools, itertools, json as _json, re, string, textwrap
    mods = [collections, functools, itertools, _json, re, string, textwrap]
    parts = []
    for m in mods:
        for name in sorted(dir(m)):
            doc = getattr(getattr(m, name), "__doc__", None)
            if isinstance(doc, str):
                parts.append(doc)
    return "\n".join(parts), "python-docstrings"


def load_sst2(split: str = "dev") -> tuple[list[str], np.ndarray]:
    """SST-2 sentences and labels for ``split`` in {"train", "dev"}."""
    import csv
    if split not in ("train", "dev"):
        raise ValueError(f"split: expected 'train' or 'dev', got {split!r}")
    path = find(f"sst2_{split}")
    if path is None:
        raise FileNotFoundError(f"SST-2 {split}: {FILES['sst2_' + split].name} not in any data "
                                f"directory; set {DATA_ENV}")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    return [r[0].strip() for r in rows], np.array([int(r[1]) for r in rows], dtype=np.int64)


def load_20newsgroups(split: str = "train") -> tuple[list[str], np.ndarray]:
    """20 Newsgroups bydate texts and labels for ``split`` in {"train", "test"}."""
    if split not in ("train", "test"):
        raise ValueError(f"split: expected 'train' or 'test', got {split!r}")
    path = find("20newsgroups")
    if path is None:
        raise FileNotFoundError(f"20 Newsgroups: not in any data directory; set {DATA_ENV}")
    texts, labels = [], []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            if doc["split"] == split:
                texts.append(doc["text"])
                labels.append(doc["label"])
    return texts, np.array(labels, dtype=np.int64)
