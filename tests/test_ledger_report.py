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
