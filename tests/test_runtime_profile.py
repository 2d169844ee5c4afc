"""The one profile switch and the seeding helper."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ddcl_theory.runtime import profile


def test_default_profile_is_cpu(monkeypatch):
    monkeypatch.delenv(profile.PROFILE_ENV, raising=False)
    prof = profile.current()
    assert prof.name == "cpu" and prof.device == "cpu"
    assert prof.pick(cpu=1, paper=2) == 1


def test_paper_profile_picks_paper_values(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    prof = profile.current()
    assert prof.is_paper and prof.pick(cpu=1, paper=2) == 2
    with pytest.raises(RuntimeError, match="'cpu' profile"):
        profile.require("cpu")


def test_unknown_profile_is_an_error(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "gpu")
    with pytest.raises(ValueError, match="DDCL_PROFILE"):
        profile.current()


def test_seed_everything_repeats_draws():
    profile.seed_everything(7)
    a = (torch.randn(3), np.random.rand(3))
    profile.seed_everything(7)
    b = (torch.randn(3), np.random.rand(3))
    assert torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    with pytest.raises(ValueError, match="seed"):
        profile.seed_everything(-1)


def test_paper_results_never_overwrite_the_committed_ones(monkeypatch, tmp_path):
    from ddcl_theory.runtime import paths
    monkeypatch.setenv(paths.RESULTS_ENV, str(tmp_path))
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    assert paths.results_dir() == tmp_path
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    assert paths.results_dir() == tmp_path / "paper"


def test_goldens_refuse_paper_output_over_the_goldens(monkeypatch):
    from ddcl_theory.ledger import goldens
    with pytest.raises(SystemExit, match="cpu-profile"):
        goldens.main(["write", "--out", str(goldens.notebooks_dir()), "99"])


def test_smoke_replaces_only_declared_budgets_in_the_paper_profile(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    monkeypatch.setenv(profile.SMOKE_ENV, "1")
    prof = profile.current()
    assert prof.smoke and prof.device == "cpu"
    assert prof.pick(cpu=3, paper=100, smoke=2) == 2      # a budget shrinks
    assert prof.pick(cpu=64, paper=512) == 512            # a size stays at paper scale
    monkeypatch.setenv(profile.SMOKE_ENV, "0")
    assert profile.current().pick(cpu=3, paper=100, smoke=2) == 100


def test_smoke_without_the_paper_profile_is_an_error(monkeypatch):
    monkeypatch.delenv(profile.PROFILE_ENV, raising=False)
    monkeypatch.setenv(profile.SMOKE_ENV, "1")
    with pytest.raises(ValueError, match="DDCL_PROFILE=paper"):
        profile.current()
