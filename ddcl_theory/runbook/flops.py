"""FLOPs counted at the paper profile's shapes: the training steps of every experiment and a
frozen encoder's forward pass per token.

    python -m ddcl_theory.runbook.flops            # the smoke run with --flops, about 10 min
    python -m ddcl_theory.runbook.flops --check    # compare a fresh count with the committed one
    python -m ddcl_theory.runbook.flops --from-report smoke.json   # from a smoke run's report

The counts come from torch's ``FlopCounterMode`` (matrix products, convolutions and attention;
element-wise work is not counted), so they depend on the code and the shapes, not on the
machine. The training counts are those of the paper profile's smoke run (the paper's model
sizes and shapes, small budgets; :mod:`ddcl_theory.experiments.smoke` with ``--flops``): per
experiment the FLOPs, optimiser steps and examples of its training steps. They are committed in
``results/runbook/flops.json`` with the versions that counted them.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

from ddcl_theory.runtime.io import write_json
from ddcl_theory.runtime.paths import repo_root

__all__ = ["FLOPS_FILE", "encoder_flops_per_token", "from_report", "count", "read", "main"]

#: the committed counts, relative to the checkout
FLOPS_FILE = Path("results") / "runbook" / "flops.json"
#: BERT-base's shape (Devlin et al. 2019): the text chapters' paper encoder
BERT_BASE_SHAPE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                   "intermediate_size": 3072}


def encoder_flops_per_token(length: int = 512, **shape: int) -> int:
    """FLOPs of a BERT encoder's forward pass per token, on one sequence of ``length`` tokens
    (attention included, so the count per token grows with ``length``). ``shape``: BertConfig
    fields (default :data:`BERT_BASE_SHAPE`). Built on the meta device: no weights, no data."""
    if not isinstance(length, int) or length < 1:
        raise ValueError(f"length: expected an int >= 1, got {length!r}")
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import BertConfig, BertModel

    config = BertConfig(**{**BERT_BASE_SHAPE, **shape})
    if length > config.max_position_embeddings:
        raise ValueError(f"length: at most {config.max_position_embeddings} positions, "
                         f"got {length}")
    with torch.device("meta"):
        model = BertModel(config, add_pooling_layer=False)
    ids = torch.zeros(1, length, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(input_ids=ids)
    total = counter.get_total_flops()
    return -(-total // length)


def from_report(record: dict) -> dict:
    """The committed form of a smoke report written with ``--flops``: ``{"experiments": {entry:
    {"flops", "steps", "examples", "models": {class: {...}}}}, "encoder": {...}, "torch":
    version}``. ``ValueError`` when the report holds a failed entry or no counts."""
    failed = [o["name"] for o in record["experiments"] if not o.get("ok")]
    if failed:
        raise ValueError(f"record: the smoke run failed for {failed}")
    uncounted = [o["name"] for o in record["experiments"] if "training" not in o]
    if uncounted:
        raise ValueError(f"record: no --flops counts for {uncounted}")
    return {"experiments": {o["name"]: o["training"] for o in record["experiments"]},
            "encoder": {"name": "bert-base-uncased", "length": 512,
                        "flops_per_token": encoder_flops_per_token(512)},
            "torch": torch.__version__.split("+")[0],
            "counted_by": "torch.utils.flop_counter.FlopCounterMode in the paper profile's "
                          "smoke run (python -m ddcl_theory.runbook.flops)"}


def count(names: list[str] | None = None) -> dict:
    """Run the smoke run with ``--flops`` (on ``names``' entries, default all) on one thread and
    return :func:`from_report` of it. ``RuntimeError`` when an entry fails."""
    from ddcl_theory.experiments import smoke

    with tempfile.TemporaryDirectory(prefix="ddcl-flops-") as scratch:
        report = Path(scratch) / "smoke.json"
        if smoke.main([*(names or []), "--flops", "--threads", "1", "--report",
                       str(report)]) != 0:
            raise RuntimeError("runbook.flops: the smoke run failed (its output names the entry)")
        return from_report(json.loads(report.read_text(encoding="utf-8")))


def read(path: Path | None = None) -> dict:
    """The committed counts (``FileNotFoundError`` naming the command that writes them)."""
    root = repo_root() or Path.cwd()
    path = Path(path) if path is not None else root / FLOPS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no FLOP counts; run python -m ddcl_theory.runbook.flops")
    return json.loads(path.read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="count afresh and compare with the committed counts; write nothing")
    parser.add_argument("--from-report", default=None,
                        help="read a smoke report written with --flops instead of counting")
    args = parser.parse_args(argv)
    fresh = (from_report(json.loads(Path(args.from_report).read_text(encoding="utf-8")))
             if args.from_report else count())
    root = repo_root() or Path.cwd()
    if args.check:
        committed = read()
        moved = sorted(name for name, c in fresh["experiments"].items()
                       if committed["experiments"].get(name) != c)
        if moved or fresh["encoder"] != committed["encoder"]:
            print(f"runbook.flops: the counts moved for {moved or ['the encoder']}; "
                  "rerun python -m ddcl_theory.runbook.flops and the runbook page")
            return 1
        print(f"runbook.flops: all {len(fresh['experiments'])} counts as committed")
        return 0
    write_json(root / FLOPS_FILE, fresh)
    print(f"runbook.flops: wrote {FLOPS_FILE} ({len(fresh['experiments'])} experiments)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
