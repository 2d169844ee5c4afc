"""ddcl_theory.ledger.reruns: reference reruns that are not the record, beside its words."""
from __future__ import annotations

import json
import shutil

import pytest

from ddcl_theory.ledger import reruns
from ddcl_theory.ledger.reference import reference_dir


def test_every_committed_rerun_names_its_code_and_sets_its_words_beside_the_records():
    rows = reruns.rerun_rows()
    assert rows and all(len(r) == len(reruns.HEADER) for r in rows)
    by_claim = {r[0]: r for r in rows}
    # the peer readouts rerun did not repeat D17's word, and says so in bold
    assert by_claim["D17"][1] == "reproduced" and by_claim["D17"][2] == "**not reproduced**"
    assert all(r[2] == r[1] for c, r in by_claim.items() if c != "D17")
    assert reruns.repeated_text(rows) == (f"{len(rows) - 1} of {len(rows)} words repeat the "
                                          "record's; not repeated: D17.")
    for chapter, runs in reruns.reruns().items():
        for run in runs:
            assert len(run["code"]) >= 7 and run["date"].startswith("20")
            # per-seed values are kept for claims the run decided, under their ids
            assert set(run.get("per_seed", {})) <= {v["id"] for v in run["verdicts"]}
            assert all(values for values in run.get("per_seed", {}).values())
    assert set(reruns.reruns()["peer_readouts"][0]["per_seed"]) == {"D17"}


def test_a_rerun_repeating_every_word_says_so_and_a_malformed_one_is_named(tmp_path):
    ref = tmp_path / "reference"
    (ref / "verdicts").mkdir(parents=True)
    (ref / reruns.RERUNS).mkdir()
    shutil.copy(reference_dir() / "verdicts" / "soft_vq.json", ref / "verdicts")
    shutil.copy(reference_dir() / reruns.RERUNS / "soft_vq.json", ref / reruns.RERUNS)
    rows = reruns.rerun_rows(ref)
    assert [r[0] for r in rows] == ["D11"] and reruns.repeated_text(rows) == (
        "1 of 1 words repeat the record's.")
    (ref / reruns.RERUNS / "soft_vq.json").write_text(json.dumps(
        {"chapter": "other", "runs": []}))
    with pytest.raises(ValueError, match="chapter must be 'soft_vq'"):
        reruns.reruns(ref)
    (ref / reruns.RERUNS / "soft_vq.json").write_text(json.dumps(
        {"chapter": "soft_vq", "runs": [{"code": "abc1234"}]}))
    with pytest.raises(ValueError, match=r"runs\[0\] lacks date, what, completed, verdicts"):
        reruns.reruns(ref)


def test_a_rerun_of_a_replaced_record_is_set_beside_the_words_it_reran(tmp_path):
    ref = tmp_path / "reference"
    (ref / "verdicts").mkdir(parents=True)
    (ref / reruns.RERUNS).mkdir()
    shutil.copy(reference_dir() / "verdicts" / "soft_vq.json", ref / "verdicts")
    record = json.loads((reference_dir() / reruns.RERUNS / "soft_vq.json").read_text())
    now = json.loads((ref / "verdicts" / "soft_vq.json").read_text())
    word = next(v["verdict"] for v in now if v["id"] == "D11")
    other = "inconclusive" if word != "inconclusive" else "reproduced"
    record["runs"][0]["reran"] = {"D11": other}
    (ref / reruns.RERUNS / "soft_vq.json").write_text(json.dumps(record))
    [row] = reruns.rerun_rows(ref)
    assert row[1] == other and row[2] == f"**{word}**"
    assert reruns.repeated_text([row]) == "0 of 1 words repeat the record's; not repeated: D11."
