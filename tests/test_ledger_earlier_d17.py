"""D17's superseded record and its rerun, kept beside the amended rule's run: their committed
per-seed values rebuild the figures the registered rule's note quotes."""
from __future__ import annotations

from pathlib import Path

from ddcl_theory.ledger import reruns, stats
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.earlier_runs import earlier_runs
from ddcl_theory.ledger.report import interval_text

SLOT = ("effective rank of the S attention maps / S, DDCL - Slot Attention (same seed and "
        "sequences), per sequence")


def _quoted(per_seed: dict) -> str:
    return interval_text(stats.bootstrap_seeds_items(per_seed[SLOT]))


def test_the_superseded_record_and_its_rerun_rebuild_the_rule_note_s_figures():
    [run] = earlier_runs("D17")
    assert run["seeds"] == list(range(2000, 2030)) and run["word"] == "reproduced"
    assert all(len(v) == 30 for v in run["per_seed"].values())
    [rerun] = reruns.reruns()["peer_readouts"]
    assert rerun["reran"] == {"D17": "reproduced"}
    note = rule_of("D17").note
    before, after = _quoted(run["per_seed"]), _quoted(rerun["per_seed"]["D17"])
    assert (before, after) == ("+0.337 [+0.330, +0.344]", "+0.024 [+0.012, +0.036]")
    assert f"from {before} (reproduced) to {after} (not reproduced)" in note


def test_the_exploratory_tuning_grids_rebuild_the_spread_the_amendment_quotes():
    """Of Slot Attention's 25 configurations, six and seven lie within one standard error of
    its best on the two exploratory seeds, with maps ranks / S from 0.09 to 0.46."""
    import json

    from ddcl_theory.experiments import peer_readouts as pr
    from ddcl_theory.ledger.reference import reference_dir

    grids = json.loads((reference_dir() / "exploratory" / "D17_tuning.json").read_text())
    counts, ranks = [], []
    for rows in grids["grids"].values():
        slot = {(r["lr"], r["factor"]): r for r in rows if r["readout"] == "slot"}
        assert len(slot) == 25
        pool = pr.equivalent({c: (r["validation_acc"], r["validation_loss"])
                              for c, r in slot.items()}, grids["held_out"])
        counts.append(len(pool))
        ranks += [slot[c]["maps_rank"] for c in pool]
    assert counts == [6, 7] and (round(min(ranks), 2), round(max(ranks), 2)) == (0.09, 0.46)
    assert "six and seven of Slot Attention's 25 configurations" in rule_of("D17").note
    assert "from 0.09 to 0.46 among them" in rule_of("D17").note
    # the chapter's history paragraph quotes the same grids: a fifth held out, six or seven
    chapter = (Path(__file__).parents[1] / "notebooks" / "peer_readouts.md").read_text()
    words = {6: "six", 7: "seven"}
    assert grids["held_out"] * 5 == 800
    assert " ".join(f"""fifth of 800 messages cannot tell apart {words[counts[0]]} or
{words[counts[1]]} of Slot Attention's configurations""".split()) in " ".join(chapter.split())


def test_the_record_s_tuning_table_rebuilds_its_picks_and_the_figures_its_evidence_quotes():
    """The confirmatory run's tuning, read from its run directory and committed beside the
    record: the picks follow from it, and it gives the whole-grid figures the evidence quotes."""
    import json

    from ddcl_theory.experiments import peer_readouts as pr
    from ddcl_theory.ledger.reference import read_reference, reference_dir

    table = json.loads((reference_dir() / "tuning" / "D17.json").read_text())
    picked = {}
    for kind, entry in table["readouts"].items():
        grid = {(r["lr"], r["factor"]): r for r in entry["grid"]}
        scores = {c: (r["validation_acc"], r["validation_loss"]) for c, r in grid.items()}
        ranks = {c: r["maps_rank"] for c, r in grid.items()}
        assert len(grid) == 25
        assert {c for c, r in grid.items() if r["equivalent"]} == set(
            pr.equivalent(scores, table["held_out"]))
        for sel in pr.SELECTIONS:
            assert list(pr.choose(scores, ranks, table["held_out"], sel)) == entry["picks"][sel]
        picked[kind] = (min(ranks.values()), ranks[tuple(entry["picks"]["most collapsed"])])
    [d17] = read_reference()["peer_readouts"]["verdicts"]
    assert (f"Over its whole grid DDCL's lowest tuning run reads {picked['ddcl'][0]:.3f}, the "
            f"peers' most collapsed equivalent tuning runs Slot Attention "
            f"{picked['slot'][1]:.3f}, Perceiver {picked['perceiver'][1]:.3f}") in d17["evidence"]
