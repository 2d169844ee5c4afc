"""The one type for symbolic results: ddcl_theory.theory.symbolic.SymbolicCheck."""
from __future__ import annotations

import pytest
import sympy as sp

from ddcl_theory.theory.symbolic import SymbolicCheck, compare, identity, is_zero

pytestmark = pytest.mark.symbolic

X = sp.Symbol("x", real=True)


def test_identity_holds_exactly_when_the_residual_is_zero():
    ok = identity("(x + 1)^2 - x^2 - 2x - 1 = 0", sp.expand((X + 1) ** 2 - X**2 - 2 * X - 1))
    assert isinstance(ok, SymbolicCheck) and ok.holds is True and ok.residual == 0
    bad = identity("x^2 = x", X**2 - X, before=X**2)
    assert bad.holds is False and bad.details == {"before": X**2}


def test_is_zero_on_tuples_and_matrices():
    assert is_zero(sp.Tuple(0, 0)) and not is_zero(sp.Tuple(0, X))
    assert is_zero(sp.zeros(2, 3)) and not is_zero(sp.Matrix([[0, X]]))


def test_compare_is_name_by_name_and_keeps_the_computed_values():
    r = compare("limits", {"a": sp.Integer(1), "b": X - X},
                {"a": sp.Integer(1), "b": sp.Integer(0)})
    assert r.holds is True and r.details == {"a": 1, "b": 0} and r.residual == sp.Tuple(0, 0)
    assert compare("wrong", {"a": X}, {"a": sp.Integer(0)}).holds is False
    with pytest.raises(ValueError, match="computed"):
        compare("missing", {}, {"a": sp.Integer(0)})
