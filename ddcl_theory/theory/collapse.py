"""Collapse of a prototype bank: the critical temperature, Hessians at collapse, the V force.

Collapse is the configuration p_1 = ... = p_K = zbar (the data mean). It is a critical point of
the free energy F_tau (see :mod:`.free_energy`) at every temperature. With C the data covariance
(divisor N) and lambda_1 >= ... >= lambda_d its eigenvalues, the Hessian of F at collapse
(P flattened row by row, shape (K d, K d)) has the eigenvalues

* 2N/K on the d translation directions (every prototype moved by the same vector);
* (2N/K)(1 - 2 lambda_i / tau), each K - 1 times, on the zero-sum directions (sum_k u_k = 0),

so collapse is a strict local minimum for tau > T_c = 2 lambda_1 and a saddle for tau < T_c.

The quantisation loss L_q = sum_nk q_nk d_nk with q *differentiated* (what autograd does through
the softmax) is L_q = F + tau H, a different function: its zero-sum Hessian at collapse is
(2N/K)(I - 4C/tau), so collapse is a saddle of L_q only below 4 lambda_1 = 2 T_c(F). The
``objective`` argument says which loss a threshold or Hessian belongs to; see
:mod:`.collapse_symbolic` for the SymPy derivation of both.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ddcl_theory.functional import Temperature, check_temperature, soft_assign
from ddcl_theory.theory.free_energy import distortion, free_energy, free_energy_grad

#: Objective name -> m in the zero-sum Hessian (2N/K)(I - m C / tau) at collapse; T_c = m lambda_1.
#: "free_energy": F (q at its Gibbs value, or q detached: the gradient is F's);
#: "quantisation": L_q with q differentiated.
COLLAPSE_FACTORS = {"free_energy": 2.0, "quantisation": 4.0}


def _factor(objective: str) -> float:
    if objective not in COLLAPSE_FACTORS:
        raise ValueError(f"objective: expected one of {sorted(COLLAPSE_FACTORS)}, "
                         f"got {objective!r}")
    return COLLAPSE_FACTORS[objective]


def _check_tokens(z: Tensor) -> None:
    if not isinstance(z, Tensor) or z.dim() != 2 or z.shape[0] < 1:
        raise ValueError(f"z: expected shape (N, d) with N >= 1, got {getattr(z, 'shape', z)!r}")


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise ValueError(f"k: expected an int >= 2 prototypes, got {k!r}")


def data_covariance(z: Tensor) -> Tensor:
    """C = (1/N) sum_n (z_n - zbar)(z_n - zbar)^T, shape (d, d), float64."""
    _check_tokens(z)
    x = z.detach().to(torch.float64)
    x = x - x.mean(0, keepdim=True)
    return x.T @ x / x.shape[0]


def critical_temperature(z: Tensor, objective: str = "free_energy") -> float:
    """Collapse threshold m lambda_max(C) for tokens z (N, d), C the covariance with divisor N.

    ``objective="free_energy"`` (default): T_c = 2 lambda_max, the threshold of F (q at its Gibbs
    value; also of training with q detached). ``"quantisation"``: 4 lambda_max, the threshold of
    L_q with q differentiated. Below it the collapsed bank (all prototypes at the data mean) is a
    saddle of that objective; above it a strict local minimum. It does not depend on K >= 2.
    """
    factor = _factor(objective)
    return float(factor * torch.linalg.eigvalsh(data_covariance(z))[-1])


def collapsed(z: Tensor, k: int) -> Tensor:
    """The collapsed bank: K copies of the data mean, shape (K, d), float64."""
    _check_tokens(z)
    _check_k(k)
    return z.detach().to(torch.float64).mean(0, keepdim=True).repeat(k, 1)


def collapse_hessian_eigenvalues(z: Tensor, k: int, temperature: Temperature,
                                 objective: str = "free_energy") -> tuple[Tensor, Tensor]:
    """Predicted Hessian eigenvalues at collapse: (translation (d,), zero-sum (d,)).

    translation: 2N/K, d times. zero-sum: (2N/K)(1 - m lambda_i / tau), i = 1..d ascending, each
    with multiplicity K - 1 in the full Hessian; m = 2 for F, 4 for L_q (q differentiated).
    """
    factor = _factor(objective)
    _check_k(k)
    check_temperature(temperature)
    n = z.shape[0]
    lam = torch.linalg.eigvalsh(data_covariance(z))
    scale = 2.0 * n / k
    tau = float(temperature)
    return torch.full_like(lam, scale), torch.sort(scale * (1.0 - factor * lam / tau)).values


def free_energy_hessian(z: Tensor, prototypes: Tensor, temperature: Temperature,
                        objective: str = "free_energy") -> Tensor:
    """Autograd Hessian at P, float64, shape (K d, K d) (P flattened row by row).

    ``objective="free_energy"``: of F_tau; ``"quantisation"``: of L_q with q differentiated.
    """
    _factor(objective)
    loss = free_energy if objective == "free_energy" else distortion
    zz = z.detach().to(torch.float64)
    k, d = prototypes.shape
    tau = float(temperature)

    def f(flat: Tensor) -> Tensor:
        return loss(zz, flat.reshape(k, d), tau)

    flat = prototypes.detach().to(torch.float64).reshape(-1)
    return torch.autograd.functional.hessian(f, flat)


def zero_sum_basis(k: int) -> Tensor:
    """An orthonormal basis (K, K-1) of {u in R^K : sum u = 0}, float64."""
    _check_k(k)
    ones = torch.ones(k, 1, dtype=torch.float64) / k ** 0.5
    full = torch.linalg.qr(torch.cat([ones, torch.eye(k, dtype=torch.float64)[:, : k - 1]], 1))[0]
    return torch.empty(k, k - 1, dtype=torch.float64).copy_(full[:, 1:])  # plain strides for kron


def restrict_to_zero_sum(hessian: Tensor, k: int, d: int) -> Tensor:
    """The Hessian (K d, K d) restricted to zero-sum perturbations: shape ((K-1) d, (K-1) d)."""
    if hessian.shape != (k * d, k * d):
        raise ValueError(f"hessian: expected shape ({k * d}, {k * d}), got {tuple(hessian.shape)}")
    basis = torch.kron(zero_sum_basis(k), torch.eye(d, dtype=torch.float64))  # (K d, (K-1) d)
    return basis.T @ hessian.to(torch.float64) @ basis


def min_zero_sum_eigenvalue(z: Tensor, k: int, temperature: Temperature,
                            objective: str = "free_energy") -> float:
    """Smallest eigenvalue of the autograd Hessian at collapse on zero-sum perturbations (float64).

    Positive: collapse is a strict local minimum of the objective; negative: a saddle.
    """
    hess = free_energy_hessian(z, collapsed(z, k), temperature, objective)
    return float(torch.linalg.eigvalsh(restrict_to_zero_sum(hess, k, z.shape[1]))[0])


def assignment_covariance(q: Tensor) -> Tensor:
    """Sigma_q = sum_n (diag(q_n) - q_n q_n^T), shape (K, K): PSD, Sigma_q 1 = 0.

    It is the Laplacian of the prototype graph with weights w_kj = sum_n q_nk q_nj.
    """
    if q.dim() != 2:
        raise ValueError(f"q: expected shape (N, K), got {tuple(q.shape)}")
    return torch.diag(q.sum(0)) - q.T @ q


def force_split(z: Tensor, prototypes: Tensor, temperature: Temperature) -> tuple[Tensor, Tensor]:
    """Split grad_P F = grad L_q (q fixed) into (data-fit part, V part), each (K, d).

    V part: 2 Sigma_q P (rows convention), the q-fixed gradient of V; data-fit part: the rest,
    -2 sum_n q_nk (z_n - mu_n), the q-fixed gradient of L_OLS. Gradient *descent* moves P by
    minus each part; minus the V part keeps the prototype mean and never increases the spread
    sum_k ||p_k - pbar||^2 (it is a consensus flow on the prototype graph).
    """
    q = soft_assign(z.to(torch.float64), prototypes.to(torch.float64), temperature)
    p = prototypes.to(torch.float64)
    v_part = 2.0 * assignment_covariance(q) @ p
    return free_energy_grad(z.to(torch.float64), p, temperature) - v_part, v_part


def spread(prototypes: Tensor) -> Tensor:
    """sum_k ||p_k - pbar||^2, float64 scalar: 0 exactly at collapse."""
    p = prototypes.to(torch.float64)
    return ((p - p.mean(0, keepdim=True)) ** 2).sum()


def count_clusters(prototypes: Tensor, tol: float) -> int:
    """Number of groups of prototypes closer than ``tol`` (single linkage), an int in [1, K]."""
    if not tol > 0:
        raise ValueError(f"tol: expected a positive distance, got {tol!r}")
    p = prototypes.detach().to(torch.float64)
    close = torch.cdist(p, p) < tol
    k = p.shape[0]
    label = list(range(k))

    def root(i: int) -> int:
        while label[i] != i:
            label[i] = label[label[i]]
            i = label[i]
        return i

    for i in range(k):
        for j in range(i + 1, k):
            if close[i, j]:
                label[root(i)] = root(j)
    return len({root(i) for i in range(k)})
