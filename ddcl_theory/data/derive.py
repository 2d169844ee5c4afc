"""Derive the staged data files from the canonical archives: pure readers and atomic writers.

The readers take an archive path and return arrays, bytes, lines, rows or records; they never
extract anything to disk and never touch the network. The writers put a value into a file through
a temporary name in the same directory and an atomic rename, so an interrupted run never leaves a
file under its final name. The subset rules (which CIFAR-10 train images, which IMDB reviews) are
stored as bit masks in ``subsets.npz`` beside this module (:func:`cifar10_train_index`,
:func:`imdb_ids`); the rest of the CIFAR-10 train set is the subset's complement
(:func:`cifar10_rest_index`).
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import os
import pickle
import re
import shutil
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ddcl_theory.data.digest import split_lines

SUBSETS = Path(__file__).with_name("subsets.npz")
CIFAR_TRAIN_SIZE = 50_000
CIFAR_TEST_SIZE = 10_000
IMDB_GROUPS = (("train", "neg"), ("train", "pos"), ("test", "neg"), ("test", "pos"))
IMDB_GROUP_SIZE = 12_500
IMDB_HEADER = ["id", "split", "label", "rating", "text"]
SST2_HEADER = "sentence\tlabel"


# ---------------------------------------------------------------------------------------------
# the stored subset rules

def cifar10_train_index() -> np.ndarray:
    """Positions (int64, sorted, shape (10000,)) of the subset's images in the official train order."""
    with np.load(SUBSETS) as z:
        mask = np.unpackbits(z["cifar10_train_mask"])[:CIFAR_TRAIN_SIZE].astype(bool)
    return np.flatnonzero(mask).astype(np.int64)


def cifar10_rest_index() -> np.ndarray:
    """Positions (int64, sorted, shape (40000,)) of the official train images not in the subset."""
    return np.setdiff1d(np.arange(CIFAR_TRAIN_SIZE, dtype=np.int64), cifar10_train_index())


def imdb_ids() -> frozenset[str]:
    """The subset's reviews as ``"split/pos|neg/<id>"`` (rating left out), 2,500 per group."""
    with np.load(SUBSETS) as z:
        bits = np.unpackbits(z["imdb_mask"])[: len(IMDB_GROUPS) * IMDB_GROUP_SIZE]
    mask = bits.reshape(len(IMDB_GROUPS), IMDB_GROUP_SIZE).astype(bool)
    return frozenset(f"{split}/{label}/{n}" for g, (split, label) in enumerate(IMDB_GROUPS)
                     for n in np.flatnonzero(mask[g]))


# ---------------------------------------------------------------------------------------------
# readers: archive -> values

class _BatchUnpickler(pickle.Unpickler):
    """Unpickles the CIFAR batches, allowing only what a pickled numpy array needs."""

    _ALLOWED = {("numpy._core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "scalar"),
                ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str):
        if module.startswith("numpy.core"):
            module = "numpy._core" + module[len("numpy.core"):]
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"CIFAR batch: refusing to load {module}.{name}")
        return super().find_class(module, name)


def _unpickle_batch(payload: bytes) -> dict:
    return _BatchUnpickler(io.BytesIO(payload), encoding="bytes").load()


def _find_member(names: Sequence[str], suffix: str) -> str:
    hits = [n for n in names if n == suffix or n.endswith("/" + suffix)]
    if len(hits) != 1:
        raise ValueError(f"archive: expected one member named */{suffix}, found {len(hits)}")
    return hits[0]


def _read_members(archive: Path, basenames: Collection[str]) -> dict[str, bytes]:
    """The regular files of a tar archive whose base names are in ``basenames``, in one pass."""
    found: dict[str, bytes] = {}
    with tarfile.open(archive, "r:*") as tar:
        for member in tar:  # one sequential pass: a gzip stream is slow to seek backwards
            base = member.name.rsplit("/", 1)[-1]
            if member.isfile() and base in basenames:
                if base in found:
                    raise ValueError(f"archive: more than one member named */{base}")
                f = tar.extractfile(member)
                found[base] = f.read() if f is not None else b""
    missing = sorted(set(basenames) - set(found))
    if missing:
        raise ValueError(f"archive: no member named {', '.join('*/' + m for m in missing)}")
    return found


def _cifar10_official(archive: Path) -> dict[str, np.ndarray]:
    """Every image of the canonical archive: train rows (batches 1..5 concatenated), test rows.

    Returns ``train_rows`` uint8 (50000, 3072) CHW, ``train_labels`` int64, ``test_rows``,
    ``test_labels`` and ``label_names`` unicode (10,).
    """
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]
    members = _read_members(archive, names)
    train = [_unpickle_batch(members[f"data_batch_{i}"]) for i in range(1, 6)]
    test = _unpickle_batch(members["test_batch"])
    meta = _unpickle_batch(members["batches.meta"])
    del members
    return {
        "train_rows": np.concatenate([np.asarray(b[b"data"], dtype=np.uint8) for b in train]),
        "train_labels": np.concatenate([np.asarray(b[b"labels"], dtype=np.int64) for b in train]),
        "test_rows": np.asarray(test[b"data"], dtype=np.uint8),
        "test_labels": np.asarray(test[b"labels"], dtype=np.int64),
        "label_names": np.array([s.decode("ascii") for s in meta[b"label_names"]]),
    }


def _hwc(rows: np.ndarray) -> np.ndarray:
    """CHW rows (N, 3072) -> contiguous HWC images (N, 32, 32, 3)."""
    return np.ascontiguousarray(rows.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))


def _train_arrays(official: Mapping[str, np.ndarray], train_index: Sequence[int]
                  ) -> dict[str, np.ndarray]:
    """``x_train``, ``y_train``, ``train_index`` at the positions ``train_index``."""
    train_index = np.asarray(train_index, dtype=np.int64)
    if train_index.ndim != 1:
        raise ValueError(f"train_index: expected a 1-d index array, got shape {train_index.shape}")
    n = len(official["train_labels"])
    if train_index.size and (train_index.min() < 0 or train_index.max() >= n):
        raise ValueError(f"train_index: expected positions in [0, {n}), got "
                         f"[{train_index.min()}, {train_index.max()}]")
    return {"x_train": _hwc(official["train_rows"][train_index]),
            "y_train": official["train_labels"][train_index], "train_index": train_index}


def cifar10_arrays(archive: Path, train_index: Sequence[int], n_test: int = 1000
                   ) -> dict[str, np.ndarray]:
    """The CIFAR-10 subset from ``cifar-10-python.tar.gz``.

    Args:
        archive: the canonical tar.gz (pickled ``cifar-10-batches-py/data_batch_1..5``,
            ``test_batch``, ``batches.meta``; ``data`` rows are 3072 bytes, CHW, RGB).
        train_index: positions in the official train order (batches 1..5 concatenated).
        n_test: how many images to take from the start of ``test_batch``.

    Returns:
        ``x_train`` uint8 (len(train_index), 32, 32, 3) HWC RGB, ``y_train`` int64, ``train_index``
        int64, ``x_test`` uint8 (n_test, 32, 32, 3), ``y_test`` int64, ``test_index`` int64
        (``arange(n_test)``), ``label_names`` unicode (10,).
    """
    official = _cifar10_official(archive)
    train = _train_arrays(official, train_index)
    if not 0 <= n_test <= len(official["test_rows"]):
        raise ValueError(f"n_test: expected 0..{len(official['test_rows'])}, got {n_test}")
    return train | {
        "x_test": _hwc(official["test_rows"][:n_test]),
        "y_test": official["test_labels"][:n_test],
        "test_index": np.arange(n_test, dtype=np.int64),
        "label_names": official["label_names"],
    }


def cifar10_rest_arrays(archive: Path, subset_index: Sequence[int]) -> dict[str, np.ndarray]:
    """The official train images of ``cifar-10-python.tar.gz`` that are not in the subset.

    Args:
        archive: the canonical tar.gz (as for :func:`cifar10_arrays`).
        subset_index: the subset's positions in the official train order.

    Returns:
        ``x_train`` uint8 (M, 32, 32, 3) HWC RGB, ``y_train`` int64 (M,), ``train_index`` int64
        (M,) = ``setdiff1d(arange(n_train), subset_index)`` in official order, ``label_names``
        unicode (10,); M = n_train - len(subset_index) (40,000 for the real archive).
    """
    official = _cifar10_official(archive)
    subset_index = np.asarray(subset_index, dtype=np.int64)
    n = len(official["train_labels"])
    if subset_index.ndim != 1 or (subset_index.size and (subset_index.min() < 0
                                                         or subset_index.max() >= n)):
        raise ValueError(f"subset_index: expected a 1-d array of positions in [0, {n})")
    rest = np.setdiff1d(np.arange(n, dtype=np.int64), subset_index)
    return _train_arrays(official, rest) | {"label_names": official["label_names"]}


def cifar10_full_arrays(archive: Path) -> dict[str, np.ndarray]:
    """Every image of ``cifar-10-python.tar.gz``, in the official order.

    Returns ``x_train`` uint8 (50000, 32, 32, 3) HWC RGB (``data_batch_1..5`` concatenated),
    ``y_train`` int64 (50000,), ``x_test`` uint8 (10000, 32, 32, 3) (``test_batch``), ``y_test``
    int64 (10000,), ``label_names`` unicode (10,); the counts are those of the real archive.
    """
    official = _cifar10_official(archive)
    return {"x_train": _hwc(official["train_rows"]), "y_train": official["train_labels"],
            "x_test": _hwc(official["test_rows"]), "y_test": official["test_labels"],
            "label_names": official["label_names"]}


def _cifar100_split(batch: dict, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows = np.asarray(batch[b"data"], dtype=np.uint8)
    if rows.ndim != 2 or rows.shape[1] != 3072:
        raise ValueError(f"archive: cifar-100-python/{split} data should be (N, 3072) rows, "
                         f"got shape {rows.shape}")
    fine = np.asarray(batch[b"fine_labels"], dtype=np.int64)
    coarse = np.asarray(batch[b"coarse_labels"], dtype=np.int64)
    if not len(rows) == len(fine) == len(coarse):
        raise ValueError(f"archive: cifar-100-python/{split} has {len(rows)} images, "
                         f"{len(fine)} fine and {len(coarse)} coarse labels")
    return _hwc(rows), fine, coarse


def cifar100_arrays(archive: Path) -> dict[str, np.ndarray]:
    """Every image of ``cifar-100-python.tar.gz``, in the official order.

    The archive holds the pickled dicts ``cifar-100-python/train`` and ``test`` (``data`` rows of
    3072 bytes, CHW, RGB; ``fine_labels``, ``coarse_labels``) and ``meta`` (``fine_label_names``,
    ``coarse_label_names``); they are unpickled refusing anything but numpy arrays and builtins.

    Returns ``x_train`` uint8 (50000, 32, 32, 3) HWC RGB, ``y_train`` int64 (50000,) fine labels,
    ``y_train_coarse`` int64 (50000,), ``x_test`` uint8 (10000, 32, 32, 3), ``y_test``,
    ``y_test_coarse``, ``label_names`` unicode (100,) fine, ``coarse_label_names`` unicode (20,).
    """
    members = _read_members(archive, ["train", "test", "meta"])
    train, test, meta = (_unpickle_batch(members[n]) for n in ("train", "test", "meta"))
    del members
    x_train, y_train, y_train_coarse = _cifar100_split(train, "train")
    x_test, y_test, y_test_coarse = _cifar100_split(test, "test")
    return {"x_train": x_train, "y_train": y_train, "y_train_coarse": y_train_coarse,
            "x_test": x_test, "y_test": y_test, "y_test_coarse": y_test_coarse,
            "label_names": np.array([s.decode("ascii") for s in meta[b"fine_label_names"]]),
            "coarse_label_names": np.array([s.decode("ascii")
                                            for s in meta[b"coarse_label_names"]])}


def _zip_member(zf: zipfile.ZipFile, suffix: str) -> bytes:
    return zf.read(_find_member(zf.namelist(), suffix))


def sst2_dev_bytes(archive: Path) -> bytes:
    """``SST-2/dev.tsv`` of the GLUE ``SST-2.zip``, unchanged."""
    with zipfile.ZipFile(archive) as zf:
        return _zip_member(zf, "SST-2/dev.tsv")


def sst2_train_lines(archive: Path) -> tuple[str, list[str]]:
    """(header, data lines sorted by code point) of ``SST-2/train.tsv`` in the GLUE zip."""
    with zipfile.ZipFile(archive) as zf:
        lines = split_lines(_zip_member(zf, "SST-2/train.tsv").decode("utf-8"))
    if not lines or lines[0] != SST2_HEADER:
        raise ValueError(f"archive: SST-2/train.tsv should start with {SST2_HEADER!r}")
    return lines[0], sorted(lines[1:])


_IMDB_MEMBER = re.compile(r"(?:^|/)aclImdb/(train|test)/(pos|neg)/(\d+)_(\d+)\.txt$")


def _imdb_scan(archive: Path, wanted: Callable[[str], bool]) -> dict[tuple[int, int], list[str]]:
    """The labelled reviews whose ``"split/pos|neg/<id>"`` passes ``wanted``, by (group, id)."""
    found: dict[tuple[int, int], list[str]] = {}
    with tarfile.open(archive, "r:*") as tar:
        for member in tar:
            m = _IMDB_MEMBER.search(member.name)
            if not member.isfile() or m is None:
                continue
            split, label, num, rating = m.groups()
            if not wanted(f"{split}/{label}/{num}"):
                continue
            f = tar.extractfile(member)
            text = f.read().decode("utf-8") if f is not None else ""
            group = IMDB_GROUPS.index((split, label))
            found[(group, int(num))] = [f"{split}/{label}/{num}_{rating}", split,
                                        "1" if label == "pos" else "0", rating, text]
    return found


def imdb_rows(archive: Path, ids: Collection[str]) -> list[list[str]]:
    """IMDB rows (header first) for the reviews ``ids`` (``"split/pos|neg/<id>"``).

    Rows are ``[id, split, label, rating, text]`` with ``id = "split/pos|neg/<id>_<rating>"``,
    label 0 = neg, 1 = pos, ordered by group (train/neg, train/pos, test/neg, test/pos) and then by
    the numeric id; text is the review file decoded as UTF-8, unchanged.
    """
    found = _imdb_scan(archive, ids.__contains__)
    if len(found) != len(ids):
        raise ValueError(f"archive: {len(ids) - len(found)} of the {len(ids)} IMDB reviews are missing")
    return [list(IMDB_HEADER)] + [found[k] for k in sorted(found)]


def imdb_all_rows(archive: Path) -> list[list[str]]:
    """Every labelled review of ``aclImdb_v1.tar.gz`` as rows (header first), as :func:`imdb_rows`.

    The unlabelled ``train/unsup`` reviews are left out: 50,000 rows for the real archive (12,500
    in each of train/neg, train/pos, test/neg, test/pos, in that order, then by review id).
    """
    found = _imdb_scan(archive, lambda _: True)
    if not found:
        raise ValueError("archive: no aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt "
                         "reviews found")
    return [list(IMDB_HEADER)] + [found[k] for k in sorted(found)]


_NEWS_MEMBER = re.compile(r"(?:^|/)20news-bydate-(train|test)/([^/]+)/([^/]+)$")


def newsgroups_records(archive: Path) -> list[dict]:
    """Every message of ``20news-bydate.tar.gz`` as a record.

    Records ``{"id": "<group>/<file>", "split", "label", "label_name", "text"}``; ``text`` is the
    file's bytes decoded as Latin-1, ``label`` the group's index in alphabetical order. Ordered as
    the staged file: train before test, then by group, then by file name (as a string).
    """
    docs: list[tuple[str, str, str, str]] = []
    with tarfile.open(archive, "r:*") as tar:
        for member in tar:
            m = _NEWS_MEMBER.search(member.name)
            if not member.isfile() or m is None:
                continue
            split, group, name = m.groups()
            f = tar.extractfile(member)
            docs.append((split, group, name, f.read().decode("latin-1") if f is not None else ""))
    if not docs:
        raise ValueError("archive: no 20news-bydate-train/ or -test/ messages found")
    groups = sorted({d[1] for d in docs})
    docs.sort(key=lambda d: (d[0] != "train", groups.index(d[1]), d[2]))
    return [{"id": f"{group}/{name}", "split": split, "label": groups.index(group),
             "label_name": group, "text": text} for split, group, name, text in docs]


# ---------------------------------------------------------------------------------------------
# writers: value -> file, atomically

@contextmanager
def atomic_path(out: Path):
    """Yield a temporary path for ``out``; move it to ``out`` only if the block succeeds.

    The temporary file has ``out``'s own name inside a hidden temporary folder beside it (so a
    gzip header records the right name); the folder is removed in every case.
    """
    out = Path(out)
    tmpdir = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    tmp = tmpdir / out.name
    try:
        yield tmp
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
        tmpdir.rmdir()


def write_bytes(out: Path, data: bytes) -> None:
    """Write ``data`` to ``out`` (not atomic by itself; use inside :func:`atomic_path`)."""
    Path(out).write_bytes(data)


def write_npz(out: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """A deflated npz of ``arrays`` (in the mapping's order) at exactly ``out``.

    Reproducible bytes: every member is dated 1980-01-01 (as :func:`numpy.savez_compressed`
    would date it now), so the same arrays always give the same file. Loads with :func:`numpy.load`.
    """
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, arr in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with zf.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asarray(arr), allow_pickle=False)


class _Utf8Writer:
    """A minimal text stream (``write(str)``) that encodes into a binary one.

    Used instead of :class:`io.TextIOWrapper`, whose close() sync-flushes the gzip stream and so
    changes the compressed bytes.
    """

    def __init__(self, raw) -> None:
        self._raw = raw

    def write(self, text: str) -> int:
        self._raw.write(text.encode("utf-8"))
        return len(text)


@contextmanager
def _gzip_text(out: Path):
    """A UTF-8 text stream into a gzip file (level 9, mtime 0, the file's name in the header)."""
    with open(out, "wb") as raw, gzip.GzipFile(filename=Path(out).name, mode="wb", mtime=0,
                                               fileobj=raw) as gz:
        yield _Utf8Writer(gz)


def write_lines_gz(out: Path, header: str, lines: Iterable[str]) -> None:
    """Gzipped text: the header and each line, each ended by ``"\\n"``."""
    with _gzip_text(out) as f:
        f.write(header + "\n")
        for line in lines:
            f.write(line + "\n")


def write_tsv_gz(out: Path, rows: Iterable[Sequence[str]]) -> None:
    """Gzipped TSV written with :mod:`csv` (minimal quoting, ``"\\n"`` line ends)."""
    with _gzip_text(out) as f:
        csv.writer(f, delimiter="\t", lineterminator="\n").writerows(rows)


def write_jsonl_gz(out: Path, records: Iterable[Mapping]) -> None:
    """Gzipped JSON lines (``ensure_ascii=False``), one record a line."""
    with _gzip_text(out) as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------------------------------------
# builders: archive -> data file (what a source registers per data set)

Builder = Callable[[Path, Path], None]


def build_cifar10(archive: Path, out: Path, *, train_index: Sequence[int] | None = None,
                  n_test: int = 1000) -> None:
    """Write the CIFAR-10 subset npz; ``train_index`` defaults to the stored subset."""
    index = cifar10_train_index() if train_index is None else train_index
    write_npz(out, cifar10_arrays(archive, index, n_test))


def build_cifar10_rest(archive: Path, out: Path, *,
                       subset_index: Sequence[int] | None = None) -> None:
    """Write the rest of the CIFAR-10 train set; ``subset_index`` defaults to the stored subset."""
    index = cifar10_train_index() if subset_index is None else subset_index
    write_npz(out, cifar10_rest_arrays(archive, index))


def build_copy(archive: Path, out: Path) -> None:
    """The data file is the downloaded file itself (Tiny Shakespeare)."""
    write_bytes(out, Path(archive).read_bytes())


def build_file_copy(archive: Path, out: Path) -> None:
    """The data file is the verified download itself, copied in blocks (a large archive)."""
    shutil.copyfile(archive, out)


def build_sst2_dev(archive: Path, out: Path) -> None:
    write_bytes(out, sst2_dev_bytes(archive))


def build_sst2_train(archive: Path, out: Path) -> None:
    header, lines = sst2_train_lines(archive)
    write_lines_gz(out, header, lines)


def build_imdb(archive: Path, out: Path, *, ids: Collection[str] | None = None) -> None:
    """Write the IMDB subset TSV; ``ids`` defaults to the stored subset."""
    write_tsv_gz(out, imdb_rows(archive, imdb_ids() if ids is None else ids))


def build_newsgroups(archive: Path, out: Path) -> None:
    write_jsonl_gz(out, newsgroups_records(archive))


# ---------------------------------------------------------------------------------------------
# builders of the paper profile's full sets (registered in ddcl_theory.data.paper_sources)

def _check_counts(arrays: Mapping[str, np.ndarray], n_train: int, n_test: int) -> None:
    got = (len(arrays["x_train"]), len(arrays["x_test"]))
    if got != (n_train, n_test):
        raise ValueError(f"archive: expected {n_train:,} train and {n_test:,} test images, "
                         f"found {got[0]:,} and {got[1]:,}")


def build_cifar10_full(archive: Path, out: Path, *, n_train: int = CIFAR_TRAIN_SIZE,
                       n_test: int = CIFAR_TEST_SIZE) -> None:
    """Write every CIFAR-10 image (:func:`cifar10_full_arrays`); the counts must be as given."""
    arrays = cifar10_full_arrays(archive)
    _check_counts(arrays, n_train, n_test)
    write_npz(out, arrays)


def build_cifar100(archive: Path, out: Path, *, n_train: int = CIFAR_TRAIN_SIZE,
                   n_test: int = CIFAR_TEST_SIZE) -> None:
    """Write every CIFAR-100 image (:func:`cifar100_arrays`); the counts must be as given."""
    arrays = cifar100_arrays(archive)
    _check_counts(arrays, n_train, n_test)
    write_npz(out, arrays)


def build_imdb_full(archive: Path, out: Path, *, group_size: int = IMDB_GROUP_SIZE) -> None:
    """Write every labelled IMDB review (:func:`imdb_all_rows`), ``group_size`` per group."""
    rows = imdb_all_rows(archive)
    counts = {g: 0 for g in IMDB_GROUPS}
    for row in rows[1:]:
        counts[(row[1], "pos" if row[2] == "1" else "neg")] += 1
    if any(n != group_size for n in counts.values()):
        raise ValueError(f"archive: expected {group_size:,} reviews in each of "
                         f"train/neg, train/pos, test/neg, test/pos, found "
                         f"{', '.join(f'{n:,}' for n in counts.values())}")
    write_tsv_gz(out, rows)
