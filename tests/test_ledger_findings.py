"""The findings page: claims grouped by word per paper, every word and number from the ledger."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddcl_theory.ledger import claims, findings

ROOT = Path(__file__).resolve().parents[1]


def _row(cid: str, word: str, **extra) -> dict:
    claim = claims.get(cid)
    return {"id": cid, "statement": claim.statement, "source": claim.source, "verdict": word,
            "our_value": extra.pop("our_value", None), "paper_value": claim.paper_value,
            **extra}


def test_groups_follow_the_words_and_leave_out_empty_ones():
    ledger = [_row("L1", "proved"), _row("L6", "inconclusive"), _row("L7", "not reproduced"),
              _row("D3", "proved")]
    titles = [(t, [r["id"] for r in rows]) for t, rows in findings.grouped(ledger,
                                                                          claims.LAPLACIAN)]
    assert titles == [("Hold", ["L1"]), ("Do not hold", ["L7"]),
                      ("Undecided at the scale that ran", ["L6"])]
    with pytest.raises(ValueError, match="source: expected one of"):
        findings.grouped(ledger, "someone else")


def test_an_undecided_claim_says_what_would_decide_it():
    tests = [{"n_seeds": 10, "seeds_needed": 34}, {"n_seeds": 10, "seeds_needed": 12}]
    row = _row("L6", "inconclusive", tests=tests, paper_profile=None)
    assert findings.what_would_decide(row) == ("10 seeds ran; the observed spread asks for 34; "
                                               "not yet run at paper scale")
    row = _row("L6", "inconclusive", tests=[{"n_seeds": 5, "seeds_needed": None}],
               paper_profile={"verdict": "reproduced"})
    assert findings.what_would_decide(row).endswith("at paper scale: reproduced")


def test_each_line_carries_the_ledger_link_word_and_both_numbers():
    text = findings.findings_markdown([_row("L8", "inconclusive", our_value="k99 -3%")],
                                      claims.LAPLACIAN)
    assert text.startswith("**Undecided at the scale that ran** (1)")
    assert "{ref}`L8 <ledger-l8>` {verdict}`inconclusive`" in text
    assert "Ours: k99 -3%." in text and "Paper: k99 547.7 → 430.4 (-21%)." in text


def test_the_committed_ledger_gives_every_paper_a_page_section():
    rows = json.loads((ROOT / "results" / "claims.json").read_text(encoding="utf-8"))
    for source in findings.PAPERS:
        text = findings.findings_markdown(rows, source)
        ids = [r["id"] for r in rows if r["source"] == source]
        assert all(f"<ledger-{cid.lower()}>" in text for cid in ids), source
