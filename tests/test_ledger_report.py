"""Printing helpers of the goldens: bounds for rounding noise, real tables for wide results."""
from __future__ import annotations

import pytest

from ddcl_theory.ledger.report import below, markdown_table


def test_below_prints_a_bound_for_rounding_noise():
    assert below(3e-17, 1e-12) == "< 1e-12"
    assert below(0.25, 1e-12) == "0.25"
    with pytest.raises(ValueError, match="bound"):
        below(1.0, 0.0)


def test_markdown_table_escapes_pipes_and_checks_widths():
    text = markdown_table(["a", "b|c"], [[0.123456, "x|y"], [2, "z"]])
    assert text.splitlines() == ["| a | b\\|c |", "|---|---|", "| 0.123 | x\\|y |", "| 2 | z |"]
    with pytest.raises(ValueError, match=r"rows\[1\]"):
        markdown_table(["a"], [[1], [1, 2]])
    with pytest.raises(ValueError, match="header"):
        markdown_table([], [])


def test_mean_sd_uses_the_sample_sd_and_says_one_thing_per_case():
    from ddcl_theory.ledger.report import mean_sd
    assert mean_sd([1.0, 2.0, 3.0]) == "2.000 ± 1.000"             # ddof 1: sd = 1
    assert mean_sd([0.5], ".2f") == "0.50" and mean_sd([]) == "–"
    assert mean_sd([0.1, -0.2], "+.2f") == "-0.05 ± 0.21"
    assert mean_sd([10, 20], ".0f", ".1f") == "15 ± 7.1"


def test_interval_text_reads_intervals_test_results_and_triples():
    from ddcl_theory.ledger import stats
    from ddcl_theory.ledger.design import Rule, Test
    from ddcl_theory.ledger.report import interval_text
    iv = stats.Interval(0.01, -0.02, 0.04, 5, "paired t")
    assert interval_text(iv) == "+0.010 [-0.020, +0.040]"
    assert interval_text(iv, "+.1f", scale=100) == "+1.0 [-2.0, +4.0]"
    assert interval_text((1.0, 0.5, 2.0), ".1f", estimate=False) == "[0.5, 2.0]"
    res = Rule((Test("x", ">"),), 5, "s").evaluate([[0.1, 0.2, 0.3, 0.2, 0.2]])[0]
    assert interval_text(res).startswith("+0.200 [")


def test_settings_rows_flatten_nested_settings_and_shorten_long_tuples():
    from dataclasses import dataclass

    from ddcl_theory.ledger.report import settings_rows
    from ddcl_theory.runtime.settings import Settings, nested, setting

    @dataclass(frozen=True)
    class Inner(Settings):
        seeds: tuple[int, ...] = setting(tuple(range(20)))

    @dataclass(frozen=True)
    class Outer(Settings):
        lr: float = setting(0.0003)
        inner: Inner = nested(Inner)

    rows = settings_rows(Outer())
    assert rows == [["lr", "0.0003"], ["inner.seeds", "(0, 1, 2, ..., 19) [20]"]]
    assert settings_rows(Outer(), ["lr"]) == [["lr", "0.0003"]]
    with pytest.raises(ValueError, match="no field"):
        settings_rows(Outer(), ["epochs"])


def test_show_verdict_prints_the_evidence_and_a_row_per_test(capsys):
    from ddcl_theory.ledger.design import Gate, Rule, Test
    from ddcl_theory.ledger.report import show_verdict, tests_rows
    from ddcl_theory.ledger.verdict import Verdict
    rule = Rule((Test("gain", ">", sesoi=0.05, why="half the paper's"),), 5, "s")
    res = rule.evaluate([[0.1, 0.12, 0.08, 0.11, 0.09]])
    v = Verdict("L6", "inconclusive", "five seeds", tests=tuple(res),
                gates=(Gate("converged", False, "2 of 5 still moving"),))
    rows = tests_rows(v)
    assert rows[0][0] == "gain" and rows[0][1] == "> 0" and rows[0][2] == "0.05"
    assert rows[0][4].startswith("5 / ") and rows[0][-1] == "reproduced"
    show_verdict(v)
    out = capsys.readouterr().out
    assert out.startswith("L6: inconclusive. five seeds")
    assert "gate not met (converged): 2 of 5 still moving" in out
