"""SymPy checks of the two-time-scale statements on small scalar blocks (claims D8, D9).

The Jacobian is J(eps) = -[[a, b], [eps c, eps e]] (or its 3x3 analogue with one fast and two
slow variables); see :mod:`ddcl_theory.theory.timescales` for the numerical linear algebra.
Every function returns a :class:`~ddcl_theory.theory.symbolic.SymbolicCheck`.
"""
from __future__ import annotations

import sympy as sp

from ddcl_theory.theory.symbolic import SymbolicCheck, identity


def slow_eigenvalue_series_2x2() -> SymbolicCheck:
    """J = -[[a, b], [eps c, eps e]] with a > 0: the slow eigenvalue's Taylor series in eps.

    Expected: lambda_slow = -eps S + eps^2 b c S / a^2 + O(eps^3) with S = e - b c / a, i.e. the
    first-order term is eps * eig(-S) and the error of that approximation is O(eps^2), with a
    non-zero eps^2 coefficient unless b c = 0 or S = 0. The residual holds the differences of
    the two coefficients, the slow root at eps = 0 and the characteristic polynomial at it.
    """
    a, eps = sp.symbols("a epsilon", positive=True)
    b, c, e, lam = sp.symbols("b c e lambda", real=True)
    trace, det = -(a + eps * e), eps * (a * e - b * c)
    slow = (trace + sp.sqrt(trace**2 - 4 * det)) / 2          # the root that -> 0 with eps
    series = sp.series(slow, eps, 0, 3).removeO()
    first, second = sp.simplify(series.coeff(eps, 1)), sp.simplify(series.coeff(eps, 2))
    s_schur = e - b * c / a
    expected_first, expected_second = -s_schur, b * c * s_schur / a**2
    is_root = sp.simplify((lam**2 - trace * lam + det).subs(lam, slow))
    residual = sp.Tuple(sp.simplify(first - expected_first),
                        sp.simplify(second - expected_second),
                        sp.simplify(slow.subs(eps, 0)), is_root)
    return identity("slow eigenvalue = -eps S + eps^2 b c S / a^2 + O(eps^3)", residual,
                    first=first, second=second)


def reduced_characteristic_polynomial_3x3() -> SymbolicCheck:
    """One fast and two slow variables (m = 1, n = 2), general entries.

    Expected: det(eps mu I - J(eps)) / eps^2 -> a * det(mu I + S) as eps -> 0, where
    S = E - C a^{-1} B is the 2x2 Schur complement. So the slow eigenvalues over eps tend to the
    eigenvalues of -S (the reduced system), for any B, C, E.
    """
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
    return identity("det(eps mu I - J)/eps^2 -> a det(mu I + S)",
                    sp.simplify(limit - expected), limit=sp.factor(limit))


def shared_potential_inertia_2x2() -> SymbolicCheck:
    """Shared potential (c = b): J(eps) = -diag(1, eps) H has real eigenvalues for every eps > 0
    (discriminant = (a - eps e)^2 + 4 eps b^2 >= 0) and det J = eps det H, trace J = -(a + eps e):
    the signs of the eigenvalues, hence stability, do not depend on eps (Sylvester)."""
    a, eps = sp.symbols("a epsilon", positive=True)
    b, e = sp.symbols("b e", real=True)
    trace, det = -(a + eps * e), eps * (a * e - b**2)
    disc = sp.expand(trace**2 - 4 * det)
    residual = sp.simplify(disc - ((a - eps * e) ** 2 + 4 * eps * b**2))
    return identity("discriminant = (a - eps e)^2 + 4 eps b^2; det J = eps det H", residual,
                    discriminant=sp.factor(disc), det=det)


def split_objective_hopf_2x2() -> SymbolicCheck:
    """Two objectives (c != b) with a > 0, e < 0 and a e - b c > 0 (stable reduced system,
    unstable encoder-alone): J(eps) is stable iff eps < eps* = -a / e; at eps* the trace
    vanishes with a positive determinant (a pair of eigenvalues crosses the imaginary axis).

    The residual holds eps* + a / e and the real parts of the eigenvalues at eps* for
    a = 1, e = -1/2, b = 1, c = -1."""
    statement = "eps* = -a/e for the two-objective 2x2 system"
    a, eps = sp.symbols("a epsilon", positive=True)
    b, c, e = sp.symbols("b c e", real=True)
    trace, det = -(a + eps * e), eps * (a * e - b * c)
    crit = sp.solve(sp.Eq(trace, 0), eps)
    if len(crit) != 1:
        return SymbolicCheck(statement, False, sp.Tuple(*crit),
                             {"eps_star": crit[0] if crit else None, "eigs_at_crit": []})
    crit_residual = sp.simplify(crit[0] + a / e)
    if crit_residual != 0:
        return identity(statement, sp.Tuple(crit_residual), eps_star=crit[0], eigs_at_crit=[])
    eigs = sp.solve(sp.Symbol("l")**2 - trace * sp.Symbol("l") + det, sp.Symbol("l"))
    at_crit = [sp.simplify(x.subs(eps, crit[0])) for x in eigs]
    real_parts = [sp.simplify(sp.re(x.subs({a: 1, e: -sp.Rational(1, 2), b: 1, c: -1})))
                  for x in at_crit]
    return identity(statement, sp.Tuple(crit_residual, *real_parts), eps_star=crit[0],
                    eigs_at_crit=at_crit)
