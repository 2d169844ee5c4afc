"""Decisions of the chapter ``laplacian_experiments``: claims L6-L8 (Zhang & Papyan 2026) on the
ViT study of :mod:`ddcl_theory.experiments.laplacian_study`.

Each word comes from the registered rule (:func:`ddcl_theory.ledger.claims.rule_of`, data in
:mod:`ddcl_theory.ledger.rules`): per test a 95% interval of a per-seed paired statistic, three
ways against the test's margin and smallest effect of interest, at the largest scale that ran;
fewer seeds than the rule registers make the word at best ``inconclusive``, and so does a gate
that failed (a deciding run cut by the epoch cap before its validation optimum, a terminal-phase
run short of 99% training accuracy). The other scales give the trend.

* L6: accuracy on the evaluation pool, all heads Laplacian - none, and the per-seed slope over
  the number of Laplacian heads, at each training-image count (decided at the largest), each
  interval a crossed bootstrap over seeds and pool images, whose power is read off its own width
  (:func:`crossed_power`); the steps between head settings and between image counts beside;
* L7: relative changes (all / none - 1) of the absolute within-sequence and between-class
  variances of the tokens after the final LayerNorm (largest image count), and of NC1 on the
  training images of the terminal-phase runs; every layer, the stream before the LayerNorm and
  the shares beside;
* L8: the relative change of k99 of those tokens, at each width (decided at the widest); the
  participation ratio beside.

The functions read a study with the fields of
:class:`~ddcl_theory.experiments.laplacian_study.ViTStudy` (``settings``, ``by``, ``values``,
``counts``, ``source``; runs with ``setting``, ``seed``, ``past_optimum``, ``train_acc``,
``best_epoch``, ``correct_items``). Claim L9 has its own chapter and decision module,
:mod:`ddcl_theory.ledger.decisions.laplacian_lm`.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
from scipy.stats import norm

from ddcl_theory.ledger import stats
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions.scales import scale_change, scale_path, scale_text
from ddcl_theory.ledger.design import Gate, TestResult
from ddcl_theory.ledger.resampling import bootstrap_crossed
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict
from ddcl_theory.runtime.settings import CONFIRMATORY_SEED_BASE

__all__ = ["L6_TOLERANCE", "L7_TOLERANCE", "L8_TOLERANCE", "PAPER", "PAPER_L6_GAPS",
           "PAPER_ROUNDING", "TERMINAL_ACCURACY", "TEST_RESAMPLES", "STEP_RESAMPLES", "AT_END",
           "gaps", "slopes", "item_correct", "item_gaps", "item_slopes", "item_steps",
           "l6_samples", "crossed_power", "crossed_powers", "with_crossed_power", "end_error",
           "mean_standard_errors", "crossed_width_text", "packed_items", "relative_change",
           "optimum_gate", "terminal_gate", "trend_of", "variance_changes", "decide_l6",
           "decide_l7", "decide_l8"]

#: How far the numbers quoted by L6, L7 and L8 may move between machines: 3x the largest
#: standard error of a 3-seed mean in the cpu run, in the units printed (points of accuracy,
#: percent of a relative change); the seeds needed scale with the squared spread of 3 seeds,
#: hence ``rel``. ATen's portable and AVX2 kernels moved none of these numbers.
L6_TOLERANCE = Tolerance(abs=4.0, rel=3.0, count_abs=2, reason=(
    "3x the largest standard error of a 3-seed mean in the cpu run (all - none, 1.4 points); "
    "seeds needed scale with the squared spread of 3 seeds; counts of 12 runs past their "
    "optimum (count_allowance); the portable and AVX2 kernels moved nothing"))
L7_TOLERANCE = Tolerance(abs=60.0, rel=3.0, count_abs=2, reason=(
    "3x the largest standard error of a 3-seed mean in the cpu run (relative change of NC1 "
    "on the pool, 19%); seeds needed scale with the squared spread of 3 seeds; the portable "
    "and AVX2 kernels moved nothing"))
L8_TOLERANCE = Tolerance(abs=17.0, rel=3.0, count_abs=2, reason=(
    "3x the largest standard error of a 3-seed mean in the cpu run (relative change of the "
    "participation ratio at width 64, 5.6%); seeds needed scale with the squared spread of 3 "
    "seeds; the portable and AVX2 kernels moved nothing"))

PAPER = {
    "L6": "ViT: ImageNet 82.32% vs 81.45% (+0.87), CIFAR-100 77.04% vs 75.12% (+1.92), all "
          "heads Laplacian vs none",
    "L7": "lower within-sequence and higher between-class variance, stronger Neural Collapse "
          "(simplex ETF)",
    "L8": "k99 547.7 -> 430.4 (-21%) with all heads Laplacian, reported for its GPT-2-style "
          "language model",
}
#: Resamples of the crossed bootstrap that decides L6's tests.
TEST_RESAMPLES = 9999
#: Resamples of the crossed bootstrap of L6's steps between head settings (set beside).
STEP_RESAMPLES = 1999
#: A paper gap closer to an end of L6's interval than this many Monte Carlo standard errors of
#: the end, plus the paper's rounding (:data:`PAPER_ROUNDING`), is said to lie at that end:
#: neither another resampling nor the paper's unrounded accuracies could place it on one side.
AT_END = 2.0
#: The paper's all - none accuracy gaps of L6 (fractions), set beside the interval.
PAPER_L6_GAPS = {"ImageNet": 0.0087, "CIFAR-100": 0.0192}
#: How far a paper gap may be from its unrounded value: two accuracies each printed to 0.01
#: points, so their difference is known to 0.01 points (a fraction of 1e-4).
PAPER_ROUNDING = 1e-4
#: The training accuracy a terminal-phase run must reach (L7's Neural Collapse gate).
TERMINAL_ACCURACY = 0.99
_BASE, _ALL = "0", "all"


# ------------------------------------------------------------------------------- statistics
def gaps(study, n_train: int | None = None) -> np.ndarray:
    """Per seed, evaluation accuracy with all heads Laplacian - none at ``n_train`` images
    (default the largest), shape (seeds,)."""
    return (study.values("eval_acc", _ALL, n_train=n_train)
            - study.values("eval_acc", _BASE, n_train=n_train))


def slopes(study, n_train: int | None = None) -> np.ndarray:
    """Per seed, the least-squares slope of evaluation accuracy against the number of Laplacian
    heads per layer over the head settings of the study (accuracy per head), shape (seeds,)."""
    counts = study.counts()
    acc = np.stack([study.values("eval_acc", s, n_train=n_train) for s in counts])
    x = np.array(list(counts.values()), dtype=float)
    return np.polyfit(x, acc, 1)[0]


def _head_weights(study) -> np.ndarray:
    """Least-squares slope weights over the head settings' Laplacian head counts: the slope of
    values ``y`` (one per setting) is ``weights @ y``, shape (settings,)."""
    x = np.array(list(study.counts().values()), dtype=float)
    return (x - x.mean()) / np.sum((x - x.mean()) ** 2)


def item_correct(study, setting: str, n_train: int | None = None) -> np.ndarray:
    """Per seed and pool image, whether the run of ``setting`` classified it correctly, shape
    (seeds, images)."""
    return np.stack([r.correct_items.astype(float) for r in study.by(setting, n_train=n_train)])


def item_gaps(study, n_train: int | None = None) -> np.ndarray:
    """Per seed and pool image, all - none correctness, shape (seeds, images); its mean over
    images is :func:`gaps`."""
    return item_correct(study, _ALL, n_train) - item_correct(study, _BASE, n_train)


def item_slopes(study, n_train: int | None = None) -> np.ndarray:
    """Per seed and pool image, the least-squares slope of correctness over the number of
    Laplacian heads, shape (seeds, images); its mean over images is :func:`slopes`."""
    weights = _head_weights(study)
    return sum(w * item_correct(study, s, n_train) for w, s in zip(weights, study.counts()))


def l6_samples(study, n_train: int | None = None) -> list[tuple[stats.Interval, float]]:
    """What L6's two tests are decided on at ``n_train`` images: the crossed bootstrap over
    seeds and pool images of the per-image gap and slope (every seed is scored on the same
    pool, so the pool's sampling does not average out over seeds), each with its per-seed
    spread for the power analysis."""
    out = []
    for per_seed, per_item in ((gaps(study, n_train), item_gaps(study, n_train)),
                               (slopes(study, n_train), item_slopes(study, n_train))):
        spread = float(np.std(per_seed, ddof=1)) if per_seed.size > 1 else float("nan")
        out.append((bootstrap_crossed(per_item, n_resamples=TEST_RESAMPLES), spread))
    return out


def item_steps(study, n_train: int | None = None) -> dict[str, np.ndarray]:
    """Per step between consecutive head settings (by Laplacian heads per layer), per seed and
    pool image the difference of correctness, ``{"<a> to <b> heads": (seeds, images)}``; the
    steps add up to :func:`item_gaps`."""
    counts = study.counts()
    order = sorted(counts, key=counts.get)
    return {f"{counts[a]} to {counts[b]} head{'' if counts[b] == 1 else 's'}":
            item_correct(study, b, n_train)
            - item_correct(study, a, n_train) for a, b in zip(order, order[1:])}


def mean_standard_errors(per_item: np.ndarray, interval: stats.Interval) -> dict[str, float]:
    """Standard errors of the grand mean of ``per_item`` (shape (seeds, images), every seed on
    the same images): ``seeds``, the spread of the seeds' means over sqrt(seeds); ``pool``, the
    part that sampling the pool's images adds and more seeds would not remove (a two-way
    random-effects estimate: the variance of the images' means over seeds, less the seeds' noise
    within an image over the seeds, over the images); ``crossed``, the one the crossed-bootstrap
    ``interval`` implies (half-width over the normal quantile), which errs wide."""
    arr = np.asarray(per_item, dtype=float)
    if arr.ndim != 2 or arr.shape[0] < 2 or arr.shape[1] < 2:
        raise ValueError(f"per_item: expected shape (seeds >= 2, images >= 2), got {arr.shape}")
    n, m = arr.shape
    image_var = arr.mean(0).var(ddof=1) - arr.var(axis=0, ddof=1).mean() / n
    return {"seeds": float(arr.mean(1).std(ddof=1) / np.sqrt(n)),
            "pool": float(np.sqrt(max(image_var, 0.0) / m)),
            "crossed": float((interval.high - interval.low) / (2 * _z(stats.CONFIDENCE)))}


def crossed_width_text(mean_se: Mapping[str, float]) -> str:
    """The standard error the crossed interval implies against the seeds' and the pool's parts
    together (points; ``mean_se`` from :func:`mean_standard_errors`), and whether it is wider."""
    crossed, both = (round(100 * v, 2) for v in (
        mean_se["crossed"], float(np.hypot(mean_se["seeds"], mean_se["pool"]))))
    return (f"the crossed bootstrap's interval implies {crossed:.2f}, "
            + (f"wider than the two together ({both:.2f}), as that bootstrap tends to be"
               if crossed > both else f"against {both:.2f} for the two together"))


def _z(confidence: float) -> float:
    return float(norm.ppf(0.5 + confidence / 2))


def crossed_power(interval: stats.Interval, per_item: np.ndarray, effect: float) -> dict:
    """The power of the crossed-bootstrap ``interval`` of the mean of ``per_item`` (shape
    (seeds, images)) read off its own width (normal approximation).

    Its squared standard error splits into the pool's part that more seeds would not remove
    (:func:`mean_standard_errors`' ``pool``) and the rest, which shrinks as 1/seeds. ``effect``:
    the distance from the margin to detect (the SESOI's). Returns ``detectable``, the effect
    these seeds detect with 80% power; ``power`` at ``effect``; ``seeds_needed`` for 80% power
    at ``effect``, None when no count of seeds would do, and ``out_of_reach``, why: ``"pool"``
    when the pool's part alone is too wide, ``"seeds"`` when more than
    :data:`~ddcl_theory.ledger.stats.MAX_SEEDS` would be needed, else None. The crossed
    bootstrap runs wide, so these figures err on the side of too many seeds."""
    if not effect > 0:
        raise ValueError(f"effect: expected a distance > 0, got {effect!r}")
    se = mean_standard_errors(per_item, interval)
    z_ci = _z(stats.CONFIDENCE)
    z_both = z_ci + float(norm.ppf(stats.POWER))
    fixed = se["pool"] ** 2
    shrinking = max(se["crossed"] ** 2 - fixed, 0.0) * interval.n
    room = (effect / z_both) ** 2 - fixed
    need, out_of_reach = None, "pool"
    if room > 0:
        need, out_of_reach = max(2, int(np.ceil(shrinking / room - 1e-9))), None
        if need > stats.MAX_SEEDS:
            need, out_of_reach = None, "seeds"
    return {"detectable": float(z_both * se["crossed"]),
            "power": float(norm.cdf(effect / se["crossed"] - z_ci)) if se["crossed"] > 0
            else 1.0, "seeds_needed": need, "out_of_reach": out_of_reach}


def crossed_powers(results: Sequence[TestResult], samples: Sequence[tuple],
                   per_items: Sequence[np.ndarray]) -> list[dict | None]:
    """Per test of ``results`` (decided on ``samples``, as :func:`l6_samples` gives them, from
    the per-item values ``per_items``), :func:`crossed_power` at the distance from the margin to
    the SESOI (to the estimate when they coincide); None with fewer than 2 seeds or no
    distance."""
    out = []
    for r, (interval, _), per_item in zip(results, samples, per_items):
        effect = abs(r.sesoi - r.margin) or abs(r.estimate - r.margin)
        usable = effect > 0 and np.asarray(per_item).shape[0] >= 2
        out.append(crossed_power(interval, per_item, effect) if usable else None)
    return out


def with_crossed_power(results: Sequence[TestResult],
                       powers: Sequence[dict | None]) -> list[TestResult]:
    """``results`` with ``detectable`` and ``seeds_needed`` from ``powers``
    (:func:`crossed_powers`: read off the deciding interval's own width, not a t interval over
    seeds alone, which leaves out the pool); a test whose power is None is kept as it is."""
    return [r if p is None else dataclasses.replace(r, detectable=p["detectable"],
                                                    seeds_needed=p["seeds_needed"])
            for r, p in zip(results, powers)]


def end_error(interval: stats.Interval, n_resamples: int) -> float:
    """Monte Carlo standard error of either end of a percentile bootstrap ``interval`` drawn
    from ``n_resamples`` resamples (normal approximation: sqrt(a (1 - a) / B) over the density
    at the end's quantile a, the density read off the interval's width)."""
    if n_resamples < 1:
        raise ValueError(f"n_resamples: expected at least 1, got {n_resamples!r}")
    alpha = (1.0 - interval.confidence) / 2.0
    sd = (interval.high - interval.low) / (2 * _z(interval.confidence))
    return float(np.sqrt(alpha * (1 - alpha) / n_resamples) * sd
                 / norm.pdf(_z(interval.confidence)))


def packed_items(study, n_train: int | None = None, at: str = "") -> dict[str, list[str]]:
    """Per head setting, each seed's correctness on every pool image as hex of
    ``numpy.packbits`` (the committed per-item values behind L6's intervals); ``at``: the image
    count named in the keys (none for the deciding count)."""
    where = f", at {at}" if at else ""
    return {f"correct on each pool image, {k} Laplacian heads per layer{where} "
            "(numpy.packbits, hex)": [r.correct.hex() for r in study.by(s, n_train=n_train)]
            for s, k in study.counts().items()}


def relative_change(study, field: str, **where) -> np.ndarray:
    """Per seed, ``field`` with all heads Laplacian over none, minus 1 (``where``: the runs,
    as :meth:`ViTStudy.by` selects them), shape (seeds,)."""
    base = study.values(field, _BASE, **where)
    if np.any(base <= 0):
        raise ValueError(f"field: {field!r} of the baseline must be positive, got {base}")
    return study.values(field, _ALL, **where) / base - 1.0


# ------------------------------------------------------------------------------- gates
def optimum_gate(runs: Sequence, what: str) -> Gate:
    """Passed when every deciding run stopped past its validation optimum (``patience`` epochs
    without a new lowest validation loss before the cap), so it was read at its optimum."""
    cut = [f"{r.setting}/{r.seed}" for r in runs if not r.past_optimum]
    best = [r.best_epoch for r in runs]
    detail = (f"{len(runs) - len(cut)} of {len(runs)} {what} stopped past their validation "
              f"optimum (at epochs {min(best)}-{max(best)} of at most {runs[0].epochs})")
    if cut:
        detail += ("; the others reached the epoch cap still improving: a longer schedule "
                   "would let them pass their optimum")
    return Gate("read at the validation optimum", not cut, detail)


def terminal_gate(runs: Sequence) -> Gate:
    """Passed when every terminal-phase run fits its training images to at least
    :data:`TERMINAL_ACCURACY`."""
    acc = [r.train_acc for r in runs]
    short = [a for a in acc if a < TERMINAL_ACCURACY]
    detail = (f"training accuracy of the {len(runs)} terminal-phase runs "
              f"{min(acc):.3f}-{max(acc):.3f} (at least {TERMINAL_ACCURACY:g} to pass)")
    if short:
        detail += "; more epochs or fewer images would reach the terminal phase"
    return Gate("terminal phase reached", not short, detail)


# ------------------------------------------------------------------------------- helpers
def trend_of(per_scale: Mapping[str, Sequence[TestResult]], index: int) -> dict[str, list]:
    """``{scale: [estimate, low, high]}`` of test ``index`` at each scale."""
    return {label: [round(r[index].estimate, 6), round(r[index].interval[0], 6),
                    round(r[index].interval[1], 6)] for label, r in per_scale.items()}


def _points(t: TestResult, scale: float = 100.0, spec: str = "+.2f") -> str:
    low, high = t.interval
    return (f"{scale * t.estimate:{spec}} [{scale * low:{spec}}, {scale * high:{spec}}]")


def _power_text(rule, tests: Sequence[TestResult], labels: Sequence[str]) -> str:
    """A sentence on each undecided test whose seeds fall short of what its spread asks for 80%
    power between the margin and the SESOI (a test that decided needs no more), with the seeds
    it ran."""
    parts = []
    for t, label in zip(tests, labels):
        need = t.seeds_needed
        if t.word == "inconclusive" and (need is None or need > t.n_seeds):
            parts.append(f"{label} would need {need} seeds at this spread ({t.n_seeds} ran)"
                         if need is not None else f"{label} would not reach 80% power with "
                         f"any count of seeds up to 100,000 at this spread ({t.n_seeds} ran)")
    if not parts:
        return ""
    return (f" Power: {'; '.join(parts)}; the rule registers {rule.n_seeds} seeds, and its "
            f"power analysis says why not more.")


def _gate_text(gates: Sequence[Gate]) -> str:
    return " ".join(f"Gate ({g.name}): {g.detail}{'' if g.passed else ' (not met)'}."
                    for g in gates)


def _model(study) -> str:
    st = study.settings
    if st.recipe == "deit":
        return (f"ViT with a CLS token (d={st.dim}, {st.depth} blocks, {st.heads} heads) under "
                "a DeiT-style recipe")
    return f"ViT (d={st.dim}, {st.depth} layers, {st.heads} heads)"


# ------------------------------------------------------------------------------- L6
def _beside_paper(interval: stats.Interval, error: float) -> str:
    """Where the paper's gaps (:data:`PAPER_L6_GAPS`) fall against ``interval`` (fractions),
    an end closer than :data:`AT_END` times ``error`` (the ends' Monte Carlo standard error,
    :func:`end_error`) plus the paper's rounding (:data:`PAPER_ROUNDING`) counting as at that
    end, neither inside nor outside. The paper's gaps were measured on other data sets; they
    are set beside, not tested."""
    parts = []
    for where, gap in PAPER_L6_GAPS.items():
        end, name = min((interval.low, "lower"), (interval.high, "upper"),
                        key=lambda e: abs(e[0] - gap))
        if abs(gap - end) <= AT_END * error + PAPER_ROUNDING:
            place = (f"{100 * abs(gap - end):.3f} points from our interval's {name} end "
                     f"({100 * end:+.3f}), within the paper's rounding ({100 * PAPER_ROUNDING:.2f} "
                     f"points) plus {AT_END:g} Monte Carlo standard errors of the end "
                     f"({AT_END:g} x {100 * error:.3f}): on which side it lies is undetermined")
        else:
            place = ("inside our interval" if interval.low <= gap <= interval.high
                     else "above our interval" if gap > interval.high else "below our interval")
        parts.append(f"{100 * gap:+.2f} ({where}) lies {place}")
    return ("The paper's gaps, measured on its data sets, not ours: " + "; ".join(parts)
            + ".")


def _sesoi_text(tests: Sequence[TestResult], labels: Sequence[str],
                specs: Sequence[str]) -> str:
    """Where each test's interval stands to its SESOI (points, ``specs`` the formats)."""
    parts = []
    for t, label, spec in zip(tests, labels, specs):
        sesoi = f"{100 * t.sesoi:{spec}}"
        parts.append(
            f"{label}'s interval lies beyond its SESOI ({sesoi}): the effect is at least the "
            "size that matters" if t.reaches_sesoi else
            f"{label}'s interval lies short of its SESOI ({sesoi}): an effect of that size is "
            "ruled out" if t.word == "not reproduced" else
            f"{label}'s interval clears the margin and holds its SESOI ({sesoi}): the effect "
            "is shown, that it is as large as the SESOI is not" if t.word == "reproduced" else
            f"{label}'s interval holds both the margin and its SESOI ({sesoi})")
    return "Against the SESOI: " + "; ".join(parts) + "."


def _count_steps_text(count_steps: Mapping[str, list]) -> str:
    """The gap's changes between consecutive image counts, and which intervals hold 0."""
    held = [k for k, (_, low, high) in count_steps.items() if low <= 0 <= high]
    return ("; between consecutive counts, likewise, " + "; ".join(
        f"{k} {100 * v[0]:+.2f} [{100 * v[1]:+.2f}, {100 * v[2]:+.2f}]"
        for k, v in count_steps.items())
        + ("; every one of these intervals holds 0: no change between counts is resolved by "
           "them, so the point estimates' path is not established"
           if len(held) == len(count_steps) else
           f"; the interval{'s' if len(held) > 1 else ''} of {' and '.join(held)} "
           f"hold{'' if len(held) > 1 else 's'} 0" if held else ""))


def _steps_text(steps: Mapping[str, stats.Interval], n_settings: int) -> str:
    """The steps between head settings with their intervals, and which hold 0."""
    held = [label for label, iv in steps.items() if iv.low <= 0 <= iv.high]
    return ("Step by step: " + "; ".join(
        f"{label} {100 * iv.estimate:+.2f} [{100 * iv.low:+.2f}, {100 * iv.high:+.2f}]"
        for label, iv in steps.items())
        + f" points (crossed bootstrap, {STEP_RESAMPLES:,} resamples); "
        + ("every step's interval lies above 0" if not held else
           f"the interval of {held[0]} holds 0, so that step is not resolved" if len(held) == 1
           else f"the intervals of {', '.join(held[:-1])} and {held[-1]} hold 0, so those "
           "steps are not resolved")
        + f" (the rule tests the slope over all {n_settings} settings, not each step).")


def _count_steps(per_count: Sequence[np.ndarray], labels: Sequence[str]) -> dict[str, list]:
    """``{"<a> to <b>": [estimate, low, high]}``: the gap's change between consecutive image
    counts (Welch, as if the counts' runs were independent; they share seeds and the pool)."""
    return {f"{a} to {b}": [round(v, 6) for v in scale_change(x, y)]
            for (a, x), (b, y) in zip(zip(labels, per_count), zip(labels[1:], per_count[1:]))}


#: Why no count of seeds reaches 80% power (:func:`crossed_power`'s ``out_of_reach``).
_OUT_OF_REACH = {"pool": "the pool's part alone is too wide",
                 "seeds": f"more than {stats.MAX_SEEDS:,} would be needed"}


def _power_of_width(tests: Sequence[TestResult], powers: Sequence[dict | None],
                    units: Sequence[str]) -> str:
    """What the deciding intervals' own widths give in power (``powers``, as
    :func:`crossed_powers` gives them)."""
    if any(p is None for p in powers):
        return ""
    if all(p["seeds_needed"] is None for p in powers):
        reasons = {p["out_of_reach"] for p in powers}
        take = ("no count of seeds would reach 80% for either, as "
                + " or ".join(_OUT_OF_REACH[r] for r in sorted(reasons)))
    else:
        take = "80% would take " + " and ".join(
            f"{p['seeds_needed']} seeds" if p["seeds_needed"] is not None
            else f"no count of seeds, as {_OUT_OF_REACH[p['out_of_reach']]}" for p in powers)
    return (f"By the deciding intervals' own width (normal approximation; the pool's part held "
            f"fixed as seeds grow; the crossed bootstrap tends to run wide, so these figures err "
            f"on the side of too many seeds), {tests[0].n_seeds} seeds detect "
            + " and ".join(f"{100 * p['detectable']:.{digits}f} {unit}"
                           for p, unit, digits in zip(powers, units, (2, 3)))
            + " with 80% power; at the SESOI their power is "
            + " and ".join(f"{100 * p['power']:.0f}%" for p in powers)
            + f"; {take}.")


def decide_l6(study) -> Verdict:
    """L6: evaluation accuracy, all heads Laplacian - none > 0 and the per-seed slope over the
    number of Laplacian heads > 0, each by a crossed bootstrap over seeds and pool images
    (:func:`l6_samples`), at each image count; decided at the largest, whose runs must all be
    read at their validation optimum. The power fields come from the intervals' own width
    (:func:`with_crossed_power`); the steps between head settings, the gap's change between
    image counts and the split of its standard error are set beside."""
    rule = rule_of("L6")
    st = study.settings
    samples = {label: l6_samples(study, n) for n, label in zip(st.n_train, st.scales)}
    items = {label: (item_gaps(study, n), item_slopes(study, n))
             for n, label in zip(st.n_train, st.scales)}
    evaluated = {label: rule.evaluate(x) for label, x in samples.items()}
    powers = {label: crossed_powers(evaluated[label], samples[label], items[label])
              for label in samples}
    per_scale = {label: with_crossed_power(evaluated[label], powers[label])
                 for label in samples}
    tests = per_scale[st.scales[-1]]
    deciding = samples[st.scales[-1]][0][0]
    runs = [r for s in st.head_settings for r in study.by(s)]
    gate = optimum_gate(runs, f"runs at {st.n_train[-1]} images")
    word = rule.word(tests, [gate])
    binding = rule.binding(tests)
    acc = {n: {s: float(study.values("eval_acc", s, n_train=n).mean()) for s in study.counts()}
           for n in st.n_train}
    counts = study.counts()
    gap, slope = gaps(study), slopes(study)
    gap_by_scale = [gaps(study, n) for n in st.n_train]
    spread = float(np.std(gap, ddof=1)) if gap.size > 1 else 0.0
    # set beside, not deciding: fewer resamples than the tests' 9,999 keep the chapter short
    steps = {label: bootstrap_crossed(x, n_resamples=STEP_RESAMPLES)
             for label, x in item_steps(study).items()}
    count_steps = _count_steps(gap_by_scale, st.scales)
    mean_se = mean_standard_errors(items[st.scales[-1]][0], deciding)
    error = end_error(deciding, TEST_RESAMPLES)
    evidence = (
        f"{_model(study)} on {study.source}, {tests[0].n_seeds} seeds per head setting"
        + (f" at {st.n_train[-1]} images and {len(st.seeds)} at the smaller counts"
           if st.extra_seeds and len(st.n_train) > 1 else "")
        + f", each run read at its validation optimum and scored on the {runs[0].n_eval:,}-image "
        f"evaluation pool. Accuracy by Laplacian heads per layer at {st.n_train[-1]} images: "
        + ", ".join(f"{counts[s]}: {100 * a:.2f}%" for s, a in acc[st.n_train[-1]].items())
        + ". All - none: " + "; ".join(f"{_points(r[0])} points at {label}"
                                       for label, r in per_scale.items())
        + f" ({scale_text(gap_by_scale, st.scales)}, over seeds only: the pool's images are "
        f"the same at every image count"
        + (_count_steps_text(count_steps) if len(count_steps) > 1 else "")
        + f"). Slope at {st.n_train[-1]} images: {_points(tests[1], spec='+.3f')} points per "
        f"Laplacian head. " + _sesoi_text(tests, ("the gap", "the slope"), ("+.2f", "+.3f"))
        + " " + _steps_text(steps, len(counts))
        + f" Standard error of the {gap.size}-seed mean gap: {100 * mean_se['seeds']:.2f} "
        f"points from the seeds' spread ({100 * spread:.2f} points per seed) and "
        f"{100 * mean_se['pool']:.2f} from sampling the pool's images (the part more seeds "
        f"would not remove); {crossed_width_text(mean_se)}. "
        + _power_of_width(tests, powers[st.scales[-1]], ("points", "points per head"))
        + _power_text(rule, tests, ("all - none", "the slope")) + " " + _gate_text([gate])
        + f" Paper: {PAPER['L6']}. " + _beside_paper(deciding, error))
    return Verdict(
        "L6", word, evidence,
        our_value=f"all - none {100 * tests[0].estimate:+.2f} points, slope "
                  f"{100 * tests[1].estimate:+.3f} points per head ({st.n_train[-1]} images)",
        numbers={"accuracy": {str(n): a for n, a in acc.items()},
                 "slope_trend": trend_of(per_scale, 1), "gap_trend": trend_of(per_scale, 0),
                 "mean_se": mean_se, "end_error": error,
                 "head_steps": {k: [round(v.estimate, 6), round(v.low, 6), round(v.high, 6)]
                                for k, v in steps.items()},
                 "count_steps": count_steps},
        rule=rule.text, n_seeds=tests[binding].n_seeds, interval=tuple(tests[binding].interval),
        scale=f"{st.n_train[-1]} training images, d={st.dim}",
        trend=trend_of(per_scale, binding), tolerance=L6_TOLERANCE, tests=tuple(tests),
        gates=(gate,),
        per_seed={rule.tests[0].statistic: gap.tolist(), rule.tests[1].statistic: slope.tolist(),
                  **packed_items(study),
                  **{f"{t.statistic}, at {label}": values.tolist()
                     for n, label in zip(st.n_train[:-1], st.scales[:-1])
                     for t, values in zip(rule.tests, (gaps(study, n), slopes(study, n)))},
                  **{k: v for n, label in zip(st.n_train[:-1], st.scales[:-1])
                     for k, v in packed_items(study, n, label).items()}})


# ------------------------------------------------------------------------------- L7
#: Where the token variances are read: label -> the :class:`ViTRun` attribute of the split.
def _locations(study) -> dict[str, str]:
    depth = study.settings.depth
    out = {f"block {l + 1} (stream)": f"stream.{l}" for l in range(depth)}
    out["final LayerNorm"] = "final"
    return out


#: The parts of an ANOVA split shown per location.
VARIANCE_PARTS = ("total", "within_sequence", "within_class", "between_class")


def variance_changes(study, n_train: int | None = None) -> dict[str, dict[str, list]]:
    """Per location (every block's residual stream, then the tokens after the final LayerNorm)
    and ANOVA part, ``[estimate, low, high]`` of the relative change all / none - 1 (95% t
    interval over seeds; a point for one seed), and of each part's share change (all - none)
    under ``"<part> share"``."""
    out: dict[str, dict[str, list]] = {}
    for label, attr in _locations(study).items():
        row: dict[str, list] = {}
        for part in VARIANCE_PARTS:
            row[part] = _interval(relative_change(study, f"{attr}.{part}", n_train=n_train))
        for part in VARIANCE_PARTS[1:]:
            share = {s: study.values(f"{attr}.{part}", s, n_train=n_train)
                     / study.values(f"{attr}.total", s, n_train=n_train) for s in (_ALL, _BASE)}
            row[f"{part} share"] = _interval(share[_ALL] - share[_BASE])
        out[label] = row
    return out


def _interval(values: np.ndarray) -> list[float]:
    """[estimate, low, high] of the t interval of per-seed ``values`` (a point for one)."""
    if values.size < 2:
        return [float(values.mean())] * 3
    iv = stats.one_sample_t(values)
    return [iv.estimate, iv.low, iv.high]


def _l7_samples(study, n_train: int | None = None) -> list[np.ndarray]:
    return [relative_change(study, "final.within_sequence", n_train=n_train),
            relative_change(study, "final.between_class", n_train=n_train),
            relative_change(study, "nc1_train", part="terminal")]


def decide_l7(study) -> Verdict:
    """L7: with all heads Laplacian vs none, the absolute within-sequence variance of the tokens
    after the final LayerNorm falls, their between-class variance rises (largest image count,
    read at the validation optimum), and NC1 on the training images of the terminal-phase runs
    falls: three relative changes (all / none - 1), 95% paired t each."""
    rule = rule_of("L7")
    st = study.settings
    per_scale = {label: rule.evaluate(_l7_samples(study, n))
                 for n, label in zip(st.n_train, st.scales)}
    tests = per_scale[st.scales[-1]]
    deciding = [r for s in (_BASE, _ALL) for r in study.by(s)]
    terminal = [r for s in (_BASE, _ALL) for r in study.by(s, part="terminal")]
    gates = (optimum_gate(deciding, f"runs at {st.n_train[-1]} images"),
             terminal_gate(terminal))
    word = rule.word(tests, gates)
    binding = rule.binding(tests)
    if binding == 2:
        trend = {f"terminal, {st.terminal.n_train} images": trend_of(per_scale, 2)[st.scales[-1]]}
    else:
        trend = trend_of(per_scale, binding)
    changes = variance_changes(study)
    final = changes["final LayerNorm"]
    last_stream = changes[f"block {st.depth} (stream)"]
    absolute = {s: {p: float(study.values(f"final.{p}", s).mean())
                    for p in ("within_sequence", "between_class")} for s in (_BASE, _ALL)}
    nc1 = {s: float(study.values("nc1_train", s, part="terminal").mean()) for s in (_BASE, _ALL)}
    etf = {s: float(study.values("etf_gap_train", s, part="terminal").mean())
           for s in (_BASE, _ALL)}
    pool_nc1 = _interval(relative_change(study, "nc1"))
    labels = ("within-sequence variance", "between-class variance", "NC1 (terminal phase)")
    text = "; ".join(f"{label} {_points(t, spec='+.1f')}% ({t.word})"
                     for label, t in zip(labels, tests))
    evidence = (
        f"{_model(study)} on {study.source}, {tests[0].n_seeds} seeds, tokens of the "
        f"{terminal[0].n_eval:,}-image evaluation pool after the final LayerNorm at "
        f"{st.n_train[-1]} training images (runs read at their validation optimum); NC1 on the "
        f"{st.terminal.n_train} training images of runs fitted for {st.terminal.epochs} epochs"
        + (" (without crops, flips, label smoothing, mixing or stochastic depth)"
           if st.recipe == "deit" else "") + ". "
        f"Relative change, all heads Laplacian / none - 1: {text}. Absolute variances (none -> "
        f"all): within-sequence {absolute[_BASE]['within_sequence']:.3g} -> "
        f"{absolute[_ALL]['within_sequence']:.3g}, between-class "
        f"{absolute[_BASE]['between_class']:.3g} -> {absolute[_ALL]['between_class']:.3g}; "
        f"as shares of the total, within-sequence "
        f"{100 * final['within_sequence share'][0]:+.1f} and between-class "
        f"{100 * final['between_class share'][0]:+.1f} points. Before the final LayerNorm "
        f"(block {st.depth}'s stream): within-sequence "
        f"{100 * last_stream['within_sequence'][0]:+.1f}%, between-class "
        f"{100 * last_stream['between_class'][0]:+.1f}%. Terminal phase: NC1 "
        f"{nc1[_BASE]:.3g} (none) and {nc1[_ALL]:.3g} (all), ETF gap {etf[_BASE]:.3g} and "
        f"{etf[_ALL]:.3g}; NC1 of the pool at {st.n_train[-1]} images "
        f"{100 * pool_nc1[0]:+.1f}%."
        + _power_text(rule, tests, labels) + " " + _gate_text(gates)
        + f" Paper: {PAPER['L7']}.")
    samples = _l7_samples(study)
    return Verdict(
        "L7", word, evidence,
        our_value=", ".join(f"{label} {100 * t.estimate:+.1f}%"
                            for label, t in zip(("within-seq", "between-class", "NC1"), tests)),
        numbers={"changes": changes, "absolute": absolute, "nc1_terminal": nc1,
                 "etf_gap_terminal": etf, "pool_nc1_change": pool_nc1,
                 "trends": [trend_of(per_scale, i) for i in range(2)]},
        rule=rule.text, n_seeds=tests[binding].n_seeds, interval=tuple(tests[binding].interval),
        scale=f"{st.n_train[-1]} training images, d={st.dim}; terminal phase on "
              f"{st.terminal.n_train} images",
        trend=trend, tolerance=L7_TOLERANCE, tests=tuple(tests), gates=gates,
        per_seed={t.statistic: v.tolist() for t, v in zip(rule.tests, samples)})


# ------------------------------------------------------------------------------- L8
def _widths(study) -> dict[str, dict]:
    """Width label -> the :meth:`ViTStudy.by` selection of its runs (narrow first: the
    sweep's runs at the wide runs' image count, then each wide width)."""
    st = study.settings
    out = {f"d={st.dim}": {"part": "sweep", "n_train": st.wide.n_train}}
    out.update({f"d={d}": {"part": "wide", "dim": d} for d in st.wide.dims})
    return out


def _sweep_fresh_for_l8(settings) -> bool:
    """Whether the sweep's runs (the narrow point) are new to L8's confirmatory run: their seeds
    belong to a confirmatory run no earlier than the wide runs' (L8's first confirmatory run
    read the sweep of the first; exploratory seeds are never new)."""
    run = min(settings.seeds) // CONFIRMATORY_SEED_BASE
    return run >= 1 and run >= min(settings.wide.seeds) // CONFIRMATORY_SEED_BASE


#: The paper's k99 change (547.7 -> 430.4), set beside the decided interval.
L8_PAPER_CHANGE = 430.4 / 547.7 - 1


def _l8_size(t: TestResult) -> str:
    """How the decided interval stands to the SESOI and to the paper's change."""
    low, high = (100 * v for v in t.interval)
    paper = 100 * L8_PAPER_CHANGE
    if t.word == "reproduced":
        text = (" The interval lies below 0 and beyond the SESOI: the drop is at least the "
                "size that matters." if t.reaches_sesoi else
                f" The interval lies below 0 but holds the SESOI ({100 * t.sesoi:+.1f}%): a "
                "drop is shown, "
                + ("and the estimate lies short of the SESOI; a drop as large as the SESOI is "
                   "not ruled out." if abs(t.estimate) < abs(t.sesoi) else
                   "and the estimate lies at or beyond the SESOI; a drop smaller than the SESOI "
                   "is not ruled out."))
    else:
        text = ""
    if paper < low:
        text += (f" The paper's {paper:+.0f}% lies beyond the interval: the drop here is "
                 "smaller than the paper's.")
    elif paper > high:
        text += f" The paper's {paper:+.0f}% lies short of the interval."
    return text


def _l8_reading(per_seed: dict[str, np.ndarray], pr: dict, words: dict[str, str],
                fresh: dict[str, bool]) -> str:
    """What the widths say beside the word: the rule's word at each width, the path of the
    k99 change's point estimates with width, its change from the narrowest to the widest (Welch,
    independent runs), the step between the two widest when they share seeds (paired t), and
    whether the participation ratio moves the same way at the widest."""
    labels = list(per_seed)
    estimates = [float(v.mean()) for v in per_seed.values()]
    est, low, high = (100 * v for v in scale_change(per_seed[labels[0]], per_seed[labels[-1]]))
    text = (" The rule's test at each width: " + "; ".join(
        f"{w} {words[w]}" + ("" if fresh[w] else " (the sweep's runs, seen before this run)")
        for w in labels) + ".")
    text += (f" The k99 change's point estimates {scale_path(estimates)} over the widths ("
             + ", ".join(f"{100 * e:+.1f}%" for e in estimates) + f"); from {labels[0]} to "
             f"{labels[-1]} the change moves {est:+.1f} [{low:+.1f}, {high:+.1f}] points "
             "(Welch, as if the widths' runs were independent)")
    a, b = per_seed[labels[-2]], per_seed[labels[-1]]
    if len(labels) > 2 and a.size == b.size and a.size > 1 and fresh[labels[-2]]:
        iv = stats.paired_t(b, a)
        text += (f", and from {labels[-2]} to {labels[-1]} {100 * iv.estimate:+.1f} "
                 f"[{100 * iv.low:+.1f}, {100 * iv.high:+.1f}] points (paired by seed)")
    text += "."
    k99_sign, pr_sign = np.sign(estimates[-1]), np.sign(pr[labels[-1]][0])
    if k99_sign and pr_sign and k99_sign != pr_sign:
        text += (f" At {labels[-1]} the participation ratio moves the other way "
                 f"({_pct(pr[labels[-1]])}): fewer components hold 99% of the variance while "
                 "the bulk of the spectrum flattens; the tail is cut, the decay is not faster "
                 "throughout.")
    return text


def _pct(v: Sequence[float]) -> str:
    """``[estimate, low, high]`` of a relative change as ``+1.0 [-2.0, +4.0]%``."""
    return f"{100 * v[0]:+.1f} [{100 * v[1]:+.1f}, {100 * v[2]:+.1f}]%"


def decide_l8(study) -> Verdict:
    """L8: the relative change (all / none - 1) of k99 of the tokens after the final LayerNorm,
    < 0 (paired t), at each width on ``wide.n_train`` images; decided at the widest. The
    participation ratio and the stream before the LayerNorm are shown beside."""
    rule = rule_of("L8")
    st = study.settings
    widths = _widths(study)
    per_scale = {label: rule.evaluate([relative_change(study, "k99", **where)])
                 for label, where in widths.items()}
    label = list(widths)[-1]
    tests = per_scale[label]
    deciding = [r for s in (_BASE, _ALL) for r in study.by(s, part="wide")]
    gate = optimum_gate(deciding, f"runs at width {st.wide.dim}")
    seeds = {w: r[0].n_seeds for w, r in per_scale.items()}
    word = rule.word(tests, [gate])
    k99 = {w: {s: float(study.values("k99", s, **where).mean()) for s in (_BASE, _ALL)}
           for w, where in widths.items()}
    pr = {w: _interval(relative_change(study, "pr", **where)) for w, where in widths.items()}
    stream = {w: _interval(relative_change(study, "k99_stream", **where))
              for w, where in widths.items()}
    t = tests[0]
    values = {w: relative_change(study, "k99", **where) for w, where in widths.items()}
    evidence = (
        f"{_model(study)} and its twins of width "
        + ", ".join(str(d) for d in st.wide.dims) + f" on {study.source}, "
        f"{st.wide.n_train} training images, runs read at their validation optimum; k99 of the "
        f"evaluation pool's tokens after the final LayerNorm; k99 as the mean over seeds, its "
        f"change as the mean of the per-seed changes. "
        + "; ".join(f"{w} ({seeds[w]} seeds): k99 {k99[w][_BASE]:.1f} (none) -> "
                    f"{k99[w][_ALL]:.1f} (all), relative change {_points(r[0], spec='+.1f')}%"
                    for w, r in per_scale.items())
        + f". At {label} one component is {100 / max(k99[label][_BASE], 1):.1f}% of k99. "
        "Beside: the participation ratio "
        + ", ".join(f"{_pct(v)} ({w})" for w, v in pr.items())
        + "; k99 of the stream before the LayerNorm "
        + ", ".join(f"{_pct(v)} ({w})" for w, v in stream.items()) + "."
        + _l8_size(t)
        + _l8_reading(values, pr,
                      {w: r[0].word for w, r in per_scale.items()},
                      {w: where.get("part") == "wide" or _sweep_fresh_for_l8(st)
                       for w, where in widths.items()})
        + " Every seed trains on the same images and is scored on the same pool: the "
        "intervals cover initialisation and batch order, not the choice of training images."
        + _power_text(rule, tests, ("the k99 change",)) + " " + _gate_text([gate])
        + f" Paper: {PAPER['L8']}.")
    statistic = rule.tests[0].statistic
    return Verdict(
        "L8", word, evidence,
        our_value=f"k99 {k99[label][_BASE]:.1f} -> {k99[label][_ALL]:.1f} "
                  f"({100 * t.estimate:+.1f}%) at {label}",
        numbers={"k99": k99, "pr_change": pr, "stream_k99_change": stream},
        rule=rule.text, n_seeds=t.n_seeds, interval=tuple(t.interval),
        scale=f"{label}, {st.wide.n_train} training images", trend=trend_of(per_scale, 0),
        tolerance=L8_TOLERANCE, tests=tuple(tests), gates=(gate,),
        # the deciding width's values under the test's statistic, the narrower ones beside
        per_seed={statistic: values[label].tolist(),
                  **{f"{statistic}, at {w}": v.tolist() for w, v in values.items()
                     if w != label}})
