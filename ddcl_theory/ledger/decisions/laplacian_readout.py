"""Decision of the chapter ``laplacian_readout``: claim X2 (ours), a DDCL readout on a Laplacian
encoder, by the registry's rule (:func:`ddcl_theory.ledger.claims.rule_of`).

The rule, fixed before the run: 5 paired seeds; the deciding statistic is the test accuracy of
the DDCL readout with every encoder head Laplacian minus with none, paired by seed, its 95%
paired t interval above 0 at the largest scale (the last epoch). It *requires* a premise: the
Laplacian heads must lower the within-sequence share of the variance of the encoder's output
tokens (paired t interval of all - none below 0). When the premise fails the question is not
asked: the word is ``inconclusive`` and the evidence says why and what would make it askable.
A deciding run whose training loss did not reach its plateau makes it ``inconclusive`` too.

:func:`decide_x2` reads a readout sweep: ``settings`` (the ViT's in ``settings.vit``, and
``scales``), ``source``, ``paired(field, setting, epoch=None)`` (per-seed arrays in seed order),
``summary(field) -> {setting: (mean, std)}`` and ``runs`` (``train_loss`` per epoch).
"""
from __future__ import annotations

import numpy as np

from ddcl_theory.ledger import stats
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict
from ddcl_theory.metrics.convergence import convergence

__all__ = ["TRAINING", "PLATEAU_REL", "PLATEAU_WINDOW", "premise_interval", "decide_x2"]

#: How far the numbers quoted by X2 may move between machines: seed means and paired t
#: intervals of 3 seeds (cpu). Measured spread of the paired differences: about 0.01 in test
#: accuracy and 0.02 in the within-sequence share, so 3 standard errors of the mean about 0.03;
#: the ends of a 3-seed t interval move with the spread itself.
TRAINING = Tolerance(abs=0.05, rel=0.3, reason="seed means and paired t intervals of short ViT "
                     "trainings (3 standard errors of the mean about 0.03)")
#: Plateau rule of the X2 runs: the mean training loss of the last two epochs within 5% of the
#: two before (the house defaults, :mod:`ddcl_theory.metrics.convergence`).
PLATEAU_REL, PLATEAU_WINDOW = 0.05, 2


def _paired(a: np.ndarray, b: np.ndarray) -> stats.Interval:
    if len(a) < 2:
        d = float(np.mean(a - b))
        return stats.Interval(d, d, d, len(a), "paired t")
    return stats.paired_t(a, b)


def premise_interval(sweep, a: str = "all", b: str = "0",
                     epoch: int | None = None) -> stats.Interval:
    """95% paired t interval of the within-sequence variance share of the encoder's output
    tokens (test images), setting ``a`` minus ``b``, paired by seed."""
    return _paired(sweep.paired("within_seq", a, epoch), sweep.paired("within_seq", b, epoch))


def _trend(sweep, field: str, a: str, b: str) -> dict[str, list[float]]:
    out = {}
    for epoch in sweep.settings.scales:
        iv = _paired(sweep.paired(field, a, epoch), sweep.paired(field, b, epoch))
        out[f"{epoch} epochs"] = [round(iv.estimate, 4), round(iv.low, 4), round(iv.high, 4)]
    return out


def decide_x2(sweep, a: str = "all", b: str = "0") -> Verdict:
    """X2: does the Laplacian encoder (setting ``a``) help the DDCL readout against ``b``?"""
    rule = rule_of("X2")
    st, vit = sweep.settings, sweep.settings.vit
    premise = premise_interval(sweep, a, b)
    acc_a, acc_b = sweep.paired("test_acc", a), sweep.paired("test_acc", b)
    acc = _paired(acc_a, acc_b)
    n = len(acc_a)
    mde = stats.detectable_effect_of(acc_a - acc_b) if n >= 2 else float("nan")
    unfinished = sum(not convergence(r.train_loss, rel=PLATEAU_REL, window=PLATEAU_WINDOW).plateau
                     for r in sweep.runs if r.setting in (a, b))
    n_runs = sum(r.setting in (a, b) for r in sweep.runs)
    premise_holds = premise.high < 0
    reasons = []
    if not premise_holds:
        word = "inconclusive"
        reasons.append(
            "the premise fails, so the question is not asked: the Laplacian heads do not lower "
            f"it (within-sequence share, all - none, {premise.estimate:+.3f}, 95% paired t "
            f"interval [{premise.low:+.3f}, {premise.high:+.3f}], not below 0); it becomes "
            "askable on an encoder whose Laplacian heads do smooth its tokens (an interval "
            "below 0), e.g. deeper and trained longer, as in the paper profile")
    else:
        word = rule.decide([acc])
        if unfinished:
            word = "inconclusive"
            reasons.append("runs had not reached the plateau of their training loss")
    if n < rule.n_seeds:
        reasons.append(f"{n} seeds, fewer than the rule's {rule.n_seeds}")
    names = {"fraction_used": "bank usage", "perplexity": "bank perplexity",
             "separation_min": "separation S_min"}
    beside = "; ".join(
        f"{label} {np.mean(sweep.paired(f, a)):.3g} vs {np.mean(sweep.paired(f, b)):.3g}"
        for f, label in names.items())
    evidence = (
        f"ViT (d={vit.dim}, {vit.depth} layers, {vit.heads} heads) + DDCL readout (K = "
        f"{st.num_prototypes}, {st.ddcl_heads} heads, tau = {st.temperature:g}, beta = "
        f"{st.beta:g}) on {vit.n_train} {sweep.source} images, {vit.epochs} epochs, {n} paired "
        f"seeds; all heads Laplacian vs none. Premise (within-sequence variance share of the "
        f"encoder's output tokens, all - none): {premise.estimate:+.3f}, 95% paired t interval "
        f"[{premise.low:+.3f}, {premise.high:+.3f}] (required: below 0). Test accuracy "
        f"{acc_a.mean():.3f} vs {acc_b.mean():.3f}, difference {acc.estimate:+.3f}, 95% paired "
        f"t interval [{acc.low:+.3f}, {acc.high:+.3f}] (smallest detectable effect "
        f"{mde:.3f}; claimed > 0). Runs still moving by the plateau rule of the training "
        f"loss ({PLATEAU_WINDOW}-epoch windows, rel {PLATEAU_REL:g}): {unfinished} of "
        f"{n_runs}. Shown beside, not deciding: {beside}. "
        + (f"Why {word}: {'; '.join(reasons)}." if reasons and word == "inconclusive" else ""))
    our = (f"premise {premise.estimate:+.3f} [{premise.low:+.3f}, {premise.high:+.3f}]; "
           f"accuracy {acc_a.mean():.3f} vs {acc_b.mean():.3f} (diff CI [{acc.low:+.3f}, "
           f"{acc.high:+.3f}])")
    return Verdict("X2", word, evidence, our_value=our,
                   numbers={"premise": premise.as_list() + [premise.estimate],
                            "premise_holds": premise_holds,
                            "accuracy": acc.as_list() + [acc.estimate], "detectable": mde,
                            "unfinished": unfinished, "runs": n_runs,
                            "trend_premise": _trend(sweep, "within_seq", a, b)},
                   rule=rule.text, n_seeds=n,
                   interval=tuple((acc if premise_holds else premise).as_list()),
                   scale=f"{vit.epochs} epochs, {vit.n_train} images",
                   trend=_trend(sweep, "test_acc", a, b), tolerance=TRAINING)
