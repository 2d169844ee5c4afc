"""The one profile switch and the seeding helper."""
from __future__ import annotations

import dataclasses

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


def test_reference_profile_runs_on_cpu_and_keeps_runs(monkeypatch, tmp_path):
    from ddcl_theory.runtime import paths
    from ddcl_theory.runtime.rundir import RunDir

    @dataclasses.dataclass
    class Settings:
        a: int = 1
    monkeypatch.setenv(paths.RESULTS_ENV, str(tmp_path))
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    prof = profile.current()
    assert prof.is_reference and not prof.is_paper and prof.device == "cpu"
    assert prof.keeps_runs and prof.results_subdir == "reference"
    assert paths.results_dir() == tmp_path / "reference"
    assert RunDir("x", Settings()).enabled
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    assert not profile.current().keeps_runs and profile.current().results_subdir == ""
    assert not RunDir("x", Settings()).enabled


def test_reference_pick_defaults_to_the_cpu_value(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    prof = profile.current()
    assert prof.pick(cpu=3, paper=100) == 3                 # nothing changes until declared
    assert prof.pick(cpu=3, paper=100, reference=10) == 10
    assert prof.pick(cpu=3, paper=100, smoke=1, reference=10) == 10
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    assert profile.current().pick(cpu=3, paper=100, reference=10) == 100
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    assert profile.current().pick(cpu=3, paper=100, reference=10) == 3


def test_smoke_with_the_reference_profile_is_an_error(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    monkeypatch.setenv(profile.SMOKE_ENV, "1")
    with pytest.raises(ValueError, match="DDCL_PROFILE=paper"):
        profile.current()


def test_the_suite_refuses_the_reference_profile():
    from tests import conftest

    class Config:
        pass
    import os
    old = os.environ.get(profile.PROFILE_ENV)
    os.environ[profile.PROFILE_ENV] = "reference"
    try:
        with pytest.raises(pytest.UsageError, match="'cpu' profile"):
            conftest.pytest_configure(Config())
    finally:
        if old is None:
            del os.environ[profile.PROFILE_ENV]
        else:
            os.environ[profile.PROFILE_ENV] = old


def test_the_paper_profile_needs_cuda_unless_the_cpu_is_asked_for(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    monkeypatch.delenv(profile.SMOKE_ENV, raising=False)
    monkeypatch.delenv(profile.ALLOW_CPU_ENV, raising=False)
    monkeypatch.setattr(profile.torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU.*DDCL_ALLOW_CPU=1"):
        profile.configure_torch()
    assert profile.current().name == "paper"          # reading paper settings still works
    monkeypatch.setenv(profile.ALLOW_CPU_ENV, "1")
    assert profile.check_device().device == "cpu"
    monkeypatch.delenv(profile.ALLOW_CPU_ENV)
    monkeypatch.setenv(profile.SMOKE_ENV, "1")          # the smoke test runs on the CPU
    assert profile.check_device().smoke
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    monkeypatch.delenv(profile.SMOKE_ENV)
    assert profile.check_device().name == "reference"
