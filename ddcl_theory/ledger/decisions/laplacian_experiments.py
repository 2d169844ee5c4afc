"""Decisions of the chapter ``laplacian_experiments``: claims L6-L9 (Zhang & Papyan 2026;
L10 is decided in :mod:`ddcl_theory.ledger.decisions.dense_features`).

Each word comes from the registry's rule (:func:`ddcl_theory.ledger.claims.rule_of`): one 95%
interval per test of the rule, computed by the method the test names
(:mod:`ddcl_theory.ledger.stats`) on seeds paired across head settings, at the largest scale that
ran (the last checkpoint of the runs); then the gate of the evidence standard: a deciding run
that did not reach its validation-loss plateau (:func:`ddcl_theory.metrics.convergence`) makes
the word ``inconclusive``. Fewer seeds than the rule asks make it at best ``inconclusive``
(:meth:`Rule.decide`).

The functions read the studies of :mod:`ddcl_theory.experiments.laplacian_study` (or any object
with the same fields): a ViT study (``settings.vit``, ``settings.scales``, ``runs`` with
``setting``, ``seed``, ``plateau``, ``points[i].<field>``; ``by(setting)``, ``counts()``,
``source``) and a GPT study (``settings`` with ``scales``, ``checkpoints``, ``l9_setting``,
``steps``, ``dim``, ``heads``; ``runs`` with ``points`` (before training, then one per round),
``plateau``; ``by(setting)``, ``source``). Every verdict carries the rule's text, the number of
paired seeds, the interval of its headline test, the scale and the trend of that test over the
checkpoints; ``numbers`` hold every test's interval and trend.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ddcl_theory.metrics.matched import at_matched_loss
from ddcl_theory.ledger import stats
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict

__all__ = ["TRAINING", "PAPER", "slopes", "pr_ratios", "matched_cdnv_pairs", "seeds_needed",
           "direction", "decide_l6", "decide_l7", "decide_l8", "decide_l9"]

#: How far the numbers quoted by L6-L9 may move between machines.
TRAINING = Tolerance(abs=0.02, rel=0.6, reason="3x the largest standard error of a 3-seed mean "
                     "relative to it in the cpu run (NC1 of the ViT's test tokens, 0.58); ATen's "
                     "portable kernels moved these numbers by less than 1e-5 relative")

PAPER = {
    "L6": "ViT: ImageNet 82.32% vs 81.45% (+0.87), CIFAR-100 77.04% vs 75.12% (+1.92), all "
          "heads Laplacian vs none",
    "L7": "lower within-sequence and higher between-class variance, stronger Neural Collapse",
    "L8": "k99 547.7 -> 430.4 (-21%) with all heads Laplacian",
    "L9": "better downstream average with 5 Laplacian heads; lower CDNV of same-next-token "
          "representations",
}


def seeds_needed(values: Sequence[float], most: int = 1000) -> int | None:
    """The smallest number of paired seeds at which the observed mean of ``values`` (per-seed
    differences, or per-seed values of a one-sample test) would be detected at 5% with 80%
    power given their observed spread (:func:`stats.detectable_effect`); None when the mean is 0
    or more than ``most`` seeds would be needed."""
    arr = np.asarray(values, dtype=float)
    effect, spread = abs(float(arr.mean())), float(arr.std(ddof=1))
    if effect == 0:
        return None
    for n in range(2, most + 1):
        if stats.detectable_effect(spread, n) <= effect:
            return n
    return None


def direction(trend: dict) -> str:
    """How the estimate of a ``{scale: [estimate, low, high]}`` trend moves from the first to the
    last scale: ``"away from 0"`` (the gap opens) or ``"toward 0"`` (it closes), with the
    first and last estimates."""
    first, last = (float(v[0]) for v in (next(iter(trend.values())), list(trend.values())[-1]))
    word = "away from 0" if abs(last) > abs(first) else "toward 0"
    return f"{first:+.3g} -> {last:+.3g} ({word})"


def _outlook(rule, n: int, items: Sequence[tuple[str, dict, np.ndarray]]) -> str:
    """At the rule's seed count, a sentence on each test: the direction of its trend over the
    checkpoints and the paired seeds that would detect the effect seen at the end
    (:func:`seeds_needed`). Empty below the rule's seed count (the cpu profile's regression
    values, where both move with a seed)."""
    if n < rule.n_seeds:
        return ""
    parts = []
    for label, trend, values in items:
        need = seeds_needed(values)
        parts.append(f"{label} {direction(trend)}, detected with {need or 'more than 1000'} "
                     "seeds")
    return " Over the checkpoints: " + "; ".join(parts) + "."


def _paired(study, field: str, at: int, lap: str = "all", base: str = "0") -> stats.Interval:
    return stats.paired_t(_vals(study, lap, field, at), _vals(study, base, field, at))


def _vals(study, setting: str, field: str, at: int) -> np.ndarray:
    return np.array([getattr(r.points[at], field) for r in study.by(setting)], dtype=float)


def _triple(iv: stats.Interval) -> list[float]:
    return [round(iv.estimate, 6), round(iv.low, 6), round(iv.high, 6)]


def _trend(scales: Sequence[str], interval_at: Callable[[int], stats.Interval]) -> dict:
    """``{scale: [estimate, low, high]}`` of one test at every checkpoint."""
    return {label: _triple(interval_at(i)) for i, label in enumerate(scales)}


def _fmt(iv: stats.Interval, digits: int = 3, scale: float = 1.0) -> str:
    return (f"{scale * iv.estimate:+.{digits}f} [{scale * iv.low:+.{digits}f}, "
            f"{scale * iv.high:+.{digits}f}]")


def _gate(word: str, runs: Sequence) -> tuple[str, list[str]]:
    """The word after the convergence gate, and the runs that did not plateau."""
    unfinished = [f"{r.setting}/{r.seed}" for r in runs if not r.plateau]
    return ("inconclusive" if unfinished else word), unfinished


def _plateau_text(unfinished: list[str], n_runs: int, curve: str) -> str:
    if unfinished:
        return (f"{len(unfinished)} of {n_runs} deciding runs had not reached the plateau of "
                f"their {curve} (so inconclusive)")
    return f"All {n_runs} deciding runs reached the plateau of their {curve}"


def _past_optimum(runs: Sequence) -> str:
    """How many runs had their least validation loss before their last epoch (and at which
    epochs): at the end of a cosine schedule a curve is flat whether or not the run has passed
    its optimum, so the plateau alone does not say the verdict is read at the best point."""
    best = [int(np.argmin(r.curve)) + 1 for r in runs]
    past = [b for b, r in zip(best, runs) if b < len(r.curve)]
    if not past:
        return "Every run's validation loss was lowest at its last epoch"
    return (f"{len(past)} of {len(runs)} runs had their least validation loss before the last "
            f"epoch (at epochs {min(past)}-{max(past)}): the verdict is read past their "
            f"validation optimum; the trend gives the earlier checkpoints")


def _vit_runs(study, settings: Sequence[str]) -> list:
    return [r for s in settings for r in study.by(s)]


def _vit_scale(study) -> str:
    st = study.settings.vit
    return f"{study.settings.checkpoints[-1]} epochs on {st.n_train} images, d={st.dim}"


def slopes(study, at: int = -1) -> np.ndarray:
    """Per seed, the least-squares slope of test accuracy against the number of Laplacian
    heads per layer over the head settings of the study (accuracy per head), shape (seeds,)."""
    counts = study.counts()
    settings = list(counts)
    acc = np.stack([_vals(study, s, "test_acc", at) for s in settings])      # (settings, seeds)
    x = np.array([counts[s] for s in settings], dtype=float)
    return np.polyfit(x, acc, 1)[0]


def decide_l6(study) -> Verdict:
    """L6: test accuracy rises with the number of Laplacian heads: all - none > 0 (paired t) and
    the per-seed slope over the head counts > 0 (one-sample t)."""
    rule = rule_of("L6")
    last = len(study.settings.checkpoints) - 1
    gain, slope = _paired(study, "test_acc", last), stats.one_sample_t(slopes(study, last))
    word, unfinished = _gate(rule.decide([gain, slope]), study.runs)
    scales = study.settings.scales
    trend = _trend(scales, lambda i: _paired(study, "test_acc", i))
    slope_trend = _trend(scales, lambda i: stats.one_sample_t(slopes(study, i)))
    acc = {s: float(_vals(study, s, "test_acc", last).mean()) for s in study.counts()}
    diff = _vals(study, "all", "test_acc", last) - _vals(study, "0", "test_acc", last)
    st = study.settings.vit
    evidence = (
        f"ViT (d={st.dim}, {st.depth} layers, {st.heads} heads) on {study.source}, {gain.n} "
        f"paired seeds, {_vit_scale(study)}. Test accuracy by Laplacian heads "
        f"per layer: " + ", ".join(f"{s}: {a:.3f}" for s, a in acc.items())
        + f". All - none: {_fmt(gain, scale=100, digits=2)} points (95% paired t; smallest "
        f"detectable {100 * stats.detectable_effect_of(diff):.2f}); slope per Laplacian head: "
        f"{_fmt(slope, scale=100, digits=2)} points (95% one-sample t; smallest detectable "
        f"{100 * stats.detectable_effect_of(slopes(study, last)):.2f}). "
        f"{_plateau_text(unfinished, len(study.runs), 'validation loss')}. "
        + _past_optimum(study.runs) + "."
        + _outlook(rule, gain.n, [("all - none", trend, diff),
                                  ("slope", slope_trend, slopes(study, last))])
        + f" Paper: {PAPER['L6']}.")
    return Verdict("L6", word, evidence,
                   our_value=f"all - none {100 * gain.estimate:+.2f} points, slope "
                             f"{100 * slope.estimate:+.2f} points per head",
                   numbers={"test_acc": acc, "gain": _triple(gain), "slope": _triple(slope),
                            "slope_trend": slope_trend, "unfinished": len(unfinished)},
                   rule=rule.text, n_seeds=gain.n, interval=(gain.low, gain.high),
                   scale=_vit_scale(study), trend=trend, tolerance=TRAINING)


#: L7's three tests: (ViTPoint field, label) in the registry's order.
L7_FIELDS = (("within_seq", "within-sequence share"), ("between_class", "between-class share"),
             ("nc1", "NC1"))


def decide_l7(study) -> Verdict:
    """L7: with all heads Laplacian vs none, a lower within-sequence share, a higher
    between-class share and a lower NC1 (three paired t intervals). The reported interval and
    trend are those of the test that decides the word (:meth:`Rule.binding`); all three are in
    ``numbers``."""
    rule = rule_of("L7")
    last = len(study.settings.checkpoints) - 1
    intervals = [_paired(study, f, last) for f, _ in L7_FIELDS]
    runs = _vit_runs(study, ("0", "all"))
    word, unfinished = _gate(rule.decide(intervals), runs)
    binding = rule.binding(intervals)
    scales = study.settings.scales
    trends = {f: _trend(scales, lambda i, f=f: _paired(study, f, i)) for f, _ in L7_FIELDS}
    train_acc = float(np.mean([r.points[last].train_acc for r in runs]))
    nc1_train = {s: float(_vals(study, s, "nc1_train", last).mean()) for s in ("0", "all")}
    diffs = {f: _vals(study, "all", f, last) - _vals(study, "0", f, last) for f, _ in L7_FIELDS}
    parts = "; ".join(
        f"{label} {_fmt(iv, digits=3 if f != 'nc1' else 2)} (smallest detectable "
        f"{stats.detectable_effect_of(diffs[f]):.3g})"
        for (f, label), iv in zip(L7_FIELDS, intervals))
    evidence = (
        f"Last-layer token representations of the ViT on {study.source} test images, "
        f"{intervals[0].n} paired seeds, {_vit_scale(study)}; all heads Laplacian - none, 95% "
        f"paired t: {parts}. Toward the terminal phase: training accuracy "
        f"{train_acc:.3f} at the end, NC1 on training images {nc1_train['0']:.3g} (none) and "
        f"{nc1_train['all']:.3g} (all; 0 at collapse). "
        f"{_plateau_text(unfinished, len(runs), 'validation loss')}."
        + _outlook(rule, intervals[0].n,
                   [(label, trends[f], diffs[f]) for f, label in L7_FIELDS])
        + f" Paper: {PAPER['L7']}.")
    our = ", ".join(f"{label} {iv.estimate:+.3g}" for (_, label), iv in zip(L7_FIELDS,
                                                                             intervals))
    return Verdict("L7", word, evidence, our_value=f"all - none: {our}",
                   numbers={"intervals": {f: _triple(iv) for (f, _), iv in
                                          zip(L7_FIELDS, intervals)},
                            "trends": trends, "train_acc": train_acc, "nc1_train": nc1_train,
                            "unfinished": len(unfinished)},
                   rule=rule.text, n_seeds=intervals[0].n,
                   interval=(intervals[binding].low, intervals[binding].high),
                   scale=_vit_scale(study), trend=trends[L7_FIELDS[binding][0]],
                   tolerance=TRAINING)


def pr_ratios(study, at: int = -1, field: str = "pr") -> np.ndarray:
    """Per seed, the participation ratio with all heads Laplacian over that with none, (seeds,)."""
    return _vals(study, "all", field, at) / _vals(study, "0", field, at)


def _pr_change(study, at: int, field: str = "pr") -> stats.Interval:
    """Paired t interval of the relative change PR(all) / PR(none) - 1 (the pairs: each seed's
    ratio against 1)."""
    ratio = pr_ratios(study, at, field)
    return stats.paired_t(ratio, np.ones_like(ratio))


def decide_l8(study) -> Verdict:
    """L8: a faster spectral decay with all heads Laplacian: the relative change of the
    participation ratio of the ViT's last-layer tokens (all vs none) < 0 (paired t). k99's
    relative change (all / none - 1, paired t) is reported beside it, with the paper's -21%."""
    rule = rule_of("L8")
    last = len(study.settings.checkpoints) - 1
    change = _pr_change(study, last)
    runs = _vit_runs(study, ("0", "all"))
    word, unfinished = _gate(rule.decide([change]), runs)
    trend = _trend(study.settings.scales, lambda i: _pr_change(study, i))
    stream = _pr_change(study, last, "pr_stream")
    k = {s: float(_vals(study, s, "k99", last).mean()) for s in ("0", "all")}
    pr = {s: float(_vals(study, s, "pr", last).mean()) for s in ("0", "all")}
    dim = study.settings.vit.dim
    k_change = _pr_change(study, last, "k99")
    width = (f"k99 relative change {_fmt(k_change, scale=100, digits=1)}% (95% paired t, width "
             f"{dim}; one component is {100 / max(k['0'], 1):.0f}% of k99): "
             + ("it excludes the paper's -21%, so at this width and scale the tail of the "
                "spectrum does not decay faster" if k_change.low > -0.21 else
                "it does not exclude the paper's -21%"))
    evidence = (
        f"Participation ratio of the ViT's last-layer tokens on {study.source} test images, "
        f"{change.n} paired seeds, {_vit_scale(study)}: none {pr['0']:.3g}, all {pr['all']:.3g}; "
        f"relative change {_fmt(change, scale=100, digits=1)}% (95% paired t; smallest "
        f"detectable {100 * stats.detectable_effect_of(pr_ratios(study, last) - 1):.1f}%); on "
        f"the residual stream before the final LayerNorm {_fmt(stream, scale=100, digits=1)}%. "
        f"k99: none {k['0']:.3g}, all {k['all']:.3g}. {width}. "
        f"{_plateau_text(unfinished, len(runs), 'validation loss')}."
        + _outlook(rule, change.n, [("relative change", trend, pr_ratios(study, last) - 1)])
        + f" Paper: {PAPER['L8']}.")
    return Verdict("L8", word, evidence,
                   our_value=f"participation ratio {pr['0']:.3g} -> {pr['all']:.3g} "
                             f"({100 * change.estimate:+.1f}%); k99 {k['0']:.3g} -> "
                             f"{k['all']:.3g}",
                   numbers={"pr": pr, "k99": k, "change": _triple(change),
                            "k99_change": _triple(k_change),
                            "stream_change": _triple(stream), "unfinished": len(unfinished)},
                   rule=rule.text, n_seeds=change.n, interval=(change.low, change.high),
                   scale=_vit_scale(study), trend=trend, tolerance=TRAINING)


def matched_cdnv_pairs(study, upto: int | None = None) -> tuple[np.ndarray, np.ndarray,
                                                                np.ndarray]:
    """Per seed, ``(level, CDNV none, CDNV Laplacian)`` at the lowest validation loss both arms
    of the seed reach within their first ``upto`` evaluation points (all when None; the first
    point is before training), each shape (seeds,)."""
    setting = study.settings.l9_setting
    out = []
    for base, lap in zip(study.by("0"), study.by(setting)):
        if base.seed != lap.seed:
            raise ValueError(f"runs: seeds {base.seed} and {lap.seed} are not paired")
        pb, pl = base.points[:upto], lap.points[:upto]
        level, c_lap, c_base = at_matched_loss([p.val_loss for p in pl], [p.cdnv for p in pl],
                                               [p.val_loss for p in pb], [p.cdnv for p in pb])
        out.append((level, c_base, c_lap))
    arr = np.array(out, dtype=float)
    return arr[:, 0], arr[:, 1], arr[:, 2]


def decide_l9(study) -> Verdict:
    """L9: with ``l9_setting`` (5) Laplacian heads per layer vs none, a lower validation loss at
    the end (paired t) and a lower CDNV of next-character classes at a matched validation loss
    (paired t; :func:`matched_cdnv_pairs`). The headline interval and trend are the matched
    CDNV's."""
    rule = rule_of("L9")
    st = study.settings
    setting = st.l9_setting

    def final(s: str, upto: int | None = None) -> np.ndarray:
        """(seeds,) validation loss of setting ``s`` at its last point (within ``upto``)."""
        return np.array([r.points[:upto][-1].val_loss for r in study.by(s)])

    def matched(upto: int | None = None) -> stats.Interval:
        _, base, lap = matched_cdnv_pairs(study, upto)
        return stats.paired_t(lap, base)

    loss = stats.paired_t(final(setting), final("0"))
    level, c0, c1 = matched_cdnv_pairs(study)
    cdnv = stats.paired_t(c1, c0)
    runs = study.by("0") + study.by(setting)
    word, unfinished = _gate(rule.decide([loss, cdnv]), runs)
    upto = [c + 1 for c in st.checkpoints]          # evaluation points up to each checkpoint
    trend = {label: _triple(matched(u)) for label, u in zip(st.scales, upto)}
    loss_trend = {label: _triple(stats.paired_t(final(setting, u), final("0", u)))
                  for label, u in zip(st.scales, upto)}
    end = {s: float(final(s).mean()) for s in ("0", setting)}
    raw = {s: float(np.mean([r.points[-1].cdnv for r in study.by(s)])) for s in ("0", setting)}
    lap_heads = study.by(setting)[0].laplacian_heads
    evidence = (
        f"Character GPT (d={st.dim}, {st.heads} heads, {lap_heads} Laplacian per layer vs none) "
        f"on {study.source}, {loss.n} paired seeds, {st.steps} steps. Validation loss at the "
        f"end: none {end['0']:.3f}, Laplacian {end[setting]:.3f} nats/char; difference "
        f"{_fmt(loss)} (95% paired t; smallest detectable "
        f"{stats.detectable_effect_of(final(setting) - final('0')):.3f}). CDNV at the end "
        f"(unmatched): none {raw['0']:.3g}, Laplacian {raw[setting]:.3g}. CDNV at a matched "
        f"validation loss (the lowest both arms of a seed reach, mean {level.mean():.3f} "
        f"nats/char; interpolated along each run's curve): none {c0.mean():.3g}, Laplacian "
        f"{c1.mean():.3g}, difference {_fmt(cdnv)} (95% paired t; smallest detectable "
        f"{stats.detectable_effect_of(c1 - c0):.3g}). "
        f"{_plateau_text(unfinished, len(runs), 'validation loss')}."
        + _outlook(rule, loss.n, [("validation loss", loss_trend, final(setting) - final("0")),
                                  ("matched CDNV", trend, c1 - c0)])
        + f" Validation loss stands in for the paper's downstream average. Paper: "
        f"{PAPER['L9']}.")
    return Verdict("L9", word, evidence,
                   our_value=f"val loss {end['0']:.3f} -> {end[setting]:.3f}; matched CDNV "
                             f"{c0.mean():.3g} -> {c1.mean():.3g}",
                   numbers={"val_loss": end, "loss_interval": _triple(loss),
                            "cdnv_interval": _triple(cdnv), "level": float(level.mean()),
                            "loss_trend": loss_trend, "unfinished": len(unfinished)},
                   rule=rule.text, n_seeds=loss.n, interval=(cdnv.low, cdnv.high),
                   scale=f"{st.steps} steps, d={st.dim}", trend=trend, tolerance=TRAINING)

