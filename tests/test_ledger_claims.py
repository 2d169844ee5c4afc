"""The claims ledger: every claim id is data, verdicts are valid words, the export is consistent."""
from __future__ import annotations

import json
import re
import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddcl_theory.ledger import claims

ROOT = Path(__file__).resolve().parents[1]
# The claim ids of the brief (docs/claims.md of the project's shared folder), copied here so
# that no test reads a file outside the repository.
EXPECTED_IDS = [f"D{i}" for i in range(1, 18)] + [f"L{i}" for i in range(1, 12)] + ["X1", "X2"]


def test_registry_has_every_claim_id_once():
    ids = [c.id for c in claims.CLAIMS]
    assert ids == EXPECTED_IDS


def test_settle_rejects_unknown_verdict_and_claim(tmp_path):
    chapter = claims.Chapter("t")
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
    a = claims.Chapter("a")
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
        ch = claims.Chapter(name)
        ch.settle("D4", "proved", "x")
        ch.save(tmp_path)
    with pytest.raises(ValueError, match="settled twice"):
        claims.build_ledger(tmp_path)


def _parse_myst(text: str):
    """Doctree of MyST ``text`` (the book's syntax extensions; ref/doc as plain inline roles,
    {verdict} as the book's own role)."""
    from docutils.core import publish_doctree
    from myst_parser.parsers.docutils_ import Parser

    return publish_doctree(text, parser=Parser(), settings_overrides={
        "myst_enable_extensions": ["colon_fence", "dollarmath", "amsmath", "substitution"],
        "report_level": 5, "halt_level": 5, "warning_stream": False})


@pytest.fixture()
def book_roles():
    """The book's {verdict} role, and {ref}/{doc} as inline text, registered with docutils."""
    import sys

    from docutils import nodes
    from docutils.parsers.rst import roles

    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    try:
        import verdict_badges
    finally:
        sys.path.remove(str(ROOT / "book" / "_ext"))

    def xref(name, rawtext, text, lineno, inliner, options=None, content=None):
        title = re.sub(r"\s*<[^>]*>$", "", text) or text
        return [nodes.reference(rawtext, title, refuri=text, classes=[f"xref-{name}"])], []

    added = {"verdict": verdict_badges.verdict_role, "ref": xref, "doc": xref}
    for name, fn in added.items():
        roles.register_local_role(name, fn)
    yield
    for name in added:
        roles._roles.pop(name, None)


def _settled_ledger(tmp_path):
    ch = claims.Chapter("decomposition")
    ch.settle("D3", "proved", "a | b, $x$ and *y* stay text", our_value="err -> 0",
              paper_value="L_q = L_OLS + V")
    ch.settle("L7", "not reproduced", "ran it", our_value="1.0")
    ch.save(tmp_path)
    return claims.build_ledger(tmp_path)


def test_every_claim_has_a_short_text_for_the_table():
    for c in claims.CLAIMS:
        assert c.short.strip(), f"{c.id}: no short text"
        assert len(c.short) <= 60 and "\n" not in c.short, f"{c.id}: {c.short!r}"
        assert c.short.count("$") % 2 == 0, f"{c.id}: unbalanced $ in {c.short!r}"


MARKDOWN_TRAPS = ["a | b", "L_q = L_OLS + V", "$x$ *y* [CLS](x) {{ sub }} <b>", "# head",
                  "1. item", "2) item", "% comment", "(label)=", ":::{note}", "- x", "+++", "> q",
                  "a\\b", "&amp; &#33;", "`code`", "{ref}`x`", "1e-12 < 3 << 4", "x  y\nz",
                  "--- ", "==", "~~no~~", "eps = eta_theta/eta_P << 1", "***"]


@pytest.mark.parametrize("text", MARKDOWN_TRAPS)
def test_markdown_text_renders_as_exactly_the_text(text):
    assert _parse_myst(claims.markdown_text(text)).astext() == " ".join(text.split())


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=string.ascii_letters[:6] + string.digits[:3] + string.punctuation
               + " \n\tαé→–", max_size=40))
def test_markdown_text_renders_as_exactly_the_text_for_any_text(text):
    assert _parse_myst(claims.markdown_text(text)).astext() == " ".join(text.split())


def test_ledger_table_has_one_row_per_claim_with_a_badge_and_both_values(tmp_path, book_roles):
    from docutils import nodes

    ledger = _settled_ledger(tmp_path)
    doc = _parse_myst(claims.ledger_markdown(ledger))
    [table] = list(doc.findall(nodes.table))
    assert "ddcl-ledger" in table["classes"] and claims.LEDGER_TABLE_LABEL in table["names"]
    rows = list(table.findall(nodes.row))
    assert len(rows) == len(claims.CLAIMS) + 1
    assert [e.astext() for e in rows[0].findall(nodes.entry)] == ["id", "claim", "verdict",
                                                                    "paper", "ours"]
    for row, data in zip(rows[1:], ledger):
        cells = list(row.findall(nodes.entry))
        assert len(cells) == 5
        [link] = list(cells[0].findall(nodes.reference))
        assert link.astext() == data["id"] and link["refuri"].endswith(
            f"<{claims.ledger_anchor(data['id'])}>")
        [badge] = [n for n in cells[2].findall(nodes.inline) if "ddcl-verdict" in n["classes"]]
        assert badge.astext() == data["verdict"]
        assert cells[3].astext() == (data["paper_value"] or "").replace("->", "→")
        assert cells[4].astext() == (data["our_value"] or "").replace("->", "→")
    d3 = rows[1 + [r["id"] for r in ledger].index("D3")]
    assert [c.astext() for c in d3.findall(nodes.entry)][3:] == ["L_q = L_OLS + V", "err → 0"]


def test_ledger_entries_hold_statement_evidence_and_chapter_link(tmp_path, book_roles):
    from docutils import nodes

    ledger = _settled_ledger(tmp_path)
    text = claims.ledger_entries_markdown(ledger)
    anchors = re.findall(r"^\(([^)]+)\)=$", text, flags=re.M)
    assert anchors == [claims.ledger_anchor(c.id) for c in claims.CLAIMS]
    doc = _parse_myst(text)
    entries = [n for n in doc.findall(nodes.container) if "ddcl-ledger-entry" in n["classes"]]
    assert len(entries) == len(claims.CLAIMS)
    by_id = dict(zip([r["id"] for r in ledger], entries))
    d3 = " ".join(by_id["D3"].astext().split())
    assert claims.get("D3").statement in d3 and "a | b, $x$ and *y* stay text" in d3
    links = [n["refuri"] for n in by_id["D3"].findall(nodes.reference)]
    assert "/notebooks/decomposition" in links
    assert f"Back to the table <{claims.LEDGER_TABLE_LABEL}>" in links
    assert not any("notebooks" in n["refuri"] for n in by_id["D5"].findall(nodes.reference))
    assert "Not settled by any chapter yet" in by_id["D5"].astext()


def test_ledger_anchors_are_distinct_labels():
    anchors = [claims.ledger_anchor(c.id) for c in claims.CLAIMS]
    assert len(set(anchors)) == len(anchors) and claims.LEDGER_TABLE_LABEL not in anchors
    with pytest.raises(KeyError, match="claim_id"):
        claims.ledger_anchor("D99")


def test_ledger_markdown_rejects_an_unknown_verdict(tmp_path):
    ledger = claims.build_ledger(tmp_path)
    ledger[0]["verdict"] = "maybe"
    with pytest.raises(ValueError, match="verdict"):
        claims.ledger_markdown(ledger)
    with pytest.raises(ValueError, match="verdict"):
        claims.ledger_entries_markdown(ledger)


def test_committed_claims_json_matches_the_verdict_files():
    """results/claims.json is what build_ledger makes of the committed verdict files."""
    committed = ROOT / "results" / "claims.json"
    if not committed.is_file():
        pytest.fail("results/claims.json is missing: build the book (the ledger page writes it)")
    on_disk = json.loads(committed.read_text(encoding="utf-8"))
    assert on_disk == claims.build_ledger(ROOT / "results" / "verdicts")
    for row in on_disk:
        assert {"id", "verdict", "evidence", "paper_value", "our_value"} <= set(row)


def test_every_empirical_claim_has_a_rule_and_the_registered_edition_comes_first(monkeypatch):
    assert all(claims.rule_of(c) is not None for c in claims.EMPIRICAL if c not in ("D10", "D12"))
    assert claims.rule_of("D3") is None
    assert claims.EMPIRICAL_FIELDS == ("rule", "n_seeds", "interval", "scale", "trend", "phase",
                                       "tests")
    from ddcl_theory.ledger import rules
    from ddcl_theory.ledger.design import Rule, Test
    second = Rule((Test("x", ">"),), n_seeds=10, scales="s")
    monkeypatch.setitem(rules.RULES, "D9", second)
    assert claims.rule_of("D9") is second


def test_record_keeps_tests_gates_and_phase_and_save_writes_the_per_seed_values(tmp_path):
    import numpy as np
    from ddcl_theory.ledger.design import Gate, Rule, Test
    from ddcl_theory.ledger.verdict import Verdict
    rule = Rule((Test("gain", ">", sesoi=0.1, why="half the paper's"),), n_seeds=5, scales="s")
    values = [0.2, 0.25, 0.3, 0.22, 0.28]
    res = rule.evaluate([np.array(values)])
    gate = Gate("converged", True, "5 of 5")
    chapter = claims.Chapter("timescales")
    chapter.record(Verdict("D9", rule.word(res, [gate]), "e", tests=tuple(res), gates=(gate,),
                           per_seed={"gain": values}))
    path = chapter.save(tmp_path / "verdicts")
    row = json.loads(path.read_text())[0]
    assert row["verdict"] == "reproduced" and row["decision"]["phase"] == "exploratory"
    assert row["decision"]["tests"][0]["interval"] == res[0].interval
    assert row["decision"]["gates"] == [gate.to_dict()]
    assert json.loads((tmp_path / "seeds" / "D9.json").read_text()) == {"gain": values}
    assert claims.phase_of("reference") == "confirmatory"
    with pytest.raises(ValueError, match="profile_name"):
        claims.phase_of("gpu")


def test_ledger_table_with_reference_and_paper_columns_parses(tmp_path, book_roles):
    from docutils import nodes

    results = tmp_path / "results"
    for folder, word in ((results / "verdicts", "qualified"),
                         (results / "reference" / "verdicts", "reproduced"),
                         (tmp_path / "paper", "inconclusive")):
        ch = claims.Chapter("a")
        ch.settle("D13", word, "ran", our_value="0.8 -> 0.9")
        if folder.parent.name != "reference":
            ch.settle("D3", "proved", "sympy")
        ch.save(folder)
    ledger = claims.build_ledger(results / "verdicts", paper_directory=tmp_path / "paper")
    doc = _parse_myst(claims.ledger_markdown(ledger))
    [table] = list(doc.findall(nodes.table))
    rows = list(table.findall(nodes.row))
    assert [e.astext() for e in rows[0].findall(nodes.entry)] == [
        "id", "claim", "verdict", "paper", "ours (cpu)", "reference", "ours at paper scale"]
    assert all(len(list(r.findall(nodes.entry))) == 7 for r in rows)
    d13 = [c.astext() for c in rows[1 + [r["id"] for r in ledger].index("D13")].findall(
        nodes.entry)]
    assert d13[2] == "inconclusive (paper)" and d13[4] == "qualified 0.8 → 0.9"
    assert d13[5] == "reproduced 0.8 → 0.9" and d13[6] == "inconclusive 0.8 → 0.9"
    entries = _parse_myst(claims.ledger_entries_markdown(ledger)).astext()
    assert "Evidence of record (paper run)" in entries and "Rule." in entries
    assert "Reference run: reproduced" in entries and "cpu run (exploratory): qualified" in entries


def test_chapter_summary_links_each_claim_to_its_section_with_word_and_value():
    chapter = claims.Chapter("decomposition")
    with pytest.raises(ValueError, match="no verdict recorded yet"):
        chapter.summary_markdown()
    chapter.settle("D4", "proved", "symbolic", our_value="V >= 0")
    chapter.settle("D3", "confirmed", "checks")
    text = chapter.summary_markdown()
    lines = text.splitlines()
    assert lines[0] == ":::{admonition} What this chapter finds" and lines[-1] == ":::"
    d3, d4 = (i for i, line in enumerate(lines) if line.startswith("- {ref}"))
    assert "{ref}`D3 <decomposition-d3>`" in lines[d3] and "{verdict}`confirmed`" in lines[d3]
    assert lines[d4].endswith(r": V \>= 0") and chapter.label("D4") == "decomposition-d4"
    with pytest.raises(KeyError, match="unknown claim"):
        chapter.label("D99")


def test_a_row_names_the_seeds_of_the_rule_it_was_decided_under():
    now = claims.rule_of("L6")
    row = {"id": "L6", "n_seeds": 22, "rule": "22 seeds (an earlier rule). Tests: ..."}
    assert "22 seed(s) (the rule asks 22)" in claims._decided_on(row)
    # a row without its rule's text falls back on the rule registered now
    assert f"(the rule asks {now.n_seeds})" in claims._decided_on({"id": "L6", "n_seeds": 22})
    assert now.text.startswith(f"{now.n_seeds} seeds")
