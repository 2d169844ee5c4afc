"""HellaSwag's validation set, the downstream task of L9 at paper scale, and its reader.

The file is the authors' ``data/hellaswag_val.jsonl`` (10,042 items, one JSON object a line)
from their repository at a pinned commit, checked against the git blob hash that commit records
for it (:class:`GitBlobSource`: the SHA-1 of ``b"blob <size>\\0" + content``, what
``git hash-object`` prints), so the download is the committed file byte for byte. Its entries are
added to :data:`ddcl_theory.data.paper_sources.PAPER_SOURCES` and ``PAPER_FILES`` when this
module is imported (as ``make data PROFILE=paper`` does; the verified file is
:func:`ddcl_theory.data.paper.hellaswag_file`), apart from that catalogue for the
reason :mod:`ddcl_theory.data.lm_sources` gives.

Each item is a context and four endings, one of them the true continuation
(:class:`HellaSwagItem`); :func:`read_items` builds each context as lm-evaluation-harness
does, ``"<activity label>: <ctx_a> <ctx_b capitalised>"``, with its clean-up of the WikiHow
items (bracketed markers dropped, ``" [title]"`` made a sentence break), so scores compare with
published ones. Scoring lives in :mod:`ddcl_theory.experiments.downstream`.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ddcl_theory.data import derive, paper_sources
from ddcl_theory.data.sources import Source

__all__ = ["HELLASWAG_COMMIT", "HELLASWAG_URL", "HELLASWAG_BLOB", "GitBlobSource",
           "HellaSwagItem", "clean", "read_items"]

#: The authors' repository (rowanz/hellaswag) at its last commit.
HELLASWAG_COMMIT = "a29ff8e9a04bba4bd6588223785ce105328adc57"
HELLASWAG_URL = ("https://raw.githubusercontent.com/rowanz/hellaswag/"
                 f"{HELLASWAG_COMMIT}/data/hellaswag_val.jsonl")
#: The git blob hash of ``data/hellaswag_val.jsonl`` in that commit's tree.
HELLASWAG_BLOB = "0f5ee25d72216f12317d5d8a7b92deafa423d81e"
ENDINGS = 4


@dataclass(frozen=True)
class GitBlobSource(Source):
    """A :class:`~ddcl_theory.data.sources.Source` pinned by the git blob hash of a file in a
    pinned commit (``algo`` stays ``"sha1"``, the hash git uses; the digest covers git's
    ``blob <size>\\0`` header, so it equals the tree entry's hash, not ``sha1sum``'s)."""

    def hexdigest(self, path: Path) -> str:
        path = Path(path)
        h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())  # noqa: S324 (git's hash)
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()

    def bytes_digest(self, body: bytes) -> str:
        """The same digest of ``body`` held in memory."""
        return hashlib.sha1(f"blob {len(body)}\0".encode() + body).hexdigest()  # noqa: S324


paper_sources.PAPER_SOURCES.setdefault(
    "hellaswag", GitBlobSource("hellaswag", HELLASWAG_URL, "hellaswag_val.jsonl", "sha1",
                               HELLASWAG_BLOB, {"hellaswag": derive.build_file_copy}))
paper_sources.PAPER_FILES.setdefault(
    "hellaswag", paper_sources.PaperFile(
        "hellaswag_val.jsonl",
        "HellaSwag validation set (10,042 contexts, four endings each): L9's downstream task, "
        "the authors' file as committed", "hellaswag", "bytes"))


@dataclass(frozen=True)
class HellaSwagItem:
    """One item: ``context`` (cleaned), its four cleaned ``endings``, the index ``label`` of
    the true one, and the file's ``ind`` and ``source_id``."""

    context: str
    endings: tuple[str, ...]
    label: int
    ind: int
    source_id: str = ""


_BRACKETS = re.compile(r"\[.*?\]")


def clean(text: str) -> str:
    """WikiHow markup out of a HellaSwag string: ``" [title]"`` becomes a sentence break, other
    bracketed markers go, double spaces close up, the ends are stripped."""
    text = text.strip().replace(" [title]", ". ")
    text = _BRACKETS.sub("", text)
    return text.replace("  ", " ").strip()


def _item(row: dict, where: str) -> HellaSwagItem:
    missing = [k for k in ("activity_label", "ctx_a", "ctx_b", "endings", "label")
               if k not in row]
    if missing:
        raise ValueError(f"{where}: expected a HellaSwag item, missing {missing}")
    endings = row["endings"]
    if not (isinstance(endings, list) and len(endings) == ENDINGS
            and all(isinstance(e, str) for e in endings)):
        raise ValueError(f"{where}: endings: expected {ENDINGS} strings, got {endings!r}")
    label = row["label"]
    if isinstance(label, str) and label.isdigit():
        label = int(label)
    if not (isinstance(label, int) and not isinstance(label, bool) and 0 <= label < ENDINGS):
        raise ValueError(f"{where}: label: expected an int in [0, {ENDINGS}), got {label!r}")
    query = f"{row['activity_label']}: {row['ctx_a']} {str(row['ctx_b']).capitalize()}"
    return HellaSwagItem(clean(query), tuple(clean(e) for e in endings), label,
                         int(row.get("ind", -1)), str(row.get("source_id", "")))


def read_items(path: Path | str, limit: int | None = None) -> list[HellaSwagItem]:
    """The items of a HellaSwag jsonl file in file order (the first ``limit`` when given).
    Raises ``ValueError`` naming the line of a malformed item."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 1):
        raise ValueError(f"limit: expected None or an int >= 1, got {limit!r}")
    items: list[HellaSwagItem] = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{Path(path).name}, line {number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{where}: not a JSON object ({err.msg})") from err
            if not isinstance(row, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
            items.append(_item(row, where))
            if limit is not None and len(items) == limit:
                break
    if not items:
        raise ValueError(f"{Path(path).name}: no HellaSwag items")
    return items

