"""Laplacian heads as heat diffusion on the token graph (claims L1-L4, L11).

Notation (the book's): T tokens as the rows of X (T, d); P (T, T) a row-stochastic attention
matrix (P >= 0, P 1 = 1); L = I - P its random-walk Laplacian; tau >= 0 a step size;
M (d, d) the product W_V W_O of a head. A Laplacian head adds (I - P) X M to the residual stream,
an ordinary head adds P X M.

Numerical functions work on float64 NumPy arrays (torch tensors are converted); the symbolic
checks (``sym_*``) return a :class:`~ddcl_theory.theory.symbolic.SymbolicCheck` whose residual
simplifies to zero when the identity holds (``sym_stochastic`` builds their symbolic matrices).
"""
from __future__ import annotations

import numpy as np
import scipy.linalg
import sympy as sp

from ddcl_theory.runtime.validate import as_float64
from ddcl_theory.theory.symbolic import SymbolicCheck, identity


# ----------------------------------------------------------------------------- basic checks
def _as_array(a, name: str, ndim: int) -> np.ndarray:
    return as_float64(a, name, ndim)


def check_row_stochastic(p, name: str = "p", atol: float = 1e-8) -> np.ndarray:
    """Return ``p`` as float64 (T, T) after checking P >= 0 and P 1 = 1 to ``atol``."""
    p = _as_array(p, name, 2)
    if p.shape[0] != p.shape[1]:
        raise ValueError(f"{name}: expected a square (T, T) matrix, got shape {p.shape}")
    if (p < -atol).any():
        raise ValueError(f"{name}: has negative entries (min {p.min():.3g})")
    err = np.abs(p.sum(axis=1) - 1.0).max() if p.size else 0.0
    if err > atol:
        raise ValueError(f"{name}: rows do not sum to 1 (max deviation {err:.3g})")
    return p


def _check_tokens(x, p: np.ndarray, name: str = "x") -> np.ndarray:
    x = _as_array(x, name, 2) if np.ndim(x) == 2 else _as_array(x, name, 1)[:, None]
    if x.shape[0] != p.shape[0]:
        raise ValueError(f"{name}: expected {p.shape[0]} tokens (rows), got shape {x.shape}")
    return x


def _check_tau(tau: float) -> float:
    tau = float(tau)
    if not np.isfinite(tau) or tau < 0:
        raise ValueError(f"tau: expected a finite value >= 0, got {tau!r}")
    return tau


def random_walk_laplacian(p) -> np.ndarray:
    """L = I - P (T, T) for a row-stochastic P."""
    p = check_row_stochastic(p)
    return np.eye(p.shape[0]) - p


def laplacian_spectrum(p) -> np.ndarray:
    """Eigenvalues of I - P (complex, shape (T,))."""
    return np.linalg.eigvals(random_walk_laplacian(p))


def disc_excess(p) -> float:
    """max_lambda |lambda - 1| - 1 over the spectrum of I - P: <= 0 means inside the disc (L1)."""
    return float(np.abs(laplacian_spectrum(p) - 1.0).max() - 1.0)


# ----------------------------------------------------------------------------- sample matrices
def softmax_rows(scores: np.ndarray, causal: bool = False) -> np.ndarray:
    """Row-wise softmax of (T, T) scores; with ``causal`` the entries above the diagonal are 0."""
    s = _as_array(scores, "scores", 2).copy()
    if causal:
        s[np.triu_indices(s.shape[0], k=1)] = -np.inf
    s = s - s.max(axis=1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=1, keepdims=True)


def random_attention(t: int, rng: np.random.Generator, *, scale: float = 2.0,
                     causal: bool = False) -> np.ndarray:
    """A softmax attention matrix (T, T) of Gaussian scores with standard deviation ``scale``."""
    if t < 1:
        raise ValueError(f"t: expected >= 1, got {t}")
    return softmax_rows(scale * rng.standard_normal((t, t)), causal=causal)


def symmetric_stochastic(t: int, rng: np.random.Generator, *, scale: float = 2.0) -> np.ndarray:
    """A symmetric (hence doubly) stochastic P: W / w_max + diag(1 - deg / w_max), W = exp(S).

    S is a symmetric Gaussian score matrix; W / w_max is a symmetric graph and the diagonal
    makes the rows sum to one (lazy self-loops); exact up to rounding.
    """
    a = scale * rng.standard_normal((t, t))
    w = np.exp((a + a.T) / 2)
    np.fill_diagonal(w, 0.0)
    deg = w.sum(axis=1)
    dmax = deg.max() if t > 1 else 1.0
    return w / dmax + np.diag(1.0 - deg / dmax)


def reversible_stochastic(t: int, rng: np.random.Generator, *,
                          scale: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    """(P, pi): P = D^{-1} W with W = exp(S), S symmetric, and its stationary law pi = deg/sum.

    This is softmax attention with symmetric scores (W_Q W_K^T symmetric): reversible,
    pi_i P_ij = pi_j P_ji, but in general not column-stochastic.
    """
    a = scale * rng.standard_normal((t, t))
    w = np.exp((a + a.T) / 2)
    deg = w.sum(axis=1)
    return w / deg[:, None], deg / deg.sum()


def sinkhorn(weights, iters: int = 200) -> np.ndarray:
    """A doubly stochastic (T, T) matrix from positive weights by Sinkhorn scaling: ``iters``
    alternations of row and column normalisation, then a final row normalisation (rows sum to
    one exactly, columns to within the scaling's convergence)."""
    a = _as_array(weights, "weights", 2)
    if (a <= 0).any():
        raise ValueError("weights: expected positive entries")
    if not isinstance(iters, int) or iters < 1:
        raise ValueError(f"iters: expected an int >= 1, got {iters!r}")
    for _ in range(iters):
        a = a / a.sum(1, keepdims=True)
        a = a / a.sum(0, keepdims=True)
    return a / a.sum(1, keepdims=True)


def stationary_distribution(p) -> np.ndarray:
    """A left eigenvector pi of P for eigenvalue 1, normalised to sum 1 (pi^T P = pi^T)."""
    p = check_row_stochastic(p)
    vals, vecs = np.linalg.eig(p.T)
    pi = np.real(vecs[:, np.argmin(np.abs(vals - 1.0))])
    return pi / pi.sum()


# ----------------------------------------------------------------------------- diffusion
def lazy_walk(p, tau: float) -> np.ndarray:
    """A = (1 - tau) I + tau P = I - tau (I - P): one explicit Euler step of dX/dt = -(I-P) X."""
    p = check_row_stochastic(p)
    tau = _check_tau(tau)
    return (1.0 - tau) * np.eye(p.shape[0]) + tau * p


def euler_step(x, p, tau: float) -> np.ndarray:
    """X - tau (I - P) X (T, d): the residual update of one Laplacian head with W_V W_O = -tau I."""
    p = check_row_stochastic(p)
    x = _check_tokens(x, p)
    return x - _check_tau(tau) * (x - p @ x)


def heat_kernel(p, t: float) -> np.ndarray:
    """exp(-t (I - P)) (T, T) through ``scipy.linalg.expm``; rows sum to 1 for every t >= 0."""
    return scipy.linalg.expm(-_check_tau(t) * random_walk_laplacian(p))


def euler_heat(p, t: float, steps: int) -> np.ndarray:
    """(I - (t/n)(I - P))^n: n explicit Euler steps of size t/n; tends to the heat kernel."""
    if steps < 1:
        raise ValueError(f"steps: expected >= 1, got {steps}")
    return np.linalg.matrix_power(lazy_walk(p, _check_tau(t) / steps), steps)


# ----------------------------------------------------------------------------- heads
def laplacian_head(x, p, m) -> np.ndarray:
    """(I - P) X M (T, d_out): what a Laplacian head adds to the residual stream."""
    p = check_row_stochastic(p)
    x = _check_tokens(x, p)
    return (x - p @ x) @ _as_array(m, "m", 2)


def attention_head(x, p, m) -> np.ndarray:
    """P X M (T, d_out): what an ordinary head adds to the residual stream."""
    p = check_row_stochastic(p)
    x = _check_tokens(x, p)
    return p @ x @ _as_array(m, "m", 2)


def residual_laplacian_step(x, p, m) -> np.ndarray:
    """X + (I - P) X M: one Laplacian-head residual update with a learned M = W_V W_O."""
    x2 = _check_tokens(x, check_row_stochastic(p))
    return x2 + laplacian_head(x2, p, m)


# ----------------------------------------------------------------------------- statistics
def mean_and_deviation(x) -> tuple[np.ndarray, np.ndarray]:
    """(m, Xc) with X = 1 m^T + Xc: the token mean m (d,) and the centred tokens Xc (T, d)."""
    x = _as_array(x, "x", 2) if np.ndim(x) == 2 else _as_array(x, "x", 1)[:, None]
    m = x.mean(axis=0)
    return m, x - m


def _weights(w, t: int) -> np.ndarray:
    if w is None:
        return np.full(t, 1.0 / t)
    w = _as_array(w, "weights", 1)
    if w.shape != (t,) or (w < 0).any() or abs(w.sum() - 1) > 1e-8:
        raise ValueError(f"weights: expected a probability vector of length {t}")
    return w


def within_variance(x, weights=None) -> float:
    """sum_i w_i ||x_i - m_w||^2, m_w = sum_i w_i x_i (uniform w = 1/T by default)."""
    x = _as_array(x, "x", 2) if np.ndim(x) == 2 else _as_array(x, "x", 1)[:, None]
    w = _weights(weights, x.shape[0])
    centred = x - w @ x
    return float(w @ (centred ** 2).sum(axis=1))


def dirichlet_energy(x, p, weights=None) -> float:
    """(1/2) sum_ij w_i P_ij ||x_i - x_j||^2 (uniform w = 1/T by default).

    With w uniform and P symmetric this is (1/T) tr(X^T (I-P) X); with P = 11^T/T it equals the
    within-sequence variance; with w = pi for a reversible P it is tr(X^T diag(pi) (I-P) X).
    """
    p = check_row_stochastic(p)
    x = _check_tokens(x, p)
    w = _weights(weights, p.shape[0])
    sq = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    return float(0.5 * (w[:, None] * p * sq).sum())


def _dirichlet_form(p: np.ndarray, w: np.ndarray) -> np.ndarray:
    """G (T, T) with x^T G x = (1/2) sum_ij w_i P_ij (x_i - x_j)^2 (symmetric, PSD, G 1 = 0)."""
    s = (w[:, None] * p + (w[:, None] * p).T) / 2
    return np.diag(s.sum(axis=1)) - s


def variance_gain(p, tau: float, weights=None) -> float:
    """max over X of Var_w(A X) / Var_w(X) for one step A = (1-tau) I + tau P.

    Exact worst case over all token matrices (the feature columns act independently): the
    squared largest singular value of W^{1/2} C_w A W^{-1/2} on the complement of sqrt(w),
    C_w = I - 1 w^T. A value <= 1 means no input can gain variance in one step.
    """
    a = lazy_walk(p, tau)
    t = a.shape[0]
    w = _weights(weights, t)
    if (w <= 0).any():
        raise ValueError("weights: expected strictly positive weights")
    sw = np.sqrt(w)
    proj = np.eye(t) - np.outer(sw, sw)
    c = np.eye(t) - np.outer(np.ones(t), w)
    op = (sw[:, None] * (c @ a)) / sw[None, :] @ proj
    return float(np.linalg.norm(op, 2) ** 2) if t > 1 else 0.0


def energy_gain(p, tau: float, weights=None, energy_p=None) -> float:
    """max over X of E_w(A X; P') / E_w(X; P') for one step A = (1-tau) I + tau P.

    ``energy_p`` is the matrix P' defining the energy (default: P itself). Computed on the
    range of the Dirichlet form G (requires its kernel to be spanned by 1, i.e. a connected
    graph, which A then preserves); returns 0.0 for a single token.
    """
    a = lazy_walk(p, tau)
    t = a.shape[0]
    if t == 1:
        return 0.0
    pe = check_row_stochastic(p if energy_p is None else energy_p, "energy_p")
    g = _dirichlet_form(pe, _weights(weights, t))
    vals, vecs = np.linalg.eigh(g)
    keep = vals > 1e-12 * max(vals.max(), 1.0)
    if keep.sum() != t - 1:
        raise ValueError("p: the energy's graph is not connected; the gain is not defined")
    u = vecs[:, keep] / np.sqrt(vals[keep])
    return float(np.linalg.eigvalsh(u.T @ a.T @ g @ a @ u).max())


def variance_counterexample() -> tuple[np.ndarray, np.ndarray, float]:
    """(P, x, tau): a row-stochastic P and tokens for which one Euler step raises the variance.

    Four scalar tokens x = (0, 0, 0, 1) (variance 3/16 = 0.1875); token 3 copies token 4
    (P row 3 = e_4), the others keep themselves; tau = 1 gives (0, 0, 1, 1), variance 1/4.
    """
    p = np.eye(4)
    p[2] = [0.0, 0.0, 0.0, 1.0]
    return p, np.array([[0.0], [0.0], [0.0], [1.0]]), 1.0


# ----------------------------------------------------------------------------- symbolic
def sym_stochastic(n: int, prefix: str = "p", causal: bool = False) -> sp.Matrix:
    """A symbolic n x n row-stochastic matrix: free entries p_ij, the last column (or diagonal
    for ``causal``) is 1 minus the rest of its row; causal matrices are lower triangular."""
    rows = []
    for i in range(n):
        if causal:
            row = [sp.Symbol(f"{prefix}{i + 1}{j + 1}", nonnegative=True) if j < i else sp.S(0)
                   for j in range(n)]
            row[i] = 1 - sum(row[:i], sp.S(0))
        else:
            row = [sp.Symbol(f"{prefix}{i + 1}{j + 1}", nonnegative=True) for j in range(n - 1)]
            row.append(1 - sum(row, sp.S(0)))
        rows.append(row)
    return sp.Matrix(rows)


def sym_laplacian_kills_ones(n: int) -> SymbolicCheck:
    """(I - P) 1 = 0 for a symbolic row-stochastic n x n P (L1); the residual is the simplified
    vector (I - P) 1."""
    p = sym_stochastic(n)
    return identity(f"(I - P) 1 = 0 for a symbolic stochastic {n}x{n} P",
                    sp.simplify((sp.eye(n) - p) * sp.ones(n, 1)))


def sym_gershgorin_radius_gap(n: int) -> SymbolicCheck:
    """Every Gershgorin disc of I - P is tangent to the inside of |z - 1| <= 1 (L1).

    The residual is the ``Tuple`` over rows i of 1 - (|c_i - 1| + r_i), with c_i = 1 - P_ii the
    disc centre and r_i = sum_{j!=i} P_ij its radius; each simplifies to 0 (uses
    0 <= P_ii <= 1), so the spectrum lies in the disc.
    """
    p = sym_stochastic(n)
    out = []
    for i in range(n):
        radius = sum((p[i, j] for j in range(n) if j != i), sp.S(0))
        # |c - 1| = |P_ii| = P_ii for P_ii >= 0; the radius is 1 - P_ii by row-stochasticity
        out.append(sp.simplify(1 - (p[i, i] + radius)))
    return identity(f"Gershgorin discs of I - P touch |z - 1| = 1 from inside ({n}x{n})",
                    sp.Tuple(*out))


def sym_two_by_two_eigenvalues() -> SymbolicCheck:
    """The eigenvalues of I - P for P = [[1-a, a], [b, 1-b]] are 0 and a + b (a + b in [0, 2]).

    ``details``: ``eigenvalues`` (the set SymPy computes) and ``nonzero`` (a + b).
    """
    a, b = sp.symbols("a b", nonnegative=True)
    lap = sp.eye(2) - sp.Matrix([[1 - a, a], [b, 1 - b]])
    eigenvalues = set(lap.eigenvals())
    residual = sp.Tuple(*sp.ordered(sp.FiniteSet(*eigenvalues) ^ sp.FiniteSet(0, a + b)))
    return identity("eigenvalues of I - [[1-a, a], [b, 1-b]] are 0 and a + b", residual,
                    eigenvalues=eigenvalues, nonzero=a + b)


def sym_euler_is_lazy_walk(n: int) -> SymbolicCheck:
    """X - tau (I-P) X = ((1-tau) I + tau P) X for symbolic P (n x n), X (n x 2), tau (L2);
    the residual is the simplified difference."""
    p = sym_stochastic(n)
    tau = sp.Symbol("tau", nonnegative=True)
    x = sp.Matrix(n, 2, lambda i, j: sp.Symbol(f"x{i + 1}{j + 1}"))
    return identity("an Euler step of the heat equation is a lazy random walk",
                    sp.simplify(x - tau * (sp.eye(n) - p) * x
                                - ((1 - tau) * sp.eye(n) + tau * p) * x))


def sym_mean_blindness(n: int) -> SymbolicCheck:
    """(I-P)(1 m^T + Xc) M = (I-P) Xc M for symbolic P, m, Xc, M (L3); the residual is the
    simplified difference."""
    p = sym_stochastic(n)
    m = sp.Matrix(1, 2, sp.symbols("m1 m2"))
    xc = sp.Matrix(n, 2, lambda i, j: sp.Symbol(f"c{i + 1}{j + 1}"))
    mm = sp.Matrix(2, 2, sp.symbols("M11 M12 M21 M22"))
    lap = sp.eye(n) - p
    return identity("a Laplacian head does not see the sequence mean",
                    sp.simplify(lap * (sp.ones(n, 1) * m + xc) * mm - lap * xc * mm))


def sym_output_mean(n: int) -> SymbolicCheck:
    """The token sum of (I - P) Xc is u^T Xc with u = 1 - P^T 1 and 1^T u = 0 (L3), for
    symbolic P and centred Xc (a column summing to 0).

    The token sum of a Laplacian head's output is (1^T - 1^T P) Xc M: zero for every centred
    Xc iff the column sums of P are all 1 (P doubly stochastic). The residual is the pair
    (1^T (I - P) Xc - u^T Xc, 1^T u); ``details``: ``total`` = 1^T (I - P) Xc (expanded) and
    ``defect`` = 1^T - 1^T P.
    """
    p = sym_stochastic(n)
    c = list(sp.symbols(f"c1:{n}"))
    xc = sp.Matrix(c + [-sum(c, sp.S(0))])
    ones = sp.ones(1, n)
    total = sp.expand(ones * (sp.eye(n) - p) * xc)
    defect = sp.simplify(ones - ones * p)
    residual = sp.Tuple(sp.expand(total[0] - (defect * xc)[0]), sp.simplify(sum(defect)))
    return identity("the token mean of (I - P) Xc is set by the column-sum defects", residual,
                    total=total, defect=defect)


def sym_causal_charpoly(n: int) -> SymbolicCheck:
    """det(lambda I - (I - P)) = prod_i (lambda - (1 - P_ii)) for a symbolic causal P (L11).

    ``details``: ``charpoly`` (factored) and ``product``.
    """
    p = sym_stochastic(n, causal=True)
    lam = sp.Symbol("lambda")
    lap = sp.eye(n) - p
    char = sp.factor((lam * sp.eye(n) - lap).det())
    prod = sp.Mul(*[lam - (1 - p[i, i]) for i in range(n)])
    return identity(f"the spectrum of I - P for a causal {n}x{n} P is 1 - diag(P)",
                    sp.simplify(char - prod), charpoly=char, product=prod)
