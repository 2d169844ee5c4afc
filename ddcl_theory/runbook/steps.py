"""What the paper profile's training loops do, per registry entry: optimiser steps, training
examples and the documents a frozen encoder reads, as functions of the entry's settings.

The formulas live beside the experiments they describe (:mod:`ddcl_theory.runbook.steps_images`,
:mod:`ddcl_theory.runbook.steps_text`) and are checked against what the smoke run counts; this
module is the one lookup the runbook page uses.
"""
from __future__ import annotations

from typing import Any

from ddcl_theory.runbook import steps_images, steps_text

__all__ = ["STEPS", "EXAMPLES", "ENCODED", "steps", "examples", "encoded"]

STEPS = {**steps_images.STEPS, **steps_text.STEPS}
EXAMPLES = {**steps_images.EXAMPLES, **steps_text.EXAMPLES}
ENCODED = dict(steps_text.ENCODED)


def _lookup(table: dict, what: str, name: str):
    if name not in table:
        raise KeyError(f"{name}: no {what} formula in ddcl_theory.runbook (known: "
                       f"{', '.join(sorted(table))})")
    return table[name]


def steps(name: str, settings: Any) -> int:
    """Optimiser steps of entry ``name``'s ``fit`` loops at ``settings`` (at most, where a run
    can stop early)."""
    return int(_lookup(STEPS, "step", name)(settings))


def examples(name: str, settings: Any) -> dict[str, int]:
    """Training examples those steps see per model class, as ``fit`` counts them (at most,
    likewise); {} for an entry that trains nothing through ``fit``."""
    return {model: int(n) for model, n in _lookup(EXAMPLES, "example", name)(settings).items()}


def encoded(name: str, settings: Any) -> tuple[int, int]:
    """(documents, length cap in tokens) a frozen encoder reads for entry ``name``; (0, 0) for
    an entry that encodes nothing."""
    if name not in ENCODED:
        return 0, 0
    docs, length = ENCODED[name](settings)
    return int(docs), int(length)
