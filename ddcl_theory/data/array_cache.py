"""Arrays decoded once from a verified archive into the data cache, then checked and read back.

:func:`cached_arrays` keeps ``<name>.npz`` beside ``<name>.npz.json``: the record of what the
arrays were made from (``source``: the archive's name, size and modification time and the
decoding's parameters) and their digest (:func:`ddcl_theory.data.digest.arrays_digest`). A file
made from another source, or whose arrays fail the digest, is refused with the command that
rebuilds it (delete it), never silently replaced.
"""
from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ddcl_theory.data.digest import arrays_digest

__all__ = ["CachedArraysError", "archive_source", "cached_arrays"]


class CachedArraysError(RuntimeError):
    """A cached array file that does not match its record."""


def archive_source(archive: Path, **params) -> dict:
    """The record of an archive (name, bytes, modification time) and the decoding's ``params``."""
    stat = Path(archive).stat()
    return {"archive": Path(archive).name, "bytes": stat.st_size,
            "mtime_ns": stat.st_mtime_ns, **params}


def cached_arrays(out: Path, source: dict, make: Callable[[], dict[str, np.ndarray]]
                  ) -> dict[str, np.ndarray]:
    """The arrays at ``out`` (an ``.npz``) when its record names ``source`` and its digest
    holds; else, when ``out`` does not exist, ``make()``'s arrays, written there first."""
    out = Path(out)
    record_path = out.with_name(out.name + ".json")
    if out.exists():
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
            want = record["digest"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise CachedArraysError(f"{out}: no usable record {record_path.name} ({err}); "
                                    f"delete it to rebuild") from err
        if record.get("source") != source:
            raise CachedArraysError(f"{out}: made from {record.get('source')}, not {source}; "
                                    f"delete it to rebuild")
        with np.load(out) as z:
            arrays = {k: z[k] for k in z.files}
        if arrays_digest(arrays) != want:
            raise CachedArraysError(f"{out}: its arrays fail their record's digest; delete it "
                                    f"to rebuild")
        return arrays
    arrays = make()
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".npz")
    os.close(fd)
    try:
        np.savez(tmp, **arrays)
        record = {"source": source, "digest": arrays_digest(arrays)}
        record_path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return arrays
