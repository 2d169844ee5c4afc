"""Decision of the chapter ``dense_features``: claim L10 (Zhang & Papyan 2026) on a proxy.

The rule, fixed before the run (the registry's two tests of L10): the deciding statistic is the
test mIoU of the linear 1x1 probe on the teacher's patch features, all heads Laplacian minus no
Laplacian head, paired by seed (same data, batches, augmentations and initialisation stream), at
the largest scale that ran (the last probe point); beside it the same paired difference of the
image-level linear probe's test accuracy (the background's CIFAR-10 class from the token mean).
Each 95% interval is the paired t interval (:func:`ddcl_theory.ledger.stats.paired_t`, i.e.
``scipy.stats.ttest_rel(...).confidence_interval()``). ``reproduced`` when both intervals lie
above 0; ``not reproduced`` when one lies below
0 (it excludes any gain); ``inconclusive`` otherwise, and also whenever a run did not reach its
loss plateau, collapsed, or the trained features do not beat the untrained ones on the dense
probe, or fewer than 5 paired seeds ran.

The function reads a sweep object with ``settings`` (``seeds``, ``steps``, ``n_train``, ``dim``,
``depth``, ``heads``), ``runs`` (``setting``, ``seed``, ``scores[i].miou``, ``plateau``,
``teacher_entropy``, ``teacher_mean_entropy``, ``effective_rank``), ``raw.miou``, ``log_k`` and
``source``.
"""
from __future__ import annotations

import numpy as np

from ddcl_theory.ledger import stats
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict

__all__ = ["RULE", "MIN_SEEDS", "TRAINING", "PAPER", "collapsed", "paired_interval",
           "detectable_effect", "decide_l10"]

MIN_SEEDS = 5
PAPER = "ADE20K linear segmentation, ViT-S/16 DINO: 32.27 (Laplacian) vs 29.81 mIoU"
RULE = ("statistic: test mIoU of a linear 1x1 probe on frozen teacher patch features, all heads "
        "Laplacian minus none, paired by seed, at the largest scale (steps) that ran, and the "
        "same difference of an image-level linear probe's test accuracy; 95% paired t "
        "intervals over >= 5 seeds; reproduced if both lie above 0, not reproduced if one lies "
        "below 0, inconclusive otherwise or if a run did not plateau, collapsed, or did not "
        "beat its untrained floor by the smallest effect the design detects")
#: How far the numbers may move between machines (seed means of short training runs).
TRAINING = Tolerance(abs=0.02, rel=0.1, reason="seed means of short self-distillation runs and "
                     "probes (accuracies on 128 test images move in steps of 1/128); the word is "
                     "decided on a paired interval")
NOT_MET = ("proxy, not the paper's setting: digits pasted on CIFAR-10 (11 classes, 32x32) instead "
           "of ADE20K (150 classes); a ViT of width {dim}, {depth} layers, {heads} heads instead "
           "of ViT-S/16; {steps} DINO steps with two views on {n_train} images instead of "
           "ImageNet pretraining with multi-crop")


def collapsed(run, log_k: float) -> bool:
    """A run collapsed when its teacher output is near uniform (per-image entropy above 95% of
    log K), near one-hot on one dimension for all images (batch-mean entropy below 0.5 nats), or
    its patch features span fewer than 2 effective dimensions."""
    return (run.teacher_entropy > 0.95 * log_k or run.teacher_mean_entropy < 0.5
            or run.effective_rank < 2.0)


def paired_interval(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """95% paired t interval of mean(a - b) over seeds (:func:`stats.paired_t`)."""
    interval = stats.paired_t(a, b)
    return interval.low, interval.high


def detectable_effect(diff: np.ndarray) -> float:
    """Smallest mean difference the paired design detects at 5% with 80% power, given the
    observed spread of the differences (:func:`stats.detectable_effect_of`)."""
    return stats.detectable_effect_of(diff)


def _values(sweep, setting: str, at: int, field: str = "miou") -> np.ndarray:
    runs = sorted((r for r in sweep.runs if r.setting == setting), key=lambda r: r.seed)
    return np.array([getattr(r.scores[at], field) for r in runs])


def decide_l10(sweep) -> Verdict:
    """L10: Laplacian heads give better dense (segmentation) features after self-distillation."""
    st = sweep.settings
    lap, std = _values(sweep, "all", -1), _values(sweep, "0", -1)
    n = len(lap)
    low, high = paired_interval(lap, std)
    diff = lap - std
    mde = detectable_effect(diff)
    acc_lap, acc_std = _values(sweep, "all", -1, "image_acc"), _values(sweep, "0", -1, "image_acc")
    acc_interval, miou_interval = stats.paired_t(acc_lap, acc_std), stats.paired_t(lap, std)
    acc_low, acc_high = acc_interval.low, acc_interval.high
    trend = {str(steps): round(float(np.mean(_values(sweep, "all", i) - _values(sweep, "0", i))),
                               4)
             for i, steps in enumerate(st.steps)}
    unfinished = sorted({f"{r.setting}/{r.seed}" for r in sweep.runs if not r.plateau})
    fell = sorted({f"{r.setting}/{r.seed}" for r in sweep.runs if collapsed(r, sweep.log_k)})
    trained = np.array([r.scores[-1].miou for r in sweep.runs])
    untrained = np.array([r.scores[0].miou for r in sweep.runs])
    # the floor: every run's own untrained probe (paired) and the raw patches. Training must
    # move the probe by at least the smallest effect this design detects: a gain above the
    # floor by a hair (the probe sitting at the all-background labelling) leaves no room for
    # a Laplacian-vs-standard difference the test could see
    floor = stats.paired_t(trained, untrained)
    above_floor = bool(floor.low > 0 and floor.estimate >= mde
                       and np.mean(trained) > sweep.raw.miou)
    if n < MIN_SEEDS or unfinished or fell or not above_floor:
        word = "inconclusive"
    else:                    # the registry's rule: its tests in order (image probe, then mIoU)
        word = rule_of("L10").decide([acc_interval, miou_interval])
    reasons = []
    if n < MIN_SEEDS:
        reasons.append(f"only {n} paired seeds (rule: >= {MIN_SEEDS})")
    if unfinished:
        reasons.append(f"{len(unfinished)} of {len(sweep.runs)} runs had not reached the loss "
                       "plateau")
    if fell:
        reasons.append(f"collapsed runs: {', '.join(fell)}")
    if not above_floor:
        reasons.append(f"the trained features do not beat the floor by a detectable margin "
                       f"(trained - untrained probe mIoU, paired over the runs, "
                       f"{floor.estimate:+.4f} [{floor.low:+.4f}, {floor.high:+.4f}], against "
                       f"the smallest detectable effect {mde:.4f}; raw patches "
                       f"{sweep.raw.miou:.3f}): the statistic cannot move at this scale")
    not_met = NOT_MET.format(dim=st.dim, depth=st.depth, heads=st.heads, steps=st.steps[-1],
                             n_train=st.n_train)
    evidence = (f"Dense proxy ({sweep.source} backgrounds), {n} paired seeds, {st.steps[-1]} "
                f"steps: probe mIoU all-Laplacian {lap.mean():.3f} vs standard {std.mean():.3f}, "
                f"difference {diff.mean():+.4f}, 95% paired t interval [{low:+.4f}, "
                f"{high:+.4f}] (smallest detectable {mde:.4f}); untrained ViT "
                f"{untrained.mean():.3f}, raw patches {sweep.raw.miou:.3f}. Image-level probe "
                f"accuracy {acc_lap.mean():.3f} vs {acc_std.mean():.3f}, interval "
                f"[{acc_low:+.3f}, {acc_high:+.3f}]. "
                + (f"Inconclusive because: {'; '.join(reasons)}. " if reasons else "")
                + f"Paper: {PAPER}; this is a {not_met}.")
    our = (f"proxy mIoU {lap.mean():.3f} vs {std.mean():.3f} "
           f"(diff {diff.mean():+.3f}, CI [{low:+.3f}, {high:+.3f}])")
    return Verdict("L10", word, evidence, our_value=our, paper_value="ADE20K 32.27 vs 29.81 mIoU",
                   numbers={"difference": float(diff.mean()), "detectable": mde,
                            "image_acc_interval": [acc_low, acc_high],
                            "unfinished": len(unfinished), "collapsed": len(fell),
                            "above_floor": above_floor,
                            "floor_interval": [floor.low, floor.high]},
                   rule=rule_of("L10").text, n_seeds=n, interval=(low, high), scale=f"{st.steps[-1]} steps",
                   trend=trend, tolerance=TRAINING)
