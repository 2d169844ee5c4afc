"""What the book found, per paper: the findings page, computed from the ledger.

:func:`findings_markdown` groups one paper's claims by their word (rows of
:func:`ddcl_theory.ledger.claims.build_ledger`, or of ``results/claims.json``): each claim in one
line with its short form, its word, our deciding number beside the paper's, a link to its ledger
entry, and, for an ``inconclusive`` one, what would decide it (the seeds its spread asks for, and
whether a paper-scale run has decided it). Nothing on the page is typed: every word and number
comes from the ledger.
"""
from __future__ import annotations

from collections.abc import Sequence

from ddcl_theory.ledger.claims import (DDCL, LAPLACIAN, OURS, _value, _verdict_badge, get,
                                       ledger_anchor, markdown_text)

__all__ = ["GROUPS", "PAPERS", "grouped", "findings_markdown", "what_would_decide"]

#: The papers (sources of the claims) in the order the page shows them, with a title each.
PAPERS = {DDCL: "DDCL-Attention", LAPLACIAN: "Laplacian heads", OURS: "Beyond the papers"}
#: The groups of the page: a title and the verdict words it holds.
GROUPS = (
    ("Hold", ("proved", "confirmed", "reproduced")),
    ("Hold under stated conditions", ("qualified",)),
    ("Do not hold", ("refuted", "not reproduced")),
    ("Undecided at the scale that ran", ("inconclusive",)),
    ("Not examined", ("untested",)),
)


def grouped(ledger: Sequence[dict], source: str) -> list[tuple[str, list[dict]]]:
    """``[(group title, rows)]`` of the claims of ``source`` (groups without a claim left out),
    rows in ledger order."""
    if source not in PAPERS:
        raise ValueError(f"source: expected one of {sorted(PAPERS)}, got {source!r}")
    mine = [row for row in ledger if row["source"] == source]
    out = []
    for title, words in GROUPS:
        rows = [row for row in mine if row["verdict"] in words]
        if rows:
            out.append((title, rows))
    return out


def what_would_decide(row: dict) -> str:
    """For an undecided claim: the seeds its tests ran and the most any test's spread asks for,
    and the paper-scale run's word when there is one."""
    parts = []
    tests = row.get("tests") or []
    if tests:
        ran = max(t["n_seeds"] for t in tests)
        needed = [t.get("seeds_needed") for t in tests]
        if any(n is None for n in needed):
            parts.append(f"{ran} seeds ran; no number of seeds would decide a test at the "
                         "observed spread")
        else:
            parts.append(f"{ran} seeds ran; the observed spread asks for {max(needed)}")
    paper = row.get("paper_profile")
    if paper:
        parts.append(f"at paper scale: {paper['verdict']}")
    elif "paper_profile" in row:
        parts.append("not yet run at paper scale")
    return "; ".join(parts)


def _line(row: dict) -> str:
    short = get(row["id"]).short or markdown_text(row["statement"])
    text = (f"- {{ref}}`{row['id']} <{ledger_anchor(row['id'])}>` "
            f"{_verdict_badge(row['verdict'])} {short}.")
    ours, paper = row.get("our_value"), row.get("paper_value")
    if ours:
        text += f" Ours: {_value(ours)}."
    if paper:
        text += f" Paper: {_value(paper)}."
    if row["verdict"] == "inconclusive" and what_would_decide(row):
        text += f" What would decide: {markdown_text(what_would_decide(row))}."
    return text


def findings_markdown(ledger: Sequence[dict], source: str) -> str:
    """One paper's findings as MyST: per group a bold title and one line per claim."""
    blocks = []
    for title, rows in grouped(ledger, source):
        blocks.append(f"**{title}** ({len(rows)})\n\n" + "\n".join(_line(r) for r in rows))
    return "\n\n".join(blocks)
