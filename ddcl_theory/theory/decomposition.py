"""The loss decomposition L_q = L_OLS + V, its variance term V and V's gradient (claims D3-D6).

Notation (the book's): tokens z_n in R^d, prototypes p_k stored as the rows of a (K, d) tensor,
weights q_n on the simplex, soft centroid mu_n = sum_k q_nk p_k, and per token

    l_q = sum_k q_k ||z - p_k||^2,   l_ols = ||z - mu||^2,   v = sum_k q_k ||p_k - mu||^2.

The symbolic half works with SymPy: for a *symbolic* number of prototypes K (``Sum`` over an
``Indexed`` family) and for small explicit K and d. Every function returns a
:class:`~ddcl_theory.theory.symbolic.SymbolicCheck` whose ``holds`` is computed, never assumed.
The numerical half works with torch tensors in float64 or float32.

Gradient convention. The theory notes write P = [p_1 ... p_K] as a d x K matrix of columns, and
there grad_P V = 2 P Sigma_q. The code stores the prototypes as K x d rows P_r = P^T; the same
statement reads grad_{P_r} V = 2 Sigma_q P_r. Both are with q held fixed (not differentiated),
with V summed over tokens, and Sigma_q = sum_n (diag(q_n) - q_n q_n^T). The per-token *mean*
that :func:`ddcl_theory.functional.loss_terms` returns has gradient 2 Sigma_q P_r / N.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import sympy as sp
import torch
from torch import Tensor

from ddcl_theory import functional as F
from ddcl_theory.theory.symbolic import SymbolicCheck, identity

# ---------------------------------------------------------------------------------------------
# Symbolic part
# ---------------------------------------------------------------------------------------------


_k, _j, _l = sp.symbols("k j l", integer=True, positive=True)
_K = sp.Symbol("K", integer=True, positive=True)
_q = sp.IndexedBase("q", real=True)
_p = sp.IndexedBase("p", real=True)
_z = sp.Symbol("z", real=True)
_s0 = sp.Symbol("s_0", real=True)  # stands for sum_k q_k while the hypothesis is not yet used


def _sum(expr: sp.Expr, index: sp.Symbol = _k) -> sp.Sum:
    return sp.Sum(expr, (index, 1, _K))


def _linearise(expr: sp.Expr) -> sp.Expr:
    """Expand, then use linearity of finite sums: split sums of sums, pull out constants.

    Only the rules Sum(a + b) = Sum(a) + Sum(b), Sum(c a) = c Sum(a) for c free of the
    summation index, and renaming a bound index are used, so the result is valid for every
    K >= 1. Multi-index sums are split from the innermost index outwards; afterwards every
    remaining sum runs over the one canonical index k, so equal sums compare equal.
    """
    def split_single(f: sp.Expr, limit: tuple) -> sp.Expr:
        index = limit[0]
        f = sp.expand(f)
        if f.is_Add:
            return sp.Add(*[split_single(a, limit) for a in f.args])
        const, dependent = f.as_independent(index, as_Add=False)
        if dependent == 1:
            return const * (limit[2] - limit[1] + 1)
        return const * sp.Sum(dependent, limit)

    def split(s: sp.Sum) -> sp.Expr:
        out = s.function
        for limit in s.limits:          # innermost first
            out = split_single(out, limit)
        return out

    def canonical(s: sp.Sum) -> sp.Expr:
        (index, lo, hi), = s.limits
        return sp.Sum(s.function.xreplace({index: _k}), (_k, lo, hi))

    expr = sp.expand(expr)
    for _ in range(3):  # nested sums (mu inside V) may need more than one pass
        expr = sp.expand(expr.replace(lambda e: isinstance(e, sp.Sum), split))
    return sp.expand(expr.replace(lambda e: isinstance(e, sp.Sum) and len(e.limits) == 1,
                                  canonical))


def _use_simplex(expr: sp.Expr) -> tuple[sp.Expr, sp.Expr]:
    """(expression with sum_k q_k written s_0, the same with s_0 = 1), both factored."""
    general = sp.factor(expr.subs(_sum(_q[_k]), _s0))
    return general, sp.simplify(general.subs(_s0, 1))


def prove_decomposition_general_k() -> SymbolicCheck:
    """L_q = L_OLS + V for one coordinate, a symbolic K and arbitrary weights with sum_k q_k = 1.

    The weights are free symbols q[k] (not the Boltzmann form and not required to be >= 0), so
    the identity holds for any q on the simplex and any token z, hence for any encoder. Squared
    norms and the losses are sums over coordinates and tokens of this one-coordinate identity.
    ``details['without_hypothesis']`` is (s_0 - 1)(z - mu)(z + mu): the only fact used is s_0 = 1.
    """
    mu = _sum(_q[_j] * _p[_j], _j)
    l_q = _sum(_q[_k] * (_z - _p[_k]) ** 2)
    l_ols = (_z - mu) ** 2
    v = _sum(_q[_k] * (_p[_k] - mu) ** 2)
    general, residual = _use_simplex(_linearise(l_q - l_ols - v))
    return identity("sum_k q_k (z-p_k)^2 - (z-mu)^2 - sum_k q_k (p_k-mu)^2 = 0, symbolic K",
                    residual, without_hypothesis=general)


def prove_cross_term_vanishes() -> SymbolicCheck:
    """The cross term 2 (z - mu) sum_k q_k (mu - p_k) of the expansion around mu is 0
    (symbolic K)."""
    mu = _sum(_q[_j] * _p[_j], _j)
    cross = 2 * (_z - mu) * _sum(_q[_k] * (mu - _p[_k]))
    general, residual = _use_simplex(_linearise(cross))
    return identity("2 (z - mu) sum_k q_k (mu - p_k) = 0, symbolic K", residual,
                    without_hypothesis=general)


def prove_v_pairwise_form_general_k() -> SymbolicCheck:
    """V = 1/2 sum_{k,l} q_k q_l (p_k - p_l)^2 = sum_k q_k p_k^2 - mu^2 (one coordinate,
    symbolic K).

    The pairwise form makes D4 and its equality case visible: a sum of non-negative terms that
    is 0 exactly when every pair of prototypes with positive weight coincides. With p replaced
    by any vector x it also gives x^T Sigma_q x = Var_q(x) >= 0, i.e. Sigma_q is PSD.
    """
    mu = _sum(_q[_j] * _p[_j], _j)
    v = _sum(_q[_k] * (_p[_k] - mu) ** 2)
    pairwise = sp.Rational(1, 2) * _sum(_sum(_q[_k] * _q[_l] * (_p[_k] - _p[_l]) ** 2, _l))
    second_moment = _sum(_q[_k] * _p[_k] ** 2) - mu ** 2
    general_a, res_a = _use_simplex(_linearise(v - pairwise))
    general_b, res_b = _use_simplex(_linearise(v - second_moment))
    return identity("V = 1/2 sum_kl q_k q_l (p_k-p_l)^2 = sum_k q_k p_k^2 - mu^2, symbolic K",
                    sp.Tuple(res_a, res_b), without_hypothesis=sp.Tuple(general_a, general_b))


def prove_sigma_q_annihilates_ones_general_k() -> SymbolicCheck:
    """(Sigma_q 1)_k = q_k - q_k sum_l q_l = 0 for one token and a symbolic K."""
    row = _q[_k] - _q[_k] * _sum(_q[_l], _l)   # (diag(q) 1 - q q^T 1)_k
    general, residual = _use_simplex(_linearise(row))
    return identity("(diag(q) - q q^T) 1 = 0, symbolic K", residual,
                    without_hypothesis=general)


def _simplex_weights(k: int, name: str = "q") -> list[sp.Expr]:
    """K generic weights with sum 1: q_1..q_{K-1} free symbols, q_K = 1 - sum of the others."""
    free = list(sp.symbols(f"{name}1:{k}", real=True)) if k > 1 else []
    return free + [1 - sum(free, sp.Integer(0))]


def check_decomposition_small(k: int, d: int, *, boltzmann: bool = False) -> SymbolicCheck:
    """Full d-dimensional identity for explicit K and d, all coordinates symbolic.

    With ``boltzmann=False`` q is a generic point of the simplex (K-1 free symbols); with
    ``boltzmann=True`` q_k = exp(-||z-p_k||^2/tau) / sum_j exp(-||z-p_j||^2/tau).
    """
    if k < 1:
        raise ValueError(f"k: expected at least one prototype, got {k}")
    if d < 1:
        raise ValueError(f"d: expected a dimension >= 1, got {d}")
    z = sp.Matrix(sp.symbols(f"z1:{d + 1}", real=True))
    ps = [sp.Matrix(sp.symbols(f"p{i}_1:{d + 1}", real=True)) for i in range(1, k + 1)]
    sq = [((z - pk).T * (z - pk))[0] for pk in ps]
    if boltzmann:
        tau = sp.Symbol("tau", positive=True)
        w = [sp.exp(-s / tau) for s in sq]
        q = [wi / sum(w) for wi in w]
    else:
        q = _simplex_weights(k)
    mu = sum((qi * pk for qi, pk in zip(q, ps)), sp.zeros(d, 1))
    l_q = sum(qi * s for qi, s in zip(q, sq))
    l_ols = ((z - mu).T * (z - mu))[0]
    v = sum(qi * ((pk - mu).T * (pk - mu))[0] for qi, pk in zip(q, ps))
    diff = l_q - l_ols - v
    if boltzmann:
        # q enters only through the weights; with w_k = exp(-d_k/tau) treated as positive
        # symbols the expression is a rational function whose numerator must vanish.
        wsyms = sp.symbols(f"w1:{k + 1}", positive=True)
        diff = diff.subs({wi: ws for wi, ws in zip(w, wsyms)})
        residual = sp.simplify(sp.together(sp.expand(diff)))
    else:
        residual = sp.expand(diff)
    kind = "Boltzmann" if boltzmann else "generic simplex"
    return identity(f"L_q = L_OLS + V, K={k}, d={d}, {kind} q, all coordinates symbolic",
                    residual)


def check_grad_v_small(k: int, d: int, n: int = 2) -> SymbolicCheck:
    """d V / d P_r = 2 Sigma_q P_r for explicit K, d, N with q held fixed (symbolic entries).

    V = sum_n sum_k q_nk ||p_k - mu_n||^2 with P_r the K x d matrix of prototype rows and
    q_n generic simplex points independent of P. The residual is the K x d matrix
    grad - 2 Sigma_q P_r, which must be the zero matrix.
    """
    if min(k, d, n) < 1:
        raise ValueError(f"k, d, n: expected positive sizes, got {(k, d, n)}")
    pr = sp.Matrix(k, d, lambda a, b: sp.Symbol(f"p{a + 1}_{b + 1}", real=True))
    qs = [sp.Matrix(_simplex_weights(k, name=f"q{m + 1}_")) for m in range(n)]
    v = sp.Integer(0)
    sigma = sp.zeros(k, k)
    for q in qs:
        mu = pr.T * q                                           # (d, 1)
        for a in range(k):
            diff = pr[a, :].T - mu
            v += q[a] * (diff.T * diff)[0]
        sigma += sp.diag(*q) - q * q.T
    grad = sp.Matrix(k, d, lambda a, b: sp.diff(v, pr[a, b]))
    residual = sp.expand(grad - 2 * sigma * pr)
    return identity(f"grad_P V = 2 Sigma_q P (rows), K={k}, d={d}, N={n}, q fixed", residual)


# ---------------------------------------------------------------------------------------------
# Numerical part
# ---------------------------------------------------------------------------------------------


def _check_inputs(z: Tensor, prototypes: Tensor, q: Tensor | None = None) -> None:
    if z.dim() != 2:
        raise ValueError(f"z: expected shape (N, d), got {tuple(z.shape)}")
    if prototypes.dim() != 2 or prototypes.shape[1] != z.shape[1]:
        raise ValueError(f"prototypes: expected shape (K, {z.shape[1]}), "
                         f"got {tuple(prototypes.shape)}")
    if q is not None and q.shape != (z.shape[0], prototypes.shape[0]):
        raise ValueError(f"q: expected shape ({z.shape[0]}, {prototypes.shape[0]}), "
                         f"got {tuple(q.shape)}")


def reference_terms(z: Tensor, prototypes: Tensor, q: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(l_q, l_ols, v) straight from the definitions, token means, in the inputs' dtype.

    z (N, d), prototypes (K, d), q (N, K). No distance expansion and no shift: one (N, d)
    difference per prototype, so this is an independent reference for
    :func:`ddcl_theory.functional.loss_terms` (which uses the faster expanded forms).
    """
    _check_inputs(z, prototypes, q)
    mu = q @ prototypes
    l_q = z.new_zeros(z.shape[0])
    v = z.new_zeros(z.shape[0])
    for k in range(prototypes.shape[0]):
        l_q = l_q + q[:, k] * ((z - prototypes[k]) ** 2).sum(-1)
        v = v + q[:, k] * ((prototypes[k] - mu) ** 2).sum(-1)
    l_ols = ((z - mu) ** 2).sum(-1)
    return l_q.mean(), l_ols.mean(), v.mean()


def variance_term(prototypes: Tensor, q: Tensor) -> Tensor:
    """V = sum_n sum_k q_nk ||p_k - mu_n||^2 (a *sum* over tokens, as in the theory notes).

    prototypes (K, d), q (N, K); differentiable in both.
    """
    if q.dim() != 2 or q.shape[1] != prototypes.shape[0]:
        raise ValueError(f"q: expected shape (N, {prototypes.shape[0]}), got {tuple(q.shape)}")
    mu = q @ prototypes
    total = prototypes.new_zeros(())
    for k in range(prototypes.shape[0]):
        total = total + (q[:, k] * ((prototypes[k] - mu) ** 2).sum(-1)).sum()
    return total


def sigma_q(q: Tensor) -> Tensor:
    """Sigma_q = sum_n (diag(q_n) - q_n q_n^T), shape (K, K), from q (N, K)."""
    if q.dim() != 2:
        raise ValueError(f"q: expected shape (N, K), got {tuple(q.shape)}")
    return torch.diag(q.sum(0)) - q.T @ q


@dataclass(frozen=True)
class IdentityCheck:
    """One random instance of the decomposition check.

    ``rel_reference``: |l_q - l_ols - v| / l_q with the terms from the definitions;
    ``rel_functional``: the same with :func:`ddcl_theory.functional.loss_terms`;
    ``rel_agreement``: max relative difference between the two implementations' l_q, l_ols, v
    (each relative to l_q); ``v_min``: the smallest per-instance V (must be >= 0).
    """

    scale: float
    temperature: float
    seed: int
    dtype: str
    rel_reference: float
    rel_functional: float
    rel_agreement: float
    v_min: float


def random_instance(scale: float, temperature: float, seed: int, *, n: int = 64, k: int = 8,
                    d: int = 5, dtype: torch.dtype = torch.float64,
                    q_kind: str = "boltzmann") -> tuple[Tensor, Tensor, Tensor]:
    """(z, prototypes, q) with coordinates ~ scale * N(0, 1) drawn from a seeded generator.

    ``q_kind``: ``"boltzmann"`` (softmax of -d/temperature, via the layer's functional code) or
    ``"dirichlet"`` (arbitrary simplex points, not of Boltzmann form; temperature unused).
    """
    if scale <= 0 or not math.isfinite(scale):
        raise ValueError(f"scale: expected a finite value > 0, got {scale!r}")
    if q_kind not in ("boltzmann", "dirichlet"):
        raise ValueError(f"q_kind: expected 'boltzmann' or 'dirichlet', got {q_kind!r}")
    g = torch.Generator().manual_seed(seed)
    z = (scale * torch.randn(n, d, generator=g, dtype=torch.float64)).to(dtype)
    p = (scale * torch.randn(k, d, generator=g, dtype=torch.float64)).to(dtype)
    if q_kind == "boltzmann":
        q = F.soft_assign(z, p, temperature)
    else:
        e = -torch.log(torch.rand(n, k, generator=g, dtype=torch.float64))
        q = (e / e.sum(-1, keepdim=True)).to(dtype)
    return z, p, q


def check_identity(scale: float, temperature: float, seed: int, dtype: torch.dtype = torch.float64,
                   **sizes) -> IdentityCheck:
    """Check L_q = L_OLS + V on one :func:`random_instance`; see :class:`IdentityCheck`."""
    z, p, q = random_instance(scale, temperature, seed, dtype=dtype, **sizes)
    ref = reference_terms(z, p, q)
    fun = F.loss_terms(z, p, q)
    l_q = float(ref[0])
    denom = l_q if l_q > 0 else 1.0
    rel_ref = abs(float(ref[0] - ref[1] - ref[2])) / denom
    rel_fun = abs(float(fun[0] - fun[1] - fun[2])) / denom
    agree = max(abs(float(a) - float(b)) for a, b in zip(ref, fun)) / denom
    return IdentityCheck(scale, temperature, seed, str(dtype).replace("torch.", ""),
                         rel_ref, rel_fun, agree, min(float(ref[2]), float(fun[2])))


def identity_grid(scales, temperatures, seeds, dtype: torch.dtype = torch.float64,
                  **sizes) -> list[IdentityCheck]:
    """:func:`check_identity` over the product scales x temperatures x seeds."""
    return [check_identity(s, t, seed, dtype, **sizes)
            for s, t, seed in itertools.product(scales, temperatures, seeds)]


def grad_v_softmax_extra(z: Tensor, prototypes: Tensor, temperature: float) -> Tensor:
    """The part of grad_P V that comes from differentiating q through the softmax, (K, d).

    With e_nk = ||p_k - mu_n||^2 and V_n = sum_k q_nk e_nk, and q_nk = softmax_k(-d_nk / tau),
    dq_nk/dp_j = (2 / tau) q_nk (delta_kj - q_nj) (z_n - p_j), so the extra term is

        extra_j = (2 / tau) sum_n q_nj (e_nj - V_n) (z_n - p_j).

    (dV/dq_nk = e_nk - ||mu_n||^2 + const; constants in k drop out against the softmax Jacobian.)
    """
    _check_inputs(z, prototypes)
    q = F.soft_assign(z, prototypes, temperature)
    mu = q @ prototypes
    e = torch.stack([((prototypes[k] - mu) ** 2).sum(-1) for k in range(prototypes.shape[0])], 1)
    v_n = (q * e).sum(1, keepdim=True)
    w = q * (e - v_n)                                           # (N, K)
    return (2.0 / temperature) * (w.T @ z - w.sum(0)[:, None] * prototypes)


@dataclass(frozen=True)
class GradientCheck:
    """grad_P V by autograd against 2 Sigma_q P (rows), for one random instance (float64).

    ``rel_fixed``: ||grad(q detached) - 2 Sigma_q P|| / ||2 diag(sum_n q_n) P||, the error
    relative to the size of the terms that cancel in Sigma_q (2 Sigma_q P itself goes to 0
    with V as tau -> 0, so it is no scale for rounding errors).
    ``rel_extra``: ||grad(q through softmax) - grad(q detached)|| / ||2 Sigma_q P||: how large
    the terms the identity leaves out are, against the identity's own gradient.
    ``rel_extra_formula``: ||autograd extra - :func:`grad_v_softmax_extra`|| / ||extra||.
    """

    temperature: float
    seed: int
    rel_fixed: float
    rel_extra: float
    rel_extra_formula: float


def gradient_check(temperature: float, seed: int, *, n: int = 32, k: int = 6,
                   d: int = 4) -> GradientCheck:
    """Compare the two autograd conventions for grad_P V with 2 Sigma_q P in float64."""
    z, p, _ = random_instance(1.0, temperature, seed, n=n, k=k, d=d)
    p = p.clone().requires_grad_(True)
    q = F.soft_assign(z, p, temperature)
    (g_full,) = torch.autograd.grad(variance_term(p, q), p)
    (g_fixed,) = torch.autograd.grad(variance_term(p, q.detach()), p)
    q0, p0 = q.detach(), p.detach()
    target = 2.0 * sigma_q(q0) @ p0
    term_scale = float((2.0 * torch.diag(q0.sum(0)) @ p0).norm())
    extra = g_full - g_fixed
    formula = grad_v_softmax_extra(z, p0, temperature)
    extra_norm = float(extra.norm())
    return GradientCheck(temperature, seed, float((g_fixed - target).norm()) / term_scale,
                         extra_norm / float(target.norm()),
                         float((extra - formula).norm()) / extra_norm if extra_norm > 0 else 0.0)


@dataclass(frozen=True)
class CollapseCheck:
    """The decomposition at (and near) full collapse p_1 = ... = p_K.

    ``v_at_collapse``: V (token mean, float64) with all prototypes equal; ``v_symbolic``: the
    same in SymPy (exactly 0); ``near``: (spread, V, bound) with prototypes spread*u_k around
    a common point and bound = spread^2 * max_kl ||u_k - u_l||^2 / 2 >= V.
    """

    v_at_collapse: float
    lq_minus_lols_at_collapse: float
    v_symbolic: sp.Expr
    near: tuple[tuple[float, float, float], ...]


def collapse_check(seed: int = 0, *, n: int = 64, k: int = 8, d: int = 5,
                   temperature: float = 1.0, spreads=(1.0, 1e-1, 1e-2, 1e-3, 0.0)) -> CollapseCheck:
    """V at collapse (D6): 0, not infinite; and V -> 0 continuously as the prototypes merge."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, d, generator=g, dtype=torch.float64)
    centre = torch.randn(1, d, generator=g, dtype=torch.float64)
    u = torch.randn(k, d, generator=g, dtype=torch.float64)
    bound_unit = 0.5 * float(torch.cdist(u, u).max() ** 2)
    collapsed = centre.expand(k, d).clone()
    q = F.soft_assign(z, collapsed, temperature)
    l_q, l_ols, v = reference_terms(z, collapsed, q)
    near = []
    for s in spreads:
        p = centre + s * u
        _, _, vs = reference_terms(z, p, F.soft_assign(z, p, temperature))
        near.append((float(s), float(vs), s * s * bound_unit))
    # symbolic: K = 3 prototypes all equal to c, generic simplex weights, d = 2
    c = sp.Matrix(sp.symbols("c1:3", real=True))
    qs = _simplex_weights(3)
    mu = sum((qi * c for qi in qs), sp.zeros(2, 1))
    v_sym = sp.simplify(sum(qi * ((c - mu).T * (c - mu))[0] for qi in qs))
    return CollapseCheck(float(v), float(l_q - l_ols), v_sym, tuple(near))
