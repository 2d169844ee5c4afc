"""The head settings of the Laplacian-head experiments and their summaries over seeds."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from ddcl_theory.experiments.laplacian_common import (
    HEAD_SETTINGS,
    SMOKE_HEAD_SETTINGS,
    bad_head_settings,
    laplacian_count,
    summarise,
)


def test_laplacian_count_names():
    assert [laplacian_count(s, 6) for s in HEAD_SETTINGS] == [0, 1, 3, 6]
    assert [laplacian_count(s, 5) for s in SMOKE_HEAD_SETTINGS] == [0, 2, 5]
    assert laplacian_count("5", 12) == 5
    for bad in ("most", "5", "-1", 2):
        with pytest.raises(ValueError, match="setting"):
            laplacian_count(bad, 4)


def test_bad_head_settings_are_the_ones_laplacian_count_refuses():
    assert bad_head_settings(HEAD_SETTINGS, 4) == []
    assert bad_head_settings(("0", "5", "half", "x"), 4) == ["5", "x"]


@dataclass
class Run:
    setting: str
    value: float | None


def test_summarise_gives_mean_and_population_std_per_setting_skipping_missing_values():
    runs = [Run("0", 1.0), Run("0", 3.0), Run("all", None), Run("all", 2.0), Run("1", None)]
    out = summarise(runs, "value")
    assert out == {"0": (2.0, 1.0), "all": (2.0, 0.0)}          # ddof=0; "1" has no value
    assert summarise(runs, "value", ("all",)) == {"all": (2.0, 0.0)}
