"""The one list of experiments: name, settings type, and the run function the chapters call.

The paper profile's smoke run (:mod:`ddcl_theory.experiments.smoke`), the settings that a
reference run records in its provenance (:func:`settings_of`) and the tests' lists of experiments
are all read from :data:`EXPERIMENTS`; a test checks that every run function a chapter calls is
here, so no chapter's experiment can miss the smoke run.

An entry names its module, settings class and run function as strings (imported when used, so a
module that fails to import fails under its entry's name) and optional ``overrides``: keyword
arguments of ``Settings.from_profile`` (e.g. ``{"causal": True}``). ``fixed_scale`` marks an
experiment that runs at one scale in every profile (an exact computation in float64): the smoke
run runs it whole instead of asking it for a smaller budget.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["Experiment", "EXPERIMENTS", "entries", "settings_of"]

_PREFIX = "ddcl_theory.experiments."


@dataclass(frozen=True)
class Experiment:
    """One experiment run: ``module.run(module.settings.from_profile(**overrides))``."""

    module: str
    settings: str
    run: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    fixed_scale: bool = False

    def __post_init__(self) -> None:
        for name in ("module", "settings", "run"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name}: expected a non-empty string, got {value!r}")
        if not isinstance(self.overrides, Mapping):
            raise ValueError(f"overrides: expected a mapping, got {self.overrides!r}")
        object.__setattr__(self, "overrides", MappingProxyType(dict(self.overrides)))

    @property
    def name(self) -> str:
        """``"<module stem>.<run function>"``, plus ``[k=v,...]`` for the overrides."""
        base = f"{self.module.removeprefix(_PREFIX)}.{self.run}"
        if self.overrides:
            base += "[" + ",".join(f"{k}={v}" for k, v in self.overrides.items()) + "]"
        return base

    def settings_class(self) -> type:
        return getattr(importlib.import_module(self.module), self.settings)

    def make_settings(self) -> Any:
        """The settings of the active profile with this entry's overrides."""
        return self.settings_class().from_profile(**self.overrides)

    def run_function(self) -> Callable[[Any], Any]:
        return getattr(importlib.import_module(self.module), self.run)


def _e(module: str, settings: str, run: str = "run", *, fixed_scale: bool = False,
       **overrides: Any) -> Experiment:
    return Experiment(_PREFIX + module, settings, run, overrides, fixed_scale)


#: Every run function a chapter calls, with the settings it is called with.
EXPERIMENTS: tuple[Experiment, ...] = (
    _e("ddcl_layer", "PatchSettings", "run_patch_prototypes"),
    _e("ddcl_layer", "TransformerSettings", "run_transformer"),
    _e("scaling", "ScalingSettings"),
    _e("annealing", "AnnealingSettings"),
    _e("cooling", "CoolingSettings"),
    _e("eps_ablation", "AblationSettings", "run_scales"),
    _e("eps_ablation", "SGDAblationSettings", "run_scales", optimiser="sgd"),
    _e("eps_ablation", "SGDBesideSettings"),
    _e("eps_ablation", "LinearSettings", "linear_analysis", fixed_scale=True),
    _e("learned_attention", "LearnedAttentionSettings", causal=True),
    _e("learned_attention", "LearnedAttentionSettings", causal=False),
    _e("overhead", "OverheadSettings"),
    _e("laplacian_study", "ViTStudySettings", "run_vit"),
    _e("laplacian_lm", "LMSettings"),
    _e("dense_features", "DenseSettings"),
    _e("dino_study", "DinoStudySettings"),
    _e("soft_vq", "SoftVQSettings"),
    _e("orbital_debris", "DebrisSettings"),
    _e("laplacian_readout", "ReadoutSettings"),
    _e("text_readout", "TextReadoutSettings"),
    _e("stacked_layers", "StackedSettings"),
    _e("peer_readouts", "StudySettings"),
)


def entries(registry: Iterable[Experiment] | None = None) -> list[Experiment]:
    """The registry as a list; ``ValueError`` naming a malformed or repeated entry."""
    rows = list(EXPERIMENTS if registry is None else registry)
    for i, row in enumerate(rows):
        if not isinstance(row, Experiment):
            raise ValueError(f"EXPERIMENTS[{i}]: expected an Experiment, got {row!r}")
    names = [e.name for e in rows]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"EXPERIMENTS: duplicate entries {twice}")
    return rows


def settings_of(modules: Iterable[str]) -> dict[str, Any]:
    """``{entry name: settings of the active profile}`` of the entries in ``modules`` (the
    experiments a chapter imports), for a run's provenance."""
    wanted = set(modules)
    return {e.name: e.make_settings() for e in entries() if e.module in wanted}
