"""The canonical sources of the data sets: URL, pinned archive checksum, and how each file derives.

:data:`SOURCES` is the registry the fetcher reads at call time (tests replace it). The host part
of every URL can be redirected to a mirror with ``DDCL_DATA_MIRROR=http://host[:port][/prefix]/``:
``https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz`` is then fetched from
``http://host:port/prefix/~kriz/cifar-10-python.tar.gz`` (scheme and host replaced, path kept).
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from ddcl_theory.data import derive

MIRROR_ENV = "DDCL_DATA_MIRROR"
HASHES = ("md5", "sha1", "sha256")


@dataclass(frozen=True)
class Source:
    """One downloadable file and the data files derived from it.

    Attributes:
        name: short name (``"cifar10"``).
        url: the canonical URL.
        filename: the name the download is saved under in the cache's ``downloads/`` folder.
        algo: ``"md5"``, ``"sha1"`` or ``"sha256"``, as the widely used loaders pin it.
        checksum: hex digest of the whole download under ``algo``.
        outputs: data-set key (of :data:`ddcl_theory.data.files.FILES`) -> builder
            ``(archive, out) -> None`` that writes the data file at ``out`` (see
            :mod:`ddcl_theory.data.derive`).
        size: the download's size in bytes, when known (for the progress bar only).
    """

    name: str
    url: str
    filename: str
    algo: str
    checksum: str
    outputs: Mapping[str, derive.Builder]
    size: int | None = None

    def __post_init__(self) -> None:
        if self.algo not in HASHES:
            raise ValueError(f"algo: expected one of {HASHES}, got {self.algo!r}")

    def hexdigest(self, path: Path) -> str:
        """The digest of ``path`` under this source's ``algo``."""
        h = hashlib.new(self.algo)
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()


SOURCES: dict[str, Source] = {
    "cifar10": Source(
        "cifar10", "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        "cifar-10-python.tar.gz", "md5", "c58f30108f718f92721af3b95e74349a",
        {"cifar10": derive.build_cifar10, "cifar10_rest": derive.build_cifar10_rest},
        size=170_498_071),
    "tinyshakespeare": Source(
        "tinyshakespeare",
        "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        "input.txt", "sha256", "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        {"tinyshakespeare": derive.build_copy}, size=1_115_394),
    "sst2": Source(
        "sst2", "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip", "SST-2.zip", "md5",
        "9f81648d4199384278b86e315dac217c",
        {"sst2_train": derive.build_sst2_train, "sst2_dev": derive.build_sst2_dev}),
    "imdb": Source(
        "imdb", "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
        "aclImdb_v1.tar.gz", "md5", "7c2ac02c03563afcf9b574c7e56c153a",
        {"imdb": derive.build_imdb}),
    "20newsgroups": Source(
        "20newsgroups", "https://ndownloader.figshare.com/files/5975967", "20news-bydate.tar.gz",
        "sha256", "8f1b2514ca22a5ade8fbb9cfa5727df95fa587f4c87b786e15c759fa66d95610",
        {"20newsgroups": derive.build_newsgroups}),
}


def source_for(key: str) -> Source:
    """The registered source that provides data set ``key``."""
    for source in SOURCES.values():
        if key in source.outputs:
            return source
    raise ValueError(f"key: no registered source provides {key!r}; sources provide "
                     f"{sorted(k for s in SOURCES.values() for k in s.outputs)}")


def resolve_url(url: str) -> str:
    """``url`` with its scheme and host replaced by ``$DDCL_DATA_MIRROR`` when that is set."""
    mirror = os.environ.get(MIRROR_ENV, "").strip()
    if not mirror:
        return url
    m = urlsplit(mirror)
    if not m.scheme or not m.netloc:
        raise ValueError(f"{MIRROR_ENV}={mirror!r}: expected a URL like http://host:port/")
    u = urlsplit(url)
    return urlunsplit((m.scheme, m.netloc, m.path.rstrip("/") + u.path, u.query, ""))
