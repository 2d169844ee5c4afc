"""Earlier reference runs of a claim, kept beside the run of record.

A rerun on the same seeds repeats its per-seed values only from the same code on the same
machine. When a chapter is rerun (its code changed, or a later session checks it), the new
values become the record; the old ones can be kept in
``results/reference/earlier/<claim id>.json`` so that a decision can say how much of its answer
moved between runs. Each entry names the commit that
recorded it, the code it ran, its seeds and its per-seed values (as the seeds file of that
commit held them)::

    {"claim": "X2", "runs": [{"recorded_in": "82d2243", "code": "059ddac",
                              "date": "2026-12-03", "what": "...", "seeds": [2000, ...],
                              "per_seed": {"<statistic>": [...], ...}}]}
"""
from __future__ import annotations

import json
from pathlib import Path

from ddcl_theory.ledger.reference import reference_dir

__all__ = ["EARLIER", "REQUIRED", "earlier_runs"]

#: The folder under ``results/reference`` that holds them.
EARLIER = "earlier"
#: The fields every earlier run must have.
REQUIRED = ("recorded_in", "code", "date", "what", "seeds", "per_seed")


def earlier_runs(claim_id: str, folder: Path | None = None) -> list[dict]:
    """The committed earlier runs of ``claim_id`` (oldest first), ``[]`` when there are none.

    ``folder``: the reference folder (default :func:`~ddcl_theory.ledger.reference.
    reference_dir`). Raises ValueError naming the file and field when an entry is malformed.
    """
    path = (reference_dir() if folder is None else Path(folder)) / EARLIER / f"{claim_id}.json"
    if not path.exists():
        return []
    record = json.loads(path.read_text())
    if record.get("claim") != claim_id:
        raise ValueError(f"{path}: claim must be {claim_id!r}, got {record.get('claim')!r}")
    runs = record.get("runs")
    if not isinstance(runs, list):
        raise ValueError(f"{path}: runs must be a list, got {type(runs).__name__}")
    for i, run in enumerate(runs):
        missing = [k for k in REQUIRED if k not in run]
        if missing:
            raise ValueError(f"{path}: runs[{i}] lacks {', '.join(missing)}")
        n = len(run["seeds"])
        short = [k for k, v in run["per_seed"].items() if len(v) != n]
        if short:
            raise ValueError(f"{path}: runs[{i}].per_seed[{short[0]!r}] has "
                             f"{len(run['per_seed'][short[0]])} values for {n} seeds")
    return runs

