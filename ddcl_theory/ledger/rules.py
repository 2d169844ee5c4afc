"""The registered decision rules of the empirical claims (second edition), frozen.

Each empirical claim's :class:`~ddcl_theory.ledger.design.Rule` is data here, written from the
exploratory runs (the cpu profile's pilots and the first edition's reference runs, whose
spreads size the seeds) and frozen before the confirmatory reference run: the provenance of a
reference result records this module's digest, and a reference result computed under another
version of it is stale (``make check-reference``). A rule changed after its confirmatory run is
an amendment (:mod:`ddcl_theory.ledger.amendments`): the registered rule's word stays the
headline.

Seeds: the confirmatory runs use :func:`ddcl_theory.runtime.settings.confirmatory_seeds`, seeds
no exploratory run used.
"""
from __future__ import annotations

import hashlib

from ddcl_theory.ledger.design import Rule, Test

__all__ = ["RULES", "Rule", "Test", "digest"]

#: claim id -> its registered rule.
RULES: dict[str, Rule] = {}


def digest(claim_id: str) -> str | None:
    """16 hex digits of the sha256 of the registered rule of ``claim_id`` (its full
    dataclass ``repr``: tests, margins, SESOIs, seeds, gates); None when it has none."""
    rule = RULES.get(claim_id)
    return None if rule is None else hashlib.sha256(repr(rule).encode("utf-8")).hexdigest()[:16]
