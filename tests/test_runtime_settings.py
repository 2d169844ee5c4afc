"""The one Settings type: values per profile, checks by type and range, nested settings."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from ddcl_theory.runtime import profile
from ddcl_theory.runtime.settings import Settings, nested, setting, values


@dataclass(frozen=True)
class Inner(Settings):
    width: int = setting(8, paper=64, ge=1)
    seeds: tuple[int, ...] = setting((0, 1), reference=(0, 1, 2, 3), smoke=(0,), ge=0,
                                     nonempty=True)


@dataclass(frozen=True)
class Outer(Settings):
    epochs: int = setting(3, reference=10, paper=40, smoke=1, ge=1)
    lr: float = setting(1e-3, gt=0, lt=1)
    optimiser: str = setting("adam", choices=("adam", "sgd"))
    threads: int | None = setting(1, paper=None, ge=1)
    inner: Inner = nested(Inner, width=setting(16, paper=128))

    def check(self) -> None:
        if self.epochs < len(self.inner.seeds) - 3:
            raise ValueError("epochs: expected at least len(inner.seeds) - 3")


@pytest.mark.parametrize("name,smoke,epochs,threads,width,seeds", [
    ("cpu", False, 3, 1, 16, (0, 1)),
    ("reference", False, 10, 1, 16, (0, 1, 2, 3)),
    ("paper", False, 40, None, 128, (0, 1)),
    ("paper", True, 1, None, 128, (0,)),
])
def test_each_profile_picks_its_value_and_falls_back_as_documented(name, smoke, epochs,
                                                                     threads, width, seeds):
    s = Outer.for_profile(profile.Profile(name, "cpu", smoke))
    assert (s.epochs, s.threads, s.inner.width, s.inner.seeds) == (epochs, threads, width, seeds)
    assert s.lr == 1e-3 and s.optimiser == "adam"


def test_the_dataclass_defaults_are_the_cpu_values(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    assert Outer() == Outer.from_profile()
    assert Outer().inner == Inner(width=16)


def test_from_profile_reads_the_environment_and_takes_overrides(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    s = Outer.from_profile(lr=0.5)
    assert s.epochs == 10 and s.lr == 0.5
    with pytest.raises(ValueError, match=r"Outer: unknown field\(s\) \['epoch'\]"):
        Outer.from_profile(epoch=3)


@pytest.mark.parametrize("changes,message", [
    ({"epochs": 0}, r"Outer\.epochs: expected >= 1, got 0"),
    ({"epochs": True}, r"Outer\.epochs: expected int, got True"),
    ({"epochs": 2.0}, r"Outer\.epochs: expected int, got 2\.0"),
    ({"lr": 1}, r"Outer\.lr: expected < 1, got 1"),
    ({"lr": "0.1"}, r"Outer\.lr: expected float, got '0\.1'"),
    ({"optimiser": "rmsprop"}, r"Outer\.optimiser: expected one of \('adam', 'sgd'\)"),
    ({"threads": 0}, r"Outer\.threads: expected >= 1, got 0"),
])
def test_a_bad_value_names_the_class_the_field_and_what_was_expected(changes, message):
    with pytest.raises(ValueError, match=message):
        Outer(**changes)


def test_tuples_are_checked_element_by_element_and_for_emptiness():
    with pytest.raises(ValueError, match=r"Inner\.seeds: expected every value >= 0"):
        Inner(seeds=(0, -1))
    with pytest.raises(ValueError, match=r"Inner\.seeds: expected tuple\[int, \.\.\.\]"):
        Inner(seeds=[0, 1])
    with pytest.raises(ValueError, match=r"Inner\.seeds: expected at least one value"):
        Inner(seeds=())


def test_none_passes_the_range_and_the_class_check_runs_last():
    assert Outer(threads=None).threads is None
    with pytest.raises(ValueError, match="epochs: expected at least"):
        Outer(epochs=1, inner=Inner(seeds=tuple(range(10))))


def test_replace_and_dataclasses_replace_check_the_same_way():
    s = Outer()
    assert s.replace(epochs=5).epochs == 5
    with pytest.raises(ValueError, match=r"Outer\.epochs"):
        dataclasses.replace(s, epochs=-1)


def test_values_flattens_nested_settings_into_rows():
    rows = dict(values(Outer()))
    assert rows["inner.width"] == 16 and rows["epochs"] == 3 and "inner" not in rows
    with pytest.raises(TypeError, match="settings: expected a settings dataclass"):
        values(object())


def test_nested_takes_only_settings_classes():
    with pytest.raises(TypeError, match="cls: expected a Settings subclass"):
        nested(dict)


def test_confirmatory_seeds_start_above_every_exploratory_seed():
    from ddcl_theory.runtime.settings import CONFIRMATORY_SEED_BASE, confirmatory_seeds
    assert confirmatory_seeds(3) == (1000, 1001, 1002) and CONFIRMATORY_SEED_BASE == 1000
    with pytest.raises(ValueError, match=r"n: expected an int in \[1, 1000\]"):
        confirmatory_seeds(0)


def test_a_later_confirmatory_run_draws_seeds_no_earlier_run_used():
    from ddcl_theory.runtime.settings import CONFIRMATORY_SEED_BASE, confirmatory_seeds
    first, second = confirmatory_seeds(20), confirmatory_seeds(20, run=2)
    assert first == tuple(range(CONFIRMATORY_SEED_BASE, CONFIRMATORY_SEED_BASE + 20))
    assert min(second) == 2 * CONFIRMATORY_SEED_BASE and not set(first) & set(second)
    assert not set(confirmatory_seeds(CONFIRMATORY_SEED_BASE)) & set(second)
    for bad in ({"n": 0}, {"n": CONFIRMATORY_SEED_BASE + 1}, {"n": 3, "run": 0},
                {"n": 3, "run": True}):
        with pytest.raises(ValueError, match="n: expected|run: expected"):
            confirmatory_seeds(**bad)
