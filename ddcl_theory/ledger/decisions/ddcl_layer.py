"""Claims of the DDCL-layer chapter: :func:`decide_d1`, :func:`decide_d2`, :func:`decide_d15`,
:func:`decide_d16`.

Reads the chapter's computations by attribute: the D1 checks on one forward pass, the operation
counts (``seq_lens``, ``ddcl``, ``attention``) and the stored benchmark numbers (D2), the logs of
the Transformer runs (``runs[variant]``, one log per seed, and ``per_seed``; ``chance``; decided
by the registry's D15 rule, :func:`ddcl_theory.ledger.claims.rule_of`) and the patch-prototype
result (``r2``, ``mean_top2``).
"""
from __future__ import annotations

import numpy as np

from ddcl_theory.ledger import stats
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.report import below
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict, decided_by
from ddcl_theory.metrics.convergence import convergence

#: Plateau rule of the D15 runs: the mean held-out cross-entropy (the test images after each
#: epoch: the run's validation curve, as the evidence standard asks) of the last two epochs
#: within 5% of the two before (the house rule's defaults, :mod:`ddcl_theory.metrics.convergence`).
#: The training curve is read beside it: a block run that overfits keeps lowering its training
#: loss while its held-out loss and accuracy stay put.
PLATEAU_REL, PLATEAU_WINDOW = 0.05, 2

#: D15 quotes seed means of test accuracy and their t intervals. Measured in the cpu run (3
#: seeds): the seeds' accuracies spread by an sd of about 0.03, so three standard errors of the
#: mean are about 0.05; the ends of a 3-seed t interval move with the spread itself, hence 0.08.
D15_TOLERANCE = Tolerance(abs=0.08, rel=0.25, reason="seed means (3 standard errors of the "
                          "3-seed mean about 0.05) and t intervals of test accuracy")

D1_RULE = ("confirmed: min q >= 0, max |sum_k q - 1| < 1e-6, max |mu - qP| < 1e-5, the "
           "distance-softmax reproduced to 1e-6, mu inside the bank's box, state unchanged")
D2_RULE = ("confirmed: the DDCL count is exactly affine in T, attention/DDCL grows with T, and "
           "the stored log-log time slopes (T >= 4096) are < 1.25 for DDCL and > 1.75 for "
           "self-attention")
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


def _interval(values: np.ndarray) -> stats.Interval:
    """95% one-sample t interval of the mean of ``values`` (a point when one seed ran)."""
    if len(values) < 2:
        m = float(np.mean(values))
        return stats.Interval(m, m, m, len(values), "one-sample t")
    return stats.one_sample_t(values)


def d15_trend(result, variant: str) -> dict[str, list[float]]:
    """{"<e> epochs": [estimate, low, high]} of test accuracy - chance of ``variant`` after each
    epoch of ``result.settings.scales`` (checkpoints of the same runs)."""
    out = {}
    for epoch in result.settings.scales:
        iv = _interval(result.per_seed(variant, "test_acc", epoch) - result.chance)
        out[f"{epoch} epochs"] = [round(iv.estimate, 4), round(iv.low, 4), round(iv.high, 4)]
    return out


def decide_d15(result) -> Verdict:
    """D15 (the layer trains end to end, as a readout and as a block) by the registry's rule.

    ``result`` is a :class:`~ddcl_theory.experiments.ddcl_layer.TransformerResult`-like object:
    ``settings`` (``seeds``, ``epochs``, ``n_train``, ``n_test``, ``scales``), ``runs[variant]``
    (logs with ``all_finite``, ``min_v``, ``train_loss``), ``chance`` and ``per_seed(variant,
    field, epoch=None)``. The word is ``rule_of("D15").decide`` on the one-sample t intervals of
    test accuracy - chance of the readout and of the block at the last epoch; then the gates:
    a non-finite loss or V < 0 at some step -> ``not reproduced`` (the rule's requirement); a
    deciding run (readout or block) whose held-out cross-entropy (its validation curve) did not
    reach its plateau (:func:`~ddcl_theory.metrics.convergence.convergence`, stated rel and
    window) -> ``inconclusive``. The training-curve reading is counted beside it.
    """
    rule = rule_of("D15")
    st, chance = result.settings, result.chance
    deciding = ("ddcl", "block")
    excess = {k: result.per_seed(k, "test_acc") - chance for k in deciding}
    intervals = [_interval(excess[k]) for k in deciding]
    word = rule.decide(intervals)
    logs = [log for k in result.runs for log in result.runs[k]]
    finite = all(log.all_finite for log in logs)
    v_ok = all(log.min_v >= 0 for k in deciding for log in result.runs[k])
    def still_moving(curve: str) -> dict[str, int]:
        return {k: sum(not convergence(getattr(log, curve), rel=PLATEAU_REL,
                                       window=PLATEAU_WINDOW).plateau for log in result.runs[k])
                for k in deciding}

    moving, moving_train = still_moving("test_loss"), still_moving("train_loss")
    unfinished = sum(moving.values())
    n_runs = sum(len(result.runs[k]) for k in deciding)
    reasons = []
    if not (finite and v_ok):
        word = "not reproduced"
        reasons.append("a loss was not finite or V < 0 at some step (the rule's requirement)")
    elif unfinished:
        word = "inconclusive"
        reasons.append("deciding runs had not reached the plateau of their held-out "
                       "cross-entropy")
    n = len(st.seeds)
    if n < rule.n_seeds:
        reasons.append(f"{n} seeds, fewer than the rule's {rule.n_seeds}")
    names = {"ddcl": "readout", "block": "block"}
    mde = {k: (stats.detectable_effect_of(excess[k]) if n >= 2 else float("nan"))
           for k in deciding}
    binding = min(range(2), key=lambda i: intervals[i].low - rule.tests[i].margin)
    mean_acc = {k: float(np.mean(result.per_seed(k, "test_acc"))) for k in result.runs}
    sd_acc = {k: (float(np.std(result.per_seed(k, "test_acc"), ddof=1)) if n >= 2 else 0.0)
              for k in result.runs}
    evidence = (
        "Two nn.TransformerEncoderLayer + two-head DDCL layer (residual + LayerNorm), trained "
        f"from scratch on CIFAR-10 patch tokens ({st.epochs} epochs, cosine learning rate, "
        f"{st.n_train:,} training and {st.n_test:,} test images, {n} seeds), as readout (linear "
        "head on pooled) and as a block between the encoder layers. Test accuracy - chance "
        f"({chance:.2f}), mean over seeds with its 95% one-sample t interval: "
        + "; ".join(f"{names[k]} {iv.estimate:+.3f} [{iv.low:+.3f}, {iv.high:+.3f}] (smallest "
                    f"detectable effect {mde[k]:.3f})" for k, iv in zip(deciding, intervals))
        + f"; margin {rule.tests[0].margin:g}. Losses finite at every step: {finite}; V >= 0 at "
        f"every step: {v_ok}. Deciding runs still moving by the plateau rule "
        f"({PLATEAU_WINDOW}-epoch windows, rel {PLATEAU_REL:g}) on their held-out "
        f"cross-entropy (the deciding curve): readout {moving['ddcl']}, block {moving['block']} "
        f"of {n_runs // 2} each; on their training cross-entropy: readout "
        f"{moving_train['ddcl']}, block {moving_train['block']}"
        + (" (a training curve still falling while the held-out one is flat is fitting the "
           "training images, not unfinished learning)"
           if sum(moving_train.values()) > unfinished else "")
        + f". Mean-pool readout of the same encoder "
        f"{mean_acc['mean']:.3f} +- {sd_acc['mean']:.3f}. "
        + (f"Why {word}: {'; '.join(reasons)}. " if reasons and word != "reproduced" else "")
        + "The paper gives no number: trainability only, not accuracy.")
    return Verdict(
        "D15", word, evidence,
        our_value=f"acc readout {mean_acc['ddcl']:.3f} +- {sd_acc['ddcl']:.3f}, block "
                  f"{mean_acc['block']:.3f} +- {sd_acc['block']:.3f}, mean pool "
                  f"{mean_acc['mean']:.3f} +- {sd_acc['mean']:.3f} ({n} seeds), chance "
                  f"{chance:.2f}",
        numbers={"test_acc": mean_acc, "test_acc_sd": sd_acc, "chance": chance,
                 "intervals": {names[k]: iv.as_list() for k, iv in zip(deciding, intervals)},
                 "detectable": {names[k]: mde[k] for k in deciding},
                 "finite": finite, "v_nonnegative": v_ok, "unfinished": unfinished,
                 "unfinished_by_arm": {names[k]: moving[k] for k in deciding},
                 "unfinished_training_curve": {names[k]: moving_train[k] for k in deciding},
                 "deciding_runs": n_runs,
                 "trend_block": d15_trend(result, "block")},
        rule=rule.text, n_seeds=n, interval=tuple(intervals[binding].as_list()),
        scale=f"{st.epochs} epochs, {st.n_train} images", trend=d15_trend(result, "ddcl"),
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
