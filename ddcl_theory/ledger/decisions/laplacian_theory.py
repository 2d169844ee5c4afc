"""Decisions of the chapter ``laplacian_theory``: claims L1-L5 and L11 (Zhang & Papyan 2026).

Each function takes what the chapter computed (results of symbolic checks as booleans,
numerical residuals, largest one-step gains) and applies the thresholds of the page.
"""
from __future__ import annotations

from collections.abc import Mapping

from ddcl_theory.ledger.verdict import Verdict, decided_by

__all__ = ["GAIN_TOL", "decide_l1", "decide_l2", "decide_l3", "decide_l4", "decide_l5",
           "decide_l11"]

#: A one-step gain counts as above 1 only beyond this (rounding of the eigenvalue solvers).
GAIN_TOL = 1e-9
#: Float64 residuals of exact identities count as zero below this.
EXACT = 1e-12


def decide_l1(symbolic: bool, disc_excess: float, kernel_residual: float) -> Verdict:
    """L1: ``proved`` when the SymPy checks hold and, numerically, every spectrum lies in the disc
    (largest ``|lambda - 1| - 1 <= 1e-9``) and ``max |(I-P)1| <= 1e-12``; else ``refuted``."""
    numeric = disc_excess <= 1e-9 and kernel_residual <= EXACT
    return Verdict(
        "L1", decided_by("proved", bool(symbolic) and numeric, "refuted"),
        "(I-P)1 = 0 and the Gershgorin discs of I-P lie in |lambda-1| <= 1: SymPy on symbolic "
        "stochastic 2x2-4x4 matrices; numerically on 45 random softmax matrices and on learned "
        "bidirectional and causal attention of a small character model (max excess <= 1e-9).",
        our_value="spectrum in |lambda-1| <= 1 (tight)",
        numbers={"disc_excess": disc_excess, "kernel_residual": kernel_residual},
        rule="proved: symbolic identities hold and numerical excess <= 1e-9, |(I-P)1| <= 1e-12")


def decide_l2(symbolic: bool, residual_gap: float, euler_order: float) -> Verdict:
    """L2: ``qualified`` (exact only for W_V W_O = -tau I) when the SymPy identity holds, the
    residual step equals the lazy walk to 1e-12 and the Euler steps converge at order 1 (within
    0.1); else ``refuted``."""
    ok = bool(symbolic) and residual_gap < EXACT and abs(euler_order - 1) < 0.1
    return Verdict(
        "L2", decided_by("qualified", ok, "refuted"),
        "Exact when W_V W_O = -tau I: the residual update is ((1-tau)I + tau P)X, an explicit "
        "Euler step of dX/dt = -(I-P)X (SymPy), a lazy random walk for 0 <= tau <= 1; repeated "
        "steps converge to the heat kernel exp(-t(I-P)) at order 1. With more than one head a "
        "head's W_V W_O has rank <= d/H, so it cannot equal -tau I; a learned W_V W_O diffuses "
        "only along directions where it is negative and sharpens where it is positive.",
        our_value=f"Euler order {euler_order:.2f}; exact iff W_V W_O = -tau I",
        numbers={"residual_gap": residual_gap, "euler_order": euler_order},
        rule="qualified: identity exact (SymPy, 1e-12) and Euler order within 0.1 of 1")


def decide_l3(symbolic: bool, laplacian_shift: float, attention_shift: float,
              general_mean: float) -> Verdict:
    """L3: ``qualified`` when the mean-blindness identity holds (SymPy; shifting the tokens
    leaves the Laplacian head's output unchanged and moves the ordinary head's by ``M^T shift``,
    both to 1e-12) and the counterexample holds (a softmax P moves the mean: largest token mean
    of ``(I-P)XM`` above 0.01); else ``refuted``."""
    exact = bool(symbolic) and laplacian_shift < EXACT and attention_shift < EXACT
    return Verdict(
        "L3", decided_by("qualified", exact and general_mean > 0.01, "refuted"),
        "(I-P)XM = (I-P)X_cM (SymPy): Laplacian heads are blind to the sequence mean, while "
        "ordinary heads pass it through (PXM = 1 (M^T m)^T + P X_c M). But the Laplacian output "
        "has zero token mean only if P is also column-stochastic; for softmax P it moves the "
        "mean (shown numerically), and ordinary heads also change the deviations.",
        our_value="mean-blind: exact; mean-preserving: iff P doubly stochastic",
        numbers={"laplacian_shift": laplacian_shift, "attention_shift": attention_shift,
                 "general_mean": general_mean},
        rule="qualified: identity exact and a softmax P moves the mean by > 0.01")


def decide_l4(gains: Mapping[str, Mapping[str, float]], counterexample: tuple) -> Verdict:
    """L4: ``qualified`` when smoothing holds under its conditions (largest one-step gains <= 1
    within :data:`GAIN_TOL`: variance and energy for symmetric P, variance for doubly stochastic
    P, pi-weighted variance and energy for reversible P) and fails without them (a general
    softmax P raises the variance, and the exact counterexample ``(variance before, after)``
    raises it); else ``refuted``.

    ``gains``: ``{kind: {"variance", "energy", "pi-variance", "pi-energy": largest gain}}`` for
    the kinds ``symmetric``, ``doubly stochastic``, ``reversible``, ``general softmax``.
    """
    bound = 1 + GAIN_TOL
    conditions = (gains["symmetric"]["variance"] <= bound
                  and gains["symmetric"]["energy"] <= bound
                  and gains["doubly stochastic"]["variance"] <= bound
                  and gains["reversible"]["pi-variance"] <= bound
                  and gains["reversible"]["pi-energy"] <= bound)
    before, after = counterexample
    counter = gains["general softmax"]["variance"] > bound and after > before
    return Verdict(
        "L4", decided_by("qualified", conditions and counter, "refuted"),
        "A step ((1-tau)I + tau P)X with 0 <= tau <= 1 does not increase the variance for doubly "
        "stochastic P and the Dirichlet energy for symmetric P; for reversible P only the "
        "pi-weighted versions are guaranteed. For general softmax P both can increase (exact "
        "4-token counterexample: variance 3/16 -> 1/4), and a learned W_V W_O with positive "
        "eigenvalues sharpens instead of smoothing.",
        our_value="holds for symmetric/doubly stochastic P; counterexample 0.1875 -> 0.25 "
                  "otherwise",
        numbers={"gains": {k: dict(v) for k, v in gains.items()}},
        rule="qualified: gains <= 1 under the conditions and a counterexample without them")


def decide_l11(symbolic: bool, diag_gap: float, in_range: bool, first_fixed: bool,
               first_token_gap: float) -> Verdict:
    """L11: ``proved`` when the characteristic polynomial factors (SymPy), the spectra of causal
    P equal ``1 - diag(P)`` to 1e-8 and lie in [0, 1], ``P_11 = 1``, and an all-Laplacian
    causal layer leaves the first token at its output bias (to 1e-6); else ``refuted``."""
    ok = (bool(symbolic) and diag_gap < 1e-8 and bool(in_range) and bool(first_fixed)
          and first_token_gap < 1e-6)
    return Verdict(
        "L11", decided_by("proved", ok, "refuted"),
        "Causal P is lower triangular and row-stochastic: (I-P)1 = 0, spectrum = {1 - P_ii} in "
        "[0, 1) (SymPy characteristic polynomial; 45 random and 32 learned causal matrices); "
        "P_11 = 1, so a Laplacian head leaves the first token unchanged, and repeated diffusion "
        "drives every token to the first.",
        our_value="eigenvalues 1 - P_ii in [0, 1); first token fixed",
        numbers={"diag_gap": diag_gap, "first_token_gap": first_token_gap},
        rule="proved: symbolic and numerical checks hold (1e-8, 1e-6)")


def decide_l5(params: Mapping[int, int], extra_flops: Mapping[int, float], shape: Mapping,
              stored: Mapping) -> Verdict:
    """L5: ``confirmed`` when every number of Laplacian heads has the same parameter count and
    the extra FLOPs stay below 0.1% for every setting; else ``refuted``.

    Args:
        params: ``{laplacian heads: parameter count}``.
        extra_flops: ``{laplacian heads: extra FLOPs as a fraction of the forward}``.
        shape: ``batch``, ``seq_len``, ``dim``, ``heads`` of the measured layer.
        stored: the committed benchmark run's ``median_ratio``, ``median_ratio_cpu`` and
            ``seq_len`` (all heads Laplacian / standard attention, forward + backward); quoted,
            not decided on (timings depend on the host).
    """
    params_equal = len(set(params.values())) == 1
    top = extra_flops[shape["heads"]]
    ok = params_equal and max(extra_flops.values()) < 0.001
    return Verdict(
        "L5", decided_by("confirmed", ok, "refuted"),
        f"Same parameter count for every number of Laplacian heads; on the fused kernel the only "
        f"extra work is V - PV, {100 * top:.2f}% extra FLOPs with all heads Laplacian "
        f"(B={shape['batch']}, T={shape['seq_len']}, d={shape['dim']}); in the stored benchmark "
        f"run (benchmarks/cpu_full.json) all heads Laplacian cost "
        f"{stored['median_ratio']:.3f}x standard attention's wall-clock time "
        f"({stored['median_ratio_cpu']:.3f}x CPU time) at T = {stored['seq_len']}, forward + "
        f"backward.",
        our_value=f"+0 parameters, +{100 * top:.2f}% FLOPs",
        numbers={"extra_flops": dict(extra_flops), "params_equal": params_equal},
        rule="confirmed: equal parameter counts and < 0.1% extra FLOPs for every setting")
