"""The registry of experiments covers every run function a chapter calls, so the smoke run does.

A run function is a function of ``ddcl_theory.experiments`` whose first parameter is a settings
object (:class:`ddcl_theory.runtime.settings.Settings`); the chapters' calls are read from their
code cells."""
from __future__ import annotations

import ast
import importlib
import inspect
import typing
from pathlib import Path

import pytest

from ddcl_theory.experiments import registry
from ddcl_theory.runbook.chapters import chapter_calls
from ddcl_theory.runtime.settings import CONFIRMATORY_SEED_BASE, Settings

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "ddcl_theory.experiments"


def takes_settings(function) -> bool:
    """The function's first parameter is annotated with a Settings class (or ``X | None``)."""
    if not inspect.isfunction(function):
        return False
    params = list(inspect.signature(function).parameters)
    if not params:
        return False
    hint = typing.get_type_hints(function).get(params[0])
    return any(isinstance(a, type) and issubclass(a, Settings)
               for a in (typing.get_args(hint) or (hint,)))


def _called_by(module: str, run: str) -> set[str]:
    """Names the function ``run`` of ``module`` calls, transitively within its module."""
    tree = ast.parse(Path(importlib.import_module(module).__file__).read_text())
    bodies = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    seen, todo = set(), [run]
    while todo:
        name = todo.pop()
        if name in seen or name not in bodies:
            continue
        seen.add(name)
        todo += [c.func.id for c in ast.walk(bodies[name])
                 if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)]
    return seen


CHAPTERS = sorted((ROOT / "notebooks").glob("*.md"))


@pytest.mark.parametrize("source", CHAPTERS, ids=lambda p: p.stem)
def test_every_run_function_a_chapter_calls_is_registered(source):
    registered = {(e.module, e.run) for e in registry.entries()}
    covered = {(e.module, name) for e in registry.entries() for name in _called_by(e.module, e.run)}
    for module, name in sorted(chapter_calls(source)):
        function = getattr(importlib.import_module(module), name, None)
        if takes_settings(function):
            assert (module, name) in registered | covered, (
                f"{source.stem} calls {module}.{name}, which takes settings, but no entry of "
                "ddcl_theory/experiments/registry.py runs it (the smoke run would miss it)")


def test_the_chapter_call_reader_finds_the_calls_it_should():
    calls = chapter_calls(ROOT / "notebooks" / "timescales.md")
    assert (f"{PREFIX}.eps_ablation", "run") in calls
    assert (f"{PREFIX}.eps_ablation", "linear_analysis") in calls
    assert takes_settings(importlib.import_module(f"{PREFIX}.eps_ablation").run)
    assert not takes_settings(importlib.import_module(f"{PREFIX}.eps_ablation").is_collapsed)


def test_every_registered_entry_names_a_run_function_and_its_settings_class():
    for e in registry.entries():
        assert takes_settings(e.run_function()), e.name
        assert issubclass(e.settings_class(), Settings), e.name


def test_registry_rejects_malformed_and_repeated_entries():
    with pytest.raises(ValueError, match="module: expected a non-empty string"):
        registry.Experiment("", "S", "run")
    with pytest.raises(ValueError, match="duplicate entries"):
        e = registry.Experiment(f"{PREFIX}.scaling", "ScalingSettings", "run")
        registry.entries([e, e])
    with pytest.raises(ValueError, match=r"EXPERIMENTS\[0\]"):
        registry.entries([("m", "S", "run")])


@pytest.mark.parametrize("entry", registry.entries(), ids=lambda e: e.name)
def test_reference_seeds_are_fresh_and_cpu_seeds_exploratory(entry, monkeypatch):
    """Where a registered experiment's reference (confirmatory) seeds differ from its cpu
    (exploratory) ones, no exploratory run used them: cpu seeds lie below
    CONFIRMATORY_SEED_BASE, reference seeds at or above it."""
    from ddcl_theory.runtime import profile
    from ddcl_theory.runtime.settings import values
    seeds = {}
    for name in ("cpu", "reference"):
        monkeypatch.setenv(profile.PROFILE_ENV, name)
        monkeypatch.delenv(profile.SMOKE_ENV, raising=False)
        rows = dict(values(entry.make_settings()))
        seeds[name] = {k: v for k, v in rows.items() if k.split(".")[-1] in ("seeds", "seed")}
    assert seeds["cpu"].keys() == seeds["reference"].keys()
    for key, cpu in seeds["cpu"].items():
        cpu = cpu if isinstance(cpu, tuple) else (cpu,)
        assert all(s < CONFIRMATORY_SEED_BASE for s in cpu), (entry.name, key)
        ref = seeds["reference"][key]
        ref = ref if isinstance(ref, tuple) else (ref,)
        if ref != cpu:
            assert all(s >= CONFIRMATORY_SEED_BASE for s in ref), (entry.name, key, ref)
