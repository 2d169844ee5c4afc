"""Claims of the free-energy chapter: :func:`decide_d7` and :func:`decide_d10`.

Reads the numbers the chapter computed on CIFAR-10 patch tokens: the spread rates of the V part
of the velocity on random banks, the spread of a bank started near collapse above the threshold
of the trained loss (L_q with q differentiated, 4 lambda_max), both critical temperatures and the
Hessians' sign changes (D7); the largest rise of F under cooling and
the separations after training above and below T_c (D10).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ddcl_theory.ledger.verdict import Verdict, decided_by

D7_RULE = ("refuted: the V part of the velocity never increases the spread (every rate "
           "<= 1e-9) and a bank started near collapse above the threshold of the trained loss "
           "(4 lambda_max for L_q with q differentiated) contracts under descent of that loss; "
           "qualified otherwise")
D10_RULE = ("two readings of 'free energy', each decided: F_tau (the deterministic-annealing "
            "free energy) and G = F + N tau log K (the only one of the two whose cooling "
            "derivative cannot be positive). A reading holds when its function never rises "
            "under any cooling schedule tried (G: relative tolerance 1e-12) and training above "
            "T_c does not end fully collapsed (some separation >= 1e-6 on some start). The "
            "claim is settled by G, the reading the statement can mean (it asks for a Lyapunov "
            "function under decreasing schedules, which F cannot be: dF/dtau = -H <= 0); "
            "confirmed when G's reading holds, refuted otherwise; F's reading is shown beside")
#: Relative rise of G (per trajectory, against |G| at its start) still counted as no rise.
G_TOLERANCE = 1e-12


def decide_d7(rates_v: Sequence[float], spread_above_threshold: Sequence[float], *,
              t_c: float, t_hessian: float, t_trained: float,
              t_hessian_trained: float) -> Verdict:
    """D7 (V keeps prototypes apart) for the loss the layer trains, L_q with q differentiated.

    ``rates_v``: the V-part spread rates on random banks; ``spread_above_threshold``: the spread
    along descent of L_q (q differentiated) at 1.1 x its threshold 4 lambda_max, started near
    collapse (first and last entries are read). ``t_c``, ``t_hessian``: F's T_c = 2 lambda_max
    and the autograd sign change of F's Hessian; ``t_trained``, ``t_hessian_trained``: the same
    for L_q.
    """
    attractive = max(rates_v) <= 1e-9
    n_banks, n_quiet = len(rates_v), sum(1 for r in rates_v if r <= 1e-9)
    quiet = f"all {n_banks}" if n_quiet == n_banks else f"{n_quiet} of {n_banks}"
    contracts = spread_above_threshold[-1] < spread_above_threshold[0]
    return Verdict(
        "D7", decided_by("refuted", attractive and contracts, "qualified"),
        "The layer trains L_q with q differentiated, L_q = F + tau H; descent of L_q is not "
        "descent of the free energy F. The V part of the velocity, -2 Sigma_q P (the q-fixed "
        "gradient of V, the claim's force), is a consensus flow: it keeps the prototype mean "
        f"and never increases the spread ({quiet} random banks). V >= 0 vanishes at collapse, "
        "so collapse is V's global minimum whether q is differentiated or not; its Hessian "
        "there is (2N/K) I on zero-sum directions. It is not repulsive. Collapse is a critical "
        "point of both losses at every tau. For the trained L_q it is a strict local minimum "
        "for tau > 4 lambda_max(C) = 2 T_c and a saddle only below (zero-sum Hessian "
        "(2N/K)(I - 4C/tau): SymPy for any K, autograd; descent of L_q next to collapse stays "
        "at 2.2 T_c and splits at 1.1 T_c). For F (q detached) the threshold is T_c = "
        "2 lambda_max(C). Below the threshold the data-fit part, through the assignments, "
        "splits collapse, not V. The claim holds only below the trained loss's threshold and "
        "with V's role reversed.",
        our_value=f"threshold of the trained L_q 4 lambda_max = {t_trained:.4g} (CIFAR patches), "
                  f"autograd Hessian sign change at {t_hessian_trained / t_trained:.6f} of it; "
                  f"F's T_c = {t_c:.4g}, sign change at {t_hessian / t_c:.6f} T_c; V-part "
                  f"spread rate <= 0 on {n_quiet}/{n_banks} banks",
        numbers={"t_c": t_c, "t_hessian": t_hessian, "t_trained": t_trained,
                 "t_hessian_trained": t_hessian_trained, "max_rate_v": float(max(rates_v))},
        rule=D7_RULE)


def decide_d10(max_f_rise: float, hot: np.ndarray, cold: np.ndarray, *,
               max_g_rise: float) -> Verdict:
    """D10 (a free energy is a Lyapunov function that guarantees S(P) > 0, also under cooling),
    under both readings of "free energy" (:data:`D10_RULE`).

    ``max_f_rise``: the largest rise of F along the cooling schedules (absolute);
    ``max_g_rise``: the largest rise of G = F + N tau log K, relative to |G| at the start of its
    trajectory. ``hot``: (starts, 4) after training at 1.2 T_c (F's threshold; the runs descend
    F): S_mean at the start, then S_min, S_mean, S_tr at the end. ``cold``: (starts, 3) S_min,
    S_mean, S_tr after training at 0.5 T_c.
    """
    hot, cold = np.asarray(hot), np.asarray(cold)
    collapse_found = bool(hot[:, 1:].max() < 1e-6)
    n_merged = int((cold[:, 0] < 1e-6).sum())
    n_collapsed = int((hot[:, 1:].max(axis=1) < 1e-6).sum())
    f_lyapunov, g_lyapunov = max_f_rise <= 0, max_g_rise <= G_TOLERANCE
    readings = {"F": f_lyapunov and not collapse_found, "G": g_lyapunov and not collapse_found}

    def said(name: str, lyapunov: bool, rise: str) -> str:
        part = ("is a Lyapunov function on every cooling schedule tried" if lyapunov
                else f"is not a Lyapunov function under cooling (it rises by up to {rise})")
        guarantee = (("but" if lyapunov else "and") + " no guarantee of S(P) > 0 follows: "
                     "above T_c training from "
                     "k-means++ banks converges to full collapse (S = 0 for every definition)"
                     if collapse_found else "and training above T_c keeps S(P) > 0")
        word = "holds" if readings[name] else "fails"
        return f"Reading {name}: {name} {part}, {guarantee}; the reading {word}."

    return Verdict(
        "D10", decided_by("confirmed", readings["G"], "refuted"),
        "F is a Lyapunov function at fixed tau for gradient steps eta < 1/N (proved; tight). "
        "The statement asks for one under decreasing temperature schedules; since dF/dtau = "
        "-H <= 0, cooling can raise F, and the free energy it can mean is G = F + N tau log K. "
        + said("G", g_lyapunov, f"{max_g_rise:.3g} relative") + " "
        + said("F", f_lyapunov, f"{max_f_rise:.3g}") + " "
        "Settled by reading G, with F shown. Below T_c the spread stays positive (S_mean, "
        "S_tr > 0), but prototypes merge in groups, so S_min -> 0 (K = 8 at 0.5 T_c, and "
        "during annealing).",
        our_value=f"G never rose (relative tol {G_TOLERANCE:g}); F rose by up to "
                  f"{max_f_rise:.3g} under cooling; S = 0 after training at 1.2 T_c "
                  f"({n_collapsed}/{len(hot)} starts); at 0.5 T_c S_min < 1e-6 on "
                  f"{n_merged}/{len(cold)} starts with S_mean {cold[:, 1].min():.3g}"
        if g_lyapunov else
                  f"G rose by {max_g_rise:.3g} (relative); F by {max_f_rise:.3g}; S = 0 after "
                  f"training at 1.2 T_c ({n_collapsed}/{len(hot)} starts)",
        numbers={"max_f_rise": max_f_rise, "max_g_rise": max_g_rise, "n_merged": n_merged,
                 "n_collapsed": n_collapsed, "reading_F_holds": readings["F"],
                 "reading_G_holds": readings["G"]},
        rule=D10_RULE)
