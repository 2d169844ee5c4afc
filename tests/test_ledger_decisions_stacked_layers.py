"""The decision of claim D12 (ddcl_theory.ledger.decisions.stacked_layers) on hand-built
inputs."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from ddcl_theory.ledger.decisions.stacked_layers import (
    COLLAPSE_RATIO,
    collapsed_levels,
    decide_d12,
)
from ddcl_theory.ledger.verdict import Verdict

NAN = math.nan


def _trace(residual=1e-15, gap=1e-15, v=0.5, step_v=0.4, sep_end=2.0):
    return SimpleNamespace(residual=[residual, residual / 2], recomputed_gap=[gap, NAN],
                           v=[v, v + 0.1], step_min_v=[NAN, step_v], sep_min=[3.0, sep_end],
                           sep_mean=[10.0, 9.5], used=[1.0, 0.9])


def _result(**level1):
    return SimpleNamespace(settings=SimpleNamespace(k1=32, k2=20, epochs=1), n_docs=800,
                           n_tokens=40000, nmi=0.31,
                           traces={1: _trace(**level1), 2: _trace(v=0.2, step_v=0.1)})


def test_d12_confirmed_when_the_identity_holds_and_both_banks_stay_separated():
    v = decide_d12(_result())
    assert isinstance(v, Verdict) and v.claim == "D12" and v.word == "confirmed"
    assert "|L_q - L_OLS - V| / L_q < 1e-12" in v.evidence and "40,000 MiniLM tokens" in v.evidence
    assert v.our_value.startswith("max residual < 1e-12; min V 0.4 / 0.1")
    assert v.numbers["collapsed_levels"] == []


def test_d12_qualified_when_a_level_loses_its_separation():
    v = decide_d12(_result(sep_end=3.0 * COLLAPSE_RATIO * 0.5))
    assert v.word == "qualified" and v.numbers["collapsed_levels"] == [1]
    assert "Qualified" in v.evidence and "level 1" in v.evidence
    # just above the ratio: separated
    assert decide_d12(_result(sep_end=3.0 * COLLAPSE_RATIO * 1.01)).word == "confirmed"


def test_collapsed_levels_reports_the_ratio():
    traces = _result(sep_end=0.03).traces
    assert collapsed_levels(traces) == {1: pytest.approx(0.01)}


@pytest.mark.parametrize("level1", [{"residual": 1e-9}, {"gap": 1e-9}, {"v": 0.0},
                                    {"step_v": -1e-6}, {"residual": 1e-9, "sep_end": 0.01}])
def test_d12_refuted_when_a_residual_a_recomputation_or_the_sign_of_v_fails(level1):
    assert decide_d12(_result(**level1)).word == "refuted"


def test_d12_needs_traces():
    with pytest.raises(ValueError, match="result"):
        decide_d12(SimpleNamespace(traces={}))
