"""Claim L10 at the papers' scale: :func:`decide_l10_paper` reads the paired DINO+iBOT study of
:mod:`ddcl_theory.experiments.dino_study` (ViT-S/16 pre-trained on Imagenette, probed on
Imagenette and ADE20K) by L10's registered rule.

The rule's tests keep their order, SESOIs and design (paired t over the seeds, all heads
Laplacian - none); the study measures each at the papers' data:

1. the image-level linear probe on the teacher's [CLS] token: Imagenette validation accuracy;
2. the dense linear probe on its patch tokens: ADE20K validation mIoU over the 150 classes (the
   papers' own statistic, 32.27 vs 29.81);
3. (beside) the same probe's pixel accuracy, at the mIoU's SESOI.

The gates are the rule's, read on the same runs: no deciding run collapsed
(:func:`~ddcl_theory.ledger.decisions.dense_features.collapsed`, on Imagenette validation images
and the held-out ADE20K training images); the dense comparison settled (the paired mIoU gap on
the held-out ADE20K training images moved over the last quarter of the schedule by at most
:data:`~ddcl_theory.ledger.rules.L10_SETTLED` on average, or by a move that, repeated, leaves
test 2's word as it is); each arm's trained teacher beats its own untrained ViT on the ADE20K
probe (paired 95% t interval above 0). Neither arm is tuned: both pre-train at DINO's published
rate, where the reference profile tunes each arm on a grid; the evidence says so.

Reads a :class:`~ddcl_theory.experiments.dino_study.DinoStudy` (duck-typed): ``settings``
(``seeds``, ``epochs``, ``trend``), ``recipe`` (``dim``, ``depth``, ``heads``, ``patch``,
``image_size``, ``lr``, ``batch_size``), ``runs``, ``values(setting, field, epochs)``,
``floor_values(setting, field)``, ``majority``, ``log_k`` and ``sizes``.
"""
from __future__ import annotations

import numpy as np

from ddcl_theory.ledger import stats
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions.dense_features import PAPER, collapsed, trend_direction
from ddcl_theory.ledger.design import Gate
from ddcl_theory.ledger.report import interval_text, mean_sd
from ddcl_theory.ledger.rules import L10_SETTLED
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict

__all__ = ["FIELDS", "TOLERANCE", "differences", "per_seed", "scale_trend", "settling_moves",
           "gates", "decide_l10_paper", "recorded"]

#: The study's reading of each of the rule's tests, in its order.
FIELDS = ("image_acc", "miou", "pixel_acc")
#: How far the paper-scale numbers may move between machines (GPU kernels).
TOLERANCE = Tolerance(abs=0.02, rel=0.3, count_abs=1,
                      reason="seed means and paired intervals of linear probes on ViT-S/16 "
                             "features over 26 seeds; GPU kernels move a run's probe by a "
                             "fraction of a point; counts of runs meeting a gate may move by one")
_SHORT = ("Imagenette [CLS] probe accuracy", "ADE20K mIoU", "ADE20K pixel accuracy")
_BASE, _ALL = "0", "all"
_NAMES = {_BASE: "none", _ALL: "all heads Laplacian"}


def _interval(d: np.ndarray, method: str) -> stats.Interval:
    return stats.one_sample_t(d) if d.size > 1 else stats.Interval(*[d[0]] * 3, 1, method)


def differences(study, field: str, epochs: int | None = None) -> np.ndarray:
    """(seeds,) all heads Laplacian - none of a reading at ``epochs`` (default the longest)."""
    return study.values(_ALL, field, epochs) - study.values(_BASE, field, epochs)


def per_seed(study) -> list[np.ndarray]:
    """The per-seed values of the rule's tests (binding, then beside), in its order."""
    return [differences(study, f) for f in FIELDS]


def scale_trend(study, field: str = "miou") -> dict[str, list[float]]:
    """``[estimate, low, high]`` (95% t interval over the trend seeds) of a test's statistic at
    each pre-training length, every length on the same seeds. Default: test 2's."""
    n = len(study.settings.trend)
    out = {}
    for epochs in study.settings.epochs:
        iv = _interval(differences(study, field, epochs)[:n], "paired t")
        out[f"{epochs} epochs"] = [round(iv.estimate, 4), round(iv.low, 4), round(iv.high, 4)]
    return out


def settling_moves(study) -> np.ndarray:
    """(seeds,) how far each seed's paired mIoU gap on the held-out ADE20K training images moved
    from :data:`~ddcl_theory.experiments.dino_study.SETTLE_AT` of the deciding schedule to its
    end."""
    return differences(study, "val_miou") - differences(study, "settle_miou")


def _deciding(study) -> list:
    longest = study.settings.epochs[-1]
    return [r for r in study.runs if r.epochs == longest]


def gates(study) -> list[Gate]:
    """The rule's three gates at the papers' data (see the module docstring)."""
    runs = _deciding(study)
    fell = [f"{r.setting}/{r.seed}" for r in runs if collapsed(r, study.log_k)]
    gap_move = float(np.mean(settling_moves(study)))
    test = rule_of("L10").tests[1]
    iv = _interval(differences(study, "miou"), "paired t")
    words = [stats.decide(iv.low + shift, iv.high + shift, side=test.side, margin=test.margin,
                          sesoi=test.sesoi) for shift in (0.0, gap_move)]
    unsettled = abs(gap_move) > L10_SETTLED and words[0] != words[1]
    floor = {s: _interval(study.values(s, "miou") - study.floor_values(s, "miou"),
                          "one-sample t") for s in (_BASE, _ALL)}
    below = [s for s, f in floor.items() if not (f.low > 0 and f.n > 1)]
    return [
        Gate("no collapse", not fell,
             f"{len(runs) - len(fell)} of {len(runs)} deciding runs kept a teacher output "
             "neither uniform nor one-hot and patch features of effective rank at least 2"
             + (f" (collapsed: {', '.join(fell)})" if fell else "")),
        Gate("settled", not unsettled,
             f"over the last quarter of the schedule the paired ADE20K mIoU gap on the "
             f"held-out training images moved by {gap_move:+.4f} on average over the seeds "
             f"(allowance {L10_SETTLED:g}, or any move that, repeated, leaves test 2's word "
             f"{words[0]!r}: it gives {words[1]!r})"),
        Gate("above the untrained floor", not below,
             "ADE20K mIoU, trained teacher - the same untrained ViT: "
             + "; ".join(f"{_NAMES[s]} {interval_text(f)}" for s, f in floor.items())
             + ("" if not below else "; " + " and ".join(_NAMES[s] for s in below)
                + " did not clear its initialisation")),
    ]


def decide_l10_paper(study) -> Verdict:
    """L10 by its registered rule on the paired study at the papers' data."""
    st, r = study.settings, study.recipe
    rule = rule_of("L10")
    samples = per_seed(study)
    results = rule.evaluate(samples)
    checked = gates(study)
    word = rule.word(results, checked)
    b = rule.binding(results)
    bound = results[b]
    failed = [g.name for g in checked if not g.passed]
    short = [t.n_seeds for t in results[:len(rule.tests)] if t.n_seeds < rule.n_seeds]
    why = (f" Inconclusive because a gate failed ({', '.join(failed)})." if failed else
           f" At most inconclusive: {short[0]} seeds, the rule registers {rule.n_seeds}."
           if short else "")
    arms = {s: {f: study.values(s, f) for f in FIELDS} for s in (_BASE, _ALL)}
    floors = {s: study.floor_values(s, "miou") for s in (_BASE, _ALL)}
    trend, acc_trend = scale_trend(study), scale_trend(study, "image_acc")
    sizes = study.sizes
    tests = "; ".join(f"test {i} ({name}) {t.word}, {interval_text(t)}" for i, (name, t)
                      in enumerate(zip(_SHORT, results), 1))
    evidence = (
        f"{tests} (test 3 beside, at the mIoU's SESOI). ViT d={r.dim}, {r.depth} layers, "
        f"{r.heads} heads, {r.patch}x{r.patch} patches at {r.image_size} px, DINO + iBOT for "
        f"{st.epochs[-1]} epochs on {sizes.get('imagenette_train', '?')} Imagenette images, "
        f"{bound.n_seeds} paired seeds; both arms at DINO's published rate ({r.lr:g} per 256 "
        f"images, batch {r.batch_size}), neither tuned. Probes: Imagenette's "
        f"{sizes.get('imagenette_val', '?')} validation images ([CLS], 10 classes); ADE20K's "
        f"{sizes.get('ade20k_validation', '?')} validation images (linear, 150 classes, fitted "
        f"on {sizes.get('ade20k_fit', '?')} training images). ADE20K mIoU: all heads Laplacian "
        f"{mean_sd(arms[_ALL]['miou'])}, none {mean_sd(arms[_BASE]['miou'])}; untrained "
        f"{mean_sd(floors[_ALL])} and {mean_sd(floors[_BASE])}; every pixel the most frequent "
        f"class {study.majority[0]:.3f}. Imagenette accuracy: {mean_sd(arms[_ALL]['image_acc'])} "
        f"vs {mean_sd(arms[_BASE]['image_acc'])}. "
        + " ".join(g.detail[0].upper() + g.detail[1:] + "." for g in checked)
        + f" Over pre-training length, on the same {len(st.trend)} seeds: test 2 "
        + "; ".join(f"{k} {interval_text(v)}" for k, v in trend.items())
        + f" (the gap {trend_direction(trend)}); test 1 "
        + "; ".join(f"{k} {interval_text(v)}" for k, v in acc_trend.items())
        + f" (the gap {trend_direction(acc_trend)})." + why + f" Paper: {PAPER}.")
    gap = arms[_ALL]["miou"].mean() - arms[_BASE]["miou"].mean()
    our = (f"ADE20K mIoU {100 * arms[_ALL]['miou'].mean():.2f} vs "
           f"{100 * arms[_BASE]['miou'].mean():.2f} (diff {100 * gap:+.2f} points), "
           f"Imagenette probe diff {interval_text(results[0], '+.3f')}")
    return Verdict("L10", word, evidence, our_value=our,
                   paper_value="ADE20K 32.27 vs 29.81 mIoU",
                   numbers={"binding": b, "majority": list(study.majority),
                            "means": {s: {f: float(v.mean()) for f, v in a.items()}
                                      for s, a in arms.items()},
                            "untrained": {s: float(v.mean()) for s, v in floors.items()}},
                   rule=rule.text, n_seeds=bound.n_seeds, interval=tuple(bound.interval),
                   scale=f"{st.epochs[-1]} epochs", trend=trend, tolerance=TOLERANCE,
                   tests=tuple(results), gates=tuple(checked),
                   per_seed={t.statistic: [float(v) for v in values]
                             for t, values in zip(rule.all_tests, samples)})


def recorded(proxy: Verdict, paper: Verdict | None) -> Verdict:
    """The verdict the chapter records for L10: the one at the papers' data where that study
    ran (the paper profile), else the proxy's."""
    for name, v in (("proxy", proxy), ("paper", paper)):
        if v is not None and v.claim != "L10":
            raise ValueError(f"{name}: expected a verdict on L10, got one on {v.claim}")
    return paper if paper is not None else proxy
