"""Two time scales (D8, D9) on scalar blocks: ddcl_theory.theory.timescales_symbolic (SymPy)."""
from __future__ import annotations

import pytest
import sympy as sp

from ddcl_theory.theory import timescales_symbolic as tss

pytestmark = pytest.mark.symbolic


def test_slow_eigenvalue_series_first_order_is_schur_and_error_is_eps_squared_symbolic():
    r = tss.slow_eigenvalue_series_2x2()
    assert r.holds is True


def test_reduced_characteristic_polynomial_is_schur_complement_3x3_symbolic():
    assert tss.reduced_characteristic_polynomial_3x3().holds is True


def test_shared_potential_2x2_real_spectrum_and_eps_free_determinant_sign_symbolic():
    assert tss.shared_potential_inertia_2x2().holds is True


def test_split_objective_2x2_critical_eps_is_minus_a_over_e_symbolic():
    r = tss.split_objective_hopf_2x2()
    assert r.holds is True


def test_slow_eigenvalue_series_coefficients_are_minus_schur_and_bcs_over_a_squared():
    r = tss.slow_eigenvalue_series_2x2()
    a = sp.Symbol("a", positive=True)
    b, c, e = sp.symbols("b c e", real=True)
    schur = e - b * c / a
    assert sp.simplify(r.details["first"] + schur) == 0
    assert sp.simplify(r.details["second"] - b * c * schur / a**2) == 0
    assert r.residual == sp.Tuple(0, 0, 0, 0)
