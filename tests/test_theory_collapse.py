"""Both collapse thresholds: F (q at its Gibbs value) and L_q with q differentiated.

ddcl_theory.theory.collapse: critical_temperature(z, objective), the Hessians at collapse.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ddcl_theory.theory import collapse as col
from ddcl_theory.theory import critical_temperature

F64 = torch.float64


def _tokens(seed: int, n: int = 30, d: int = 3) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=gen, dtype=F64) @ torch.randn(d, d, generator=gen,
                                                                       dtype=F64)


def _quantisation_min_eigenvalue(z, k, tau):
    """Independent of the package: L_q = sum q d with q = softmax(-d / tau) differentiated."""
    n, d = z.shape

    def loss(flat):
        dist = ((z[:, None, :] - flat.reshape(k, d)[None]) ** 2).sum(-1)   # (N, K)
        return (torch.softmax(-dist / tau, dim=1) * dist).sum()

    hess = torch.autograd.functional.hessian(loss, z.mean(0).repeat(k, 1).reshape(-1))
    basis = torch.kron(col.zero_sum_basis(k), torch.eye(d, dtype=F64))
    return float(torch.linalg.eigvalsh(basis.T @ hess @ basis)[0])


def test_default_objective_is_free_energy_and_keeps_its_number():
    z = _tokens(0)
    lam = np.linalg.eigvalsh(np.cov(z.numpy().T, bias=True))[-1]
    assert critical_temperature(z) == critical_temperature(z, objective="free_energy")
    assert math.isclose(critical_temperature(z), 2 * lam, rel_tol=1e-10)
    assert math.isclose(critical_temperature(z, objective="quantisation"), 4 * lam,
                        rel_tol=1e-10)


def test_unknown_objective_is_a_value_error_naming_the_argument():
    z = _tokens(1)
    for call in (lambda: critical_temperature(z, objective="distortion"),
                 lambda: col.collapse_hessian_eigenvalues(z, 2, 1.0, objective="F"),
                 lambda: col.free_energy_hessian(z, col.collapsed(z, 2), 1.0, objective="")):
        with pytest.raises(ValueError, match="objective"):
            call()


@pytest.mark.parametrize("seed,k", [(0, 2), (1, 3), (2, 5)])
def test_quantisation_threshold_is_where_autograd_hessian_changes_sign(seed, k):
    z = _tokens(seed)
    t_q = critical_temperature(z, objective="quantisation")
    assert _quantisation_min_eigenvalue(z, k, t_q * (1 + 1e-4)) > 0
    assert _quantisation_min_eigenvalue(z, k, t_q * (1 - 1e-4)) < 0
    assert abs(_quantisation_min_eigenvalue(z, k, t_q)) < 1e-8 * z.shape[0]


@pytest.mark.parametrize("tau_ratio", [0.5, 1.5, 3.0, 5.0])
@pytest.mark.parametrize("objective", ["free_energy", "quantisation"])
def test_hessian_spectrum_at_collapse_matches_prediction(tau_ratio, objective):
    z, k = _tokens(3, n=25, d=2), 3
    tau = tau_ratio * float(torch.linalg.eigvalsh(col.data_covariance(z))[-1])
    hess = col.free_energy_hessian(z, col.collapsed(z, k), tau, objective)
    trans, zero = col.collapse_hessian_eigenvalues(z, k, tau, objective)
    predicted = torch.sort(torch.cat([trans, zero.repeat_interleave(k - 1)])).values
    assert torch.allclose(torch.linalg.eigvalsh(hess), predicted, rtol=1e-9, atol=1e-9)
    assert col.min_zero_sum_eigenvalue(z, k, tau, objective) == pytest.approx(
        float(zero[0]), rel=1e-9, abs=1e-9)


def test_between_the_thresholds_collapse_is_a_minimum_of_f_and_a_saddle_of_lq():
    z = _tokens(4, n=200)
    tau = 2.5 * float(torch.linalg.eigvalsh(col.data_covariance(z))[-1])
    assert col.min_zero_sum_eigenvalue(z, 3, tau, "free_energy") > 0
    assert col.min_zero_sum_eigenvalue(z, 3, tau, "quantisation") < 0
    assert _quantisation_min_eigenvalue(z, 3, tau) == pytest.approx(
        col.min_zero_sum_eigenvalue(z, 3, tau, "quantisation"), rel=1e-9)


def test_quantisation_loss_gradgradcheck_float64():
    from ddcl_theory.theory.free_energy import distortion
    z = _tokens(5, n=8, d=2)
    p = col.collapsed(z, 3) + 0.1 * torch.randn(3, 2, dtype=F64,
                                               generator=torch.Generator().manual_seed(0))
    p.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda q: distortion(z, q, 1.3), (p,))
    assert torch.autograd.gradgradcheck(lambda q: distortion(z, q, 1.3), (p,))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_quantisation_grad_closed_form_equals_autograd_and_differs_from_f(seed):
    from ddcl_theory.theory import free_energy as fe
    gen = torch.Generator().manual_seed(seed)
    z = 2 * torch.randn(20, 3, generator=gen, dtype=F64)
    p = torch.randn(4, 3, generator=gen, dtype=F64).requires_grad_(True)
    (g_auto,) = torch.autograd.grad(fe.distortion(z, p, 0.8), p)
    g_closed = fe.quantisation_grad(z, p.detach(), 0.8)
    assert torch.allclose(g_auto, g_closed, rtol=1e-10, atol=1e-10)
    g_f, g_h = fe.free_energy_grad(z, p.detach(), 0.8), torch.autograd.grad(
        fe.assignment_entropy(z, p, 0.8), p)[0]
    assert torch.allclose(g_closed, g_f + 0.8 * g_h, rtol=1e-9, atol=1e-9)   # L_q = F + tau H
    assert not torch.allclose(g_closed, g_f, atol=1e-3)
    step = fe.gradient_step(z, p.detach(), 0.8, 0.01, objective="quantisation")
    assert torch.allclose(step, p.detach() - 0.01 * g_closed)
    with pytest.raises(ValueError, match="objective"):
        fe.gradient_step(z, p.detach(), 0.8, 0.01, objective="l_q")


def test_lq_descent_leaves_collapse_between_the_thresholds_f_descent_does_not():
    from ddcl_theory.theory import free_energy as fe
    z = _tokens(6, n=100, d=2)
    lam = float(torch.linalg.eigvalsh(col.data_covariance(z))[-1])
    pert = 1e-4 * torch.tensor([[1.0, 0.5], [-1.0, -0.5]], dtype=F64)
    spreads = {}
    for objective in ("free_energy", "quantisation"):
        for ratio in (3.0, 4.4):          # tau / lambda_max: between the thresholds, above both
            p = col.collapsed(z, 2) + pert
            for _ in range(300):
                p = fe.gradient_step(z, p, ratio * lam, 0.9 / 100, objective=objective)
            spreads[objective, ratio] = float(col.spread(p)) / float(col.spread(pert))
    assert spreads["free_energy", 3.0] < 1e-3 and spreads["free_energy", 4.4] < 1e-3
    assert spreads["quantisation", 3.0] > 1e3 and spreads["quantisation", 4.4] < 1
