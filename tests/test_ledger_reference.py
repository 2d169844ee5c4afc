"""The reference results: provenance with source digests, the reader, the stale check, and the
ledger's columns and verdict choice, on small fake reference files (no reference run here)."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import torch

from ddcl_theory.ledger import claims, reference, rules

CHAPTER = """---
jupytext: {}
---
# A chapter

Prose that says from the first epoch, import nothing.

```{code-cell} ipython3
%matplotlib inline
from ddcl_theory.experiments import foo as exp
from ddcl_theory.runtime import profile
```
"""


def _fake_checkout(root: Path) -> Path:
    """A checkout with notebooks/chap.md -> experiments.foo -> layers.bar (+ runtime, ignored)."""
    pkg = root / "ddcl_theory"
    for sub in ("experiments", "layers", "runtime"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "experiments" / "foo.py").write_text(
        "from ddcl_theory.layers import bar\nfrom ddcl_theory.runtime import io, training\n")
    (pkg / "runtime" / "training.py").write_text("from ddcl_theory.runtime import rng\n")
    (pkg / "runtime" / "rng.py").write_text("SEED = 0\n")
    (pkg / "layers" / "bar.py").write_text("X = 1\n")
    (root / "notebooks").mkdir()
    source = root / "notebooks" / "chap.md"
    source.write_text(CHAPTER)
    return source


def _reference_run(root: Path, source: Path, rows: list[dict]) -> Path:
    folder = root / "results" / "reference"
    (folder / "verdicts").mkdir(parents=True)
    (folder / "verdicts" / "chap.json").write_text(json.dumps(rows))
    record = {"git_commit": "abc", "profile": "reference", "torch": "2.x", "numpy": "1.x"}
    reference.write_provenance(source, record, 12.34, folder=folder / "provenance", root=root)
    return folder


def test_chapter_modules_follow_imports_through_the_science_only(tmp_path):
    source = _fake_checkout(tmp_path)
    mods = reference.chapter_modules(source, tmp_path)
    assert "ddcl_theory.experiments.foo" in mods and "ddcl_theory.layers.bar" in mods
    assert not any(m.startswith("ddcl_theory.runtime") for m in mods)


def test_provenance_carries_commit_digests_versions_machine_and_time(tmp_path):
    source = _fake_checkout(tmp_path)
    folder = _reference_run(tmp_path, source, [])
    prov = json.loads((folder / "provenance" / "chap.json").read_text())
    assert prov["chapter"] == "chap" and prov["git_commit"] == "abc" and prov["seconds"] == 12.3
    assert prov["torch"] == "2.x" and prov["machine"]["machine"] and prov["machine"]["cpus"] >= 1
    assert prov["machine"]["kernels"] == torch.backends.cpu.get_cpu_capability()
    assert set(prov["digests"]) >= {"chapter", "ddcl_theory.experiments.foo",
                                    "ddcl_theory.layers.bar"}
    assert all(re.fullmatch(r"[0-9a-f]{16}", d) for d in prov["digests"].values())


def test_reader_returns_verdicts_and_provenance(tmp_path):
    source = _fake_checkout(tmp_path)
    folder = _reference_run(tmp_path, source, [{"id": "D9", "verdict": "inconclusive"}])
    (folder / "verdicts" / "other.json").write_text("[]")
    found = reference.read_reference(folder)
    assert found["chap"]["verdicts"][0]["id"] == "D9"
    assert found["chap"]["provenance"]["digests"]["chapter"]
    assert found["other"]["provenance"] is None
    assert reference.read_reference(tmp_path / "nowhere") == {}


def test_stale_check_reports_changed_experiment_source(tmp_path, capsys):
    source = _fake_checkout(tmp_path)
    folder = _reference_run(tmp_path, source, [])
    assert reference.stale(folder, tmp_path) == []
    (tmp_path / "ddcl_theory" / "runtime" / "io.py").write_text("# storage only\n")
    assert reference.stale(folder, tmp_path) == []            # runtime is not the experiment
    (tmp_path / "ddcl_theory" / "layers" / "bar.py").write_text("X = 2\n")
    problems = reference.stale(folder, tmp_path)
    assert len(problems) == 1 and "ddcl_theory.layers.bar" in problems[0]
    assert "stale" in problems[0] and "abc" in problems[0]
    (folder / "provenance" / "chap.json").unlink()
    assert "no provenance" in reference.stale(folder, tmp_path)[0]
    assert "make reference NAMES=chap)" in reference.stale(folder, tmp_path)[0]


def test_check_command_fails_on_stale_results(tmp_path, monkeypatch, capsys):
    source = _fake_checkout(tmp_path)
    folder = _reference_run(tmp_path, source, [])
    monkeypatch.setattr(reference, "repo_root", lambda: tmp_path)
    assert reference.main(["check", "--dir", str(folder)]) == 0
    assert "all current" in capsys.readouterr().out
    source.write_text(CHAPTER + "\nmore\n")
    assert reference.main(["check", "--dir", str(folder)]) == 1
    assert "chapter" in capsys.readouterr().out
    assert reference.main(["check", "--dir", str(tmp_path / "none")]) == 0


def _settle(folder: Path, name: str, words: dict[str, str], decision: dict | None = None):
    ch = claims.Chapter(name)
    for cid, word in words.items():
        ch.settle(cid, word, f"{name} evidence for {cid}", our_value=f"{name} value")
        ch.settled[-1].decision = decision
    ch.save(folder)


def test_ledger_without_larger_scales_has_only_cpu_rows(tmp_path):
    _settle(tmp_path / "results" / "verdicts", "a", {"D9": "qualified", "D3": "proved"},
            {"rule": "old rule", "n_seeds": 3})
    ledger = claims.build_ledger(tmp_path / "results" / "verdicts")
    by_id = {r["id"]: r for r in ledger}
    assert not claims.has_reference_profile(ledger) and "verdict_from" not in by_id["D9"]
    assert by_id["D9"]["rule"] == claims.rule_of("D9").text
    assert by_id["D9"]["recorded_rule"] == "old rule" and by_id["D9"]["n_seeds"] == 3
    assert by_id["D9"]["interval"] is None and by_id["D9"]["trend"] is None
    assert "rule" not in by_id["D3"]                      # proofs carry no empirical fields
    assert "  - ours" in claims.ledger_markdown(ledger).splitlines()


def test_ledger_takes_the_verdict_from_the_largest_scale_that_ran(tmp_path):
    results = tmp_path / "results"
    _settle(results / "verdicts", "a", {"D9": "qualified", "D11": "not reproduced",
                                        "L6": "reproduced"})
    decision = {"rule": claims.rule_of("D9").text, "n_seeds": 10, "interval": [0.1, 0.4],
                "scale": "2000 steps", "trend": {"500 steps": 0.05, "2000 steps": 0.25}}
    _settle(results / "reference" / "verdicts", "a", {"D9": "reproduced",
                                                      "D11": "inconclusive"}, decision)
    _settle(tmp_path / "paper", "a", {"D11": "reproduced"})
    ledger = claims.build_ledger(results / "verdicts", paper_directory=tmp_path / "paper")
    by_id = {r["id"]: r for r in ledger}
    assert claims.has_reference_profile(ledger) and claims.has_paper_profile(ledger)
    d9, d11, l6 = by_id["D9"], by_id["D11"], by_id["L6"]
    assert (d9["verdict"], d9["verdict_from"], d9["cpu_verdict"]) == (
        "reproduced", "reference", "qualified")
    assert (d9["n_seeds"], d9["interval"], d9["scale"]) == (10, [0.1, 0.4], "2000 steps")
    assert "recorded_rule" not in d9
    assert (d11["verdict"], d11["verdict_from"]) == ("reproduced", "paper")
    assert d11["reference_profile"]["verdict"] == "inconclusive"
    assert (l6["verdict"], l6["verdict_from"], l6["reference_profile"]) == (
        "reproduced", "cpu", None)
    table = claims.ledger_markdown(ledger)
    head = table.split("* - {ref}")[0]
    assert "  - ours (cpu)" in head and "  - reference" in head and "ours at paper scale" in head
    row = table.split("<ledger-d9>`")[1].split("* - ")[0]
    assert "{verdict}`reproduced` (reference)" in row and "{verdict}`qualified` a value" in row
    entries = claims.ledger_entries_markdown(ledger)
    d9_entry = entries.split("(ledger-d9)=")[1].split("(ledger-d10)=")[0]
    assert "**Rule.**" in d9_entry and "[0.1, 0.4]" in d9_entry
    assert "**Evidence of record (reference run).**" in d9_entry
    assert "**cpu run (exploratory):** {verdict}`qualified` a value" in d9_entry
    assert d9_entry.count("a value") == 1 + d9_entry.count("**Ours:**")   # each said once
    asks = claims.rule_of("D9").n_seeds
    assert "500 steps: 0.05" in d9_entry and f"10 seed(s) (the rule asks {asks})" in d9_entry


def test_reference_column_can_be_switched_off(tmp_path, monkeypatch):
    results = tmp_path / "results"
    _settle(results / "verdicts", "a", {"D9": "qualified"})
    _settle(results / "reference" / "verdicts", "a", {"D9": "reproduced"})
    monkeypatch.setenv(claims.REFERENCE_LEDGER_ENV, "0")
    ledger = claims.build_ledger(results / "verdicts")
    assert not claims.has_reference_profile(ledger) and ledger[8]["verdict"] == "qualified"


def test_results_check_sets_the_reference_folder_aside():
    from ddcl_theory.ledger import results_check
    assert results_check._set_aside("results/reference/verdicts/a.json")
    assert results_check._set_aside("results/paper/verdicts/a.json")
    assert results_check._set_aside("results/first_edition/verdicts/a.json")
    assert results_check._set_aside("results/runbook/flops.json")
    assert results_check._set_aside("results/seeds/D9.json")
    assert results_check._set_aside("results/settings/a.json")
    assert not results_check._set_aside("results/verdicts/a.json")
    assert not results_check._set_aside("results/claims.json")


@pytest.mark.parametrize("cid", sorted(rules.RULES))
def test_every_empirical_claim_has_a_rule_with_enough_seeds(cid):
    rule = claims.rule_of(cid)
    assert rule.n_seeds >= 5 and rule.tests and rule.scales
    assert "95%" in rule.text and f"{rule.n_seeds} seeds" in rule.text


def test_summary_rows_and_markdown(tmp_path):
    source = _fake_checkout(tmp_path)
    folder = _reference_run(tmp_path, source, [{"id": "D13", "verdict": "reproduced"}])
    [row] = reference.summary(folder, tmp_path)
    assert (row["chapter"], row["claims"], row["commit"], row["seconds"], row["stale"]) == (
        "chap", "D13", "abc", 12.3, False)
    assert row["machine"].endswith(f" CPUs, {torch.backends.cpu.get_cpu_capability()}")
    text = reference.summary_markdown([row])
    assert "| chap | D13 | `abc` | – | 0.2 | 2.x |" in text and "| yes |" in text
    text = reference.summary_markdown([dict(row, cpu_seconds=90.0)])
    assert "| chap | D13 | `abc` | 1.5 | 0.2 | 2.x |" in text
    assert "Total of the reference run: 2 CPU minutes (0.0 h), 0 wall minutes." in text
    # two one-core chapters of 60 and 90 CPU minutes share the two cores: 90 minutes
    rows = [dict(row, chapter="a", seconds=7200.0, cpu_seconds=3600.0),
            dict(row, chapter="b", seconds=5400.0, cpu_seconds=5400.0)]
    assert ("Side by side on 2 cores (`make reference`), each chapter on the cores it keeps "
            "busy: about 90 wall minutes (1.5 h), projected from these rows (the chapters "
            "without a reference run, which settle no empirical claim, not counted).") in \
        reference.summary_markdown(rows)
    # a chapter whose settings record two workers keeps both cores for its recorded wall
    # time: 120 + 90 minutes
    rows[0]["settings"] = {"Study": {"workers": 2, "threads": 1}}
    rows[1]["stale"] = True
    assert ("about 210 wall minutes (3.5 h), projected from these rows (the chapters without a "
            "reference run, which settle no empirical claim, not counted), some of them "
            "stale.") in reference.summary_markdown(rows)
    (tmp_path / "ddcl_theory" / "layers" / "bar.py").write_text("X = 3\n")
    assert reference.summary(folder, tmp_path)[0]["stale"]
    assert "No reference run" in reference.summary_markdown([])


def _rerun(folder: Path, source: Path, root: Path, commit: str, code: str) -> dict:
    record = {"git_commit": commit, "code_sha256": code, "cpu_seconds": 4.0}
    reference.write_provenance(source, record, 5.0, folder=folder / "provenance", root=root)
    return json.loads((folder / "provenance" / "chap.json").read_text())


def test_a_rerun_over_an_earlier_runs_units_counts_that_runs_time(tmp_path):
    source = _fake_checkout(tmp_path)
    folder = tmp_path / "results" / "reference"
    (folder / "verdicts").mkdir(parents=True)
    (folder / "verdicts" / "chap.json").write_text(json.dumps([{"id": "L9"}]))
    first = {"git_commit": "c1", "code_sha256": "k", "cpu_seconds": 2800.0}
    reference.write_provenance(source, first, 1500.0, folder=folder / "provenance", root=tmp_path)
    # no run directory of c1 here: a rerun computed everything itself
    assert "units_from" not in _rerun(folder, source, tmp_path, "c2", "k")
    reference.write_provenance(source, first, 1500.0, folder=folder / "provenance", root=tmp_path)
    made = folder / "runs" / "exp-1"
    made.mkdir(parents=True)
    (made / "provenance.json").write_text(json.dumps({"git_commit": "c1", "code_sha256": "k"}))
    assert "units_from" not in _rerun(folder, source, tmp_path, "c2", "other code")
    reference.write_provenance(source, first, 1500.0, folder=folder / "provenance", root=tmp_path)
    prov = _rerun(folder, source, tmp_path, "c2", "k")
    assert prov["units_from"]["git_commit"] == "c1" and prov["units_from"]["seconds"] == 1500.0
    assert _rerun(folder, source, tmp_path, "c3", "k")["units_from"]["git_commit"] == "c1"
    [row] = reference.summary(folder, tmp_path)
    assert (row["commit"], row["units_commit"]) == ("c3", "c1")
    assert (row["seconds"], row["cpu_seconds"]) == (1505.0, 2804.0)
    assert "chap (units at `c1`)" in reference.summary_markdown([row])


def test_reference_dir_is_the_committed_one_unless_named(tmp_path, monkeypatch):
    from ddcl_theory.runtime import paths
    monkeypatch.delenv(reference.REFERENCE_ENV, raising=False)
    monkeypatch.setenv(paths.RESULTS_ENV, str(tmp_path))       # CI's scratch folder for verdicts
    assert reference.reference_dir() == paths.repo_root() / "results" / "reference"
    monkeypatch.setenv(reference.REFERENCE_ENV, str(tmp_path / "ref"))
    assert reference.reference_dir() == tmp_path / "ref"
    assert reference.reference_dir(tmp_path / "r") == tmp_path / "r" / "reference"


def test_describe_committed_shows_word_interval_scale_and_trend(tmp_path):
    import json
    from ddcl_theory.ledger.reference import describe_committed
    (tmp_path / "verdicts").mkdir()
    (tmp_path / "verdicts" / "demo.json").write_text(json.dumps([{
        "id": "D99", "verdict": "inconclusive", "evidence": "a straddling interval",
        "decision": {"n_seeds": 5, "interval": [-0.01, 0.02], "scale": "300 steps",
        "trend": {"100 steps": 0.0, "300 steps": 0.005}}}]))
    (tmp_path / "provenance").mkdir()
    (tmp_path / "provenance" / "demo.json").write_text(json.dumps(
        {"chapter": "demo", "git_commit": "0123456789abcdef", "seconds": 4321.0,
         "hostname": "box-17"}))
    text = describe_committed("demo", tmp_path, width=40)
    flat = " ".join(text.split())
    assert "D99: inconclusive" in text and "n = 5" in flat and "[-0.01, +0.02]" in flat
    assert "at 300 steps" in flat and "300 steps" in flat.split("trend:")[1]
    assert "0123456789ab" in text and "4321" not in text and "box-17" not in text
    assert max(map(len, text.splitlines())) <= 40
    assert "No reference run" in describe_committed("other", tmp_path)


def test_describe_committed_names_the_tests_that_clear_the_margin_but_not_the_sesoi(tmp_path):
    import json
    from ddcl_theory.ledger.reference import describe_committed

    def test(name, side, interval, word):
        return {"statistic": name, "side": side, "margin": 0.0,
                "sesoi": 0.05 if side == ">" else -0.05, "interval": interval, "word": word}
    (tmp_path / "verdicts").mkdir()
    (tmp_path / "verdicts" / "demo.json").write_text(json.dumps([{
        "id": "D99", "verdict": "reproduced", "evidence": "two tests", "decision": {
            "tests": [test("gain a", ">", [0.06, 0.09], "reproduced"),
                      test("gain b", ">", [0.005, 0.063], "reproduced"),
                      test("drop c", "<", [-0.2, -0.01], "reproduced"),
                      test("drop d", "<", [-0.2, -0.06], "reproduced"),
                      test("gain e", ">", [-0.01, 0.03], "inconclusive")]}}]))
    (tmp_path / "seeds").mkdir()
    (tmp_path / "seeds" / "D99.json").write_text(json.dumps(
        {"gain b": [0.19, 0.0, -0.01, 0.02, 0.02]}))
    flat = " ".join(describe_committed("demo", tmp_path).split())
    assert ("short of the SESOI: gain b: [+0.005, +0.063] clears the margin 0 but not the "
            "SESOI +0.05" in flat)
    # its seeds: two on the margin or below it, the median, the mean without the best seed
    assert ("per seed: 2 of 5 on the margin or on its other side, median +0.02, mean +0.044, "
            "+0.0075 without its most favourable seed" in flat)
    assert "drop c: [-0.2, -0.01] clears the margin 0 but not the SESOI -0.05; the effect is "\
           "shown, that it is as large as the SESOI is not " in flat + " "
    assert "short of the SESOI: drop c: [-0.2, -0.01]" in flat
    assert flat.count("short of the SESOI") == 2


def test_a_chapters_digests_cover_its_decision_but_not_the_ledger_page_code():
    from ddcl_theory.runtime.paths import repo_root
    mods = reference.chapter_modules(repo_root() / "notebooks" / "peer_readouts.md")
    assert "ddcl_theory.ledger.decisions.peer_readouts" in mods      # it decides the verdict
    assert "ddcl_theory.ledger.stats" in mods                        # and its intervals
    assert {"ddcl_theory.ledger.design", "ddcl_theory.ledger.verdict"} <= set(mods)  # its rule
    assert "ddcl_theory.experiments.peer_readouts.study" in mods
    assert not {"ddcl_theory.ledger.claims", "ddcl_theory.ledger.report"} & set(mods)


def test_a_tolerance_declaration_leaves_the_chapter_digest_and_code_or_prose_change_it(tmp_path):
    cell = ("```{{code-cell}} ipython3\n{decl}x = train()\nprint(x)\n```\n")
    chapter = tmp_path / "chap.md"

    def digest(decl: str, prose: str = "Text.\n") -> str:
        chapter.write_text(prose + cell.format(decl=decl))
        return reference.chapter_digest(chapter)

    plain = digest("")
    assert digest("# nbval-tolerance: abs=0.05 -- accuracies\n") == plain
    assert digest("# nbval-tolerance: abs=0.05 count_abs=2 -- accuracies;\n"
                  "# counts of 9 runs that met a stop rule\n") == plain
    assert digest("# nbval-tolerance: abs=0.05 -- r\n# a comment\n") == plain
    assert digest("# a comment, not a declaration\n") != plain
    assert digest("", prose="Other text.\n") != plain
    chapter.write_text("Text.\n" + cell.format(decl="").replace("train()", "train(lr=10)"))
    assert reference.chapter_digest(chapter) != plain


def _git(root: Path, *args: str) -> str:
    import subprocess
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], capture_output=True, text=True, check=True).stdout.strip()


def test_grown_coverage_is_added_only_for_modules_unchanged_since_the_run(tmp_path, monkeypatch):
    source = _fake_checkout(tmp_path)
    ledger = tmp_path / "ddcl_theory" / "ledger"
    ledger.mkdir()
    (ledger / "__init__.py").write_text("")
    (ledger / "design.py").write_text("WORDS = 3\n")
    (tmp_path / "ddcl_theory" / "experiments" / "foo.py").write_text(
        "from ddcl_theory.layers import bar\nfrom ddcl_theory.ledger import design\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "run")
    run_commit = _git(tmp_path, "rev-parse", "HEAD")
    narrow = tuple(d for d in reference.DECIDING if d != "ledger.design")
    monkeypatch.setattr(reference, "DECIDING", narrow)          # the coverage at the run
    folder = _reference_run(tmp_path, source, [{"id": "D1", "verdict": "proved"}])
    prov_path = folder / "provenance" / "chap.json"
    prov = json.loads(prov_path.read_text())
    prov["git_commit"], prov["git_dirty"] = run_commit, False
    prov_path.write_text(json.dumps(prov))
    monkeypatch.undo()                                          # the coverage grows
    assert any("ddcl_theory.ledger.design" in p for p in reference.stale(folder, tmp_path))

    _git(tmp_path, "commit", "-q", "--allow-empty", "-m", "later")
    lines = reference.extend_digests(folder, tmp_path)
    assert lines == [f"reference/chap: added ddcl_theory.ledger.design (unchanged since "
                     f"{run_commit[:12]})"]
    assert reference.stale(folder, tmp_path) == []
    prov = json.loads(prov_path.read_text())
    assert set(prov["digests_added"]) == {"ddcl_theory.ledger.design"}
    assert reference.extend_digests(folder, tmp_path) == []     # nothing more to add

    # a module changed after the run is not vouched for
    monkeypatch.setattr(reference, "DECIDING", narrow)
    folder.joinpath("provenance", "chap.json").unlink()
    reference.write_provenance(source, {"git_commit": run_commit, "git_dirty": False}, 1.0,
                               folder=folder / "provenance", root=tmp_path)
    monkeypatch.undo()
    (ledger / "design.py").write_text("WORDS = 4\n")
    assert "changed since" in reference.extend_digests(folder, tmp_path)[0]   # in the checkout
    _git(tmp_path, "commit", "-qam", "a new word")
    assert "changed since" in reference.extend_digests(folder, tmp_path)[0]   # in a commit
    # and a result whose recorded code moved is stale, not extended
    (tmp_path / "ddcl_theory" / "layers" / "bar.py").write_text("X = 2\n")
    assert "not extended, stale in ddcl_theory.layers.bar" in \
        reference.extend_digests(folder, tmp_path)[0]


def test_grown_coverage_is_not_vouched_for_a_dirty_run_or_an_untracked_module(tmp_path,
                                                                              monkeypatch):
    source = _fake_checkout(tmp_path)
    ledger = tmp_path / "ddcl_theory" / "ledger"
    ledger.mkdir()
    (ledger / "__init__.py").write_text("")
    (tmp_path / "ddcl_theory" / "experiments" / "foo.py").write_text(
        "from ddcl_theory.layers import bar\nfrom ddcl_theory.ledger import design\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "run")                    # design.py not committed
    commit = _git(tmp_path, "rev-parse", "HEAD")
    (ledger / "design.py").write_text("WORDS = 3\n")          # untracked at the run and now
    narrow = tuple(d for d in reference.DECIDING if d != "ledger.design")

    def provenance(dirty: bool) -> Path:
        monkeypatch.setattr(reference, "DECIDING", narrow)
        folder = tmp_path / "results" / "reference"
        if not (folder / "verdicts").is_dir():
            (folder / "verdicts").mkdir(parents=True)
            (folder / "verdicts" / "chap.json").write_text(json.dumps([]))
        reference.write_provenance(source, {"git_commit": commit, "git_dirty": dirty}, 1.0,
                                   folder=folder / "provenance", root=tmp_path)
        monkeypatch.undo()
        return folder

    folder = provenance(dirty=False)
    assert "changed since" in reference.extend_digests(folder, tmp_path)[0]
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "design tracked now")
    folder = provenance(dirty=True)
    assert "not tied to a clean commit" in reference.extend_digests(folder, tmp_path)[0]


def test_seed_spread_reads_either_side_of_the_margin():
    from ddcl_theory.ledger.reference import seed_spread
    assert seed_spread([-0.3, -0.1, 0.05], "<", 0.0) == (
        "per seed: 1 of 3 on the margin or on its other side, median -0.1, mean -0.117, "
        "-0.025 without its most favourable seed")
    with pytest.raises(ValueError, match="side, values"):
        seed_spread([0.1], ">", 0.0)


def test_provenance_records_the_runtime_a_chapter_runs_and_the_check_names_its_drift(
        tmp_path, monkeypatch, capsys):
    """training (imported by the experiment) and rng (by training) are recorded; io stores
    results and is left out. A change there is drift, reported beside the stale check."""
    source = _fake_checkout(tmp_path)
    folder = _reference_run(tmp_path, source, [{"id": "D13", "verdict": "reproduced"}])
    prov = json.loads((folder / "provenance" / "chap.json").read_text())
    assert set(prov["runtime_digests"]) == {"ddcl_theory.runtime.training",
                                            "ddcl_theory.runtime.rng"}
    assert reference.runtime_drift(folder, tmp_path) == {"chap": []}
    (tmp_path / "ddcl_theory" / "runtime" / "io.py").write_text("# storage only\n")
    assert reference.runtime_drift(folder, tmp_path) == {"chap": []}
    (tmp_path / "ddcl_theory" / "runtime" / "rng.py").write_text("SEED = 1\n")
    assert reference.runtime_drift(folder, tmp_path) == {"chap": ["ddcl_theory.runtime.rng"]}
    assert reference.stale(folder, tmp_path) == []            # drift is not staleness
    [row] = reference.summary(folder, tmp_path)
    assert row["runtime_changed"] == ["ddcl_theory.runtime.rng"] and not row["stale"]
    text = reference.summary_markdown([row])
    assert "| yes | rng |" in text and "changed since the run, in 1 of 1 chapters" in text
    monkeypatch.setattr(reference, "repo_root", lambda: tmp_path)
    assert reference.main(["check", "--dir", str(folder)]) == 0
    assert ("note: reference/chap: runtime changed since its run: ddcl_theory.runtime.rng "
            "(not stale; rerun to know whether its values repeat)") in capsys.readouterr().out
    # a provenance without runtime digests shows none
    del prov["runtime_digests"]
    (folder / "provenance" / "chap.json").write_text(json.dumps(prov))
    assert reference.runtime_drift(folder, tmp_path) == {"chap": None}
    assert "| yes | – |" in reference.summary_markdown(reference.summary(folder, tmp_path))


def _git_checkout(root: Path) -> str:
    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                              text=True).stdout.strip()
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "run")
    return git("rev-parse", "HEAD")


def test_runtime_digests_of_an_earlier_run_are_read_from_git_at_its_commit(tmp_path):
    source = _fake_checkout(tmp_path)
    commit = _git_checkout(tmp_path)
    folder = tmp_path / "results" / "reference"
    (folder / "verdicts").mkdir(parents=True)
    (folder / "verdicts" / "chap.json").write_text("[]")
    record = {"git_commit": commit, "git_dirty": False}
    reference.write_provenance(source, record, 1.0, folder=folder / "provenance", root=tmp_path)
    path = folder / "provenance" / "chap.json"
    prov = json.loads(path.read_text())
    recorded = prov.pop("runtime_digests")
    path.write_text(json.dumps(prov))
    # after the run: rng changed and a new runtime module is imported by training
    (tmp_path / "ddcl_theory" / "runtime" / "rng.py").write_text("SEED = 2\n")
    (tmp_path / "ddcl_theory" / "runtime" / "threads.py").write_text("N = 1\n")
    (tmp_path / "ddcl_theory" / "runtime" / "training.py").write_text(
        "from ddcl_theory.runtime import rng, threads\n")
    assert reference.record_runtime(folder, tmp_path) == [
        f"reference/chap: runtime digests recorded from {commit[:12]}"]
    prov = json.loads(path.read_text())
    assert prov["runtime_digests_from"] == commit
    assert prov["runtime_digests"]["ddcl_theory.runtime.rng"] == \
        recorded["ddcl_theory.runtime.rng"]
    assert prov["runtime_digests"]["ddcl_theory.runtime.threads"] == reference.ABSENT
    assert reference.runtime_drift(folder, tmp_path)["chap"] == [
        "ddcl_theory.runtime.rng", "ddcl_theory.runtime.threads",
        "ddcl_theory.runtime.training"]
    assert reference.record_runtime(folder, tmp_path) == []        # recorded once
    # a run not tied to a clean commit is refused
    del prov["runtime_digests"]
    path.write_text(json.dumps({**prov, "git_dirty": True}))
    assert "not tied to a clean commit" in reference.record_runtime(folder, tmp_path)[0]


def test_provenance_names_the_cpus_vector_extensions(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse4_2 avx2 fma avx512f amx_bf16 ht\n"
                    "flags\t\t: other\n")
    assert reference.cpu_isa(info) == ["amx_bf16", "avx2", "avx512f", "fma", "sse4_2"]
    assert reference.cpu_isa(tmp_path / "none") is None
    info.write_text("processor\t: 0\n")
    assert reference.cpu_isa(info) is None
    source = _fake_checkout(tmp_path)
    prov = json.loads((_reference_run(tmp_path, source, []) / "provenance" / "chap.json")
                      .read_text())
    assert prov["machine"]["isa"] == reference.cpu_isa()
