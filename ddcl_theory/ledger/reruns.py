"""Reruns of reference chapters that are not the record, set beside the record's words.

A reference chapter rerun in a later session (from a clean tree, to see whether its record
repeats) is kept in ``results/reference/reruns/<chapter>.json`` when it is not made the record:
its code, date, what it was and whether the chapter completed, and for each claim it decided
the word, evidence and tests as the chapter's decision gave them, with the per-seed values.
A rerun of a record that a later confirmatory run has since replaced names the words of the
record it reran (``"reran": {"D17": "reproduced"}``), and is set beside those::

    {"chapter": "peer_readouts", "runs": [{"code": "e656076", "date": "2026-12-05",
        "what": "...", "completed": false, "verdicts": [{"id": "D17", "verdict": "...", ...}],
        "per_seed": {"D17": {...}}}]}

:func:`rerun_rows` lists every claim a rerun decided beside the record's word; the ledger page
shows them, so that a word a rerun does not repeat is seen where the word is.
"""
from __future__ import annotations

import json
from pathlib import Path

from ddcl_theory.ledger.reference import read_reference, reference_dir

__all__ = ["RERUNS", "HEADER", "reruns", "rerun_rows", "repeated_text"]

#: The folder under ``results/reference`` that holds them.
RERUNS = "reruns"
#: The columns of :func:`rerun_rows`.
HEADER = ["claim", "record", "rerun", "rerun's value", "rerun from", "the rerun"]
_REQUIRED = ("code", "date", "what", "completed", "verdicts")


def reruns(folder: Path | None = None) -> dict[str, list[dict]]:
    """``{chapter: [rerun, ...]}`` from ``<folder>/reruns/*.json`` (``folder``: the reference
    folder, default the checkout's); raises ValueError naming the file and field when an entry
    is malformed."""
    folder = reference_dir() if folder is None else Path(folder)
    out = {}
    for path in sorted((folder / RERUNS).glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("chapter") != path.stem:
            raise ValueError(f"{path}: chapter must be {path.stem!r}, got "
                             f"{record.get('chapter')!r}")
        for i, run in enumerate(record.get("runs") or []):
            missing = [k for k in _REQUIRED if k not in run]
            if missing:
                raise ValueError(f"{path}: runs[{i}] lacks {', '.join(missing)}")
        out[path.stem] = record.get("runs") or []
    return out


def rerun_rows(folder: Path | None = None) -> list[list[str]]:
    """One row per claim a rerun decided: the claim, the word of the record it reran (the
    current record's unless the rerun names another, ``reran``), the rerun's word (in bold
    where they differ), its value, its code and date, and what it was."""
    record = {row["id"]: row["verdict"] for entry in read_reference(folder).values()
              for row in entry["verdicts"]}
    rows = []
    for chapter, runs in reruns(folder).items():
        for run in runs:
            reran = run.get("reran") or {}
            for i, v in enumerate(run["verdicts"]):
                then = reran.get(v["id"], record.get(v["id"], "–"))
                word = v["verdict"] if v["verdict"] == then else f"**{v['verdict']}**"
                rows.append([v["id"], then, word, v.get("our_value") or "–",
                             f"`{run['code']}`, {run['date']}", "" if i else run["what"]])
    return rows


def repeated_text(rows: list[list[str]]) -> str:
    """How many of :func:`rerun_rows`' words repeat the record's, and which do not."""
    differ = [r[0] for r in rows if r[1] != r[2]]
    text = f"{len(rows) - len(differ)} of {len(rows)} words repeat the record's"
    return text + (f"; not repeated: {', '.join(differ)}." if differ else ".")
