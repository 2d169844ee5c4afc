"""Content digests: what a data file holds, independent of how its bytes were written.

A data file derived from a canonical archive need not be byte-identical to the staged copy (an npz
or a gzip stream carries timestamps and compression choices), so the package records, beside each
file's sha256, a digest of its *content* under one of these schemes (all sha256, hex):

``bytes``
    The file's bytes (files that are copied unchanged: Tiny Shakespeare, the SST-2 dev set).
``npz-arrays``
    For each array of the npz, in sorted name order: the line ``json.dumps([name, dtype.str,
    shape]) + "\\n"`` then the array's C-order bytes. Object arrays are refused.
``sorted-lines``
    A (possibly gzipped) UTF-8 text with a header line: the header, then the other lines sorted by
    code point, each followed by ``"\\n"`` (row order does not count; SST-2 train).
``csv-rows``
    A (possibly gzipped) UTF-8 TSV read with :mod:`csv` (``delimiter="\\t"``, so quoted fields are
    undone): each row, header included, in file order, as ``json.dumps(row, ensure_ascii=False)
    + "\\n"`` (IMDB).
``json-records``
    (Possibly gzipped) JSON lines: each record, in file order, as ``json.dumps(record,
    ensure_ascii=False, sort_keys=True) + "\\n"`` (20 Newsgroups).

Every function here is pure: a path or in-memory value in, a hex digest out.
"""
from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

SCHEMES = ("bytes", "npz-arrays", "sorted-lines", "csv-rows", "json-records")
_GZIP_MAGIC = b"\x1f\x8b"


def file_sha256(path: Path) -> str:
    """sha256 (hex) of the bytes of ``path``, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_text(path: Path) -> str:
    """The UTF-8 text of ``path``, gunzipped first when it starts with the gzip magic bytes."""
    raw = Path(path).read_bytes()
    if raw[:2] == _GZIP_MAGIC:
        raw = gzip.decompress(raw)
    return raw.decode("utf-8")


def arrays_digest(arrays: Mapping[str, np.ndarray]) -> str:
    """``npz-arrays`` digest of named arrays (any shapes; no object dtype)."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        arr = np.asarray(arrays[name])
        if arr.dtype.hasobject:
            raise ValueError(f"arrays[{name!r}]: object arrays have no stable bytes; got {arr.dtype}")
        h.update((json.dumps([name, arr.dtype.str, list(arr.shape)]) + "\n").encode("utf-8"))
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def sorted_lines_digest(header: str, lines: Iterable[str]) -> str:
    """``sorted-lines`` digest of a header line and data lines (without their newlines)."""
    h = hashlib.sha256()
    h.update((header + "\n").encode("utf-8"))
    for line in sorted(lines):
        h.update((line + "\n").encode("utf-8"))
    return h.hexdigest()


def rows_digest(rows: Iterable[Sequence[str]]) -> str:
    """``csv-rows`` digest of rows of strings (header first), in the given order."""
    h = hashlib.sha256()
    for row in rows:
        h.update((json.dumps(list(row), ensure_ascii=False) + "\n").encode("utf-8"))
    return h.hexdigest()


def records_digest(records: Iterable[Mapping]) -> str:
    """``json-records`` digest of JSON objects, in the given order."""
    h = hashlib.sha256()
    for rec in records:
        h.update((json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
    return h.hexdigest()


def split_lines(text: str) -> list[str]:
    """Lines of ``text`` split on ``"\\n"`` (a trailing ``"\\r"`` dropped), no final empty line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def content_digest(scheme: str, path: Path) -> str:
    """The content digest of the file at ``path`` under ``scheme`` (one of :data:`SCHEMES`).

    Raises ``ValueError`` when the file cannot be read under the scheme (wrong format).
    """
    path = Path(path)
    if scheme == "bytes":
        return file_sha256(path)
    try:
        if scheme == "npz-arrays":
            with np.load(path, allow_pickle=False) as z:
                return arrays_digest({name: z[name] for name in z.files})
        if scheme == "sorted-lines":
            lines = split_lines(read_text(path))
            if not lines:
                raise ValueError("empty file")
            return sorted_lines_digest(lines[0], lines[1:])
        if scheme == "csv-rows":
            return rows_digest(csv.reader(io.StringIO(read_text(path), newline=""), delimiter="\t"))
        if scheme == "json-records":
            return records_digest(json.loads(line) for line in split_lines(read_text(path)) if line)
    except (OSError, EOFError, UnicodeDecodeError, ValueError, csv.Error, gzip.BadGzipFile,
            zipfile.BadZipFile) as err:
        raise ValueError(f"{path.name}: not readable as {scheme!r} content ({err})") from err
    raise ValueError(f"scheme: expected one of {SCHEMES}, got {scheme!r}")
