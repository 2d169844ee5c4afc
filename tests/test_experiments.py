"""Every experiment reads its scale from the one profile switch through ``Settings.from_profile()``."""
from __future__ import annotations

import pytest

from ddcl_theory.experiments import (
    annealing,
    ddcl_layer,
    ddp_check,
    eps_ablation,
    laplacian_readout,
    laplacian_vit,
    learned_attention,
    orbital_debris,
    overhead,
    peer_readouts,
    scaling,
    soft_vq,
    stacked_layers,
    text_readout,
)
from ddcl_theory.runtime import profile

SETTINGS = [
    ddcl_layer.PatchSettings, ddcl_layer.TransformerSettings, scaling.ScalingSettings,
    annealing.AnnealingSettings, eps_ablation.AblationSettings, overhead.OverheadSettings,
    learned_attention.LearnedAttentionSettings, laplacian_vit.ViTSettings,
    soft_vq.SoftVQSettings, orbital_debris.DebrisSettings,
    laplacian_readout.ReadoutSettings, text_readout.TextReadoutSettings,
    stacked_layers.StackedSettings, peer_readouts.StudySettings, ddp_check.DDPSettings,
]


@pytest.mark.parametrize("cls", SETTINGS, ids=lambda c: c.__name__)
def test_paper_profile_changes_the_settings(cls, monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    cpu = cls.from_profile()
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    paper = cls.from_profile()
    assert type(cpu) is type(paper) is cls
    assert cpu != paper


@pytest.mark.parametrize("cls", SETTINGS, ids=lambda c: c.__name__)
def test_cpu_profile_is_the_default(cls, monkeypatch):
    monkeypatch.delenv(profile.PROFILE_ENV, raising=False)
    default = cls.from_profile()
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    assert default == cls.from_profile()


@pytest.mark.parametrize("cls", SETTINGS, ids=lambda c: c.__name__)
def test_the_dataclass_defaults_are_the_cpu_values_whatever_the_active_profile(cls, monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    assert cls() == cls.for_profile(profile.Profile("cpu", "cpu"))
    assert cls() != cls.from_profile()
