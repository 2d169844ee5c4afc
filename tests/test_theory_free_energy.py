"""Free energy, descent, annealing and collapse (claims D7, D10): ddcl_theory.theory."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ddcl_theory.functional import loss_terms, soft_assign
from ddcl_theory.theory import collapse as col
from ddcl_theory.theory import critical_temperature
from ddcl_theory.theory import free_energy as fe
from ddcl_theory.theory.annealing import (
    constant_schedule,
    exponential_schedule,
    linear_schedule,
    run_flow,
)

F64 = torch.float64


def _instance(seed: int, n: int, k: int, d: int, scale: float = 2.0):
    gen = torch.Generator().manual_seed(seed)
    z = scale * torch.randn(n, d, generator=gen, dtype=F64)
    p = scale * torch.randn(k, d, generator=gen, dtype=F64)
    return z, p


sizes = st.tuples(st.integers(0, 10_000), st.integers(2, 12), st.integers(2, 5), st.integers(1, 3))
temperatures = st.floats(0.05, 20.0)


# --- identities of F (theorem "Identities of the free energy") -------------------------------

@settings(max_examples=40, deadline=None)
@given(sizes, temperatures)
def test_free_energy_equals_lq_minus_tau_entropy(size, tau):
    seed, n, k, d = size
    z, p = _instance(seed, n, k, d)
    l_q, _, _ = loss_terms(z, p, soft_assign(z, p, tau))      # mean over tokens
    lhs = fe.free_energy(z, p, tau)
    rhs = n * l_q - tau * fe.assignment_entropy(z, p, tau)
    assert torch.allclose(lhs, rhs, rtol=1e-10, atol=1e-10)
    assert torch.allclose(fe.distortion(z, p, tau), n * l_q, rtol=1e-10, atol=1e-10)


@settings(max_examples=30, deadline=None)
@given(sizes, temperatures)
def test_free_energy_gradient_closed_form_equals_autograd(size, tau):
    seed, n, k, d = size
    z, p = _instance(seed, n, k, d)
    p = p.requires_grad_(True)
    (g,) = torch.autograd.grad(fe.free_energy(z, p, tau), p)
    assert torch.allclose(g, fe.free_energy_grad(z, p.detach(), tau), rtol=1e-9, atol=1e-9)


def test_free_energy_gradcheck_float64():
    z, p = _instance(1, 7, 3, 2)
    assert torch.autograd.gradcheck(lambda pp: fe.free_energy(z, pp, 0.7), (p.requires_grad_(True),))


def test_gradient_of_f_is_q_fixed_gradient_of_lq():
    z, p = _instance(2, 9, 4, 3)
    q = soft_assign(z, p, 1.3).detach()
    pp = p.clone().requires_grad_(True)
    l_q, _, _ = loss_terms(z, pp, q)
    (g,) = torch.autograd.grad(z.shape[0] * l_q, pp)
    assert torch.allclose(g, fe.free_energy_grad(z, p, 1.3), atol=1e-10)


@settings(max_examples=30, deadline=None)
@given(sizes, st.floats(0.2, 10.0))
def test_dF_dtau_equals_minus_entropy_finite_difference(size, tau):
    seed, n, k, d = size
    z, p = _instance(seed, n, k, d)
    h = 1e-5 * tau
    dF = (fe.free_energy(z, p, tau + h) - fe.free_energy(z, p, tau - h)) / (2 * h)
    H = fe.assignment_entropy(z, p, tau)
    assert abs(float(dF + H)) < 1e-6 * (1 + float(H))


@settings(max_examples=30, deadline=None)
@given(sizes, temperatures)
def test_entropy_bounds_and_lyapunov_g_monotone_in_tau(size, tau):
    seed, n, k, d = size
    z, p = _instance(seed, n, k, d)
    H = float(fe.assignment_entropy(z, p, tau))
    assert -1e-12 <= H <= n * math.log(k) + 1e-9
    # dG/dtau = N log K - H >= 0: cooling never raises G at fixed P
    assert float(fe.annealing_lyapunov(z, p, 0.7 * tau)) <= float(fe.annealing_lyapunov(z, p, tau)) + 1e-9
    # ... while F rises when the temperature drops (dF/dtau = -H <= 0)
    assert float(fe.free_energy(z, p, 0.7 * tau)) >= float(fe.free_energy(z, p, tau)) - 1e-9


def test_cluster_mass_sums_to_n():
    z, p = _instance(3, 11, 4, 2)
    assert torch.allclose(fe.cluster_mass(z, p, 0.9).sum(), torch.tensor(11.0, dtype=F64))


# --- descent (lemma "Curvature bound", theorem "Monotone descent for eta < 1/N") --------------

@settings(max_examples=25, deadline=None)
@given(sizes, st.floats(0.05, 10.0))
def test_hessian_largest_eigenvalue_below_two_max_mass(size, tau):
    seed, n, k, d = size
    z, p = _instance(seed, n, k, d)
    lam = float(torch.linalg.eigvalsh(col.free_energy_hessian(z, p, tau))[-1])
    assert lam <= float(fe.hessian_upper_bound(z, p, tau)) * (1 + 1e-9) + 1e-9
    assert float(fe.hessian_upper_bound(z, p, tau)) <= 2 * n + 1e-9


@settings(max_examples=40, deadline=None)
@given(sizes, temperatures, st.floats(0.01, 0.99))
def test_gradient_step_below_one_over_n_decreases_f_by_the_descent_lemma(size, tau, frac):
    seed, n, k, d = size
    z, p = _instance(seed, n, k, d)
    eta = frac * fe.safe_step(n)
    g = fe.free_energy_grad(z, p, tau)
    f0 = float(fe.free_energy(z, p, tau))
    f1 = float(fe.free_energy(z, fe.gradient_step(z, p, tau, eta), tau))
    assert f1 <= f0 - eta * (1 - eta * n) * float((g * g).sum()) + 1e-9 * (1 + abs(f0))


def test_step_above_one_over_n_can_increase_f():
    z, _ = _instance(4, 50, 2, 2)
    p = torch.stack([z.mean(0) + 0.5, z.mean(0) + 100.0])     # one prototype holds all the mass
    f0 = float(fe.free_energy(z, p, 0.5))
    assert float(fe.free_energy(z, fe.gradient_step(z, p, 0.5, 0.95 / 50), 0.5)) < f0
    assert float(fe.free_energy(z, fe.gradient_step(z, p, 0.5, 1.05 / 50), 0.5)) > f0


@settings(max_examples=25, deadline=None)
@given(sizes, temperatures)
def test_em_step_never_increases_f(size, tau):
    seed, n, k, d = size
    z, p = _instance(seed, n, k, d)
    f0 = float(fe.free_energy(z, p, tau))
    assert float(fe.free_energy(z, fe.em_step(z, p, tau), tau)) <= f0 + 1e-9 * (1 + abs(f0))


# --- annealing (theorem "Lyapunov function under cooling") ------------------------------------

@settings(max_examples=20, deadline=None)
@given(sizes, st.floats(0.5, 20.0), st.floats(0.01, 0.9), st.integers(1, 30),
       st.sampled_from(["linear", "exponential"]), st.floats(0.05, 0.99))
def test_g_never_rises_under_any_decreasing_schedule(size, tau0, end, steps, kind, frac):
    seed, n, k, d = size
    z, p = _instance(seed, n, k, d)
    make = linear_schedule if kind == "linear" else exponential_schedule
    tr = run_flow(z, p, make(tau0, end * tau0, steps), step=frac / n)
    assert tr.max_rise("lyapunov") <= 1e-9 * (1 + abs(tr.lyapunov).max())
    assert np.allclose(tr.lyapunov, tr.free_energy + n * tr.temperatures * math.log(k))


def test_f_rises_when_cooling_from_collapse_by_n_log_k_dtau():
    z, _ = _instance(5, 40, 3, 2)
    taus = linear_schedule(3 * critical_temperature(z), 2.5 * critical_temperature(z), 1)
    tr = run_flow(z, col.collapsed(z, 3), taus, step=0.5 / 40)
    rise = tr.free_energy[1] - tr.free_energy[0]
    assert rise > 0
    assert math.isclose(rise, 40 * math.log(3) * (taus[0] - taus[1]), rel_tol=1e-9)


def test_fixed_temperature_flow_is_monotone():
    z, p = _instance(6, 60, 4, 2)
    tr = run_flow(z, p, constant_schedule(0.8, 200), step=0.9 / 60)
    assert tr.max_rise() <= 1e-9 * abs(tr.free_energy[0])
    assert tr.free_energy[-1] < tr.free_energy[0]


def test_schedules_shapes_and_bad_input():
    assert linear_schedule(2.0, 1.0, 4).tolist() == [2.0, 1.75, 1.5, 1.25, 1.0]
    assert np.allclose(exponential_schedule(8.0, 1.0, 3), [8.0, 4.0, 2.0, 1.0])
    with pytest.raises(ValueError, match="steps"):
        linear_schedule(1.0, 0.5, 0)
    with pytest.raises(ValueError, match="tau_start"):
        exponential_schedule(-1.0, 0.5, 3)
    z, p = _instance(0, 5, 2, 2)
    with pytest.raises(ValueError, match="step"):
        run_flow(z, p, constant_schedule(1.0, 2))
    with pytest.raises(ValueError, match="update"):
        run_flow(z, p, constant_schedule(1.0, 2), update="adam")


# --- collapse and the critical temperature (theorem "Hessian at collapse") --------------------

def _zero_sum_min_eigenvalue(z, k, tau):
    """Independent of critical_temperature: torch.autograd.functional.hessian of F at collapse."""
    n, d = z.shape
    zbar = z.mean(0)

    def f(flat):
        p = flat.reshape(k, d)
        dist = ((z[:, None, :] - p[None, :, :]) ** 2).sum(-1)     # direct (N, K, d) form
        return -tau * torch.logsumexp(-dist / tau, dim=1).sum()

    hess = torch.autograd.functional.hessian(f, zbar.repeat(k, 1).reshape(-1))
    basis = torch.kron(col.zero_sum_basis(k), torch.eye(d, dtype=F64))
    return float(torch.linalg.eigvalsh(basis.T @ hess @ basis)[0])


@pytest.mark.parametrize("seed,k", [(0, 2), (1, 3), (2, 5)])
def test_critical_temperature_is_where_autograd_hessian_at_collapse_changes_sign(seed, k):
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(30, 3, generator=gen, dtype=F64) @ torch.randn(3, 3, generator=gen, dtype=F64)
    t_c = critical_temperature(z)
    assert _zero_sum_min_eigenvalue(z, k, t_c * (1 + 1e-4)) > 0
    assert _zero_sum_min_eigenvalue(z, k, t_c * (1 - 1e-4)) < 0
    assert abs(_zero_sum_min_eigenvalue(z, k, t_c)) < 1e-8 * z.shape[0]


def test_critical_temperature_is_twice_largest_covariance_eigenvalue():
    z, _ = _instance(7, 200, 2, 3)
    c = np.cov(z.numpy().T, bias=True)
    assert math.isclose(critical_temperature(z), 2 * np.linalg.eigvalsh(c)[-1], rel_tol=1e-10)
    assert critical_temperature(z.float()) == pytest.approx(critical_temperature(z), rel=1e-5)


@pytest.mark.parametrize("tau_ratio", [0.5, 0.9, 1.1, 3.0])
def test_collapse_hessian_spectrum_matches_prediction(tau_ratio):
    z, _ = _instance(8, 25, 3, 2)
    k, d = 3, 2
    tau = tau_ratio * critical_temperature(z)
    hess = col.free_energy_hessian(z, col.collapsed(z, k), tau)
    trans, zero = col.collapse_hessian_eigenvalues(z, k, tau)
    predicted = torch.sort(torch.cat([trans, zero.repeat_interleave(k - 1)])).values
    assert torch.allclose(torch.linalg.eigvalsh(hess), predicted, rtol=1e-9, atol=1e-9)
    assert torch.allclose(fe.free_energy_grad(z, col.collapsed(z, k), tau), torch.zeros(k, d, dtype=F64),
                          atol=1e-10)


def test_critical_temperature_bad_input():
    with pytest.raises(ValueError, match="z"):
        critical_temperature(torch.zeros(5))
    with pytest.raises(ValueError, match="k"):
        col.collapsed(torch.zeros(4, 2), 1)


# --- the V part of the flow (proposition "The V part of the flow is attractive") --------------

@settings(max_examples=40, deadline=None)
@given(sizes, temperatures)
def test_v_part_of_descent_keeps_mean_and_never_increases_spread(size, tau):
    seed, n, k, d = size
    z, p = _instance(seed, n, k, d)
    fit, v_part = col.force_split(z, p, tau)
    assert torch.allclose(fit + v_part, fe.free_energy_grad(z, p, tau), atol=1e-10)
    assert float(v_part.sum(0).abs().max()) < 1e-9 * (1 + float(v_part.abs().max()))
    centred = p - p.mean(0, keepdim=True)
    assert float((centred * -v_part).sum()) <= 1e-9


def test_v_part_is_q_fixed_gradient_of_v():
    z, p = _instance(9, 10, 3, 2)
    q = soft_assign(z, p, 1.1).detach()
    pp = p.clone().requires_grad_(True)
    _, _, v = loss_terms(z, pp, q)
    (g,) = torch.autograd.grad(z.shape[0] * v, pp)
    assert torch.allclose(g, col.force_split(z, p, 1.1)[1], atol=1e-10)


def test_assignment_covariance_is_a_laplacian():
    z, p = _instance(10, 12, 4, 2)
    sigma = col.assignment_covariance(soft_assign(z, p, 0.8))
    assert torch.allclose(sigma.sum(1), torch.zeros(4, dtype=F64), atol=1e-12)
    assert (sigma - torch.diag(torch.diag(sigma)) <= 1e-15).all()
    assert float(torch.linalg.eigvalsh(sigma)[0]) > -1e-12


def test_count_clusters_and_spread():
    p = torch.tensor([[0.0, 0.0], [1e-9, 0.0], [1.0, 0.0], [1.0, 1e-9]], dtype=F64)
    assert col.count_clusters(p, 1e-3) == 2
    assert col.count_clusters(p, 10.0) == 1
    assert float(col.spread(col.collapsed(torch.randn(5, 2, dtype=F64), 3))) == pytest.approx(0.0, abs=1e-28)
    with pytest.raises(ValueError, match="tol"):
        col.count_clusters(p, 0.0)


def test_em_fixed_point_matches_repeated_em_steps_and_reports_settling():
    z, p = _instance(11, 40, 3, 2)
    expected = p
    for _ in range(5):
        expected = fe.em_step(z, expected, 1.5)
    got, iters, settled = fe.em_fixed_point(z, p, 1.5, max_iters=5, tol=1e-300)
    assert torch.allclose(got, expected, atol=1e-12) and iters == 5 and not settled
    fixed, iters, settled = fe.em_fixed_point(z, p, 1.5, max_iters=10_000, tol=1e-12)
    assert settled and iters < 10_000
    assert float(fe.free_energy_grad(z, fixed, 1.5).abs().max()) < 1e-8
    with pytest.raises(ValueError, match="max_iters"):
        fe.em_fixed_point(z, p, 1.5, max_iters=0, tol=1e-9)
