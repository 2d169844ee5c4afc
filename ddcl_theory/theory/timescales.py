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

This module holds the linear algebra (pure functions on matrices) and a small concrete coupled
model (:class:`CoupledModel`: an MLP encoder, K prototypes, a logistic head on the pooled soft
centroids) whose exact float64 derivatives feed it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from ddcl_theory.functional import loss_terms, soft_assign

OBJECTIVES = ("shared", "split")


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


def _check_eps(eps: float) -> float:
    eps = float(eps)
    if not np.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps: expected a finite value > 0, got {eps!r}")
    return eps


def jacobian(blocks: Blocks, eps: float) -> np.ndarray:
    """J(eps) = -D(eps) G with D = diag(I_m, eps I_n); shape (m + n, m + n)."""
    eps = _check_eps(eps)
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
    eps = _check_eps(eps)
    _, slow = split_spectrum(blocks, eps)
    reduced = eps * np.linalg.eigvals(-schur_complement(blocks))
    a, b = match_eigenvalues(slow, reduced)
    return float(np.max(np.abs(a - b)))


def fast_eigenvalue_error(blocks: Blocks, eps: float) -> float:
    """max_i |lambda_i^fast(J(eps)) - nu_i| with nu = eig(-A); O(eps) as eps -> 0."""
    fast, _ = split_spectrum(blocks, eps)
    a, b = match_eigenvalues(fast, np.linalg.eigvals(-blocks.a))
    return float(np.max(np.abs(a - b)))


def loglog_slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of log y against log x (all entries must be > 0)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.size < 2:
        raise ValueError(f"x, y: expected equal shapes with >= 2 points, got {x.shape}, {y.shape}")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("x, y: log-log fit needs positive values")
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


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


# --------------------------------------------------------------------------------------------
# A concrete coupled model: MLP encoder + prototypes + logistic head on the pooled centroid
# --------------------------------------------------------------------------------------------

@dataclass
class CoupledModel:
    """Encoder z = tanh(W2 tanh(W1 x + b1) + b2) on tokens, K prototypes, and a logistic head.

    The data are ``x`` (B, T, d_in) token features of B sequences with binary labels ``y`` (B,).
    For token n of sequence b, q = softmax(-||z - p_k||^2 / tau); the pooled vector of sequence b
    is the mean over its tokens of the soft centroid mu = sum_k q_k p_k, and the logit is
    a . pooled + c. The flat parameter vector is w = (P (K*d), theta) with
    theta = (W1 (h*d_in), b1 (h), W2 (d*h), b2 (d), a (d), c (1)).

    Objectives (``objective``):

    * ``"shared"``: both blocks descend one potential
      L = CE + lam * L_q + (wd / 2) ||theta||^2 (plain backpropagation of a total loss);
    * ``"split"``: the encoder descends that L, the prototypes descend lam * L_q only (the task
      gradient into P is cut, as with a detached readout).

    The tanh on the output breaks the rotation and translation symmetry of L_q in z-space, so
    equilibria are isolated (no zero modes).
    """

    x: Tensor
    y: Tensor
    k: int = 3
    d: int = 2
    hidden: int = 6
    tau: float = 1.0
    lam: float = 1.0
    wd: float = 1e-2

    def __post_init__(self) -> None:
        if self.x.dim() != 3:
            raise ValueError(f"x: expected shape (B, T, d_in), got {tuple(self.x.shape)}")
        if self.y.shape != (self.x.shape[0],):
            raise ValueError(f"y: expected shape ({self.x.shape[0]},), got {tuple(self.y.shape)}")
        for name in ("k", "d", "hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected >= 1, got {getattr(self, name)}")
        if self.tau <= 0 or self.lam < 0 or self.wd < 0:
            raise ValueError(f"tau, lam, wd: expected tau > 0, lam >= 0, wd >= 0, got "
                             f"{self.tau}, {self.lam}, {self.wd}")
        self.x = self.x.to(torch.float64)
        self.y = self.y.to(torch.float64)

    @property
    def d_in(self) -> int:
        return self.x.shape[-1]

    @property
    def m(self) -> int:
        """Number of prototype parameters (the fast block)."""
        return self.k * self.d

    @property
    def n(self) -> int:
        """Number of encoder + head parameters (the slow block)."""
        h, d, di = self.hidden, self.d, self.d_in
        return h * di + h + d * h + d + d + 1

    def unflatten(self, w: Tensor) -> dict[str, Tensor]:
        """Views of the flat vector ``w`` (m + n,) as named parameters."""
        if w.shape != (self.m + self.n,):
            raise ValueError(f"w: expected shape ({self.m + self.n},), got {tuple(w.shape)}")
        h, d, di = self.hidden, self.d, self.d_in
        sizes = [("P", (self.k, d)), ("W1", (h, di)), ("b1", (h,)), ("W2", (d, h)), ("b2", (d,)),
                 ("a", (d,)), ("c", ())]
        out, i = {}, 0
        for name, shape in sizes:
            size = int(np.prod(shape)) if shape else 1
            out[name] = w[i:i + size].reshape(shape)
            i += size
        return out

    def init(self, generator: torch.Generator) -> Tensor:
        """A random starting point: small Gaussian weights, prototypes on encoded tokens."""
        h, d, di = self.hidden, self.d, self.d_in
        g = lambda *s, scale: torch.randn(*s, generator=generator, dtype=torch.float64) * scale
        theta = torch.cat([g(h * di, scale=1 / np.sqrt(di)), g(h, scale=0.1),
                           g(d * h, scale=1 / np.sqrt(h)), g(d, scale=0.1), g(d, scale=0.1),
                           torch.zeros(1, dtype=torch.float64)])
        w = torch.cat([torch.zeros(self.m, dtype=torch.float64), theta])
        z = self.encode(w).reshape(-1, d)
        idx = torch.randperm(z.shape[0], generator=generator)[: self.k]
        w[: self.m] = z[idx].reshape(-1).detach()
        return w

    def encode(self, w: Tensor) -> Tensor:
        """Tokens z, shape (B, T, d)."""
        p = self.unflatten(w)
        hid = torch.tanh(self.x @ p["W1"].T + p["b1"])
        return torch.tanh(hid @ p["W2"].T + p["b2"])

    def terms(self, w: Tensor, detach_p_in_task: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """(ce, l_q, reg): task cross-entropy, mean L_q over tokens, (1/2)||theta||^2."""
        p = self.unflatten(w)
        z = self.encode(w)
        b, t, d = z.shape
        flat = z.reshape(b * t, d)
        q = soft_assign(flat, p["P"], self.tau)
        l_q, _, _ = loss_terms(flat, p["P"], q)
        protos = p["P"].detach() if detach_p_in_task else p["P"]
        pooled = (q @ protos).reshape(b, t, d).mean(1)
        logit = pooled @ p["a"] + p["c"]
        ce = torch.nn.functional.binary_cross_entropy_with_logits(logit, self.y)
        reg = 0.5 * (w[self.m:] ** 2).sum()
        return ce, l_q, reg

    def potential(self, w: Tensor) -> Tensor:
        """L = CE + lam L_q + (wd/2)||theta||^2 (the encoder's objective in both variants)."""
        ce, l_q, reg = self.terms(w)
        return ce + self.lam * l_q + self.wd * reg

    def field(self, w: Tensor, objective: str = "shared", create_graph: bool = False) -> Tensor:
        """F(w) = (grad_P L_P, grad_theta L_theta), shape (m + n,)."""
        if objective not in OBJECTIVES:
            raise ValueError(f"objective: expected one of {OBJECTIVES}, got {objective!r}")
        w = w if w.requires_grad else w.detach().requires_grad_(True)
        g_enc = torch.autograd.grad(self.potential(w), w, create_graph=create_graph)[0]
        if objective == "shared":
            return g_enc
        _, l_q, _ = self.terms(w)
        g_p = torch.autograd.grad(self.lam * l_q, w, create_graph=create_graph)[0]
        return torch.cat([g_p[: self.m], g_enc[self.m:]])

    def game_hessian(self, w: Tensor, objective: str = "shared") -> Blocks:
        """G = dF/dw at ``w`` in float64, cut into :class:`Blocks`."""
        g = torch.autograd.functional.jacobian(
            lambda v: self.field(v, objective, create_graph=True), w.detach().clone(),
            vectorize=True)
        return Blocks.split(g.detach().numpy(), self.m)


@dataclass(frozen=True)
class Equilibrium:
    """An equilibrium w* of the coupled flow, with the residual ||F(w*)|| it reached."""

    w: Tensor
    residual: float
    flow_steps: int
    newton_steps: int


def find_equilibrium(model: CoupledModel, w0: Tensor, objective: str = "shared", *,
                     eps: float = 1.0, step: float = 0.2, flow_steps: int = 3000,
                     newton_steps: int = 20, tol: float = 1e-11) -> Equilibrium:
    """Run the coupled flow (explicit Euler, steps ``step`` for P and ``eps*step`` for theta),
    then polish with damped Newton on F(w) = 0 (least-squares step, halved until ||F||
    decreases). Equilibria do not depend on eps; the flow only chooses which one is found, and
    Newton converges to whichever equilibrium is near, stable or not. ``w0`` has shape (m + n,).
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective: expected one of {OBJECTIVES}, got {objective!r}")
    _check_eps(eps)
    d = torch.cat([torch.ones(model.m), torch.full((model.n,), eps)]).to(torch.float64)
    w = w0.detach().to(torch.float64).clone()
    for _ in range(flow_steps):
        w = w - step * d * model.field(w, objective).detach()
    residual = float(model.field(w, objective).norm())
    done = 0
    for done in range(1, newton_steps + 1):
        if residual < tol:
            done -= 1
            break
        g = model.game_hessian(w, objective).full()
        f = model.field(w, objective).detach().numpy()
        direction = torch.from_numpy(np.linalg.lstsq(g, f, rcond=None)[0])
        alpha = 1.0
        while True:   # backtracking on ||F||: a damped Newton step
            trial = w - alpha * direction
            trial_res = float(model.field(trial, objective).norm())
            if trial_res < residual or alpha < 1e-6:
                break
            alpha /= 2
        w, residual = trial, trial_res
    return Equilibrium(w.detach(), residual, flow_steps, done)


# --------------------------------------------------------------------------------------------
# Symbolic checks (SymPy) on scalar blocks
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SymbolicResult:
    """A SymPy derivation: ``holds`` when every expected expression matched (simplify to 0)."""

    statement: str
    computed: dict
    holds: bool


def slow_eigenvalue_series_2x2() -> SymbolicResult:
    """J = -[[a, b], [eps c, eps e]] with a > 0: the slow eigenvalue's Taylor series in eps.

    Expected: lambda_slow = -eps S + eps^2 b c S / a^2 + O(eps^3) with S = e - b c / a, i.e. the
    first-order term is eps * eig(-S) and the error of that approximation is O(eps^2), with a
    non-zero eps^2 coefficient unless b c = 0 or S = 0.
    """
    import sympy as sp
    a, eps = sp.symbols("a epsilon", positive=True)
    b, c, e, lam = sp.symbols("b c e lambda", real=True)
    trace, det = -(a + eps * e), eps * (a * e - b * c)
    slow = (trace + sp.sqrt(trace**2 - 4 * det)) / 2          # the root that -> 0 with eps
    series = sp.series(slow, eps, 0, 3).removeO()
    first, second = sp.simplify(series.coeff(eps, 1)), sp.simplify(series.coeff(eps, 2))
    s_schur = e - b * c / a
    expected_first, expected_second = -s_schur, b * c * s_schur / a**2
    is_root = sp.simplify((lam**2 - trace * lam + det).subs(lam, slow))
    ok = (sp.simplify(first - expected_first) == 0 and sp.simplify(second - expected_second) == 0
          and sp.simplify(slow.subs(eps, 0)) == 0 and is_root == 0)
    return SymbolicResult("slow eigenvalue = -eps S + eps^2 b c S / a^2 + O(eps^3)",
                          {"first": first, "second": second}, bool(ok))


def reduced_characteristic_polynomial_3x3() -> SymbolicResult:
    """One fast and two slow variables (m = 1, n = 2), general entries.

    Expected: det(eps mu I - J(eps)) / eps^2 -> a * det(mu I + S) as eps -> 0, where
    S = E - C a^{-1} B is the 2x2 Schur complement. So the slow eigenvalues over eps tend to the
    eigenvalues of -S (the reduced system), for any B, C, E.
    """
    import sympy as sp
    a, eps, mu = sp.symbols("a epsilon mu", positive=True)
    b1, b2, c1, c2, e11, e12, e21, e22 = sp.symbols("b1 b2 c1 c2 e11 e12 e21 e22", real=True)
    B, C = sp.Matrix([[b1, b2]]), sp.Matrix([[c1], [c2]])
    E = sp.Matrix([[e11, e12], [e21, e22]])
    G = sp.Matrix(sp.BlockMatrix([[sp.Matrix([[a]]), B], [C, E]]))
    D = sp.diag(1, eps, eps)
    J = -D * G
    charpoly = (eps * mu * sp.eye(3) - J).det()
    limit = sp.limit(sp.expand(charpoly / eps**2), eps, 0)
    S = E - C * B / a
    expected = a * (mu * sp.eye(2) + S).det()
    ok = sp.simplify(limit - expected) == 0
    return SymbolicResult("det(eps mu I - J)/eps^2 -> a det(mu I + S)",
                          {"limit": sp.factor(limit)}, bool(ok))


def shared_potential_inertia_2x2() -> SymbolicResult:
    """Shared potential (c = b): J(eps) = -diag(1, eps) H has real eigenvalues for every eps > 0
    (discriminant = (a - eps e)^2 + 4 eps b^2 >= 0) and det J = eps det H, trace J = -(a + eps e):
    the signs of the eigenvalues, hence stability, do not depend on eps (Sylvester)."""
    import sympy as sp
    a, eps = sp.symbols("a epsilon", positive=True)
    b, e = sp.symbols("b e", real=True)
    trace, det = -(a + eps * e), eps * (a * e - b**2)
    disc = sp.expand(trace**2 - 4 * det)
    ok = sp.simplify(disc - ((a - eps * e) ** 2 + 4 * eps * b**2)) == 0
    return SymbolicResult("discriminant = (a - eps e)^2 + 4 eps b^2; det J = eps det H",
                          {"discriminant": sp.factor(disc), "det": det}, bool(ok))


def split_objective_hopf_2x2() -> SymbolicResult:
    """Two objectives (c != b) with a > 0, e < 0 and a e - b c > 0 (stable reduced system,
    unstable encoder-alone): J(eps) is stable iff eps < eps* = -a / e; at eps* the trace
    vanishes with a positive determinant (a pair of eigenvalues crosses the imaginary axis)."""
    import sympy as sp
    a, eps = sp.symbols("a epsilon", positive=True)
    b, c, e = sp.symbols("b c e", real=True)
    trace, det = -(a + eps * e), eps * (a * e - b * c)
    crit = sp.solve(sp.Eq(trace, 0), eps)
    ok = len(crit) == 1 and sp.simplify(crit[0] + a / e) == 0
    eigs = sp.solve(sp.Symbol("l")**2 - trace * sp.Symbol("l") + det, sp.Symbol("l"))
    at_crit = [sp.simplify(x.subs(eps, crit[0])) for x in eigs] if ok else []
    ok = ok and all(sp.simplify(sp.re(x.subs({a: 1, e: -sp.Rational(1, 2), b: 1, c: -1})))
                    == 0 for x in at_crit)
    return SymbolicResult("eps* = -a/e for the two-objective 2x2 system",
                          {"eps_star": crit[0] if crit else None, "eigs_at_crit": at_crit},
                          bool(ok))
