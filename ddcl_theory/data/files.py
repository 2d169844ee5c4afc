"""The catalogue of data files, where they are looked for, and how a found file is verified.

Each data set (a key of :data:`FILES`) is looked up, in order, in ``$DDCL_DATA_DIR``;
``<repo>/data``; ``<repo>/../shared/data``; the user cache
(:func:`ddcl_theory.data.cache.cache_dir`). The first file found must verify: its sha256 equals
the staged copy's, or its content digest does (:mod:`ddcl_theory.data.digest`; a file derived
from the canonical archive need not be byte-identical). A file that verifies under neither raises
:class:`DataIntegrityError` naming it: it is never used silently.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from ddcl_theory.data import digest
from ddcl_theory.data.cache import cache_dir
from ddcl_theory.runtime import paths

DATA_ENV = "DDCL_DATA_DIR"


class FallbackDataWarning(UserWarning):
    """Raised (as a warning) when a loader substitutes bundled fallback data."""


class DataIntegrityError(ValueError):
    """A data file is present but matches neither its sha256 nor its content digest."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path, self.detail = Path(path), detail
        super().__init__(f"{self.path}: {detail}; the file is corrupt or another version. "
                         "Delete it (`python -m ddcl_theory.data ensure` fetches a verified copy) "
                         "or replace it")


@dataclass(frozen=True)
class DataFile:
    """A staged data file.

    Attributes:
        name: file name in a data directory.
        sha256: sha256 of the staged file's bytes.
        description: one line.
        scheme: content-digest scheme (:data:`ddcl_theory.data.digest.SCHEMES`).
        content: content digest of the staged file under ``scheme`` (computed from the staged
            files in ``shared/data``); empty when it is the sha256 (scheme ``bytes``).
        size: the staged file's size in bytes, or None when not recorded. A file of another size
            cannot match ``sha256``, so :func:`verify` goes straight to its content digest.
    """

    name: str
    sha256: str
    description: str
    scheme: str = "bytes"
    content: str = ""
    size: int | None = None

    @property
    def content_digest(self) -> str:
        return self.content or self.sha256


FILES = {
    "cifar10": DataFile("cifar10_subset.npz",
                        "cdba3356cb18e7b178d698027eddbaf83d4d3636f12d4408f8a6a68ddec747f2",
                        "CIFAR-10, 10,000 train (1,000/class) + first 1,000 test images",
                        "npz-arrays",
                        "11acd1f80bf1914aa52db5c8dc81dbaaedf6d4456dd3caff49e72ec58e978fee",
                        31_070_454),
    "cifar10_rest": DataFile("cifar10_rest.npz",
                             "0197631017212d32d1f8e0c800d8940ac148df0033d8f833b8696b57c30139cf",
                             "CIFAR-10, the other 40,000 train images (4,000/class)",
                             "npz-arrays",
                             "4ed3ff092c47d3bd4cffbaa83dc3bc3f91cfe57d70468a30dfb6235e389b7b99",
                             113_189_859),
    "tinyshakespeare": DataFile("tinyshakespeare.txt",
                                "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
                                "Tiny Shakespeare, 1,115,394 characters", size=1_115_394),
    "sst2_train": DataFile("sst2_train.tsv.gz",
                           "7ed611143c88cb290c4fe68049202f2ca4e214c83089ecf0313511327d86f758",
                           "GLUE SST-2 train", "sorted-lines",
                           "6a7e45c9f2610234d8088a09db4568fc2eb328f5c8a0f941942f07b467ebe210",
                           1_442_879),
    "sst2_dev": DataFile("sst2_dev.tsv",
                         "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0",
                         "GLUE SST-2 dev", size=94_931),
    "imdb": DataFile("imdb_subset.tsv.gz",
                     "b4dd52c925b19181d0c3484800d315ea4fc993a62eb536b63e222cc32b53b56f",
                     "IMDB balanced 10k subset", "csv-rows",
                     "26a00226108315d50bd841889393757382f40fc721889ead3df8ca959e9174ae",
                     5_240_990),
    "20newsgroups": DataFile("20newsgroups_bydate.jsonl.gz",
                             "e967403cb466624d430c23383e500fb64e1e813fd4301e68c98be73bcad3ff4b",
                             "20 Newsgroups bydate", "json-records",
                             "8cb1349adc7378183ebe78cf680a1b1eac88fd47ad32f2e969047f84e56861c4",
                             13_730_313),
}


def _check_key(key: str) -> None:
    if key not in FILES:
        raise ValueError(f"key: unknown data set {key!r}; expected one of {sorted(FILES)}")


def search_dirs() -> list[tuple[str, Path]]:
    """Every candidate data directory as (label, path), in search order, existing or not."""
    candidates: list[tuple[str, Path]] = []
    env = os.environ.get(DATA_ENV)
    if env:
        candidates.append((f"${DATA_ENV}", Path(env)))
    root = paths.repo_root()
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

    The sha256 of the bytes is tried first (when the size is the staged copy's); otherwise, or
    when it differs, the content digest (``FILES[key].scheme``) is computed and compared. The
    outcome is cached per file (path, size, mtime, inode), so repeated calls cost a ``stat``.
    Raises :class:`DataIntegrityError` naming the file when neither matches.
    """
    _check_key(key)
    spec = FILES[key]
    path = Path(path).resolve()
    st = path.stat()
    token = (key, str(path), st.st_size, st.st_mtime_ns, st.st_ino, spec.sha256,
             spec.content_digest, spec.size)
    if token in _VERIFIED:
        return _VERIFIED[token]
    if spec.size is None or st.st_size == spec.size:
        sha = digest.file_sha256(path)
        if sha == spec.sha256:
            _VERIFIED[token] = "sha256"
            return "sha256"
        mismatch = f"sha256 {sha[:12]}... does not match the expected {spec.sha256[:12]}..."
    else:
        mismatch = (f"its size ({st.st_size:,} bytes) differs from the staged copy's "
                    f"({spec.size:,} bytes), so its sha256 cannot match")
    try:
        content = digest.content_digest(spec.scheme, path)
    except ValueError as err:
        raise DataIntegrityError(path, f"{mismatch}, and the file is unreadable as "
                                 f"{spec.scheme!r} content ({err})") from err
    if content != spec.content_digest:
        raise DataIntegrityError(path, f"{mismatch}, nor does its {spec.scheme!r} content digest "
                                 f"({content[:12]}... vs {spec.content_digest[:12]}...)")
    _VERIFIED[token] = "content digest"
    return "content digest"


def find(key: str) -> Path | None:
    """Path of data set ``key`` (a key of :data:`FILES`) after verification, or None.

    The first data directory holding the file wins; a file there that fails verification raises
    :class:`DataIntegrityError` (a ``ValueError``), it is never silently used or skipped.
    """
    _check_key(key)
    for d in data_dirs():
        path = d / FILES[key].name
        if path.is_file():
            verify(key, path)
            return path
    return None


def notice_fallback(key: str, substitute: str) -> None:
    """Print and warn (:class:`FallbackDataWarning`) that ``substitute`` stands in for ``key``."""
    msg = (f"NOTICE: {FILES[key].name} not found (set {DATA_ENV}, or run "
           f"`python -m ddcl_theory.data ensure` to fetch it); using {substitute} instead. "
           "Numbers will differ from the book's.")
    print(msg)
    warnings.warn(msg, FallbackDataWarning, stacklevel=3)


def missing_error(key: str, what: str) -> FileNotFoundError:
    """The error a loader without a fallback raises when data set ``key`` is nowhere."""
    return FileNotFoundError(f"{what}: {FILES[key].name} not in any data directory; run "
                             f"`python -m ddcl_theory.data ensure {key}` or set {DATA_ENV}")
