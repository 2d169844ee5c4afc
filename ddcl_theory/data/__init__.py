"""Loaders for the real data sets: a search path, verification, a canonical-source fetcher, fallbacks.

Each data set (a key of :data:`FILES`) is looked up, in order, in ``$DDCL_DATA_DIR``;
``<repo>/data``; ``<repo>/../shared/data``; the user cache (``$DDCL_CACHE_DIR``, else
``$XDG_CACHE_HOME/ddcl-theory``, else ``~/.cache/ddcl-theory``). The first file found must verify:
its sha256 equals the staged copy's, or its content digest does (:mod:`ddcl_theory.data.digest`;
a file derived from the canonical archive need not be byte-identical). A file that verifies under
neither raises :class:`DataIntegrityError` naming it: it is never used silently.

``python -m ddcl_theory.data ensure`` downloads the missing data sets from their canonical sources
(:mod:`ddcl_theory.data.sources`) into the cache (:mod:`ddcl_theory.data.fetch`); the loaders
themselves never touch the network. When a file is missing everywhere, the image and text loaders
fall back to data shipped with an installed package (scikit-learn's digits for images, Python's
own documentation text for characters) and say so with a :class:`FallbackDataWarning` and a
printed notice: results on fallback data are not comparable with the committed goldens.

Row orders: SST-2 train rows are returned sorted by (sentence, label), whatever the file's row
order (the staged file and GLUE's ``train.tsv`` order them differently); SST-2 dev, IMDB and
20 Newsgroups rows come in file order (the derived files reproduce the staged order).
"""
from __future__ import annotations

import gzip
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ddcl_theory.data import digest
from ddcl_theory.data.fetch import CACHE_ENV, cache_dir
from ddcl_theory.runtime.paths import repo_root

DATA_ENV = "DDCL_DATA_DIR"


class FallbackDataWarning(UserWarning):
    """Raised (as a warning) when a loader substitutes bundled fallback data."""


class DataIntegrityError(ValueError):
    """A data file is present but matches neither its sha256 nor its content digest."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path, self.detail = Path(path), detail
        super().__init__(f"{self.path}: {detail}; the file is corrupt or another version. Delete it "
                         "(`python -m ddcl_theory.data ensure` fetches a verified copy) or replace it")


@dataclass(frozen=True)
class DataFile:
    """A staged data file.

    Attributes:
        name: file name in a data directory.
        sha256: sha256 of the staged file's bytes.
        description: one line.
        scheme: content-digest scheme (:data:`ddcl_theory.data.digest.SCHEMES`).
        content: content digest of the staged file under ``scheme`` (computed from the staged
            files in ``shared/data``).
    """

    name: str
    sha256: str
    description: str
    scheme: str = "bytes"
    content: str = ""

    @property
    def content_digest(self) -> str:
        return self.content or self.sha256


FILES = {
    "cifar10": DataFile("cifar10_subset.npz",
                        "cdba3356cb18e7b178d698027eddbaf83d4d3636f12d4408f8a6a68ddec747f2",
                        "CIFAR-10, 10,000 train (1,000/class) + first 1,000 test images",
                        "npz-arrays",
                        "11acd1f80bf1914aa52db5c8dc81dbaaedf6d4456dd3caff49e72ec58e978fee"),
    "tinyshakespeare": DataFile("tinyshakespeare.txt",
                                "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
                                "Tiny Shakespeare, 1,115,394 characters"),
    "sst2_train": DataFile("sst2_train.tsv.gz",
                           "7ed611143c88cb290c4fe68049202f2ca4e214c83089ecf0313511327d86f758",
                           "GLUE SST-2 train", "sorted-lines",
                           "6a7e45c9f2610234d8088a09db4568fc2eb328f5c8a0f941942f07b467ebe210"),
    "sst2_dev": DataFile("sst2_dev.tsv",
                         "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0",
                         "GLUE SST-2 dev"),
    "imdb": DataFile("imdb_subset.tsv.gz",
                     "b4dd52c925b19181d0c3484800d315ea4fc993a62eb536b63e222cc32b53b56f",
                     "IMDB balanced 10k subset", "csv-rows",
                     "26a00226108315d50bd841889393757382f40fc721889ead3df8ca959e9174ae"),
    "20newsgroups": DataFile("20newsgroups_bydate.jsonl.gz",
                             "e967403cb466624d430c23383e500fb64e1e813fd4301e68c98be73bcad3ff4b",
                             "20 Newsgroups bydate", "json-records",
                             "8cb1349adc7378183ebe78cf680a1b1eac88fd47ad32f2e969047f84e56861c4"),
}


def search_dirs() -> list[tuple[str, Path]]:
    """Every candidate data directory as (label, path), in search order, existing or not."""
    candidates: list[tuple[str, Path]] = []
    env = os.environ.get(DATA_ENV)
    if env:
        candidates.append((f"${DATA_ENV}", Path(env)))
    root = repo_root()
    if root is not None:
        candidates += [("<repo>/data", root / "data"),
                       ("../shared/data", root.parent / "shared" / "data")]
    candidates.append(("cache", cache_dir()))
    return candidates


def data_dirs() -> list[Path]:
    """The candidate data directories, in search order (existing ones only)."""
    return [d for _, d in search_dirs() if d.is_dir()]


# (key, resolved path, size, mtime, inode, expected digests) -> how the file verified
_VERIFIED: dict[tuple, str] = {}


def verify(key: str, path: Path) -> str:
    """Check the file at ``path`` as data set ``key``; return ``"sha256"`` or ``"content digest"``.

    The sha256 of the bytes is tried first; when it differs from the staged copy's, the content
    digest (``FILES[key].scheme``) is computed and compared. The outcome is cached per file
    (path, size, mtime, inode), so repeated calls cost a ``stat``. Raises
    :class:`DataIntegrityError` naming the file when neither matches.
    """
    if key not in FILES:
        raise ValueError(f"key: unknown data set {key!r}; expected one of {sorted(FILES)}")
    spec = FILES[key]
    path = Path(path).resolve()
    st = path.stat()
    token = (key, str(path), st.st_size, st.st_mtime_ns, st.st_ino, spec.sha256, spec.content_digest)
    if token in _VERIFIED:
        return _VERIFIED[token]
    sha = digest.file_sha256(path)
    if sha == spec.sha256:
        how = "sha256"
    else:
        try:
            content = digest.content_digest(spec.scheme, path)
        except ValueError as err:
            raise DataIntegrityError(path, f"sha256 {sha[:12]}... does not match the expected "
                                     f"{spec.sha256[:12]}..., and the file is unreadable as "
                                     f"{spec.scheme!r} content ({err})") from err
        if content != spec.content_digest:
            raise DataIntegrityError(path, f"sha256 {sha[:12]}... does not match the expected "
                                     f"{spec.sha256[:12]}..., nor does its {spec.scheme!r} content "
                                     f"digest ({content[:12]}... vs {spec.content_digest[:12]}...)")
        how = "content digest"
    _VERIFIED[token] = how
    return how


def find(key: str) -> Path | None:
    """Path of data set ``key`` (a key of :data:`FILES`) after verification, or None.

    The first data directory holding the file wins; a file there that fails verification raises
    :class:`DataIntegrityError` (a ``ValueError``), it is never silently used or skipped.
    """
    if key not in FILES:
        raise ValueError(f"key: unknown data set {key!r}; expected one of {sorted(FILES)}")
    for d in data_dirs():
        path = d / FILES[key].name
        if path.is_file():
            verify(key, path)
            return path
    return None


def notice_fallback(key: str, substitute: str) -> None:
    msg = (f"NOTICE: {FILES[key].name} not found (set {DATA_ENV}, or run `python -m ddcl_theory.data "
           f"ensure` to fetch it); using {substitute} instead. "
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


def _missing(key: str, what: str) -> FileNotFoundError:
    return FileNotFoundError(f"{what}: {FILES[key].name} not in any data directory; run "
                             f"`python -m ddcl_theory.data ensure {key}` or set {DATA_ENV}")


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
        raise _missing(key, f"SST-2 {split}")
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
        raise _missing("imdb", "IMDB")
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
        raise _missing("20newsgroups", "20 Newsgroups")
    texts, labels = [], []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            if doc["split"] == split:
                texts.append(doc["text"])
                labels.append(doc["label"])
    return texts, np.array(labels, dtype=np.int64)
