"""The decomposition L_q = L_OLS + V (D3), V >= 0 (D4), grad_P V = 2 Sigma_q P (D5), V at collapse (D6)."""
from __future__ import annotations

import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ddcl_theory import functional as F
from ddcl_theory.theory import decomposition as D

SCALES = (1e-3, 1e-2, 1e-1, 1.0, 1e1, 1e2, 1e3)
TEMPERATURES = SCALES


# --- D3: symbolic ------------------------------------------------------------------------------

def test_sympy_proof_general_k():
    result = D.prove_decomposition_general_k()
    assert result.holds is True
    assert result.residual == 0


def test_sympy_proof_general_k_uses_exactly_sum_q_equals_one():
    # Negative control: without sum_k q_k = 1 the residual is (s0 - 1)(z^2 - mu^2), not 0.
    result = D.prove_decomposition_general_k()
    general = result.details["without_hypothesis"]
    assert general != 0
    s0 = D._s0
    mu = D._sum(D._q[D._k] * D._p[D._k])
    assert sp.expand(general - (s0 - 1) * (D._z ** 2 - mu ** 2)) == 0


def test_cross_term_vanishes_general_k():
    assert D.prove_cross_term_vanishes().holds is True


@pytest.mark.parametrize("k,d", [(1, 1), (2, 1), (2, 3), (3, 2), (4, 3)])
def test_lq_equals_lols_plus_v_symbolic_generic_simplex(k, d):
    assert D.check_decomposition_small(k, d).holds is True


@pytest.mark.parametrize("k,d", [(2, 1), (2, 2), (3, 1)])
def test_lq_equals_lols_plus_v_symbolic_boltzmann(k, d):
    assert D.check_decomposition_small(k, d, boltzmann=True).holds is True


def test_check_decomposition_small_rejects_bad_sizes():
    with pytest.raises(ValueError, match="k"):
        D.check_decomposition_small(0, 2)
    with pytest.raises(ValueError, match="d"):
        D.check_decomposition_small(2, 0)


# --- D3: numerical -----------------------------------------------------------------------------

def test_lq_equals_lols_plus_v_float64_rel_1e10():
    checks = D.identity_grid(SCALES, TEMPERATURES, seeds=(0, 1))
    assert len(checks) == 2 * len(SCALES) * len(TEMPERATURES)
    assert max(c.rel_reference for c in checks) < 1e-10
    assert max(c.rel_functional for c in checks) < 1e-10
    assert max(c.rel_agreement for c in checks) < 1e-10


def test_lq_equals_lols_plus_v_float32_rel_1e4():
    checks = D.identity_grid(SCALES, TEMPERATURES, seeds=(0,), dtype=torch.float32)
    assert all(c.dtype == "float32" for c in checks)
    assert max(c.rel_reference for c in checks) < 1e-4
    assert max(c.rel_functional for c in checks) < 1e-4


@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 20), k=st.integers(1, 7),
       d=st.integers(1, 6))
@settings(max_examples=40, deadline=None)
def test_lq_equals_lols_plus_v_any_simplex_q(seed, n, k, d):
    # q arbitrary on the simplex (Dirichlet), not of Boltzmann form: the identity still holds.
    z, p, q = D.random_instance(1.0, 1.0, seed, n=n, k=k, d=d, q_kind="dirichlet")
    l_q, l_ols, v = D.reference_terms(z, p, q)
    assert abs(float(l_q - l_ols - v)) <= 1e-12 * max(float(l_q), 1.0)


def test_identity_fails_off_the_simplex():
    # Negative control: weights summing to 2 break the identity.
    z, p, q = D.random_instance(1.0, 1.0, 3, q_kind="dirichlet")
    l_q, l_ols, v = D.reference_terms(z, p, 2.0 * q)
    assert abs(float(l_q - l_ols - v)) > 1e-3


def test_random_instance_rejects_bad_arguments():
    with pytest.raises(ValueError, match="scale"):
        D.random_instance(0.0, 1.0, 0)
    with pytest.raises(ValueError, match="q_kind"):
        D.random_instance(1.0, 1.0, 0, q_kind="uniform")


# --- D4 ---------------------------------------------------------------------------------------

@given(seed=st.integers(0, 2**31 - 1), log_scale=st.floats(-3, 3), log_tau=st.floats(-3, 3),
       k=st.integers(1, 8))
@settings(max_examples=60, deadline=None)
def test_v_nonnegative(seed, log_scale, log_tau, k):
    z, p, q = D.random_instance(10.0 ** log_scale, 10.0 ** log_tau, seed, n=16, k=k, d=3)
    l_q, _, v = D.reference_terms(z, p, q)
    assert float(v) >= 0.0
    assert float(D.variance_term(p, q)) >= 0.0
    # the fast code computes V as a difference of second moments: >= 0 up to rounding
    assert float(F.loss_terms(z, p, q)[2]) >= -1e-12 * float(l_q)


def test_v_pairwise_form_general_k():
    assert D.prove_v_pairwise_form_general_k().holds is True


def test_v_zero_iff_weighted_prototypes_coincide():
    # q puts weight only on prototypes 0 and 1; they coincide, the others differ: V = 0.
    p = torch.tensor([[1.0, 2.0], [1.0, 2.0], [5.0, -1.0]], dtype=torch.float64)
    z = torch.randn(4, 2, dtype=torch.float64)
    q = torch.tensor([[0.3, 0.7, 0.0]] * 4, dtype=torch.float64)
    assert float(D.variance_term(p, q)) == 0.0
    # Move weight onto the distinct prototype: V > 0.
    q2 = torch.tensor([[0.3, 0.6, 0.1]] * 4, dtype=torch.float64)
    assert float(D.variance_term(p, q2)) > 0.0


# --- D5 ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("k,d,n", [(2, 1, 1), (2, 2, 2), (3, 2, 2)])
def test_grad_v_equals_2_sigma_q_p_symbolic(k, d, n):
    assert D.check_grad_v_small(k, d, n).holds is True


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("temperature", [1e-2, 1.0, 1e2])
def test_grad_v_equals_2_sigma_q_p(seed, temperature):
    check = D.gradient_check(temperature, seed)
    assert check.rel_fixed < 1e-12


@pytest.mark.parametrize("temperature", [1e-1, 1.0, 1e1])
def test_grad_v_through_softmax_has_extra_term(temperature):
    check = D.gradient_check(temperature, 0)
    assert check.rel_extra > 1e-4          # not the identity's gradient ...
    assert check.rel_extra_formula < 1e-10  # ... but the stated closed form


def test_grad_v_q_fixed_gradcheck_float64():
    g = torch.Generator().manual_seed(5)
    p = torch.randn(4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    q = torch.softmax(torch.randn(6, 4, generator=g, dtype=torch.float64), -1)
    assert torch.autograd.gradcheck(lambda p_: D.variance_term(p_, q), (p,))


@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 12), k=st.integers(1, 8))
@settings(max_examples=40, deadline=None)
def test_sigma_q_psd_and_annihilates_ones(seed, n, k):
    g = torch.Generator().manual_seed(seed)
    q = torch.softmax(3.0 * torch.randn(n, k, generator=g, dtype=torch.float64), -1)
    s = D.sigma_q(q)
    assert torch.allclose(s, s.T)
    assert float(torch.linalg.eigvalsh(s).min()) >= -1e-12 * n
    assert float((s @ torch.ones(k, dtype=torch.float64)).abs().max()) <= 1e-12 * n


def test_sigma_q_annihilates_ones_general_k():
    assert D.prove_sigma_q_annihilates_ones_general_k().holds is True


def test_v_equals_trace_p_sigma_p():
    # q fixed: V = tr(P_r^T Sigma_q P_r), so V >= 0 is Sigma_q >= 0.
    z, p, q = D.random_instance(1.0, 0.5, 7)
    v = D.variance_term(p, q)
    assert torch.allclose(v, torch.trace(p.T @ D.sigma_q(q) @ p), rtol=1e-12)


# --- D6 ---------------------------------------------------------------------------------------

def test_v_zero_at_collapse():
    check = D.collapse_check()
    assert check.v_symbolic == 0
    assert 0.0 <= check.v_at_collapse < 1e-25
    assert abs(check.lq_minus_lols_at_collapse) < 1e-12
    for spread, v, bound in check.near:
        assert 0.0 <= v <= bound + 1e-25
    # V decreases to 0 with the spread, it never blows up
    vs = [v for _, v, _ in check.near]
    assert vs == sorted(vs, reverse=True)


# --- input checks -----------------------------------------------------------------------------

def test_reference_terms_reject_bad_shapes():
    z = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="prototypes"):
        D.reference_terms(z, torch.zeros(4, 3), torch.zeros(3, 4))
    with pytest.raises(ValueError, match="q"):
        D.reference_terms(z, torch.zeros(4, 2), torch.zeros(3, 5))
    with pytest.raises(ValueError, match="q"):
        D.sigma_q(torch.zeros(3))


def test_reference_terms_agree_with_functional():
    z, p, q = D.random_instance(2.0, 0.7, 11)
    for a, b in zip(D.reference_terms(z, p, q), F.loss_terms(z, p, q)):
        assert torch.allclose(a, b, rtol=1e-12, atol=0)
