"""Goldens: one executed .ipynb per jupytext source, never stale, nothing machine-specific."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from ddcl_theory.ledger import goldens

ROOT = Path(__file__).resolve().parents[1]


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [ch["file"] for ch in part["chapters"]]
    return files


def test_every_golden_matches_its_source():
    assert goldens.check() == []


def test_every_chapter_in_the_toc_exists_with_a_golden():
    for entry in _toc_files():
        if entry.startswith("notebooks/"):
            assert (ROOT / f"{entry}.md").is_file(), entry
            assert (ROOT / f"{entry}.ipynb").is_file(), entry
        else:
            assert (ROOT / f"{entry}.md").is_file(), entry


def test_sphinx_reads_sources_not_goldens():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert "**/*.ipynb" in config["exclude_patterns"]


def test_goldens_carry_no_timing_no_paths_no_errors():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"/(work|root|home|tmp)/", text), f"{path.name}: machine path in outputs"
        for i, cell in enumerate(nb["cells"]):
            assert cell["id"] == f"cell-{i:03d}", f"{path.name}: unstable cell id"
            assert "execution" not in cell.get("metadata", {}), f"{path.name}: timing metadata"
            for out in cell.get("outputs", []):
                assert out["output_type"] != "error", f"{path.name}: cell {i} stores an error"


def test_reference_write_defaults_to_build_reference_and_commits_provenance(monkeypatch, tmp_path):
    """Under DDCL_PROFILE=reference, `goldens write` executes into _build/reference (never over
    the goldens), resumes by provenance, and writes results/reference/provenance/<chapter>.json
    with the digests of the code it ran (the execution itself is stubbed here)."""
    from ddcl_theory.runtime import paths, profile
    calls = []

    def fake_write(source, out_dir=None):
        calls.append(out_dir)
        (out_dir / goldens.golden_path(source).name).write_text("{}")
        return 2.0

    monkeypatch.setenv(paths.RESULTS_ENV, str(tmp_path))
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    monkeypatch.setenv(goldens.ALLOW_DIRTY_ENV, "1")        # the checkout may be mid-change
    monkeypatch.setattr(goldens, "write", fake_write)
    monkeypatch.setattr(goldens, "notebooks_dir", lambda: tmp_path / "nb" / "notebooks")
    (tmp_path / "nb" / "notebooks").mkdir(parents=True)
    source = tmp_path / "nb" / "notebooks" / "orbital_debris.md"
    source.write_text((Path(__file__).parents[1] / "notebooks" / "orbital_debris.md").read_text())
    assert goldens.main(["write", "orbital_debris"]) == 0
    assert calls == [tmp_path / "nb" / "_build" / "reference"]
    prov = json.loads((tmp_path / "reference" / "provenance" / "orbital_debris.json").read_text())
    assert prov["profile"] == "reference" and prov["seconds"] == 2.0
    assert "ddcl_theory.experiments.orbital_debris" in prov["digests"]
    assert goldens.main(["write", "orbital_debris"]) == 0       # same provenance: skipped
    assert len(calls) == 1


def test_a_reference_run_refuses_uncommitted_code(monkeypatch):
    from ddcl_theory.runtime import profile, provenance
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    monkeypatch.delenv(goldens.ALLOW_DIRTY_ENV, raising=False)
    monkeypatch.setattr(provenance, "git_commit", lambda: ("a" * 40, True))
    with pytest.raises(SystemExit, match="clean, committed tree"):
        goldens.main(["write", "orbital_debris"])
    monkeypatch.setattr(provenance, "git_commit", lambda: ("a" * 40, False))
    goldens.require_clean_tree()                  # committed code (results aside) passes


def test_the_cell_timeout_is_off_under_paper_and_configurable(monkeypatch):
    from ddcl_theory.runtime import profile
    monkeypatch.delenv(goldens.CELL_TIMEOUT_ENV, raising=False)
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    assert goldens.cell_timeout() == goldens.CELL_TIMEOUT_S
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    assert goldens.cell_timeout() is None
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    assert goldens.cell_timeout() is None
    monkeypatch.setenv(goldens.CELL_TIMEOUT_ENV, "600")
    assert goldens.cell_timeout() == 600
    monkeypatch.setenv(goldens.CELL_TIMEOUT_ENV, "none")
    assert goldens.cell_timeout() is None
    monkeypatch.setenv(goldens.CELL_TIMEOUT_ENV, "ten")
    with pytest.raises(ValueError, match="DDCL_CELL_TIMEOUT: expected seconds"):
        goldens.cell_timeout()


def test_make_paper_without_cuda_stops_with_the_message(monkeypatch):
    from ddcl_theory.runtime import profile
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    monkeypatch.delenv(profile.SMOKE_ENV, raising=False)
    monkeypatch.delenv(profile.ALLOW_CPU_ENV, raising=False)
    monkeypatch.setattr(profile.torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        goldens.main(["write", "decomposition"])
