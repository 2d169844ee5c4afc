"""Two time scales: prototypes fast, encoder slow (claims D8, D9).

Time is measured in units of 1 / eta_P. With prototype parameters ``P`` (first block, size m) and
encoder parameters ``theta`` (second block, size n), each descending its own objective,

    dP/ds = -grad_P L_P(P, theta),      dtheta/ds = -eps grad_theta L_theta(P, theta),

with eps = eta_theta / eta_P. Write ``F = (grad_P L_P, grad_theta L_theta)`` and ``G = dF/dw``
(the "game Hessian", symmetric exactly when L_P = L_theta). At an equilibrium the linearised flow
is ``J(eps) = -D(eps) G`` with ``D(eps) = diag(I_m, eps I_n)``, i.e.

    J(eps) = -[[A, B], [eps C, eps E]],   A = G_PP (m, m), B = G_Ptheta (m, n),
                                          C = G_thetaP (n, m), E = G_thetatheta (n, n).

As eps -> 0 the m fast eigenvalues tend to eig(-A) and the n slow ones are
eps * eig(-S) + O(eps^2) with the Schur complement S = E - C A^{-1} B (the Jacobian of the
reduced system, in which P sits at its quasi-steady state P*(theta)).

This module holds the linear algebra (pure functions on matrices). A small concrete coupled model
whose exact float64 derivatives feed it is :mod:`ddcl_theory.theory.coupled_model`; the SymPy
checks on scalar blocks are :mod:`ddcl_theory.theory.timescales_symbolic`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

from ddcl_theory.metrics.fits import loglog_slope  # noqa: F401  (ts.loglog_slope)


# --------------------------------------------------------------------------------------------
# Linear algebra of the two-time-scale Jacobian
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Blocks:
    """The four blocks of the game Hessian ``G`` (prototypes first, encoder second).

    Attributes:
        a: G_PP, shape (m, m).
        b: G_Ptheta, shape (m, n).
        c: G_thetaP, shape (n, m).
        e: G_thetatheta, shape (n, n).
    """

    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    e: np.ndarray

    @property
    def m(self) -> int:
        return self.a.shape[0]

    @property
    def n(self) -> int:
        return self.e.shape[0]

    def full(self) -> np.ndarray:
        """G as one (m + n, m + n) matrix."""
        return np.block([[self.a, self.b], [self.c, self.e]])

    @classmethod
    def split(cls, g: np.ndarray, m: int) -> "Blocks":
        """Cut a square ``g`` (m + n, m + n) into blocks; the first ``m`` rows/cols are fast."""
        g = np.asarray(g, dtype=float)
        if g.ndim != 2 or g.shape[0] != g.shape[1]:
            raise ValueError(f"g: expected a square matrix, got shape {g.shape}")
        if not 0 < m < g.shape[0]:
            raise ValueError(f"m: expected 0 < m < {g.shape[0]}, got {m}")
        return cls(g[:m, :m], g[:m, m:], g[m:, :m], g[m:, m:])


def check_eps(eps: float) -> float:
    """``eps`` as a float; ``ValueError`` unless it is finite and > 0."""
    eps = float(eps)
    if not np.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps: expected a finite value > 0, got {eps!r}")
    return eps


def jacobian(blocks: Blocks, eps: float) -> np.ndarray:
    """J(eps) = -D(eps) G with D = diag(I_m, eps I_n); shape (m + n, m + n)."""
    eps = check_eps(eps)
    d = np.concatenate([np.ones(blocks.m), np.full(blocks.n, eps)])
    return -d[:, None] * blocks.full()


def schur_complement(blocks: Blocks) -> np.ndarray:
    """S = E - C A^{-1} B, shape (n, n): the reduced (slow) system's Hessian.

    Raises ``ValueError`` when A is singular (no isolated quasi-steady state P*(theta)).
    """
    cond = np.linalg.cond(blocks.a)
    if not np.isfinite(cond) or cond > 1e14:
        raise ValueError(f"blocks.a: singular fast block (condition number {cond:.3g})")
    return blocks.e - blocks.c @ np.linalg.solve(blocks.a, blocks.b)


def match_eigenvalues(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pair two equally long sets of (complex) eigenvalues by minimum total distance.

    Returns ``(x_sorted, y_matched)``, x sorted by real part and y permuted to match.
    """
    x, y = np.asarray(x), np.asarray(y)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x, y: expected two 1-d arrays of equal length, got {x.shape}, {y.shape}")
    order = np.argsort(x.real, kind="stable")
    x = x[order]
    rows, cols = linear_sum_assignment(np.abs(x[:, None] - y[None, :]))
    return x[rows], y[cols]


def split_spectrum(blocks: Blocks, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(fast, slow) eigenvalues of J(eps): the n of smallest modulus are the slow ones."""
    lam = np.linalg.eigvals(jacobian(blocks, eps))
    order = np.argsort(np.abs(lam), kind="stable")
    return lam[order[blocks.n:]], lam[order[:blocks.n]]


def slow_eigenvalue_error(blocks: Blocks, eps: float) -> float:
    """max_i |lambda_i^slow(J(eps)) - eps mu_i| over matched pairs, mu = eig(-S).

    Tikhonov / first-order singular perturbation predicts this is O(eps^2).
    """
    eps = check_eps(eps)
    _, slow = split_spectrum(blocks, eps)
    reduced = eps * np.linalg.eigvals(-schur_complement(blocks))
    a, b = match_eigenvalues(slow, reduced)
    return float(np.max(np.abs(a - b)))


def fast_eigenvalue_error(blocks: Blocks, eps: float) -> float:
    """max_i |lambda_i^fast(J(eps)) - nu_i| with nu = eig(-A); O(eps) as eps -> 0."""
    fast, _ = split_spectrum(blocks, eps)
    a, b = match_eigenvalues(fast, np.linalg.eigvals(-blocks.a))
    return float(np.max(np.abs(a - b)))


@dataclass(frozen=True)
class Inertia:
    """Numbers of eigenvalues with positive, negative and (near-)zero real part."""

    positive: int
    negative: int
    zero: int


def inertia(eigenvalues: np.ndarray, tol: float = 1e-9) -> Inertia:
    """Inertia of a spectrum by real parts; |Re| <= tol * max|lambda| counts as zero."""
    lam = np.asarray(eigenvalues)
    scale = tol * max(1.0, float(np.max(np.abs(lam)))) if lam.size else tol
    re = lam.real
    return Inertia(int(np.sum(re > scale)), int(np.sum(re < -scale)),
                   int(np.sum(np.abs(re) <= scale)))


def max_real_part(blocks: Blocks, eps: float) -> float:
    """Largest real part of the eigenvalues of J(eps) (> 0: locally unstable)."""
    return float(np.max(np.linalg.eigvals(jacobian(blocks, eps)).real))


def spectral_radius_discrete(blocks: Blocks, eps: float, eta_p: float) -> float:
    """rho(I + eta_P J(eps)): the discrete update with steps eta_P (prototypes) and eps*eta_P
    (encoder) is locally stable iff this is < 1."""
    if not np.isfinite(eta_p) or eta_p <= 0:
        raise ValueError(f"eta_p: expected a finite value > 0, got {eta_p!r}")
    j = jacobian(blocks, eps)
    return float(np.max(np.abs(np.linalg.eigvals(np.eye(j.shape[0]) + eta_p * j))))


def _bisect(f, lo: float, hi: float, iters: int) -> float:
    """Geometric bisection for the sign change of f on [lo, hi] (f(lo) < 0 <= f(hi))."""
    for _ in range(iters):
        mid = float(np.sqrt(lo * hi))
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
    return float(np.sqrt(lo * hi))


def critical_eps(indicator, eps_grid: np.ndarray, iters: int = 60) -> float | None:
    """Smallest eps on (and refined between points of) ``eps_grid`` where ``indicator(eps)``
    turns from < 0 to >= 0; None when it never does on the grid.

    ``indicator`` is e.g. ``lambda e: max_real_part(blocks, e)`` (continuous-time loss of
    stability) or ``lambda e: spectral_radius_discrete(blocks, e, eta) - 1`` (discrete).
    """
    grid = np.sort(np.asarray(eps_grid, dtype=float))
    if grid.size < 2 or np.any(grid <= 0):
        raise ValueError("eps_grid: expected >= 2 positive values")
    values = [indicator(e) for e in grid]
    if values[0] >= 0:
        return float(grid[0])
    for (lo, hi), (vlo, vhi) in zip(zip(grid[:-1], grid[1:]), zip(values[:-1], values[1:])):
        if vlo < 0 <= vhi:
            return _bisect(indicator, float(lo), float(hi), iters)
    return None
