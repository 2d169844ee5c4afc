"""Files that are either their old content or their new one, and JSON-ready values.

* :func:`atomic_write_bytes` / :func:`atomic_write_text` / :func:`write_json` /
  :func:`atomic_torch_save`: write to a temporary file in the same folder, fsync, rename; a
  reader (or a run killed half-way) never sees half a file.
* :func:`jsonable`: dataclasses, mappings, NumPy and torch scalars as plain JSON types.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

__all__ = ["atomic_write_bytes", "atomic_write_text", "write_json", "read_json",
           "atomic_torch_save", "jsonable"]


@contextlib.contextmanager
def _atomic_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s new content into: a temporary file beside it, fsynced
    and renamed over ``path`` when the block ends, removed when it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):           # make the rename itself durable (POSIX)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically: a temporary file beside it, fsync, then rename.

    A reader (or a run killed half-way) sees either the old file or the complete new one.
    The parent folder is created if missing. Returns the path.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"data: expected bytes, got {type(data).__name__}")
    with _atomic_file(path) as fh:
        fh.write(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as JSON (sorted keys, one-space indent, final newline) atomically."""
    return atomic_write_text(path, json.dumps(jsonable(obj), indent=1, sort_keys=True,
                                              ensure_ascii=False) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    """The JSON value stored at ``path`` (UTF-8)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def atomic_torch_save(path: str | os.PathLike, obj: Any) -> Path:
    """``torch.save(obj)`` to ``path`` atomically, streamed into the temporary file (a GPT-2
    small training state is 2 GB: no copy of it is held in memory)."""
    with _atomic_file(path) as fh:
        torch.save(obj, fh)
    return Path(path)


def jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON types: dataclasses and mappings become dicts, tuples lists, numpy
    and torch scalars numbers, paths their name only (never an absolute path); else ``repr``."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, torch.Tensor) and obj.numel() == 1:
        return obj.item()
    if isinstance(obj, os.PathLike):
        return Path(obj).name
    return repr(obj)
