"""SymPy: Hessians at collapse of F and of L_q (q differentiated): ddcl_theory.theory."""
from __future__ import annotations

import pytest

from ddcl_theory.theory import collapse_symbolic as cs
from ddcl_theory.theory.symbolic import SymbolicCheck

pytestmark = pytest.mark.symbolic


def test_token_curvature_holds_for_symbolic_k():
    check = cs.token_curvature_any_k()
    assert isinstance(check, SymbolicCheck)
    assert check.holds, check.residual


def test_token_curvature_with_the_free_energy_factor_for_lq_fails():
    """Negative control: L_q's curvature is not F's (factor 4 instead of 8 must not hold)."""
    assert not cs.token_curvature_any_k(quantisation_factor=4).holds


@pytest.mark.parametrize("k", [2, 4])       # K = 2 and 3: the free_energy chapter's golden
def test_zero_sum_hessians_with_symbolic_tokens(k):
    check = cs.zero_sum_hessians((k,))
    assert isinstance(check, SymbolicCheck)
    assert check.holds, check.residual


def test_zero_sum_hessians_with_the_free_energy_multiplier_for_lq_fails():
    """Negative control: L_q's zero-sum form is not F's (I - 2C/tau must not hold for L_q)."""
    assert not cs.zero_sum_hessians((2,), quantisation_m=2).holds


def test_zero_sum_hessians_bad_k():
    with pytest.raises(ValueError, match="ks"):
        cs.zero_sum_hessians((1,))
