"""Where a paper data file is found, and its digest record: the check every load goes through.

A paper data file (:data:`ddcl_theory.data.paper_sources.PAPER_FILES`) is looked up in the data
directories of :func:`ddcl_theory.data.files.search_dirs` (``$DDCL_DATA_DIR``, ``<repo>/data``,
``../shared/data``, the user cache), first hit wins. Beside it lies ``<name>.digest.json``, written
by the derivation (:mod:`ddcl_theory.data.paper_fetch`)::

    {"key": ..., "file": <name>, "scheme": <content-digest scheme>, "content": <hex>,
     "sha256": <hex of the bytes>, "size": <bytes>,
     "source": {"url": ..., "filename": ..., "md5" or "sha256": <archive checksum>}}

:func:`verify` holds the file to its record: its sha256 (when the size matches), else its content
digest (:mod:`ddcl_theory.data.digest`: an npz rewritten with other compression still passes);
and the record to the catalogue, when the catalogue pins the content digest. A file without a
record, or one that matches neither, raises :class:`PaperDataError` naming the file.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ddcl_theory.data import (  # noqa: F401 (lm_sources, hellaswag: their entries)
    digest,
    files,
    hellaswag,
    lm_sources,
    paper_sources,
)

RECORD_SUFFIX = ".digest.json"
ENSURE_PAPER = "python -m ddcl_theory.data ensure --paper"


class PaperDataError(files.DataIntegrityError):
    """A paper data file is present but has no valid record or does not match it."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path, self.detail = Path(path), detail
        ValueError.__init__(self, f"{self.path}: {detail}. Delete it (and its {RECORD_SUFFIX}); "
                                  f"`{ENSURE_PAPER}` derives a verified copy")


def spec(key: str) -> paper_sources.PaperFile:
    """The catalogue entry of paper data set ``key``."""
    if key not in paper_sources.PAPER_FILES:
        raise ValueError(f"key: unknown paper data set {key!r}; expected one of "
                         f"{sorted(paper_sources.PAPER_FILES)}")
    return paper_sources.PAPER_FILES[key]


def record_path(path: Path) -> Path:
    """The digest record of the data file at ``path``: ``<path>.digest.json``."""
    path = Path(path)
    return path.with_name(path.name + RECORD_SUFFIX)


def make_record(key: str, path: Path) -> dict:
    """The record of the file at ``path`` as data set ``key`` (digests computed here)."""
    entry = spec(key)
    source = paper_sources.PAPER_SOURCES[entry.source]
    return {"key": key, "file": entry.name, "scheme": entry.scheme,
            "content": digest.content_digest(entry.scheme, path),
            "sha256": digest.file_sha256(path), "size": Path(path).stat().st_size,
            "source": {"url": source.url, "filename": source.filename,
                       source.algo: source.checksum}}


def write_record(data_path: Path, record: dict) -> Path:
    """Write ``record`` beside ``data_path`` atomically (temporary file, then rename); its path."""
    out = record_path(data_path)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def read_record(key: str, path: Path) -> dict:
    """The record beside ``path``, checked to describe data set ``key``; raises PaperDataError."""
    entry, rec_path = spec(key), record_path(path)
    if not rec_path.is_file():
        raise PaperDataError(path, f"no digest record {rec_path.name} beside it")
    try:
        record = json.loads(rec_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise PaperDataError(path, f"its digest record {rec_path.name} is unreadable "
                                   f"({err})") from err
    wanted = {"key": key, "file": entry.name, "scheme": entry.scheme}
    if not isinstance(record, dict) or any(record.get(k) != v for k, v in wanted.items()) \
            or not all(isinstance(record.get(k), str) for k in ("content", "sha256")):
        raise PaperDataError(path, f"its digest record {rec_path.name} does not describe {wanted}")
    if entry.content and record["content"] != entry.content:
        raise PaperDataError(path, f"its digest record names content {record['content'][:12]}..., "
                                   f"the catalogue pins {entry.content[:12]}...")
    return record


# (key, resolved path, size, mtime, inode, record mtime, pinned content) -> how it verified
_VERIFIED: dict[tuple, str] = {}


def verify(key: str, path: Path) -> str:
    """Check the file at ``path`` against its record; ``"sha256"`` or ``"content digest"``.

    Cached per file and record (path, size, mtime, inode), so repeated calls cost two ``stat``.
    Raises :class:`PaperDataError` naming the file when the record is missing, invalid or not met.
    """
    entry = spec(key)
    path = Path(path).resolve()
    st, rec_st = path.stat(), (record_path(path).stat() if record_path(path).is_file() else None)
    token = (key, str(path), st.st_size, st.st_mtime_ns, st.st_ino,
             rec_st and rec_st.st_mtime_ns, entry.content)
    if token in _VERIFIED:
        return _VERIFIED[token]
    record = read_record(key, path)
    if record.get("size") == st.st_size and digest.file_sha256(path) == record["sha256"]:
        _VERIFIED[token] = "sha256"
        return "sha256"
    try:
        content = digest.content_digest(entry.scheme, path)
    except ValueError as err:
        raise PaperDataError(path, f"its bytes differ from its record and it is unreadable as "
                                   f"{entry.scheme!r} content ({err})") from err
    if content != record["content"]:
        raise PaperDataError(path, f"neither its sha256 nor its {entry.scheme!r} content digest "
                                   f"({content[:12]}...) matches its record "
                                   f"({record['content'][:12]}...)")
    _VERIFIED[token] = "content digest"
    return "content digest"


def locate(key: str) -> Path | None:
    """The first data directory's copy of ``key``'s file, unverified, or None."""
    name = spec(key).name
    for d in files.data_dirs():
        if (d / name).is_file():
            return d / name
    return None


def find(key: str) -> Path | None:
    """Path of paper data set ``key`` after :func:`verify`; None when no data directory has it."""
    path = locate(key)
    if path is not None:
        verify(key, path)
    return path


def missing_error(key: str, what: str) -> FileNotFoundError:
    """The error a paper loader raises when data set ``key`` is in no data directory."""
    return FileNotFoundError(
        f"{what}: {spec(key).name} not in any data directory; run `{ENSURE_PAPER} {key}` (or "
        f"`make data PROFILE=paper`), or set {files.DATA_ENV} to a directory holding it and its "
        f"{RECORD_SUFFIX}")
