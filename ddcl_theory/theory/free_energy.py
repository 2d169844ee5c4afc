"""The deterministic-annealing free energy of a prototype bank, its gradient and descent steps.

Notation as in :mod:`ddcl_theory.functional`: tokens z (N, d), prototypes P (K, d) as rows,
temperature tau > 0, d_nk = ||z_n - p_k||^2, q_nk = softmax_k(-d_nk / tau). Unlike
``functional.loss_terms`` (means over tokens), every quantity here is a *sum* over the N tokens,
as in the book's statements:

* free energy      F_tau(P) = -tau sum_n log sum_k exp(-d_nk / tau)
* distortion       L_q(P)   = sum_n sum_k q_nk d_nk
* entropy          H(P)     = -sum_n sum_k q_nk log q_nk       (0 <= H <= N log K)
* gradient         grad_{p_k} F = 2 sum_n q_nk (p_k - z_n) = 2 (N_k p_k - sum_n q_nk z_n)
  (= grad L_q with q held fixed; with q differentiated grad L_q = grad F + tau grad H)
* cluster mass     N_k = sum_n q_nk
* annealing bound  G_tau(P) = F_tau(P) + N tau log K = -tau sum_n log mean_k exp(-d_nk / tau)

so that F = L_q - tau H, dF/dtau = -H and G is non-increasing under cooling.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ddcl_theory.functional import Temperature, check_temperature, squared_distances


def _scaled_logits(z: Tensor, prototypes: Tensor, temperature: Temperature) -> Tensor:
    """-d_nk / tau, shape (N, K), in the working dtype of ``squared_distances``."""
    check_temperature(temperature)
    d = squared_distances(z, prototypes)
    tau = temperature.to(d.dtype) if isinstance(temperature, Tensor) else temperature
    return -d / tau


def free_energy(z: Tensor, prototypes: Tensor, temperature: Temperature) -> Tensor:
    """F_tau(P) = -tau sum_n logsumexp_k(-d_nk / tau), a scalar (sum over the N tokens)."""
    logits = _scaled_logits(z, prototypes, temperature)
    tau = temperature.to(logits.dtype) if isinstance(temperature, Tensor) else temperature
    return -tau * torch.logsumexp(logits, dim=-1).sum()


def assignment_entropy(z: Tensor, prototypes: Tensor, temperature: Temperature) -> Tensor:
    """H = -sum_n sum_k q_nk log q_nk, a scalar in [0, N log K] (sum over tokens)."""
    log_q = torch.log_softmax(_scaled_logits(z, prototypes, temperature), dim=-1)
    return -(log_q.exp() * log_q).sum()


def distortion(z: Tensor, prototypes: Tensor, temperature: Temperature) -> Tensor:
    """L_q = sum_n sum_k q_nk ||z_n - p_k||^2 with Boltzmann q (sum over tokens)."""
    logits = _scaled_logits(z, prototypes, temperature)
    q = torch.softmax(logits, dim=-1)
    return (q * squared_distances(z, prototypes)).sum()


def cluster_mass(z: Tensor, prototypes: Tensor, temperature: Temperature) -> Tensor:
    """N_k = sum_n q_nk, shape (K,); sums to N."""
    return torch.softmax(_scaled_logits(z, prototypes, temperature), dim=-1).sum(0)


def free_energy_grad(z: Tensor, prototypes: Tensor, temperature: Temperature) -> Tensor:
    """grad_P F in closed form, shape (K, d): row k is 2 (N_k p_k - sum_n q_nk z_n).

    This is also the gradient of L_q with q held fixed (the envelope theorem).
    """
    q = torch.softmax(_scaled_logits(z, prototypes, temperature), dim=-1)
    p = prototypes.to(q.dtype)
    return 2.0 * (q.sum(0).unsqueeze(-1) * p - q.T @ z.to(q.dtype))


def quantisation_grad(z: Tensor, prototypes: Tensor, temperature: Temperature) -> Tensor:
    """grad_P L_q with q *differentiated* (as autograd through the softmax), shape (K, d):
    row k is 2 sum_n q_nk (1 - (d_nk - dbar_n) / tau) (p_k - z_n), dbar_n = sum_j q_nj d_nj.

    It equals grad F + tau grad H (L_q = F + tau H), not grad F: descent of L_q is not descent
    of F (their thresholds at collapse are 4 and 2 lambda_max, see :mod:`.collapse`).
    """
    logits = _scaled_logits(z, prototypes, temperature)
    q = torch.softmax(logits, dim=-1)
    tau = temperature.to(q.dtype) if isinstance(temperature, Tensor) else temperature
    d = squared_distances(z, prototypes).to(q.dtype)
    w = q * (1.0 - (d - (q * d).sum(-1, keepdim=True)) / tau)                   # (N, K)
    return 2.0 * (w.sum(0).unsqueeze(-1) * prototypes.to(q.dtype) - w.T @ z.to(q.dtype))


def annealing_lyapunov(z: Tensor, prototypes: Tensor, temperature: Temperature) -> Tensor:
    """G_tau(P) = F_tau(P) + N tau log K: non-increasing under cooling (see the module
    docstring)."""
    n, k = z.shape[0], prototypes.shape[0]
    tau = float(temperature)
    return free_energy(z, prototypes, temperature) + n * tau * math.log(k)


def hessian_upper_bound(z: Tensor, prototypes: Tensor, temperature: Temperature) -> Tensor:
    """2 max_k N_k: an upper bound on the largest eigenvalue of the Hessian of F at P.

    The Hessian's quadratic form is
    2 sum_k N_k ||u_k||^2 - (4/tau) sum_n Var_{q_n}(<p_k - z_n, u_k>)
    and the variance term is >= 0. The bound is <= 2N for every P and tau.
    """
    return 2.0 * cluster_mass(z, prototypes, temperature).max()


def safe_step(n_tokens: int) -> float:
    """1 / N: every step size 0 < eta < 1/N makes a gradient step decrease F (sum convention)."""
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or n_tokens < 1:
        raise ValueError(f"n_tokens: expected an int >= 1, got {n_tokens!r}")
    return 1.0 / n_tokens


def gradient_step(z: Tensor, prototypes: Tensor, temperature: Temperature, step: float,
                  objective: str = "free_energy") -> Tensor:
    """One prototype gradient step P - step * grad(P), shape (K, d): grad F_tau (default; also
    L_q with q detached) or, with ``objective="quantisation"``, grad L_q with q differentiated."""
    if not step > 0:
        raise ValueError(f"step: expected a positive step size, got {step!r}")
    if objective not in ("free_energy", "quantisation"):
        raise ValueError(f"objective: expected 'free_energy' or 'quantisation', got {objective!r}")
    grads = {"free_energy": free_energy_grad, "quantisation": quantisation_grad}
    grad = grads[objective](z, prototypes, temperature)
    return prototypes.to(grad.dtype) - step * grad


def em_step(z: Tensor, prototypes: Tensor, temperature: Temperature) -> Tensor:
    """One deterministic-annealing fixed-point step p_k <- sum_n q_nk z_n / N_k, shape (K, d).

    It is the gradient step with the per-prototype step 1 / (2 N_k), and it never increases F:
    F(P') <= L_q(P') - tau H(q) <= L_q(P) - tau H(q) = F(P) with q = q(P).
    """
    q = torch.softmax(_scaled_logits(z, prototypes, temperature), dim=-1)
    mass = q.sum(0).clamp_min(torch.finfo(q.dtype).tiny)
    return (q.T @ z.to(q.dtype)) / mass.unsqueeze(-1)


def em_fixed_point(z: Tensor, prototypes: Tensor, temperature: float, *, max_iters: int,
                   tol: float) -> tuple[Tensor, int, bool]:
    """Iterate :func:`em_step` until no prototype coordinate moves more than ``tol``.

    Returns (P (K, d), iterations used, settled), settled False when ``max_iters`` ran out.
    The loop drops ||z_n||^2 from the logits (a per-token shift, which the softmax ignores)
    and computes everything in float64.
    """
    check_temperature(temperature)
    if isinstance(max_iters, bool) or not isinstance(max_iters, int) or max_iters < 1:
        raise ValueError(f"max_iters: expected an int >= 1, got {max_iters!r}")
    if not tol > 0:
        raise ValueError(f"tol: expected a positive tolerance, got {tol!r}")
    zz = z.detach().to(torch.float64)
    p = prototypes.detach().to(torch.float64)
    tau = float(temperature)
    for it in range(1, max_iters + 1):
        logits = (2.0 * zz @ p.T - (p * p).sum(-1)) / tau
        q = torch.softmax(logits, dim=-1)
        new = (q.T @ zz) / q.sum(0).clamp_min(torch.finfo(q.dtype).tiny).unsqueeze(-1)
        moved = float((new - p).abs().max())
        p = new
        if moved <= tol:
            return p, it, True
    return p, max_iters, False
