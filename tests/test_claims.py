"""The claims ledger: every claim id is data, verdicts are valid words, the export is consistent."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ddcl_theory import claims

ROOT = Path(__file__).resolve().parents[1]
SHARED_CLAIMS = ROOT.parent / "shared" / "docs" / "claims.md"
EXPECTED_IDS = [f"D{i}" for i in range(1, 18)] + [f"L{i}" for i in range(1, 12)] + ["X1", "X2"]


def test_registry_has_every_claim_id_once():
    ids = [c.id for c in claims.CLAIMS]
    assert ids == EXPECTED_IDS


@pytest.mark.skipif(not SHARED_CLAIMS.is_file(), reason="../shared/docs/claims.md not beside the checkout")
def test_registry_matches_shared_claims_list():
    listed = re.findall(r"^\| ([DLX]\d+) \|", SHARED_CLAIMS.read_text(encoding="utf-8"), flags=re.M)
    assert sorted(listed) == sorted(EXPECTED_IDS)


def test_settle_rejects_unknown_verdict_and_claim(tmp_path):
    chapter = claims.Chapter("t", page="notebooks/t")
    with pytest.raises(ValueError, match="verdict"):
        chapter.settle("D3", "true", "because")
    with pytest.raises(KeyError, match="claim_id"):
        chapter.settle("D99", "proved", "because")
    with pytest.raises(ValueError, match="evidence"):
        chapter.settle("D3", "proved", "  ")
    chapter.settle("D3", "proved", "sympy")
    with pytest.raises(ValueError, match="already settled"):
        chapter.settle("D3", "proved", "again")


def test_build_ledger_merges_and_defaults_to_untested(tmp_path):
    a = claims.Chapter("a", page="notebooks/a")
    a.settle("D4", "proved", "sum of squares", our_value="min V = 0")
    a.save(tmp_path)
    ledger = claims.build_ledger(tmp_path)
    by_id = {row["id"]: row for row in ledger}
    assert by_id["D4"]["verdict"] == "proved" and by_id["D4"]["page"] == "notebooks/a"
    assert by_id["D5"]["verdict"] == "untested"
    assert by_id["L8"]["paper_value"] == claims.get("L8").paper_value
    counts = claims.verdict_counts(ledger)
    assert counts["proved"] == 1 and sum(counts.values()) == len(claims.CLAIMS)


def test_build_ledger_rejects_a_claim_settled_twice(tmp_path):
    for name in ("a", "b"):
        ch = claims.Chapter(name, page=f"notebooks/{name}")
        ch.settle("D4", "proved", "x")
        ch.save(tmp_path)
    with pytest.raises(ValueError, match="settled twice"):
        claims.build_ledger(tmp_path)


def test_ledger_markdown_links_evidence_to_its_page(tmp_path):
    ch = claims.Chapter("a", page="notebooks/02_decomposition")
    ch.settle("D3", "proved", "a | b")
    ch.save(tmp_path)
    table = claims.ledger_markdown(claims.build_ledger(tmp_path))
    assert "[a \\| b](02_decomposition.md)" in table
    assert table.count("\n") == len(claims.CLAIMS) + 1


def test_committed_claims_json_matches_the_verdict_files():
    """results/claims.json is what build_ledger makes of the committed verdict files."""
    committed = ROOT / "results" / "claims.json"
    if not committed.is_file():
        pytest.fail("results/claims.json is missing: build the book (the ledger page writes it)")
    on_disk = json.loads(committed.read_text(encoding="utf-8"))
    assert on_disk == claims.build_ledger(ROOT / "results" / "verdicts")
    for row in on_disk:
        assert {"id", "verdict", "evidence", "paper_value", "our_value"} <= set(row)
