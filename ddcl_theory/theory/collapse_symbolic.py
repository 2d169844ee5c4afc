"""SymPy derivation of the Hessian at collapse for the free energy F and for L_q (q differentiated).

Collapse is p_1 = ... = p_K = zbar. Along P(t) = collapse + t U (rows u_k), token n has
d_nk(t) = c_n - 2 t a_nk + t^2 b_k with c_n = ||x_n||^2, a_nk = <x_n, u_k>, b_k = ||u_k||^2 and
x_n = z_n - zbar. The second derivative at t = 0 of one token's term depends on (a_nk, b_k) only:

* F   = -tau log sum_k exp(-d_k / tau):               F'' = (2/K) sum_k b_k - (4/tau) Var_k(a_k)
* L_q = sum_k q_k d_k, q = softmax(-d / tau) (q differentiated): L'' = (2/K) sum_k b_k
  - (8/tau) Var_k(a_k)

with Var_k the variance under the uniform weights 1/K. :func:`token_curvature_any_k` proves both
for a *symbolic* K (SymPy sums over k = 1..K). Summed over the tokens, with sum_k u_k = 0,
sum_n Var_k(a_nk) = (N/K) sum_k u_k^T C u_k, so the Hessians on the zero-sum subspace are
(2N/K)(I - 2C/tau) for F and (2N/K)(I - 4C/tau) for L_q: T_c(F) = 2 lambda_max(C), and collapse
is a saddle of L_q only below 4 lambda_max(C). :func:`zero_sum_hessians` checks that last step on
the full functions with symbolic tokens and perturbations for K = 2, 3, 4 (d = 2, N = 3).
"""
from __future__ import annotations

import sympy as sp

from ddcl_theory.theory.symbolic import SymbolicCheck, identity


def token_curvature_any_k(quantisation_factor: int = 8) -> SymbolicCheck:
    """One token's second derivatives at collapse for F and for L_q, K a symbolic integer >= 1.

    ``quantisation_factor`` is the coefficient of Var_k(a_k) / tau expected for L_q (8 is the
    truth; another value gives a check that fails, which the tests use). Residual: the Tuple
    (F'' - expected, L_q'' - expected), simplified.
    """
    t = sp.Symbol("t", real=True)
    tau = sp.Symbol("tau", positive=True)
    kk = sp.Symbol("K", integer=True, positive=True)
    k = sp.Symbol("k", integer=True, positive=True)
    c = sp.Symbol("c", real=True)
    a, b = sp.IndexedBase("a", real=True), sp.IndexedBase("b", real=True)
    d_k = c - 2 * t * a[k] + t**2 * b[k]
    partition = sp.Sum(sp.exp(-d_k / tau), (k, 1, kk))
    free = -tau * sp.log(partition)
    quant = sp.Sum(d_k * sp.exp(-d_k / tau), (k, 1, kk)) / partition

    def at_collapse(f: sp.Expr) -> sp.Expr:
        return sp.diff(f, t, 2).subs(t, 0).doit()

    f2, l2 = at_collapse(free), at_collapse(quant)
    sum_a, sum_a2 = sp.Sum(a[k], (k, 1, kk)), sp.Sum(a[k] ** 2, (k, 1, kk))
    var_a = sum_a2 / kk - (sum_a / kk) ** 2
    mean_b2 = 2 * sp.Sum(b[k], (k, 1, kk)) / kk
    residual = sp.Tuple(sp.simplify(f2 - (mean_b2 - 4 * var_a / tau)),
                        sp.simplify(l2 - (mean_b2 - quantisation_factor * var_a / tau)))
    return identity(
        "one token at collapse, any K: F'' = (2/K) sum b_k - (4/tau) Var_k a_k and "
        f"L_q'' (q differentiated) = (2/K) sum b_k - ({quantisation_factor}/tau) Var_k a_k",
        residual, free_energy=f2, quantisation=l2)


def zero_sum_hessians(ks: tuple[int, ...] = (2, 3, 4), n_tokens: int = 3,
                      dim: int = 2, quantisation_m: int = 4) -> SymbolicCheck:
    """Zero-sum quadratic forms at collapse of F and L_q against (2N/K) sum_k u_k^T (I - mC/tau)
    u_k, m = 2 (F) and ``quantisation_m`` (L_q; 4 is the truth, another value gives a check that
    fails), for symbolic tokens (N, d) and symbolic zero-sum U (K, d).

    The gradient at collapse is checked to vanish too. Each token's derivatives in t are taken
    on the full functions and then set at t = 0, where its K Gibbs weights are one and the same
    exp(-||z_n - zbar||^2 / tau): that exponential becomes a positive symbol E_n (its powers,
    powers of E_n), so every residual is a rational function that :func:`sympy.cancel` brings
    to 0 exactly (far faster than :func:`sympy.simplify` on the exponentials). Residual: one
    Tuple entry per K and quantity (gradient of F, gradient of L_q, form of F, form of L_q).
    """
    if any(isinstance(k, bool) or not isinstance(k, int) or k < 2 for k in ks):
        raise ValueError(f"ks: expected ints >= 2, got {ks!r}")
    t = sp.Symbol("t", real=True)
    tau = sp.Symbol("tau", positive=True)
    z = sp.Matrix(n_tokens, dim, lambda n, i: sp.Symbol(f"z{n}{i}", real=True))
    zbar = sp.Matrix([[sum(z[:, i]) / n_tokens for i in range(dim)]])
    x = z - sp.ones(n_tokens, 1) * zbar
    cov = x.T * x / n_tokens
    weight_at_collapse = [sp.Symbol(f"E{n}", positive=True) for n in range(n_tokens)]
    residuals, details = [], {}
    for k in ks:
        free_rows = sp.Matrix(k - 1, dim, lambda j, i: sp.Symbol(f"u{j}{i}", real=True))
        u = free_rows.col_join(-sp.ones(1, k - 1) * free_rows)  # zero-sum rows
        p = sp.ones(k, 1) * zbar + t * u
        dist = [[sum((z[n, i] - p[j, i]) ** 2 for i in range(dim)) for j in range(k)]
                for n in range(n_tokens)]
        weights = [[sp.exp(-dist[n][j] / tau) for j in range(k)] for n in range(n_tokens)]
        token_terms = {
            "free_energy": [-tau * sp.log(sum(w)) for w in weights],
            "quantisation": [sum(w[j] * dist[n][j] for j in range(k)) / sum(w)
                             for n, w in enumerate(weights)]}

        def as_weight_power(e: sp.Expr, n: int) -> sp.Expr:
            """exp(c * a_n) -> E_n**c, a_n = -||z_n - zbar||^2 / tau (SymPy writes a product
            of exponentials as one, so c is any rational); anything else is an error."""
            c = sp.cancel(e.args[0] / (-dist[n][0].subs(t, 0) / tau))
            if not c.is_Rational:
                raise ValueError(f"unexpected exponential at collapse: {e}")
            return weight_at_collapse[n] ** c

        def at_collapse(terms: list[sp.Expr], order: int) -> sp.Expr:
            """sum_n d^order/dt^order of token n's term at t = 0, exp(c a_n) -> E_n**c."""
            return sum(sp.diff(term, t, order).subs(t, 0).replace(
                lambda e: isinstance(e, sp.exp), lambda e, n=n: as_weight_power(e, n))
                for n, term in enumerate(terms))

        form = {m: sum(((u[j, :] * (sp.eye(dim) - m * cov / tau)) * u[j, :].T)[0]
                       for j in range(k)) * 2 * n_tokens / k for m in (2, quantisation_m)}
        got = {name: at_collapse(terms, 2) for name, terms in token_terms.items()}
        slope = {name: at_collapse(terms, 1) for name, terms in token_terms.items()}

        def exact(expr: sp.Expr) -> sp.Expr:
            return sp.cancel(sp.expand(expr))

        residuals += [exact(slope["free_energy"]), exact(slope["quantisation"]),
                      exact(got["free_energy"] - form[2]),
                      exact(got["quantisation"] - form[quantisation_m])]
        details[f"K={k}"] = (got["free_energy"], got["quantisation"])
    return identity(
        f"zero-sum Hessian at collapse, K in {list(ks)}, N = {n_tokens}, d = {dim}: "
        f"F -> (2N/K)(I - 2C/tau), L_q (q differentiated) -> (2N/K)(I - {quantisation_m}C/tau)",
        sp.Tuple(*residuals), **details)
