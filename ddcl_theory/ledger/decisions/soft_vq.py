"""Claim D11 (soft VQ keeps the whole codebook from the first epoch): :func:`decide_d11`.

The rule is the registry's (``rule_of("D11")``), fixed before the run: at the largest training
size that ran, (1) the soft quantiser's codebook usage on the test tokens after epoch 1, its 95%
one-sample t interval above 0.95; (2) the paired difference of that usage, soft - VectorQuantize
(with a setting under which dead-code expiry fires in the run), its 95% paired t interval above
0; both over 5 seeds. Requires: the soft quantiser reconstructs (held-out MSE after epoch 1 below
the mean predictor's, every seed) and passes the reconstruction gradient without an estimator,
else ``not reproduced``. The claim is about early training (``early=True``): no plateau gate;
the plateau status of the runs is reported. VectorQuantize whose expiry did not fire in every
deciding run makes comparison (2) void: the word is then at best ``inconclusive``.

The function reads a :class:`ddcl_theory.experiments.soft_vq.SoftVQResult`-like object
(``settings.n_train``, ``settings.seeds``, ``settings.epochs``, ``settings.num_codes``, ``soft``,
``ema`` (arms with ``label`` and ``r`` / ``decay``, ``threshold``), ``selection`` (candidates with
``arm``, ``usage``, ``rel_mse``, ``expiries``, ``chosen``), ``source`` and ``select(method,
n_train)`` giving runs with ``seed``, ``held_out_usage``, ``rel_mse``, ``usage``, ``expiries``,
``plateau``) and the gradient check (``soft``, ``hard_without_estimator``).
"""
from __future__ import annotations

import numpy as np

from ddcl_theory.ledger import stats
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict

__all__ = ["PAPER", "TOLERANCE", "decide_d11", "epoch_trend", "size_trend", "tests_at"]

PAPER = ("soft: 100% of the codebook from epoch 1; hard VQ-VAE (64 codes, CIFAR-10): 18.8% (or "
         "39%) at the start, 100% after 44 epochs")
#: How far the numbers of the evidence may move between machines.
TOLERANCE = Tolerance(abs=0.15, rel=0.5, reason="seed means of short VQ-VAE trainings; usage "
                      "moves in steps of 1/64 and the cold soft bank is chaotic")


def _paired(result, n_train: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    soft, ema = result.select("soft", n_train), result.select("ema", n_train)
    if [x.seed for x in soft] != [x.seed for x in ema]:
        raise ValueError(f"runs: the soft and VectorQuantize runs at n={n_train} are not paired "
                         f"by seed")
    return (np.array([x.held_out_usage[epoch] for x in soft]),
            np.array([x.held_out_usage[epoch] for x in ema]))


def tests_at(result, n_train: int, epoch: int = 0) -> list[stats.Interval]:
    """The rule's two intervals at one training size after epoch ``epoch + 1``: soft usage
    (one-sample t), soft - VectorQuantize usage (paired t)."""
    soft, ema = _paired(result, n_train, epoch)
    if soft.size < 2:        # one seed: no interval, a zero-width one at the value
        return [stats.Interval(float(v), float(v), float(v), soft.size, m)
                for v, m in ((soft.mean(), "one-sample t"), ((soft - ema).mean(), "paired t"))]
    return [stats.one_sample_t(soft), stats.paired_t(soft, ema)]


def _triple(iv: stats.Interval) -> list[float]:
    return [round(float(iv.estimate), 4), round(float(iv.low), 4), round(float(iv.high), 4)]


def size_trend(result, test: int) -> dict[str, list[float]]:
    """Test ``test`` (0 or 1) after epoch 1 at every training size: {"N images": [est, low,
    high]}."""
    return {f"{n} images": _triple(tests_at(result, n)[test]) for n in result.settings.n_train}


def epoch_trend(result, test: int) -> dict[str, list[float]]:
    """Test ``test`` at the largest size after every epoch: {"epoch e": [est, low, high]}."""
    n = result.settings.n_train[-1]
    return {f"epoch {e + 1}": _triple(tests_at(result, n, e)[test])
            for e in range(result.settings.epochs)}


def _fmt(iv: stats.Interval) -> str:
    return f"{iv.estimate:.2f} [{iv.low:.2f}, {iv.high:.2f}]"


def decide_d11(result, grads) -> Verdict:
    """D11 by the registry's rule at the largest training size that ran (see the module)."""
    rule = rule_of("D11")
    s = result.settings
    n = s.n_train[-1]
    soft_runs, ema_runs = result.select("soft", n), result.select("ema", n)
    intervals = tests_at(result, n)
    k = len(soft_runs)
    raw = [stats.decide_interval(iv, side=t.side, margin=t.margin)
           for t, iv in zip(rule.tests, intervals)] if k >= 2 else ["inconclusive"] * 2
    word = rule.decide(intervals) if k >= 2 else "inconclusive"
    no_estimator = grads.soft > 0 and grads.hard_without_estimator == 0
    rel_first = np.array([x.rel_mse[0] for x in soft_runs])
    rel_last = np.array([x.rel_mse[-1] for x in soft_runs])
    reconstructs = bool(np.all(rel_first < 1.0))
    fired = [int(sum(x.expiries)) for x in ema_runs]
    void = not all(f > 0 for f in fired)
    reasons = []
    if not (reconstructs and no_estimator):
        failed = [] if reconstructs else ["the soft quantiser does not reconstruct after "
                                          "epoch 1 (held-out MSE not below the mean "
                                          "predictor's in every seed)"]
        if not no_estimator:
            failed.append("the reconstruction gradient does not reach the encoder without an "
                          "estimator")
        reasons.append("requires fails: " + "; ".join(failed))
        word = "not reproduced" if k >= rule.n_seeds else "inconclusive"
    if void and word == "reproduced":
        word = "inconclusive"
    if void:
        reasons.append("VectorQuantize's expiry did not fire in every deciding run, so the "
                       "comparison is void")
    if k < rule.n_seeds:
        reasons.append(f"only {k} seeds (rule: {rule.n_seeds}), so at best inconclusive")
    # the deciding test: the first whose own word is the claim's (test 1 when all agree)
    deciding = next((i for i, w in enumerate(raw) if w == rule.combine(raw)), 0)
    mde = [stats.detectable_effect_of([x.held_out_usage[0] for x in soft_runs]) if k >= 2
           else float("nan"),
           stats.detectable_effect_of(np.subtract(*_paired(result, n, 0))) if k >= 2
           else float("nan")]
    plateaued = sum(x.plateau for x in soft_runs + ema_runs)
    soft_curve = epoch_trend(result, 0)
    ema_usage = [float(np.mean([x.held_out_usage[e] for x in ema_runs])) for e in range(s.epochs)]
    hard_runs = result.select("hard", n)
    hard_first = float(np.mean([x.usage[0] for x in hard_runs]))
    chosen = {c.arm.method: c for c in result.selection if c.chosen}
    ema_grid = [c for c in result.selection if c.arm.method == "ema"]
    last = s.epochs
    evidence = (
        f"VQ-VAE, {s.num_codes} codes, {result.source}, training sizes "
        f"{', '.join(str(m) for m in s.n_train)} images, {s.epochs} epochs, {k} paired seeds; "
        f"usage = fraction of the codes that are the (argmax) code of at least one test token. "
        f"Soft quantiser trained on MSE + beta L_q with q differentiated, tau = "
        f"{result.soft.r:g} T_c with T_c = 4 lambda_max (the quantisation objective's); "
        f"VectorQuantize k-means init, decay {result.ema.decay:g}, threshold_ema_dead_code "
        f"{result.ema.threshold:g}; both chosen by the lowest validation MSE after epoch 1 over "
        f"{sum(c.arm.method == 'soft' for c in result.selection)} and {len(ema_grid)} settings "
        f"(VectorQuantize among those whose expiry fired: expiries in the selection epoch "
        + ", ".join(f"{c.arm.decay:g}/{c.arm.threshold:g}: {c.expiries}" for c in ema_grid)
        + f"). At {n} images after epoch 1: (1) soft usage {_fmt(intervals[0])} "
        f"(95% one-sample t; smallest detectable effect {mde[0]:.2f}) against the claimed > "
        f"{rule.tests[0].margin:g}; (2) soft - VectorQuantize {_fmt(intervals[1])} (95% paired "
        f"t; smallest detectable {mde[1]:.2f}) against > 0; VectorQuantize's expiry replaced "
        f"between {min(fired)} and {max(fired)} codes per run. Over epochs 1-{last} the soft usage goes "
        + " -> ".join(f"{v[0]:.2f}" for v in soft_curve.values())
        + ", VectorQuantize's " + " -> ".join(f"{u:.2f}" for u in ema_usage)
        + f". Soft held-out MSE / mean predictor's: {rel_first.mean():.2f} after epoch 1, "
        f"{rel_last.mean():.2f} after epoch {last}; no estimator needed: "
        f"{'yes' if no_estimator else 'no'}. Early-training claim, no plateau gate; runs that "
        f"reached their training-loss plateau: soft {sum(x.plateau for x in soft_runs)} of "
        f"{len(soft_runs)}, VectorQuantize {sum(x.plateau for x in ema_runs)} of "
        f"{len(ema_runs)}. Hard VQ (straight-through, uniform init) used "
        f"{hard_first:.2f} of the codes in epoch 1 (training tokens). "
        + (f"Gates: {'; '.join(reasons)}. " if reasons else "")
        + f"Paper: {PAPER}.")
    our = (f"soft usage after epoch 1 {intervals[0].estimate:.2f} "
           f"[{intervals[0].low:.2f}, {intervals[0].high:.2f}], after epoch {last} "
           f"{list(soft_curve.values())[-1][0]:.2f}; VectorQuantize {ema_usage[0]:.2f} -> "
           f"{ema_usage[-1]:.2f}")
    numbers = {"tests": [_triple(iv) for iv in intervals], "detectable": mde,
               "reconstructs": reconstructs, "no_estimator": bool(no_estimator),
               "rel_mse_first": float(rel_first.mean()), "rel_mse_last": float(rel_last.mean()),
               "expiries": fired, "void": void, "plateaued": int(plateaued),
               "soft_r": result.soft.r, "ema": [result.ema.decay, result.ema.threshold],
               "size_trend": [size_trend(result, 0), size_trend(result, 1)],
               "epoch_trend": [soft_curve, epoch_trend(result, 1)],
               "chosen": {m: c.arm.label for m, c in chosen.items()}}
    iv = intervals[deciding]
    return Verdict("D11", word, evidence, our_value=our, paper_value=PAPER, numbers=numbers,
                   rule=rule.text, n_seeds=k, interval=(float(iv.low), float(iv.high)),
                   scale=f"{n} images, epoch 1", trend=size_trend(result, deciding),
                   tolerance=TOLERANCE)
