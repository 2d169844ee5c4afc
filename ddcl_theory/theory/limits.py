"""Temperature limits of the soft assignment (claim X1): hard VQ as tau -> 0, uniform as tau -> oo.

Symbolic half (SymPy, K = 2 and K = 3): exact limits of q, the soft centroid mu, V, L_OLS and L_q
and the first term of the large-temperature expansion. Numerical half (torch): the rates at which
the limits are approached, and a sweep of L_q, L_OLS and V over temperatures for given tokens and
prototypes. Shapes: z (N, d), prototypes (K, d) rows, q (N, K).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy as sp
import torch
from torch import Tensor

from ddcl_theory import functional as F
from ddcl_theory.theory.symbolic import SymbolicCheck, compare


def _two_prototype_model():
    """K = 2 with d_1 = a, d_2 = a + delta (delta > 0: prototype 1 is the nearer one).

    Returns the symbols and the quantities as functions of tau. mu, V, L_OLS and L_q are written
    through q_1 and the scalar products they need, valid in any dimension: with
    s = ||p_1 - p_2||^2, mu = q1 p1 + q2 p2, V = q1 q2 s, L_OLS = L_q - V.
    """
    tau, delta, s = sp.symbols("tau delta s", positive=True)
    a = sp.Symbol("a", nonnegative=True)
    p1, p2 = sp.symbols("p1 p2", real=True)  # one coordinate of each prototype
    q1 = 1 / (1 + sp.exp(-delta / tau))
    q2 = 1 - q1
    quantities = {
        "q1": q1,
        "mu": q1 * p1 + q2 * p2,
        "V": q1 * q2 * s,
        "L_q": q1 * a + q2 * (a + delta),
    }
    quantities["L_OLS"] = quantities["L_q"] - quantities["V"]
    return (tau, delta, s, a, p1, p2), quantities


def zero_temperature_limit_k2() -> SymbolicCheck:
    """tau -> 0+: q_1 -> 1, mu -> p_1 (nearest prototype), V -> 0, L_q and L_OLS -> d_1 =
    min_k d_k."""
    (tau, delta, s, a, p1, p2), qty = _two_prototype_model()
    computed = {name: sp.limit(e, tau, 0, "+") for name, e in qty.items()}
    expected = {"q1": sp.Integer(1), "mu": p1, "V": sp.Integer(0), "L_q": a, "L_OLS": a}
    return compare("K=2, tau -> 0+: hard nearest-prototype assignment", computed, expected)


def infinite_temperature_limit_k2() -> SymbolicCheck:
    """tau -> oo: q_1 -> 1/2, mu -> (p_1 + p_2)/2, V -> ||p_1 - p_2||^2 / 4, L_q -> mean
    distance."""
    (tau, delta, s, a, p1, p2), qty = _two_prototype_model()
    computed = {name: sp.limit(e, tau, sp.oo) for name, e in qty.items()}
    expected = {"q1": sp.Rational(1, 2), "mu": (p1 + p2) / 2, "V": s / 4,
                "L_q": a + delta / 2, "L_OLS": a + delta / 2 - s / 4}
    return compare("K=2, tau -> oo: uniform assignment", computed, expected)


def high_temperature_rate_k2() -> SymbolicCheck:
    """q_1 = 1/2 + delta / (4 tau) + O(tau^-3): the uniform limit is approached at rate 1/tau."""
    (tau, delta, *_), qty = _two_prototype_model()
    x = sp.Symbol("x", positive=True)  # x = 1 / tau
    series = sp.series(qty["q1"].subs(tau, 1 / x), x, 0, 3).removeO()
    computed = {"q1 to O(1/tau^2)": sp.expand(series.subs(x, 1 / tau))}
    expected = {"q1 to O(1/tau^2)": sp.Rational(1, 2) + delta / (4 * tau)}
    return compare("K=2: q_1 - 1/2 = delta/(4 tau) + O(tau^-3)", computed, expected)


def zero_temperature_limit_k3() -> SymbolicCheck:
    """K = 3 with gaps g_2, g_3 > 0 to the nearest prototype: q -> (1, 0, 0) as tau -> 0+."""
    tau, g2, g3 = sp.symbols("tau g2 g3", positive=True)
    w = [sp.Integer(1), sp.exp(-g2 / tau), sp.exp(-g3 / tau)]
    q = [wi / sum(w) for wi in w]
    computed = {f"q{i + 1}": sp.limit(qi, tau, 0, "+") for i, qi in enumerate(q)}
    expected = {"q1": sp.Integer(1), "q2": sp.Integer(0), "q3": sp.Integer(0)}
    return compare("K=3, tau -> 0+: one-hot on the nearest prototype", computed, expected)


def squeeze_bounds_general_k() -> SymbolicCheck:
    """Both limits for a symbolic K by squeezing q between bounds whose limits SymPy computes.

    Zero temperature: with g > 0 the smallest gap d_j - d_min over the non-nearest prototypes,
    0 <= 1 - q_min = S / (1 + S) <= S <= (K - 1) exp(-g / tau),
    S = sum_{j != argmin} exp(-(d_j - d_min)/tau).
    Infinite temperature: with r = max_k d_k - min_k d_k,
    exp(-r / tau) / K <= q_k <= exp(r / tau) / K for every k.
    The computed entries are the limits of the bounds; squeezing gives 1 - q_min -> 0 and
    q_k -> 1/K.
    """
    tau, g, r = sp.symbols("tau g r", positive=True)
    k = sp.Symbol("K", integer=True, positive=True)
    computed = {
        "upper bound on 1 - q_min, tau -> 0+": sp.limit((k - 1) * sp.exp(-g / tau), tau, 0, "+"),
        "lower bound on K q_k, tau -> oo": sp.limit(sp.exp(-r / tau), tau, sp.oo),
        "upper bound on K q_k, tau -> oo": sp.limit(sp.exp(r / tau), tau, sp.oo),
    }
    expected = {"upper bound on 1 - q_min, tau -> 0+": sp.Integer(0),
                "lower bound on K q_k, tau -> oo": sp.Integer(1),
                "upper bound on K q_k, tau -> oo": sp.Integer(1)}
    return compare("symbolic K: squeeze bounds for both limits", computed, expected)


# ---------------------------------------------------------------------------------------------
# Numerical rates and sweeps
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RateRow:
    """Approach to the two limits at one temperature (float64).

    ``hard_dev``: max_n (1 - q_n[argmin_k d_nk]), the distance to the one-hot limit;
    ``hard_rate``: -tau log(hard_dev) / min_n gap_n, which tends to 1 as tau -> 0 (the
    deviation is exp(-gap/tau) up to a factor <= K-1);
    ``uniform_dev``: max_nk |q_nk - 1/K|;
    ``uniform_rate``: tau * uniform_dev / (max_nk |d_nk - mean_k d_nk| / K), which tends to
    1 as tau -> oo (q_nk = 1/K - (d_nk - mean_k d_nk)/(K tau) + O(tau^-2)).
    """

    temperature: float
    hard_dev: float
    hard_rate: float
    uniform_dev: float
    uniform_rate: float


def limit_rates(z: Tensor, prototypes: Tensor, temperatures) -> list[RateRow]:
    """:class:`RateRow` for each temperature; z and prototypes are cast to float64."""
    z, p = z.double(), prototypes.double()
    d = F.squared_distances(z, p)
    k = p.shape[0]
    sorted_d = d.sort(dim=1).values
    gap = float((sorted_d[:, 1] - sorted_d[:, 0]).min()) if k > 1 else float("inf")
    if k > 1 and gap <= 0:
        raise ValueError("z: some token is equidistant from two nearest prototypes (a tie); "
                         "the zero-temperature limit is then not one-hot")
    nearest = d.argmin(dim=1)
    spread = float((d - d.mean(1, keepdim=True)).abs().max()) / k
    rows = []
    for tau in temperatures:
        q = F.soft_assign(z, p, float(tau))
        dev = float((1.0 - q.gather(1, nearest[:, None])).max())
        udev = float((q - 1.0 / k).abs().max())
        hard_rate = -tau * np.log(dev) / gap if dev > 0 else float("nan")
        rows.append(RateRow(float(tau), dev, float(hard_rate), udev,
                            float(tau * udev / spread) if spread > 0 else float("nan")))
    return rows


@dataclass(frozen=True)
class TemperatureSweep:
    """L_q, L_OLS, V (token means) over temperatures, with their tau -> 0 and tau -> oo limits.

    Arrays have one entry per temperature. ``hard``: (L_q, L_OLS, V) of hard nearest-prototype
    assignment (the VQ distortion, itself, 0). ``uniform``: the same with q = 1/K.
    ``hard_fraction``: fraction of tokens with max_k q_nk > 0.99 (practically hard-assigned;
    argmax_k q_nk is the nearest prototype at *every* temperature, so that is no measure).
    ``perplexity``: exp of the mean per-token assignment entropy.
    """

    temperatures: np.ndarray
    l_q: np.ndarray
    l_ols: np.ndarray
    v: np.ndarray
    perplexity: np.ndarray
    hard_fraction: np.ndarray
    hard: tuple[float, float, float]
    uniform: tuple[float, float, float]


def temperature_sweep(z: Tensor, prototypes: Tensor, temperatures) -> TemperatureSweep:
    """Evaluate the decomposition at each temperature (float64 arithmetic)."""
    if len(temperatures) == 0:
        raise ValueError("temperatures: expected at least one temperature")
    z, p = z.double(), prototypes.double()
    n, k = z.shape[0], p.shape[0]
    d = F.squared_distances(z, p)
    nearest = d.argmin(dim=1)
    rows = []
    for tau in temperatures:
        q = F.soft_assign(z, p, float(tau))
        terms = [float(t) for t in F.loss_terms(z, p, q)]
        ent = float(-(q * torch.log(q.clamp_min(1e-300))).sum(1).mean())
        hard_frac = float((q.max(1).values > 0.99).double().mean())
        rows.append(terms + [float(np.exp(ent)), hard_frac])
    arr = np.array(rows)
    hard_q = torch.nn.functional.one_hot(nearest, k).double()
    uni_q = torch.full((n, k), 1.0 / k, dtype=torch.float64)
    hard = tuple(float(t) for t in F.loss_terms(z, p, hard_q))
    uniform = tuple(float(t) for t in F.loss_terms(z, p, uni_q))
    return TemperatureSweep(np.asarray(temperatures, dtype=float), arr[:, 0], arr[:, 1], arr[:, 2],
                            arr[:, 3], arr[:, 4], hard, uniform)
