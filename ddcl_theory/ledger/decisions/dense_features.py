"""Claim L10 (Laplacian heads after DINO self-distillation) on the dense proxy: :func:`decide_l10`.

The rule is the registered one (``rule_of("L10")``, :data:`ddcl_theory.ledger.rules.RULES`),
taken at the longest pre-training that ran. Its tests, in order, each one paired value per seed
(all heads Laplacian minus none, the same images, batches, views, masks and initial weights):

1. the test accuracy of the image-level linear probe on the teacher's [CLS] token;
2. the test foreground mIoU of the linear 1x1 probe on the teacher's patch tokens (digit tile or
   background);
3. (beside, not combined) the test mIoU of the 11-class 1x1 probe.

Each seed draws its own test images, so the spread over seeds holds the sampling of the test
items, and the paired t interval covers it. Each arm pre-trains at its own tuned rate; the
evidence prints the tuning grid, each rate's two validation scores and the rates chosen.

Gates (a failed one makes the word ``inconclusive``): no deciding run collapsed
(:func:`collapsed`, read on validation images); the foreground comparison settled: the paired
validation foreground mIoU gap moved by at most :data:`~ddcl_theory.ledger.rules.L10_SETTLED` on
average over the seeds in the last quarter of the deciding schedule (:func:`settling_moves`), or
by a move that, repeated once more, leaves test 2's word as it is; in each head
setting the trained teacher beats the same untrained ViT on the foreground probe (paired 95% t
interval over the seeds above 0: the statistic can move at this scale).

Reads a :class:`ddcl_theory.experiments.dense_features.DenseSweep` (duck-typed): ``settings``
(``seeds``, ``steps``, ``trend``, ``n_train``, ``n_test``, ``dim``, ``depth``, ``heads``,
``head_settings``, ``tune_lrs``, ``tune_seeds``), ``lrs``, ``tuning_table(setting, field)``,
``runs``
(``setting``, ``seed``, ``steps``, ``score``, ``settle_val_fg_miou``, ``teacher_entropy``,
``teacher_mean_entropy``, ``effective_rank``), ``values(setting, field, steps)``,
``floor_values(which, setting, field)``, ``log_k`` and ``source``.
"""
from __future__ import annotations

import numpy as np

from ddcl_theory.ledger import stats
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.design import Gate
from ddcl_theory.ledger.report import interval_text, mean_sd
from ddcl_theory.ledger.rules import L10_SETTLED
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict

__all__ = ["PAPER", "TOLERANCE", "FIELDS", "collapsed", "differences", "per_seed",
           "scale_trend", "split_text", "trend_direction", "tuning_text", "gates",
           "decide_l10"]

PAPER = "ADE20K linear segmentation, ViT-S/16 DINO: 32.27 (Laplacian) vs 29.81 mIoU"
#: The probe field of each test, in the rule's order (image accuracy, foreground mIoU, mIoU).
FIELDS = ("image_acc", "fg_miou", "miou")
#: How far the numbers of the evidence may move between machines.
TOLERANCE = Tolerance(abs=0.05, rel=0.5, count_abs=1,
                      reason="seed means and paired intervals of probes on the features of "
                             "short self-distillation runs over the cpu profile's 2 seeds: one "
                             "run drifting on "
                             "other kernels moves a seed's foreground mIoU by a few points; "
                             "counts of runs meeting a gate may move by one")
#: Short names of the tests, in the rule's order.
_SHORT = ("image probe", "foreground mIoU", "11-class mIoU")
_BASE, _ALL = "0", "all"
_NAMES = {_BASE: "none", _ALL: "all heads Laplacian"}


def _seeds(n: int) -> str:
    return f"{n} seed" + ("" if n == 1 else "s")


def collapsed(run, log_k: float) -> bool:
    """A run collapsed when its teacher output is near uniform (per-image entropy above 95% of
    log K), near one-hot on one dimension for all images (batch-mean entropy below 0.5 nats), or
    its patch features span fewer than 2 effective dimensions."""
    return (run.teacher_entropy > 0.95 * log_k or run.teacher_mean_entropy < 0.5
            or run.effective_rank < 2.0)


def differences(sweep, field: str, steps: int | None = None) -> np.ndarray:
    """(seeds,) all heads Laplacian - none of a probe ``field`` at ``steps`` (default the
    longest), in seed order."""
    return sweep.values(_ALL, field, steps) - sweep.values(_BASE, field, steps)


def per_seed(sweep, steps: int | None = None) -> list[np.ndarray]:
    """The per-seed values of the rule's tests (binding, then beside), in its order."""
    return [differences(sweep, f, steps) for f in FIELDS]


def scale_trend(sweep, field: str = "fg_miou") -> dict[str, list[float]]:
    """A test's statistic ``[estimate, low, high]`` (95% t interval over the seeds) at each
    pre-training length, every length on the same trend seeds (the first
    ``settings.trend``); a point where one seed ran. Default: test 2's field."""
    n = len(sweep.settings.trend)
    out = {}
    for steps in sweep.settings.steps:
        d = differences(sweep, field, steps)[:n]
        iv = stats.one_sample_t(d) if d.size > 1 else stats.Interval(*[d[0]] * 3, 1, "paired t")
        out[f"{steps} steps"] = [round(iv.estimate, 4), round(iv.low, 4), round(iv.high, 4)]
    return out


def tuning_text(sweep) -> str:
    """The tuning grid, each arm's mean validation scores per rate, the chosen rates, and
    whether a chosen rate sits at an end of the grid or the two scores prefer different
    rates."""
    st = sweep.settings
    grid = st.tune_lrs
    parts = []
    for s in (_BASE, _ALL):
        acc = sweep.tuning_table(s, "val_image_acc")
        fg = sweep.tuning_table(s, "val_fg_miou")
        cells = ", ".join(f"{lr:g}: {a:.3f}/{f:.3f}" for lr, a, f in zip(grid, acc, fg))
        chosen = sweep.lrs[s]
        notes = []
        if chosen in (grid[0], grid[-1]) and len(grid) > 1:
            notes.append("at an end of the grid")
        best_acc, best_fg = grid[int(np.argmax(acc))], grid[int(np.argmax(fg))]
        if best_acc != best_fg:
            notes.append(f"image accuracy alone would pick {best_acc:g}, foreground mIoU "
                         f"alone {best_fg:g}")
        parts.append(f"{_NAMES[s]}: {chosen:g}" + (f" ({'; '.join(notes)})" if notes else "")
                     + f" [validation image accuracy/foreground mIoU by rate: {cells}]")
    text = (f"Rates tuned per arm at {st.steps[-1]} steps on tuning seeds "
            f"{', '.join(map(str, st.tune_seeds))} (validation images only, best mean rank of "
            "the two scores): " + "; ".join(parts) + ".")
    return text + _image_rate_text(sweep)


def _image_rate_text(sweep) -> str:
    """Where an arm's chosen rate is not its best for the image probe: its validation image
    accuracy there and at that best, and how the two arms' best image accuracies compare with
    test 1's SESOI (on the tuning seeds' validation images)."""
    st = sweep.settings
    if len(st.tune_lrs) < 2:
        return ""
    acc = {s: sweep.tuning_table(s, "val_image_acc") for s in (_BASE, _ALL)}
    off = []
    for s in (_BASE, _ALL):
        chosen = acc[s][list(st.tune_lrs).index(sweep.lrs[s])]
        best = int(np.argmax(acc[s]))
        if st.tune_lrs[best] != sweep.lrs[s]:
            off.append(f"{_NAMES[s]} scores {chosen:.3f} at its chosen rate against "
                       f"{acc[s][best]:.3f} at {st.tune_lrs[best]:g}")
    if not off:
        return ""
    sesoi = rule_of("L10").tests[0].s
    gap = float(acc[_ALL].max() - acc[_BASE].max())
    verdict = ("so a rate chosen for the image probe alone would not have lifted the "
               "Laplacian arm by the SESOI on validation" if gap < sesoi else
               "so a rate chosen for the image probe alone could have changed test 1")
    return (f" Validation image accuracy: {'; '.join(off)}. Each arm's best over the grid: "
            f"all heads Laplacian {acc[_ALL].max():.3f}, none {acc[_BASE].max():.3f} "
            f"(difference {gap:+.3f}, test 1's SESOI {sesoi:g}): {verdict}.")


def split_text(results) -> str:
    """One sentence on the binding tests (image probe, foreground mIoU): each one's word and
    interval, and, when their words differ, that the claim's word needs both."""
    binding = results[:len(_SHORT) - 1]
    cells = "; ".join(f"test {i} ({name}) {r.word}, {interval_text(r)}"
                      for i, (name, r) in enumerate(zip(_SHORT, binding), 1))
    if len({r.word for r in binding}) > 1:
        return f"A split result: {cells}. The claim's word needs both binding tests."
    return f"Both binding tests {binding[0].word}: {cells}."


def trend_direction(trend: dict[str, list[float]]) -> str:
    """How a trend ``{scale: [estimate, low, high]}`` moves with the scale: "grows" or
    "shrinks" when its estimates move one way and the last lies outside the first scale's
    interval; "shows no clear direction" otherwise; "reads no direction from one seed" when
    its intervals are points (so a printed direction is never rounding noise)."""
    points = list(trend.values())
    if len(points) < 2 or any(low == high for _, low, high in points):
        return "reads no direction from one seed"
    est = np.array([p[0] for p in points])
    _, low, high = points[0]
    if np.all(np.diff(est) > 0) and est[-1] > high:
        return "grows"
    if np.all(np.diff(est) < 0) and est[-1] < low:
        return "shrinks"
    return "shows no clear direction"


def _beside_text(result) -> str:
    """A word on the test decided beside: a difference that is real (its interval excludes
    the margin) but negligible (short of the SESOI) is named so."""
    low, high = result.interval
    real = low > result.margin if result.side == ">" else high < result.margin
    if real and result.word == "not reproduced":
        return (f", real (its interval excludes {result.margin:g}) but negligible (short of "
                f"its SESOI {result.sesoi:g})")
    return f", {result.word} against its SESOI {result.sesoi:g}"


def _deciding(sweep) -> list:
    longest = sweep.settings.steps[-1]
    return [r for r in sweep.runs if r.steps == longest]


def settling_moves(sweep) -> np.ndarray:
    """(seeds,) how far each seed's paired validation foreground mIoU gap (all heads Laplacian -
    none) moved from :data:`~ddcl_theory.experiments.dense_features.SETTLE_AT` of the deciding
    schedule to its end."""
    runs = {(r.setting, r.seed): r for r in _deciding(sweep)}
    gap = {s: [runs[(_ALL, s)].score.val_fg_miou - runs[(_BASE, s)].score.val_fg_miou,
               runs[(_ALL, s)].settle_val_fg_miou - runs[(_BASE, s)].settle_val_fg_miou]
           for s in sweep.settings.seeds}
    return np.array([end - mid for end, mid in gap.values()])


def gates(sweep) -> list[Gate]:
    """The rule's three gates, checked on the deciding runs (see the module docstring)."""
    runs = _deciding(sweep)
    fell = [f"{r.setting}/{r.seed}" for r in runs if collapsed(r, sweep.log_k)]
    moves = [abs(r.score.val_fg_miou - r.settle_val_fg_miou) for r in runs]
    gap_move = float(np.mean(settling_moves(sweep)))
    test = rule_of("L10").tests[1]
    d = differences(sweep, "fg_miou")
    iv = stats.one_sample_t(d) if d.size > 1 else stats.Interval(*[d[0]] * 3, 1, "paired t")
    words = [stats.decide(iv.low + shift, iv.high + shift, side=test.side, margin=test.margin,
                          sesoi=test.sesoi) for shift in (0.0, gap_move)]
    unsettled = abs(gap_move) > L10_SETTLED and words[0] != words[1]
    floor = {}
    for s in (_BASE, _ALL):
        gain = sweep.values(s, "fg_miou") - sweep.floor_values("untrained", s, "fg_miou")
        floor[s] = (stats.one_sample_t(gain) if gain.size > 1
                    else stats.Interval(*[gain[0]] * 3, 1, "one-sample t"))
    below = [s for s, iv in floor.items() if not (iv.low > 0 and iv.n > 1)]
    above = not below
    return [
        Gate("no collapse", not fell,
             f"{len(runs) - len(fell)} of {len(runs)} deciding runs kept a teacher output "
             "neither uniform nor one-hot and patch features of effective rank at least 2"
             + ("" if not fell else f" (collapsed: {', '.join(fell)})")),
        Gate("settled", not unsettled,
             f"over the last quarter of the schedule the paired validation foreground mIoU gap "
             f"(all heads Laplacian - none) moved by {gap_move:+.4f} on average over the seeds "
             f"(allowance {L10_SETTLED:g}, or any move that, repeated, leaves test 2's word "
             f"{words[0]!r}: it gives {words[1]!r}; largest move of one run {max(moves):.2g}"
             + ("; a longer schedule would let the comparison settle)" if unsettled else ")")),
        Gate("above the untrained floor", above,
             "foreground mIoU, trained teacher - the same untrained ViT: "
             + "; ".join(f"{'all heads Laplacian' if s == _ALL else 'none'} "
                         f"{interval_text(iv)}" for s, iv in floor.items())
             + ("" if above else "; the features of "
               + " and ".join(_NAMES[s] for s in below)
               + " must beat their initialisation before a difference between the arms can "
               "show (that arm's recipe: its rate grid, its length)")),
    ]


def decide_l10(sweep) -> Verdict:
    """L10 by its registered rule at the longest pre-training that ran."""
    st = sweep.settings
    rule = rule_of("L10")
    samples = per_seed(sweep)
    results = rule.evaluate(samples)
    checked = gates(sweep)
    word = rule.word(results, checked)
    b = rule.binding(results)
    bound = results[b]
    acc, fg, miou = results
    trend = scale_trend(sweep)
    failed = [g.name for g in checked if not g.passed]
    short = [r.n_seeds for r in results[:len(rule.tests)] if r.n_seeds < rule.n_seeds]
    why = ""
    if failed:
        why = f" Inconclusive because a gate failed ({', '.join(failed)})."
    elif short:
        why = (f" At most inconclusive: {short[0]} seeds, the rule registers "
               f"{rule.n_seeds}.")
    arms = {s: {f: sweep.values(s, f) for f in FIELDS} for s in (_BASE, _ALL)}
    background = sweep.floor_values("background")
    ceiling = {s: sweep.floor_values("ceiling", s) for s in (_BASE, _ALL)}
    n_trend = len(st.trend)
    acc_trend = scale_trend(sweep, "image_acc")
    evidence = (
        split_text(results) + " "
        f"Dense proxy ({sweep.source} backgrounds), {bound.n_seeds} paired seeds, "
        f"{st.n_train} training images, {st.n_test} test images a seed, ViT d={st.dim}, "
        f"{st.depth} layers, {st.heads} heads, {st.steps[-1]} steps of DINO + iBOT. "
        + tuning_text(sweep) + " Image probe accuracy: all heads "
        f"Laplacian {mean_sd(arms[_ALL]['image_acc'])}, none "
        f"{mean_sd(arms[_BASE]['image_acc'])}, difference {interval_text(acc)}. "
        f"Foreground mIoU: {mean_sd(arms[_ALL]['fg_miou'])} vs "
        f"{mean_sd(arms[_BASE]['fg_miou'])}, difference {interval_text(fg)}. "
        f"11-class mIoU (beside): {mean_sd(arms[_ALL]['miou'])} vs "
        f"{mean_sd(arms[_BASE]['miou'])}, difference {interval_text(miou)}"
        + _beside_text(miou) + "; all background "
        f"{background.mean():.3f}, supervised ceiling {ceiling[_ALL].mean():.3f} (all) and "
        f"{ceiling[_BASE].mean():.3f} (none) over {_seeds(len(ceiling[_ALL]))}. "
        + " ".join(g.detail[0].upper() + g.detail[1:] + "." for g in checked)
        + f" Over pre-training length, on the same {_seeds(n_trend)}: test 2 "
        + "; ".join(f"{k} {interval_text(v)}" for k, v in trend.items())
        + f" (the gap {trend_direction(trend)}); test 1 "
        + "; ".join(f"{k} {interval_text(v)}" for k, v in acc_trend.items())
        + f" (the gap {trend_direction(acc_trend)})."
        + why
        + f" Paper: {PAPER}; a scale of effect here, not a target.")
    our = (f"foreground mIoU diff {interval_text(fg, '+.3f')}, image probe diff "
           f"{interval_text(acc, '+.3f')}")
    return Verdict("L10", word, evidence, our_value=our,
                   paper_value="ADE20K 32.27 vs 29.81 mIoU",
                   numbers={"binding": b, "lrs": dict(sweep.lrs),
                            "means": {s: {f: float(v.mean()) for f, v in a.items()}
                                      for s, a in arms.items()},
                            "background": float(background.mean()),
                            "ceiling": {s: float(v.mean()) for s, v in ceiling.items()}},
                   rule=rule.text, n_seeds=bound.n_seeds, interval=tuple(bound.interval),
                   scale=f"{st.steps[-1]} steps", trend=trend, tolerance=TOLERANCE,
                   tests=tuple(results), gates=tuple(checked),
                   per_seed={t.statistic: [float(v) for v in values]
                             for t, values in zip(rule.all_tests, samples)})
