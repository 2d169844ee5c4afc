"""Claims of the DDCL-layer chapter: :func:`decide_d1`, :func:`decide_d2`, :func:`decide_d15`,
:func:`decide_d16`.

Reads the chapter's computations by attribute: the D1 checks on one forward pass, the operation
counts (``seq_lens``, ``ddcl``, ``attention``) and the stored benchmark numbers (D2), the logs of
the Transformer run (``logs[variant]`` with ``all_finite``, ``v``, ``test_acc``; ``chance``) and
the patch-prototype result (``r2``, ``mean_top2``).
"""
from __future__ import annotations

from ddcl_theory.ledger.report import below
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict, decided_by

#: D15 quotes test accuracies of one four-epoch training run.
D15_TOLERANCE = Tolerance(abs=0.04, reason="test accuracy of one four-epoch training run")

D1_RULE = ("confirmed: min q >= 0, max |sum_k q - 1| < 1e-6, max |mu - qP| < 1e-5, the "
           "distance-softmax reproduced to 1e-6, mu inside the bank's box, state unchanged")
D2_RULE = ("confirmed: the DDCL count is exactly affine in T, attention/DDCL grows with T, and "
           "the stored log-log time slopes (T >= 4096) are < 1.25 for DDCL and > 1.75 for "
           "self-attention")
D15_RULE = ("reproduced: every loss finite, V >= 0 at every step, and readout and block end "
            "more than 0.05 above chance")
D16_RULE = "qualified: R^2 of the soft centroids > 0.5 and mean top-2 mass > 0.8"


def decide_d1(*, min_q: float, row_error: float, centroid_error: float, rule_error: float,
              inside_box: bool, unchanged: bool) -> Verdict:
    """D1 (the layer is what its definition says) from one forward pass on real tokens."""
    ok = (min_q >= 0 and row_error < 1e-6 and centroid_error < 1e-5 and rule_error < 1e-6
          and inside_box and unchanged)
    return Verdict(
        "D1", decided_by("confirmed", ok, "refuted"),
        "On CIFAR-10 patch tokens: rows of q on the simplex (max |sum-1| "
        f"{below(row_error, 1e-6)}), mu = qP (max error {below(centroid_error, 1e-6)}) inside "
        "the bank's box, one distance-softmax per head and no state change per forward; the "
        "property tests check permutation equivariance, masking, the zero-temperature limit "
        "and float64 gradients.",
        our_value=f"max |sum_k q - 1| {below(row_error, 1e-6)} (float32)",
        numbers={"row_error": row_error, "centroid_error": centroid_error,
                 "rule_error": rule_error},
        rule=D1_RULE)


def decide_d2(counts, *, slope_ddcl: float, slope_sdpa: float, ratio_at: dict,
              mem_lens, mem_ddcl) -> Verdict:
    """D2 (O(TK) cost against attention's O(T^2)) from the FLOP counts and the stored run.

    ``ratio_at[16384]`` holds ``sdpa_over_ddcl_wall`` and ``ddcl_over_bare_cpu``; ``mem_lens``,
    ``mem_ddcl`` are the stored peak-memory ratios of the DDCL layer.
    """
    lens, ddcl, attention = counts.seq_lens, counts.ddcl, counts.attention
    slopes = [(c2 - c1) / (t2 - t1) for c1, c2, t1, t2 in zip(ddcl, ddcl[1:], lens, lens[1:])]
    ok = (len(set(slopes)) == 1 and attention[-1] / ddcl[-1] > attention[0] / ddcl[0]
          and slope_ddcl < 1.25 and slope_sdpa > 1.75)
    flop_ratios = ", ".join(f"{b / a:.0f}x at T = {t}" for t, a, b in zip(lens, ddcl, attention))
    at = ratio_at[16384]
    return Verdict(
        "D2", decided_by("confirmed", ok, "refuted"),
        "torch's FLOP counter on the actual modules (D = 64, K = 16, two heads) matches the "
        "closed forms exactly: the DDCL layer's count is affine in T (O(TK) per head), "
        f"self-attention's has a T^2 term. Attention / DDCL operations: {flop_ratios}. Stored "
        "benchmark run (benchmarks/cpu_full.json, CPU, B = 1, D = 256, 4 heads, K = 64, forward "
        f"+ backward): log-log time slope for T >= 4096 {slope_ddcl:.2f} for DDCL against "
        f"{slope_sdpa:.2f} for fused self-attention; self-attention / DDCL "
        f"{at['sdpa_over_ddcl_wall']:.0f}x at T = 16384; DDCL / its bare matrix products "
        f"{at['ddcl_over_bare_cpu']:.2f} (CPU time) at T = 16384; peak memory "
        f"{mem_ddcl[-1]:.1f}x the input at T = {mem_lens[-1]}.",
        our_value=f"FLOP ratio attention/DDCL: {flop_ratios}; measured time slope "
                  f"{slope_ddcl:.2f} vs {slope_sdpa:.2f}, {at['sdpa_over_ddcl_wall']:.0f}x "
                  f"faster than self-attention at T = 16384",
        numbers={"slope_ddcl": slope_ddcl, "slope_sdpa": slope_sdpa},
        rule=D2_RULE)


def decide_d15(result, settings) -> Verdict:
    """D15 (the layer trains end to end in an encoder stack) from the Transformer run.

    ``result.logs`` maps ``"ddcl"``, ``"mean"``, ``"block"`` to training logs; ``settings``
    gives ``epochs``, ``n_train``, ``n_test`` for the evidence.
    """
    logs, chance = result.logs, result.chance
    ok = (all(log.all_finite for log in logs.values())
          and min(logs["ddcl"].v) >= 0 and min(logs["block"].v) >= 0
          and all(logs[k].test_acc[-1] > chance + 0.05 for k in ("ddcl", "block")))
    acc = {k: round(log.test_acc[-1], 3) for k, log in logs.items()}
    return Verdict(
        "D15", decided_by("reproduced", ok, "not reproduced"),
        "Two nn.TransformerEncoderLayer + two-head DDCL layer (residual + LayerNorm), trained "
        f"from scratch on CIFAR-10 patch tokens ({settings.epochs} epochs, "
        f"{settings.n_train:,} training and {settings.n_test:,} test images), as readout "
        "(linear head on pooled) and as a block between the encoder layers: finite losses and "
        f"V >= 0 at every step; test accuracy {acc['ddcl']:.3f} (readout) and "
        f"{acc['block']:.3f} (block) vs chance {chance:.2f}; mean-pool readout of the same "
        f"encoder {acc['mean']:.3f}. Trainability only, not accuracy.",
        our_value=f"acc readout {acc['ddcl']:.3f}, block {acc['block']:.3f}, mean pool "
                  f"{acc['mean']:.3f}, chance {chance:.2f}",
        numbers={"test_acc": acc, "chance": chance}, rule=D15_RULE, n_seeds=1,
        tolerance=D15_TOLERANCE)


def decide_d16(patch) -> Verdict:
    """D16 (outputs readable as mixtures of global prototypes) from the patch-prototype fit."""
    readable = patch.r2 > 0.5 and patch.mean_top2 > 0.8
    return Verdict(
        "D16", decided_by("qualified", readable, "not reproduced"),
        "Every output is a convex combination of global prototypes by construction. It is "
        "readable as an explanation only where the prototypes live in input space and q is "
        "peaked: with the projections off, 16 colour-patch prototypes explain "
        f"{patch.r2:.0%} of the variance of held-out CIFAR-10 patches and the top two carry "
        f"{patch.mean_top2:.0%} of the mass on average. With learned projections (the "
        "Transformer) the prototypes live in a learned space and need further work to be shown.",
        our_value=f"R^2 {patch.r2:.3f}, top-2 mass {patch.mean_top2:.3f}",
        numbers={"r2": patch.r2, "mean_top2": patch.mean_top2}, rule=D16_RULE)
