"""The findings page: claims grouped by word per paper, every word and number from the ledger."""
from __future__ import annotations

import json
import re
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


NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def _numbers(text: str) -> set[str]:
    return set(NUMBER.findall(text.replace("\\", "")))


def _page_disagreements(ledger: list[dict]) -> list[str]:
    """Every line of the findings page of ``ledger`` whose word is not its claim's word in the
    committed ``results/claims.json``, or which shows a number the committed row does not hold."""
    committed = {row["id"]: row for row in json.loads(
        (ROOT / "results" / "claims.json").read_text(encoding="utf-8"))}
    problems = []
    for source in findings.PAPERS:
        for line in findings.findings_markdown(ledger, source).splitlines():
            if not line.startswith("- {ref}"):
                continue
            cid = re.match(r"- \{ref\}`(\w+) <", line).group(1)
            word = re.search(r"\{verdict\}`([^`]+)`", line).group(1)
            row = committed[cid]
            if word != row["verdict"]:
                problems.append(f"{cid}: page says {word!r}, claims.json {row['verdict']!r}")
            allowed = _numbers(json.dumps(row) + claims.get(cid).short
                               + findings.what_would_decide(row)) | _numbers(cid)
            if extra := _numbers(line.split("`", 4)[-1]) - allowed:
                problems.append(f"{cid}: numbers {sorted(extra)} are not in claims.json")
    return problems


def test_every_word_and_number_of_the_findings_page_is_the_committed_ledgers():
    ledger = json.loads((ROOT / "results" / "claims.json").read_text(encoding="utf-8"))
    assert _page_disagreements(ledger) == []


def test_a_changed_word_or_number_on_the_page_is_caught():
    ledger = json.loads((ROOT / "results" / "claims.json").read_text(encoding="utf-8"))
    wrong = [dict(row) for row in ledger]
    first = wrong[0]
    first["verdict"] = "refuted" if first["verdict"] != "refuted" else "proved"
    assert any(p.startswith(f"{first['id']}: page says") for p in _page_disagreements(wrong))
    wrong = [dict(row) for row in ledger]
    with_value = next(row for row in wrong if row.get("our_value"))
    with_value["our_value"] = "9137.5 of it"
    assert any("9137.5" in p for p in _page_disagreements(wrong))
