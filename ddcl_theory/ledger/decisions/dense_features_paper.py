"""Claim L10 on the papers' model and probe data: :func:`decide_l10_paper` reads the paired
DINO+iBOT study of :mod:`ddcl_theory.experiments.dino_study` (ViT-S/16 pre-trained on
Imagenette, probed on Imagenette and ADE20K) by L10's paper-scale rule
(:data:`ddcl_theory.ledger.rules.PAPER_RULES`), registered before any run at that scale.

Its tests, each paired on the same seed:

1. the Imagenette validation accuracy of a linear probe on the teacher's [CLS] token, all
   heads Laplacian - none;
2. the ADE20K validation mIoU of a linear probe on its patch tokens (the papers' statistic),
   all heads Laplacian / none - 1 (relative: our baseline lies below the paper's).

Every seed is scored on the same benchmark splits, so each interval is a crossed bootstrap over
the seeds and the images (:func:`~ddcl_theory.ledger.resampling.bootstrap_crossed` of the
per-image paired correctness for test 1; :func:`crossed_miou` of the per-image per-class counts
for test 2), and the spread that sizes the seeds is the per-seed one; the evidence gives the
half-width that resampling the images alone makes (:func:`image_half_widths`), the part of an
interval no number of seeds can shrink.

Gates (a failed one makes the word ``inconclusive``): no deciding run collapsed
(:func:`~ddcl_theory.ledger.decisions.dense_features.collapsed`); the dense comparison settled
(the paired relative mIoU gap on the held-out ADE20K training images moved over the last
quarter of the schedule by at most :data:`~ddcl_theory.ledger.rules.L10_PAPER_SETTLED` on
average, or by a move that,
repeated, leaves test 2's word as it is); each arm's trained teacher beats its own untrained
ViT on the ADE20K probe (paired 95% t interval above 0).

Reads a :class:`~ddcl_theory.experiments.dino_study.DinoStudy` (duck-typed): ``settings``
(``seeds``, ``epochs``, ``trend``, ``tune_lrs``, ``tune_seeds``), ``recipe``, ``tuning``,
``lrs``, ``runs``, ``values(setting, field, epochs)``, ``items(setting, field)``,
``floor_values(setting, field)``, ``majority``, ``log_k``, ``sizes`` and ``source``.
"""
from __future__ import annotations

import numpy as np

from ddcl_theory.ledger import stats
from ddcl_theory.metrics.segmentation import miou_of_counts
from ddcl_theory.ledger.decisions.dense_features import collapsed, trend_direction
from ddcl_theory.ledger.design import Gate
from ddcl_theory.ledger.report import interval_text, mean_sd
from ddcl_theory.ledger.resampling import CROSSED, bootstrap_crossed
from ddcl_theory.ledger.rules import L10_PAPER_SETTLED, PAPER_RULES
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict

__all__ = ["PAPER_MIOU", "TOLERANCE", "differences", "relative", "crossed_miou", "samples",
           "image_half_widths", "scale_trend", "settling_moves", "gates", "decide_l10_paper",
           "recorded"]

#: The papers' ADE20K mIoU (Laplacian heads, standard heads), ViT-S/16 DINO.
PAPER_MIOU = (0.3227, 0.2981)
#: How far the paper-scale numbers may move between machines (GPU kernels).
TOLERANCE = Tolerance(abs=0.02, rel=0.3, count_abs=1,
                      reason="seed means and crossed bootstrap intervals of linear probes on "
                             "ViT-S/16 features over 26 seeds; GPU kernels move a run's probe by "
                             "a fraction of a point; counts of runs meeting a gate may move by "
                             "one")
_SHORT = ("Imagenette [CLS] probe accuracy", "ADE20K mIoU, relative gain")
_BASE, _ALL = "0", "all"
_NAMES = {_BASE: "none", _ALL: "all heads Laplacian"}
#: Resamples of the crossed bootstrap of mIoU (each a (seeds x images) reweighting), as many
#: as :func:`~ddcl_theory.ledger.resampling.bootstrap_crossed` draws.
MIOU_RESAMPLES = 9999


def _t(d: np.ndarray, method: str) -> stats.Interval:
    return stats.one_sample_t(d) if d.size > 1 else stats.Interval(*[d[0]] * 3, 1, method)


def differences(study, field: str, epochs: int | None = None) -> np.ndarray:
    """(seeds,) all heads Laplacian - none of a reading at ``epochs`` (default the longest)."""
    return study.values(_ALL, field, epochs) - study.values(_BASE, field, epochs)


def relative(study, field: str = "miou", epochs: int | None = None) -> np.ndarray:
    """(seeds,) all heads Laplacian / none - 1 of a reading at ``epochs`` (default the
    longest): test 2's statistic."""
    return study.values(_ALL, field, epochs) / study.values(_BASE, field, epochs) - 1.0


def crossed_miou(counts_all: np.ndarray, counts_base: np.ndarray, *,
                 n_resamples: int = MIOU_RESAMPLES, seed: int = 0,
                 seeds: bool = True) -> stats.Interval:
    """Percentile bootstrap of the mean over seeds of the paired relative mIoU gap (all / base
    - 1), from each arm's per-image counts (seeds, images, 3, C) of
    :func:`~ddcl_theory.metrics.segmentation.image_counts` on one shared image set: each
    resample reweights the seeds by one multinomial draw and, independently, the images by
    another, and recomputes every seed's two mIoUs on the reweighted images (as
    :func:`~ddcl_theory.ledger.resampling.bootstrap_crossed`, for ratios of sums). With
    ``seeds`` False every seed keeps its weight: the images' share of the interval."""
    if counts_all.shape != counts_base.shape or counts_all.ndim != 4:
        raise ValueError(f"counts: expected two equal (seeds, images, 3, C) arrays, got "
                         f"{counts_all.shape} and {counts_base.shape}")
    n_seeds, n_images = counts_all.shape[:2]
    if seeds and n_seeds < 2:
        raise ValueError(f"counts: expected at least 2 seeds, got {n_seeds}")
    rng = np.random.default_rng(seed)
    image_w = rng.multinomial(n_images, np.full(n_images, 1.0 / n_images), size=n_resamples)
    seed_w = rng.multinomial(n_seeds, np.full(n_seeds, 1.0 / n_seeds), size=n_resamples)
    if not seeds:
        seed_w = np.ones_like(seed_w)
    per_seed = np.stack([miou_of_counts(counts_all[s], image_w)
                         / miou_of_counts(counts_base[s], image_w) - 1.0
                         for s in range(n_seeds)])
    boot = (seed_w * per_seed.T).sum(1) / n_seeds
    estimate = float(np.mean([miou_of_counts(a) / miou_of_counts(b) - 1.0
                              for a, b in zip(counts_all, counts_base)]))
    low, high = np.quantile(boot, [0.025, 0.975])
    return stats.Interval(estimate, float(low), float(high), n_seeds, CROSSED, 0.95)


def samples(study) -> list:
    """The rule's tests as ``(interval, per-seed sd)`` pairs (:meth:`Rule.evaluate`); with one
    seed, a point at its difference (no interval; the word stays inconclusive)."""
    diffs = [differences(study, "image_acc"), relative(study)]
    if len(diffs[0]) < 2:
        return [(stats.Interval(*[float(d[0])] * 3, 1, CROSSED, 0.95), float("nan"))
                for d in diffs]
    acc = study.items(_ALL, "image_correct").astype(float) \
        - study.items(_BASE, "image_correct").astype(float)
    iou = crossed_miou(study.items(_ALL, "segment_counts"),
                       study.items(_BASE, "segment_counts"))
    return [(bootstrap_crossed(acc), float(np.std(diffs[0], ddof=1))),
            (iou, float(np.std(diffs[1], ddof=1)))]


def image_half_widths(study) -> tuple[float, float]:
    """Half the width of each test's 95% interval when only the shared images are resampled
    (every seed kept once): the part of the crossed interval more seeds cannot shrink."""
    acc = (study.items(_ALL, "image_correct").astype(float)
           - study.items(_BASE, "image_correct").astype(float)).mean(0)
    a = stats.bootstrap(acc)
    b = crossed_miou(study.items(_ALL, "segment_counts"), study.items(_BASE, "segment_counts"),
                     seeds=False)
    return (a.high - a.low) / 2, (b.high - b.low) / 2


def scale_trend(study, test: int = 2) -> dict[str, list[float]]:
    """``[estimate, low, high]`` (95% t interval over the trend seeds) of test ``test``'s
    statistic at each pre-training length, every length on the same seeds."""
    n = len(study.settings.trend)
    out = {}
    for epochs in study.settings.epochs:
        d = relative(study, "miou", epochs) if test == 2 else differences(study, "image_acc",
                                                                           epochs)
        iv = _t(d[:n], "paired t")
        out[f"{epochs} epochs"] = [round(iv.estimate, 4), round(iv.low, 4), round(iv.high, 4)]
    return out


def settling_moves(study) -> np.ndarray:
    """(seeds,) how far each seed's paired relative mIoU gap on the held-out ADE20K training
    images moved from :data:`~ddcl_theory.experiments.dino_study.SETTLE_AT` of the deciding
    schedule to its end."""
    return relative(study, "val_miou") - relative(study, "settle_miou")


def gates(study, test2: stats.Interval) -> list[Gate]:
    """The rule's three gates (see the module docstring); ``test2``: test 2's interval."""
    longest = study.settings.epochs[-1]
    runs = [r for r in study.runs if r.epochs == longest]
    fell = [f"{r.setting}/{r.seed}" for r in runs if collapsed(r, study.log_k)]
    gap_move = float(np.mean(settling_moves(study)))
    test = PAPER_RULES["L10"].tests[1]
    words = [stats.decide(test2.low + shift, test2.high + shift, side=test.side,
                          margin=test.margin, sesoi=test.sesoi) for shift in (0.0, gap_move)]
    unsettled = abs(gap_move) > L10_PAPER_SETTLED and words[0] != words[1]
    floor = {s: _t(study.values(s, "miou") - study.floor_values(s, "miou"), "one-sample t")
             for s in (_BASE, _ALL)}
    below = [s for s, f in floor.items() if not (f.low > 0 and f.n > 1)]
    return [
        Gate("no collapse", not fell,
             f"{len(runs) - len(fell)} of {len(runs)} deciding runs kept a teacher output "
             "neither uniform nor one-hot and raw patch features of effective rank at least 2"
             + (f" (collapsed: {', '.join(fell)})" if fell else "")),
        Gate("settled", not unsettled,
             f"over the last quarter of the schedule the paired relative ADE20K mIoU gap on the "
             f"held-out training images moved by {gap_move:+.4f} on average over the seeds "
             f"(allowance {L10_PAPER_SETTLED:g}, or any move that, repeated, leaves test 2's word "
             f"{words[0]!r}: it gives {words[1]!r})"),
        Gate("above the untrained floor", not below,
             "ADE20K mIoU, trained teacher - the same untrained ViT: "
             + "; ".join(f"{_NAMES[s]} {interval_text(f)}" for s, f in floor.items())
             + ("" if not below else "; " + " and ".join(_NAMES[s] for s in below)
                + " did not clear its initialisation")),
    ]


def _tuning_text(study) -> str:
    st = study.settings
    parts = []

    def score(s: str, lr: float, f: str) -> float:
        return float(np.mean([getattr(t, f) for t in study.tuning
                              if t.setting == s and t.lr == lr]))
    for s in (_BASE, _ALL):
        cells = ", ".join(f"{lr:g}: {score(s, lr, 'val_image_acc'):.3f}/"
                          f"{score(s, lr, 'val_miou'):.3f}" for lr in st.tune_lrs)
        at_end = (" (at an end of the grid)" if len(st.tune_lrs) > 1
                  and study.lrs[s] in (st.tune_lrs[0], st.tune_lrs[-1]) else "")
        parts.append(f"{_NAMES[s]} {study.lrs[s]:g}{at_end} [held-out accuracy/mIoU by rate: "
                     f"{cells}]")
    return (f"Rates tuned per arm at {st.epochs[-1]} epochs on tuning seed(s) "
            f"{', '.join(map(str, st.tune_seeds))}, on held-out training images only: "
            + "; ".join(parts) + ".")


def decide_l10_paper(study) -> Verdict:
    """L10 by its paper-scale rule on the paired study (see the module docstring)."""
    st, r = study.settings, study.recipe
    rule = PAPER_RULES["L10"]
    pairs = samples(study)
    results = rule.evaluate(pairs)
    checked = gates(study, pairs[1][0])
    word = rule.word(results, checked)
    b = rule.binding(results)
    bound = results[b]
    failed = [g.name for g in checked if not g.passed]
    short = [t.n_seeds for t in results if t.n_seeds < rule.n_seeds]
    why = (f" Inconclusive because a gate failed ({', '.join(failed)})." if failed else
           f" At most inconclusive: {short[0]} seeds, the rule registers {rule.n_seeds}."
           if short else "")
    arms = {s: {f: study.values(s, f) for f in ("image_acc", "miou", "pixel_acc")}
            for s in (_BASE, _ALL)}
    floors = {s: study.floor_values(s, "miou") for s in (_BASE, _ALL)}
    trend, acc_trend = scale_trend(study), scale_trend(study, 1)
    widths = image_half_widths(study)
    sizes = study.sizes
    base, lap = arms[_BASE]["miou"].mean(), arms[_ALL]["miou"].mean()
    tests = "; ".join(f"test {i} ({name}) {t.word}, {interval_text(t)}" for i, (name, t)
                      in enumerate(zip(_SHORT, results), 1))
    evidence = (
        f"{tests}. Data: {study.source}. ViT d={r.dim}, {r.depth} layers, {r.heads} heads, "
        f"{r.patch}x{r.patch} patches at {r.image_size} px, DINO + iBOT for {st.epochs[-1]} "
        f"epochs on {sizes.get('imagenette_train', '?')} Imagenette images, {bound.n_seeds} "
        f"paired seeds. " + _tuning_text(study) + " Probes: Imagenette's "
        f"{sizes.get('imagenette_val', '?')} validation images ([CLS], 10 classes, fitted on "
        f"{sizes.get('imagenette_fit', '?')} training images); ADE20K's "
        f"{sizes.get('ade20k_validation', '?')} validation images (150 classes, fitted on "
        f"{sizes.get('ade20k_fit', '?')} training images); the same images for every seed, "
        f"so the intervals resample them as well as the seeds: the images alone give "
        f"+/-{widths[0]:.4f} (test 1) and +/-{widths[1]:.4f} (test 2), which no number of seeds "
        f"can shrink. ADE20K mIoU: all heads "
        f"Laplacian {mean_sd(arms[_ALL]['miou'])}, none {mean_sd(arms[_BASE]['miou'])} (paper "
        f"{PAPER_MIOU[0]:.4f} and {PAPER_MIOU[1]:.4f}; relative gain ours "
        f"{(lap - base) / base:+.1%}, the paper's {PAPER_MIOU[0] / PAPER_MIOU[1] - 1:+.1%}); "
        f"pixel accuracy {mean_sd(arms[_ALL]['pixel_acc'])} vs "
        f"{mean_sd(arms[_BASE]['pixel_acc'])}; untrained {mean_sd(floors[_ALL])} and "
        f"{mean_sd(floors[_BASE])}; every pixel the most frequent class "
        f"{study.majority[0]:.3f}. Imagenette accuracy: {mean_sd(arms[_ALL]['image_acc'])} vs "
        f"{mean_sd(arms[_BASE]['image_acc'])}. "
        + " ".join(g.detail[0].upper() + g.detail[1:] + "." for g in checked)
        + f" Over pre-training length, on the same {len(st.trend)} seeds: test 2 "
        + "; ".join(f"{k} {interval_text(v)}" for k, v in trend.items())
        + f" (the gap {trend_direction(trend)}); test 1 "
        + "; ".join(f"{k} {interval_text(v)}" for k, v in acc_trend.items())
        + f" (the gap {trend_direction(acc_trend)})." + why)
    our = (f"ADE20K mIoU {100 * lap:.2f} vs {100 * base:.2f} (relative gain "
           f"{interval_text(results[1], '+.3f')}), Imagenette probe diff "
           f"{interval_text(results[0], '+.3f')}")
    per_seed = {rule.tests[0].statistic: [float(v) for v in differences(study, "image_acc")],
                rule.tests[1].statistic: [float(v) for v in relative(study)]}
    return Verdict("L10", word, evidence, our_value=our,
                   paper_value="ADE20K 32.27 vs 29.81 mIoU",
                   numbers={"binding": b, "majority": list(study.majority),
                            "lrs": dict(study.lrs), "image_half_widths": list(widths),
                            "means": {s: {f: float(v.mean()) for f, v in a.items()}
                                      for s, a in arms.items()},
                            "untrained": {s: float(v.mean()) for s, v in floors.items()}},
                   rule=rule.text, n_seeds=bound.n_seeds, interval=tuple(bound.interval),
                   scale=f"{st.epochs[-1]} epochs", trend=trend, tolerance=TOLERANCE,
                   tests=tuple(results), gates=tuple(checked), per_seed=per_seed)


def recorded(proxy: Verdict, paper: Verdict | None) -> Verdict:
    """The verdict the chapter records for L10: the one on the papers' data where that study
    ran (the paper profile), else the proxy's."""
    for name, v in (("proxy", proxy), ("paper", paper)):
        if v is not None and v.claim != "L10":
            raise ValueError(f"{name}: expected a verdict on L10, got one on {v.claim}")
    return paper if paper is not None else proxy
