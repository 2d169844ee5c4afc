"""Decision of the chapter ``laplacian_lm``: claim L9 (Zhang & Papyan 2026) on the
language-model study of :mod:`ddcl_theory.experiments.laplacian_lm`.

The word comes from the registered rule (:func:`ddcl_theory.ledger.claims.rule_of`, data in
:mod:`ddcl_theory.ledger.rules`): per test a 95% paired t interval over seeds, three ways
against the test's margin and smallest effect of interest, at the longest training length that
ran; the shorter lengths (runs of their own) give the trend. Fewer seeds than the rule registers
make the word at best ``inconclusive``, and so does a failed gate (a comparison still moving
at the end of the longest schedule: the mean paired validation-loss gap).

* test 1: the held-out loss at each seed's validation optimum, Laplacian - none;
* test 2: the relative change (Laplacian / none - 1) of the CDNV of the held-out tokens at the
  optimum;
* beside: the same CDNV change at a matched validation loss
  (:func:`ddcl_theory.metrics.matched.at_matched_loss`).

The functions read a study with the fields of
:class:`~ddcl_theory.experiments.laplacian_lm.LMStudy` (``settings`` with ``steps``,
``scales``, ``arms``; ``by``, ``source``, ``n_heldout_windows``) whose runs have ``seed``,
``best``, ``val_loss``, ``cdnv``, ``heldout``, ``heldout_windows`` and ``eval_steps``.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions.dense_features import trend_direction
from ddcl_theory.ledger.design import Gate, TestResult
from ddcl_theory.ledger.rules import L9_SETTLE
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict
from ddcl_theory.metrics.matched import at_matched_loss

__all__ = ["L9_TOLERANCE", "PAPER", "pairs", "loss_gaps", "cdnv_changes",
           "matched_cdnv_changes", "item_standard_errors", "gap_moves", "settled_gate",
           "samples",
           "decide_l9"]

#: How far the numbers quoted by L9 may move between machines: 3x the largest standard error of
#: a 3-seed mean in the cpu run, in the units printed (percent of a relative change); the seeds
#: needed scale with the squared spread of 3 seeds, hence ``rel``.
L9_TOLERANCE = Tolerance(abs=25.0, rel=3.0, count_abs=2, reason=(
    "3x the largest standard error of a 3-seed mean in the cpu run (relative change of the "
    "CDNV at 200 steps, 8.4%); seeds needed scale with the squared spread of 3 seeds"))

PAPER = ("GPT-2-style models of 561M parameters pre-trained on FineWeb-Edu: the best "
         "downstream average (30.06%) with 5 Laplacian heads; same-next-token representations "
         "more separable")


# ------------------------------------------------------------------------------- statistics
def pairs(study, steps: int | None = None) -> list[tuple]:
    """``(none, Laplacian)`` runs of each seed at a training length (default the longest)."""
    base_arm, lap_arm = study.settings.arms
    out = list(zip(study.by(base_arm, steps), study.by(lap_arm, steps)))
    for base, lap in out:
        if base.seed != lap.seed:
            raise ValueError(f"study: runs of seeds {base.seed} and {lap.seed} are not paired")
    return out


def loss_gaps(study, steps: int | None = None) -> np.ndarray:
    """Per seed, held-out loss at the validation optimum, Laplacian - none, (seeds,)."""
    return np.array([lap.heldout - base.heldout for base, lap in pairs(study, steps)])


def cdnv_changes(study, steps: int | None = None) -> np.ndarray:
    """Per seed, the CDNV of the held-out tokens at the optimum, Laplacian / none - 1."""
    return np.array([lap.cdnv[lap.best] / base.cdnv[base.best] - 1.0
                     for base, lap in pairs(study, steps)])


def matched_cdnv_changes(study, steps: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per seed, ``(level, change)``: the lowest validation loss both arms reach and the CDNV
    there, Laplacian / none - 1, each read along the run's curve (both (seeds,))."""
    rows = []
    for base, lap in pairs(study, steps):
        level, c_lap, c_base = at_matched_loss(lap.val_loss, lap.cdnv, base.val_loss,
                                               base.cdnv)
        rows.append((level, c_lap / c_base - 1.0))
    arr = np.array(rows, dtype=float)
    return arr[:, 0], arr[:, 1]


def item_standard_errors(study, steps: int | None = None) -> np.ndarray:
    """Per seed, the standard error that sampling the held-out windows adds to the seed's
    loss gap: sd of the per-window differences over sqrt(windows), (seeds,)."""
    out = []
    for base, lap in pairs(study, steps):
        d = np.asarray(lap.heldout_windows) - np.asarray(base.heldout_windows)
        out.append(float(d.std(ddof=1) / np.sqrt(d.size)))
    return np.array(out)


def samples(study, steps: int | None = None) -> list[np.ndarray]:
    """The per-seed values of the rule's tests, then those beside, at a training length."""
    return [loss_gaps(study, steps), cdnv_changes(study, steps),
            matched_cdnv_changes(study, steps)[1]]


# ------------------------------------------------------------------------------- the gate
def gap_moves(study, steps: int | None = None) -> np.ndarray:
    """Per seed, how far the validation-loss gap (Laplacian - none) moved over the last round
    of the schedule (the last tenth in the study's settings): gap at the end - gap a round
    before, (seeds,)."""
    return np.array([(lap.val_loss[-1] - base.val_loss[-1])
                     - (lap.val_loss[-2] - base.val_loss[-2])
                     for base, lap in pairs(study, steps)])


def settled_gate(study, settle: float = L9_SETTLE) -> Gate:
    """Passed when, at the longest length, the mean paired validation-loss gap moved by less
    than ``settle`` over the last round: the runs are read at their optimum once the schedule
    no longer moves the comparison."""
    moves = gap_moves(study)
    move = float(moves.mean())
    runs = [r for arm in study.settings.arms for r in study.by(arm)]
    best = [r.best for r in runs]
    rounds = len(runs[0].val_loss) - 1
    passed = abs(move) < settle
    unit = "character" if _unit(study) == "char" else "token"
    detail = (f"over the last round the mean validation-loss gap moved by {move:+.4f} nats per "
              f"{unit} (less than {settle:g} in size passes); the {len(runs)} runs reached "
              f"their optimum after rounds {min(best)}-{max(best)} of {rounds}")
    if not passed:
        detail += "; a longer schedule would let the comparison settle"
    return Gate("comparison settled at the optimum", passed, detail)


# ------------------------------------------------------------------------------- helpers
def _unit(study) -> str:
    """What the study's losses are per (``char`` or ``token``)."""
    return getattr(study, "unit", "char")


def _downstream_text(study) -> tuple[str, dict[str, float]]:
    """A sentence on the downstream task's acc_norm per arm at the longest length (where the
    study scored one), and the means by arm; beside the rule, not part of it."""
    task = getattr(study, "downstream", "")
    if not task:
        return "", {}
    arms = study.settings.arms
    scores = {a: [r.downstream for r in study.by(a)] for a in arms}
    if any(v is None for vs in scores.values() for v in vs):
        return "", {}
    means = {str(a): float(np.mean(v)) for a, v in scores.items()}
    diff = np.array(scores[arms[1]]) - np.array(scores[arms[0]])
    return (f" Beside: {task} length-normalised accuracy (acc_norm) none "
            f"{100 * means[str(arms[0])]:.1f}%, Laplacian {100 * means[str(arms[1])]:.1f}%; "
            f"Laplacian - none {100 * diff.mean():+.1f} points (mean over "
            f"{len(diff)} seeds; chance 25%)."), means


def _trend(per_scale: dict[str, Sequence[TestResult]], index: int) -> dict[str, list]:
    return {label: [round(r[index].estimate, 6), round(r[index].interval[0], 6),
                    round(r[index].interval[1], 6)] for label, r in per_scale.items()}


def _iv(t: TestResult, scale: float = 1.0, spec: str = "+.3f") -> str:
    low, high = t.interval
    return f"{scale * t.estimate:{spec}} [{scale * low:{spec}}, {scale * high:{spec}}]"


def _word_text(t: TestResult) -> str:
    """The test's word and which kind it is: a reproduced interval that clears the SESOI or
    not; a not-reproduced one of the wrong sign, or real but negligible, or small either way."""
    low, high = t.interval
    if t.word == "reproduced":
        return "reproduced, " + ("beyond the SESOI" if t.reaches_sesoi else
                                 "but not clear of the SESOI")
    if t.word == "not reproduced":
        wrong = low > t.margin if t.side == "<" else high < t.margin
        real = high < t.margin if t.side == "<" else low > t.margin
        kind = ("the wrong sign" if wrong else "real but smaller than the SESOI" if real
                else "smaller than the SESOI either way")
        return f"not reproduced: {kind}"
    return t.word


def _power_text(rule, tests: Sequence[TestResult], labels: Sequence[str]) -> str:
    """A sentence on each undecided test whose seeds fall short of what its spread asks for
    (a test that decided needs no more seeds)."""
    parts = []
    for t, label in zip(tests, labels):
        if t.word == "inconclusive" and (t.seeds_needed is None or t.seeds_needed > t.n_seeds):
            need = "more than 100,000" if t.seeds_needed is None else t.seeds_needed
            parts.append(f"{label} would need {need} seeds at this spread")
    if not parts:
        return ""
    return (f" Power: {'; '.join(parts)} ({tests[0].n_seeds} ran, the rule registers "
            f"{rule.n_seeds}).")


def _lead_moves(trend: dict[str, list[float]]) -> str:
    """How the Laplacian arm's lead (none - Laplacian held-out loss, the loss gap's negative)
    moves with training, from the gap's trend ``{length: [estimate, low, high]}``, by
    :func:`~ddcl_theory.ledger.decisions.dense_features.trend_direction`; where the Laplacian
    arm is behind at every length, its deficit is read instead (so "grows" is never said of a
    lead that is negative)."""
    behind = all(est > 0 for est, _, _ in trend.values())
    if behind:
        direction, what = trend_direction(trend), "deficit"
    else:
        direction = trend_direction({k: [-e, -h, -lo] for k, (e, lo, h) in trend.items()})
        what = "lead"
    if direction in ("grows", "shrinks"):
        return f"the Laplacian arm's {what} {direction} with training"
    return f"the Laplacian arm's {what} {direction}"


# ------------------------------------------------------------------------------- L9
def decide_l9(study) -> Verdict:
    """L9: at the longest training length, the held-out loss (Laplacian - none < 0) and the
    relative change of the held-out CDNV at the validation optimum (< 0), paired t each; the
    matched-loss CDNV beside; the gate reads the deciding runs' validation curves."""
    rule = rule_of("L9")
    st = study.settings
    per_scale = {label: rule.evaluate(samples(study, n))
                 for n, label in zip(st.steps, st.scales)}
    results = per_scale[st.scales[-1]]
    tests = results[:len(rule.tests)]
    gate = settled_gate(study)
    word = rule.word(tests, [gate])
    binding = rule.binding(tests)
    base_arm, lap_arm = st.arms
    heldout = {arm: float(np.mean([r.heldout for r in study.by(arm)])) for arm in st.arms}
    cdnv = {arm: float(np.mean([r.cdnv[r.best] for r in study.by(arm)])) for arm in st.arms}
    level, _ = matched_cdnv_changes(study)
    gap = loss_gaps(study)
    item_se = item_standard_errors(study)
    spread = float(np.std(gap, ddof=1)) if gap.size > 1 else 0.0
    loss_t, cdnv_t, matched_t = results
    moves = _lead_moves(_trend(per_scale, 0))
    unit = _unit(study)
    model = getattr(study, "model_name", "Character GPT")
    downstream, downstream_means = _downstream_text(study)
    evidence = (
        f"{model} (d={st.dim}, {st.depth} layers, {st.heads} heads, {lap_arm} Laplacian "
        f"per layer vs none) on {study.source}, {loss_t.n_seeds} seeds at {st.steps[-1]} "
        f"steps, each run read at its lowest validation loss and scored on the "
        f"{study.n_heldout_windows:,} windows of the held-out text. Held-out loss: none "
        f"{heldout[base_arm]:.3f}, Laplacian {heldout[lap_arm]:.3f} nats/{unit}; Laplacian - "
        f"none {_iv(loss_t)} ({_word_text(loss_t)}). "
        + "By length: " + "; ".join(f"{_iv(r[0])} at {label}" for label, r in per_scale.items())
        + f" ({moves}). CDNV of the held-out tokens at the optimum: none "
        f"{cdnv[base_arm]:.4g}, Laplacian {cdnv[lap_arm]:.4g}; relative change "
        f"{_iv(cdnv_t, 100, '+.1f')}% ({_word_text(cdnv_t)}). Beside: at a matched validation loss "
        f"(mean {level.mean():.3f} nats/{unit}) {_iv(matched_t, 100, '+.1f')}% "
        f"({_word_text(matched_t)}). Sampling the held-out windows adds about "
        f"{float(np.mean(item_se)):.4f} nats/{unit} of standard error to one seed's loss gap, "
        f"against a seed-to-seed spread of {spread:.4f}." + downstream
        + _power_text(rule, tests, ("the loss gap", "the CDNV change"))
        + f" Gate ({gate.name}): {gate.detail}{'' if gate.passed else ' (not met)'}."
        + f" Paper: {PAPER}.")
    values = samples(study)
    statistics = [t.statistic for t in rule.all_tests]
    return Verdict(
        "L9", word, evidence,
        our_value=f"held-out loss {heldout[base_arm]:.3f} -> {heldout[lap_arm]:.3f} nats/{unit} "
                  f"({loss_t.estimate:+.3f}); CDNV {100 * cdnv_t.estimate:+.1f}% "
                  f"({st.steps[-1]} steps)",
        numbers={"heldout_loss": {str(a): v for a, v in heldout.items()},
                 "cdnv": {str(a): v for a, v in cdnv.items()},
                 "loss_trend": _trend(per_scale, 0), "cdnv_trend": _trend(per_scale, 1),
                 "matched_trend": _trend(per_scale, 2), "matched_level": float(level.mean()),
                 "item_se": float(np.mean(item_se)), "seed_sd": spread}
        | ({"downstream": downstream_means} if downstream_means else {}),
        rule=rule.text, n_seeds=tests[binding].n_seeds, interval=tuple(tests[binding].interval),
        scale=f"{st.steps[-1]} steps, d={st.dim}", trend=_trend(per_scale, binding),
        tolerance=L9_TOLERANCE, tests=tuple(results), gates=(gate,),
        per_seed={s: v.tolist() for s, v in zip(statistics, values)})
