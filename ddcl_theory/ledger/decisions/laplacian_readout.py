"""Decision of the chapter ``laplacian_readout``: claim X2 (ours), a DDCL readout on a Laplacian
encoder, by the registered rule (:func:`ddcl_theory.ledger.claims.rule_of`, data in
:mod:`ddcl_theory.ledger.rules`).

The word is the accuracy test's: the readout's accuracy on the evaluation pool with every encoder
head Laplacian minus with none, paired by seed, its 95% interval three ways against 0 and the
SESOI, at the largest training-image count. Every seed is scored on the same pool, so the
interval resamples seeds and pool images together
(:func:`~ddcl_theory.ledger.resampling.bootstrap_crossed` of the per-image differences of
correctness). Fewer seeds than the rule registers make it
at best ``inconclusive``, and so does a deciding run cut by the epoch cap before its validation
optimum. The same statistic at every image count is the trend; the verdict's interval is the
accuracy test's at the largest.

Beside it, decided by the same three-way rule but not combined into the word: the premise (the
relative change of the absolute within-sequence variance of the encoder's tokens, after its final
LayerNorm and before it) and the prototypes' usage and separation. The premise after the
LayerNorm, the tokens the readout reads, says how the word is read (:func:`reading`): a word
about smoothing where the tokens were smoothed, a word about Laplacian heads where they were not.

:func:`decide_x2` reads a study with the fields of
:class:`~ddcl_theory.experiments.laplacian_readout.ReadoutStudy`: ``settings`` (``n_train``,
``scales``, the model's sizes), ``source``, ``values(field, setting, n_train)`` (per-seed
arrays in seed order) and ``by(setting, n_train)`` (runs with ``seed``, ``past_optimum``,
``best_epoch``, ``epochs``, ``correct_items``). Earlier runs on the same seeds
(:mod:`ddcl_theory.ledger.earlier_runs`: other sessions, whose machines and training code may
differ; float32 training turns a difference in the last bits into different per-seed outcomes)
are decided by the same tests from their committed per-seed values and set beside: where they
disagree with the run of record, the evidence says which conclusions not every run shows.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ddcl_theory.ledger import stats
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions.laplacian_experiments import (TEST_RESAMPLES,
                                                                crossed_powers,
                                                                crossed_width_text,
                                                                mean_standard_errors,
                                                                with_crossed_power)
from ddcl_theory.ledger.decisions.scales import scale_text
from ddcl_theory.ledger.design import Gate, TestResult
from ddcl_theory.ledger.resampling import bootstrap_crossed
from ddcl_theory.ledger.rules import X2_PLANNING_SPREAD
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict

__all__ = ["TRAINING", "STATISTICS", "ITEMS", "samples", "item_differences",
           "decided_samples", "evaluate", "encode_items", "decode_items", "earlier_tests",
           "optimum_gate", "reading", "trend_of", "decide_x2"]

#: How far the numbers quoted by X2 may move between machines, in their printed units (points
#: of accuracy, per cent of a relative change): 3x the largest standard error of a 3-seed mean
#: in the cpu run (the prototypes' usage, 16 points); seeds needed scale with the squared
#: spread of 3 seeds; counts of runs past their optimum. The cpu profile trains in float64, and
#: there the portable and AVX2 kernels moved nothing.
TRAINING = Tolerance(abs=55.0, rel=3.0, count_abs=2, reason=(
    "3x the largest standard error of a 3-seed mean in the cpu run (usage of the prototypes, "
    "all - none, 16 points); seeds needed scale with the squared spread of 3 seeds; counts of "
    "runs past their optimum (count_allowance)"))
_ALL, _NONE = "all", "0"
#: What each test of the rule reads (a field of the runs), and how the pair is combined:
#: ``"difference"`` all - none, ``"relative"`` all / none - 1.
STATISTICS = (("eval_acc", "difference"), ("final.within_sequence", "relative"),
              ("stream.within_sequence", "relative"), ("fraction_used", "difference"),
              ("relative_min", "relative"))
#: Short names of the rule's tests, in its order, for sentences.
_SHORT = ("accuracy", "premise after the final LayerNorm", "premise before it",
          "prototypes used", "their separation")
#: What follows the accuracy statistic in the name of its committed per-image values.
ITEMS = " (per pool image, - 0 +)"
_STATISTIC = rule_of("X2").tests[0].statistic


def _paired(study, field: str, how: str, n_train: int | None) -> np.ndarray:
    lap, base = (study.values(field, s, n_train) for s in (_ALL, _NONE))
    if how == "difference":
        return lap - base
    if np.any(base <= 0):
        raise ValueError(f"field: {field!r} of the runs without Laplacian heads must be "
                         f"positive for a relative change, got {base}")
    return lap / base - 1.0


def samples(study, n_train: int | None = None) -> list[np.ndarray]:
    """Per test of the rule (binding, then beside), the per-seed paired statistic at
    ``n_train`` images (default the largest), each of shape (seeds,)."""
    return [_paired(study, field, how, n_train) for field, how in STATISTICS]


def item_differences(study, n_train: int | None = None) -> np.ndarray:
    """Per seed and pool image, all - none correctness at ``n_train`` images (default the
    largest), shape (seeds, images), values in {-1, 0, 1}."""
    pairs = zip(study.by(_ALL, n_train), study.by(_NONE, n_train))
    return np.stack([lap.correct_items.astype(float) - base.correct_items.astype(float)
                     for lap, base in pairs])


def decided_samples(study, n_train: int | None = None) -> list:
    """What the rule's tests are decided on at ``n_train`` images: for the accuracy test the
    crossed bootstrap interval over seeds and pool images
    (:data:`~ddcl_theory.ledger.decisions.laplacian_experiments.TEST_RESAMPLES` resamples, as
    L6's) with the per-seed spread of the gap,
    for the others their per-seed values (:func:`samples`)."""
    return _decided(item_differences(study, n_train), samples(study, n_train))


def _decided(items: np.ndarray, per_seed: list[np.ndarray]) -> list:
    """The accuracy test's crossed interval over ``items`` (seeds, images) with the spread of
    its per-seed gaps ``per_seed[0]``, then the other tests' per-seed values."""
    gaps = per_seed[0]
    spread = float(np.std(gaps, ddof=1)) if gaps.size > 1 else float("nan")
    interval = bootstrap_crossed(items, n_resamples=TEST_RESAMPLES)
    return [(interval, spread)] + per_seed[1:]


def _tests(rule, items: np.ndarray, per_seed: list[np.ndarray]
           ) -> tuple[list[TestResult], dict | None]:
    decided = _decided(items, per_seed)
    results = list(rule.evaluate(decided))
    powers = crossed_powers(results[:1], decided[:1], [items])
    return with_crossed_power(results[:1], powers) + results[1:], powers[0]


def evaluate(rule, study, n_train: int | None = None) -> tuple[list[TestResult], dict | None]:
    """The rule's tests at ``n_train`` images (:func:`decided_samples`), the accuracy test's
    ``detectable`` and ``seeds_needed`` read off its crossed interval's own width (the pool's
    part held fixed as seeds grow), and that test's power record
    (:func:`~ddcl_theory.ledger.decisions.laplacian_experiments.crossed_powers`)."""
    return _tests(rule, item_differences(study, n_train), samples(study, n_train))


def earlier_tests(rule, per_seed: Mapping[str, Sequence]) -> list[TestResult]:
    """The rule's tests on an earlier run's committed per-seed values (``per_seed``: as
    :func:`decide_x2` commits them, keyed by statistic, the accuracy test's per-image values
    under its statistic + :data:`ITEMS`), decided as the run of record's are."""
    acc = rule.tests[0].statistic
    items = decode_items(per_seed[acc + ITEMS])
    values = [np.asarray(per_seed[t.statistic], dtype=float) for t in rule.all_tests]
    if not np.allclose(items.mean(axis=1), values[0], atol=1e-9):
        raise ValueError(f"per_seed: the per-image values of {acc!r} do not average to its "
                         f"per-seed gaps")
    return _tests(rule, items, values)[0]


def encode_items(differences: np.ndarray) -> list[str]:
    """One string per seed of its per-image differences (``"-"``, ``"0"``, ``"+"`` for -1, 0,
    +1), the committed per-item values behind the accuracy interval."""
    table = np.array(list("-0+"))
    return ["".join(table[row.astype(int) + 1]) for row in differences]


def decode_items(encoded: Sequence[str]) -> np.ndarray:
    """The inverse of :func:`encode_items`: shape (seeds, images), values in {-1, 0, 1}."""
    lookup = np.full(256, 9, dtype=np.int8)
    lookup[[ord("-"), ord("0"), ord("+")]] = [-1, 0, 1]
    rows = [lookup[np.frombuffer(row.encode("ascii"), dtype=np.uint8)] for row in encoded]
    if len({r.size for r in rows}) > 1 or any((r == 9).any() for r in rows):
        raise ValueError("encoded: expected strings of equal length over '-', '0', '+'")
    return np.stack(rows).astype(float)


def optimum_gate(runs: Sequence, what: str) -> Gate:
    """Passed when every deciding run stopped past its validation optimum (``patience`` epochs
    without a new lowest validation loss before the cap), so that it was read there."""
    cut = [f"{r.setting}/{r.seed}" for r in runs if not r.past_optimum]
    best = [r.best_epoch for r in runs]
    detail = (f"{len(runs) - len(cut)} of {len(runs)} {what} stopped past their validation "
              f"optimum (at epochs {min(best)}-{max(best)} of at most {runs[0].epochs})")
    if cut:
        detail += ("; the others reached the epoch cap still improving: a longer schedule "
                   "would let them pass their optimum")
    return Gate("read at the validation optimum", not cut, detail)


def reading(word: str, premise: str, raised: bool = False) -> str:
    """How the claim's ``word`` reads given the word of the premise after the final LayerNorm
    (``reproduced``: the Laplacian heads lowered the within-sequence variance of the tokens the
    readout reads; ``raised``: its interval lies wholly above 0)."""
    if premise == "reproduced":
        return {"reproduced": "the Laplacian heads smoothed the tokens the readout reads, and "
                              "the readout classified better: smoothing helped the prototypes",
                "not reproduced": "the Laplacian heads smoothed the tokens the readout reads, "
                                  "and the readout did not classify better by the smallest "
                                  "effect of interest: smoothing did not help the prototypes",
                }.get(word, "the Laplacian heads smoothed the tokens the readout reads; "
                            "whether that helped the readout is open at this power")
    why = ("raised" if raised else "did not lower" if premise == "not reproduced"
           else "were not shown to lower")
    return (f"the Laplacian heads {why} the within-sequence variance of the tokens the readout "
            f"reads, so the word says whether Laplacian heads help a DDCL readout, not whether "
            f"smoothing does")


def trend_of(per_scale: Mapping[str, Sequence[TestResult]], index: int = 0
             ) -> dict[str, list[float]]:
    """``{scale: [estimate, low, high]}`` of test ``index`` at each scale."""
    return {label: [round(r[index].estimate, 6), round(r[index].interval[0], 6),
                    round(r[index].interval[1], 6)] for label, r in per_scale.items()}


def _points(t: TestResult, scale: float = 100.0, spec: str = "+.2f") -> str:
    low, high = t.interval
    return f"{scale * t.estimate:{spec}} [{scale * low:{spec}}, {scale * high:{spec}}]"


def _holds_margin(t: TestResult) -> bool:
    return t.interval[0] <= t.margin <= t.interval[1]


def _short_of_sesoi(t: TestResult, earlier: Sequence[tuple[Mapping, TestResult]] = ()) -> str:
    """Why a ``not reproduced`` accuracy test says so: its interval lies short of the SESOI;
    then which side of 0 (a loss shown, a negligible gain, or how large a loss is left open).
    A loss is qualified when an earlier run on the same seeds (``earlier``: each run's record
    and its accuracy test) did not show one."""
    low, high = t.interval
    sesoi = _count(100 * t.sesoi, "point")
    if high < t.margin:
        other = [(run, e) for run, e in earlier if e.interval[1] >= e.margin]
        text = (f"the accuracy interval lies short of the SESOI ({sesoi}), and wholly below 0: "
                "the readout is less accurate on the Laplacian encoder"
                + (" in this run" if other else ""))
        if high > t.margin - (t.sesoi - t.margin):
            text += " (a loss smaller than the SESOI is not excluded)"
        if other:
            n = len(earlier)
            runs = "the earlier run" if n == 1 else f"{len(other)} of the {n} earlier runs"
            short = all(e.word == "not reproduced" for _, e in earlier)
            below = sum(e.estimate < e.margin for _, e in earlier) + 1
            its = "its" if len(other) == 1 else "their"
            text += (f"; {runs} on the same seeds held 0 in {its} interval ("
                     + "; ".join(f"code of {run['code']}: {_points(e)} points"
                                 for run, e in other)
                     + "), so not every run shows the loss"
                     + (f"; {below} of the {n + 1} runs' estimates lie below 0" if below <= n
                        else f"; all {n + 1} runs' estimates lie below 0")
                     + (", and every run lies short of the SESOI" if short else ""))
        elif earlier:
            text += (", as in the earlier run on the same seeds" if len(earlier) == 1 else
                     f", as in each of the {len(earlier)} earlier runs on the same seeds")
        return text
    text = (f"the accuracy interval lies short of the SESOI: any gain is smaller than the SESOI "
            f"({sesoi}), {'though real' if low > t.margin else 'if there is one'}")
    if low < t.margin:
        text += f"; a loss of up to {100 * (t.margin - low):.2f} points is not excluded"
    return text


def _count(value: float, unit: str) -> str:
    """``"1 point"``, ``"2.5 points"``."""
    return f"{value:g} {unit}" + ("" if value == 1 else "s")


def _standard_error_text(mean_se: Mapping[str, float], spread: float, n_seeds: int) -> str:
    """The split of the mean gap's standard error (points), from
    :func:`~ddcl_theory.ledger.decisions.laplacian_experiments.mean_standard_errors`."""
    return (f"Standard error of the {n_seeds}-seed mean gap: {100 * mean_se['seeds']:.2f} points "
            f"from the seeds' spread ({100 * spread:.2f} points per seed) and "
            f"{100 * mean_se['pool']:.2f} from sampling the pool's images (the part more seeds "
            f"would not remove); {crossed_width_text(mean_se)}.")


def _planned_text(power: Mapping, n_seeds: int, rule_seeds: int) -> str:
    """The rule's planned sensitivity (a t interval over the seeds of its planning run,
    :data:`~ddcl_theory.ledger.rules.X2_PLANNING_SPREAD`) beside the one this run gives, when
    it ran the rule's ``rule_seeds`` seeds (a pilot's ``n_seeds`` are not compared)."""
    if n_seeds != rule_seeds:
        return ""
    planned = stats.detectable_effect(X2_PLANNING_SPREAD, rule_seeds)
    got = power["detectable"]
    verdict = ("less sensitive than planned" if round(100 * got, 2) > round(100 * planned, 2)
               else "at least as sensitive as planned")
    return (f" The rule's text expected {rule_seeds} seeds to detect {100 * planned:.2f} points, "
            f"from a t interval over an earlier run's seeds alone (sd "
            f"{100 * X2_PLANNING_SPREAD:.2f} points); this interval also covers the pool and is "
            f"read off this run's spread: {100 * got:.2f} points, {verdict}.")


def _power_text(power: Mapping | None, n_seeds: int, rule_seeds: int) -> str:
    """What the accuracy interval's own width gives in power (``power``: a
    :func:`~ddcl_theory.ledger.decisions.laplacian_experiments.crossed_power` record), beside
    the rule's plan for ``rule_seeds`` seeds."""
    if power is None:
        return ""
    need = (f"80% would take {power['seeds_needed']} seeds" if power["seeds_needed"] is not None
            else "no count of seeds would reach 80%, as "
            + ("the pool's part alone is too wide" if power["out_of_reach"] == "pool"
               else f"more than {stats.MAX_SEEDS:,} would be needed"))
    return (f" By the interval's own width (normal approximation; the pool's part held fixed "
            f"as seeds grow; the crossed bootstrap tends to run wide, so these figures err on the "
            f"side of too many seeds), {n_seeds} seeds detect {100 * power['detectable']:.2f} "
            f"points with 80% power; at the SESOI their power is {100 * power['power']:.0f}%; "
            f"{need}." + _planned_text(power, n_seeds, rule_seeds))


def _beside_word(t: TestResult) -> str:
    """A test's word, and for ``reproduced`` whether its interval also clears the SESOI."""
    if t.word == "reproduced" and not t.reaches_sesoi:
        sesoi = f"{100 * t.sesoi:+g}{'%' if 'relative' in t.statistic else ' points'}"
        return f"reproduced: clear of its margin, not shown to reach its SESOI of {sesoi}"
    return t.word


def _run_to_run_text(now: Sequence[TestResult], gaps: np.ndarray,
                     earlier: Sequence[tuple[Mapping, Sequence[TestResult]]],
                     word: str) -> str:
    """Each earlier run on the same seeds, decided by the same tests, beside this one: its
    accuracy interval, the tests whose word differs, and how its per-seed gaps correlate
    with this run's ``gaps`` (seeds,); then whether the claim's ``word`` is every run's."""
    parts = []
    for run, tests in earlier:
        differ = [f"{name} {then.word} (now {t.word})"
                  for name, t, then in zip(_SHORT, now, tests) if then.word != t.word]
        then = np.asarray(run["per_seed"][_STATISTIC], dtype=float)
        r = float(np.corrcoef(then, gaps)[0, 1]) if gaps.size > 2 else float("nan")
        parts.append(f"the same seeds, run from the code of {run['code']} ({run['what']}; "
                     f"{run['date']}), gave all - none {_points(tests[0])} points, "
                     f"{tests[0].word}, its per-seed gaps correlating r = {r:+.2f} with this "
                     "run's; "
                     + ("words that differ from this run's: " + ", ".join(differ) if differ
                        else "every test's word the same as this run's"))
    if not parts:
        return ""
    same = all(tests[0].word == word for _, tests in earlier)
    return (" Run to run: " + "; ".join(parts) + f". {'Its' if len(parts) == 1 else 'Their'} "
            "per-seed values are committed (results/reference/earlier); "
            + (f"the word is {word} in every run; " if same else "")
            + "the record is this run's, the latest from the code that decides it.")


def decide_x2(study, earlier: Sequence[Mapping] = ()) -> Verdict:
    """X2: does a DDCL readout on an encoder whose heads are all Laplacian classify better than
    on the same encoder without (the accuracy test, at the largest image count), and how does
    the premise say to read the answer?

    ``earlier``: earlier runs (:func:`ddcl_theory.ledger.earlier_runs.earlier_runs`); those on
    this study's seeds are decided by the same tests and set beside (:func:`earlier_tests`).
    """
    rule = rule_of("X2")
    st = study.settings
    evaluated = {label: evaluate(rule, study, n) for n, label in zip(st.n_train, st.scales)}
    per_scale = {label: results for label, (results, _) in evaluated.items()}
    tests, power = evaluated[st.scales[-1]]
    acc, after, before, used, sep = tests
    runs = [r for s in (_NONE, _ALL) for r in study.by(s)]
    gate = optimum_gate(runs, f"runs at {st.n_train[-1]} images")
    word = rule.word(tests, [gate])
    read = reading(word, after.word, raised=after.interval[0] > 0)
    earlier_decided = [(run, earlier_tests(rule, run["per_seed"])) for run in earlier
                  if list(run["seeds"]) == list(st.seeds)]
    mean_se = mean_standard_errors(item_differences(study), stats.Interval(
        acc.estimate, *acc.interval, acc.n_seeds, acc.method))
    gaps = samples(study)[0]
    spread = float(np.std(gaps, ddof=1)) if gaps.size > 1 else 0.0
    means = {s: float(study.values("eval_acc", s).mean()) for s in (_NONE, _ALL)}
    reasons = []
    if acc.n_seeds < rule.n_seeds:
        reasons.append(f"{acc.n_seeds} seeds, fewer than the rule's {rule.n_seeds} (a pilot)")
    if not gate.passed:
        reasons.append("runs were cut by the epoch cap before their validation optimum")
    if acc.word == "inconclusive":
        need = acc.seeds_needed
        reasons.append(f"the accuracy interval holds both 0 and the SESOI "
                       f"({_count(100 * acc.sesoi, 'point')}); "
                       + (f"{need} seeds at this spread would tell them apart"
                          if need is not None else "no feasible number of seeds would "
                          "tell them apart at this spread"))
    evidence = (
        f"ViT (d={st.dim}, {st.depth} layers, {st.heads} heads) + DDCL readout (K = "
        f"{st.num_prototypes}, {st.ddcl_heads} heads, tau = {st.temperature:g}, beta = "
        f"{st.beta:g}) on {study.source}, {acc.n_seeds} paired seeds, every run read at its "
        f"validation optimum and scored on the {runs[0].n_eval:,}-image evaluation pool; all "
        f"heads Laplacian vs none. Accuracy at {st.n_train[-1]} images "
        f"{100 * means[_ALL]:.2f}% vs {100 * means[_NONE]:.2f}%; all - none: "
        + "; ".join(f"{_points(r[0])} points at {label}" for label, r in per_scale.items())
        + f" (each interval resamples seeds and pool images together; SESOI "
        f"{_count(100 * acc.sesoi, 'point')}; "
        f"{scale_text([samples(study, n)[0] for n in st.n_train], st.scales)}, over seeds "
        f"only). " + _standard_error_text(mean_se, spread, acc.n_seeds)
        + _power_text(power, acc.n_seeds, rule.n_seeds) + " Premise, within-"
        f"sequence variance all / none - 1: after the final LayerNorm {_points(after)}% "
        f"({_beside_word(after)}), before it {_points(before)}% ({_beside_word(before)}). "
        f"Beside: prototypes used all - none {_points(used, spec='+.1f')} points "
        f"({_beside_word(used)}); their separation in units of the tokens' spread "
        f"{_points(sep)}% ({_beside_word(sep)}). Gate "
        f"({gate.name}): {gate.detail}. Reading: {read}."
        + (f" Why {word}: {'; '.join(reasons)}." if word == "inconclusive" and reasons else "")
        + (f" Why {word}: {_short_of_sesoi(acc, [(r, t[0]) for r, t in earlier_decided])}."
           if word == "not reproduced" else "")
        + (" The interval also clears the SESOI." if word == "reproduced" and acc.reaches_sesoi
           else "")
        + _run_to_run_text(tests, samples(study)[0], earlier_decided, word))
    our = (f"accuracy all - none {_points(acc)} points at {st.n_train[-1]} images; within-"
           f"sequence variance after the LayerNorm {_points(after, spec='+.1f')}%")
    per_seed = {t.statistic: [float(v) for v in values]
                for t, values in zip(rule.all_tests, samples(study))}
    for n, label in zip(st.n_train[:-1], st.scales[:-1]):
        per_seed[f"{rule.tests[0].statistic}, at {label}"] = [
            float(v) for v in samples(study, n)[0]]
    per_seed[rule.tests[0].statistic + ITEMS] = encode_items(
        item_differences(study))
    numbers = {"per_scale": {label: [r.to_dict() for r in results]
                             for label, results in per_scale.items()},
               "premise_word": after.word, "reading": read,
               "mean_se": mean_se, "power": power, "spread": spread,
               "accuracy": {s: [float(v) for v in study.values("eval_acc", s)]
                            for s in (_NONE, _ALL)},
               "earlier": [{"code": run["code"], "recorded_in": run["recorded_in"],
                            "tests": [t.to_dict() for t in tests]}
                           for run, tests in earlier_decided]}
    return Verdict("X2", word, evidence, our_value=our, numbers=numbers, rule=rule.text,
                   n_seeds=acc.n_seeds, interval=(float(acc.interval[0]),
                                                  float(acc.interval[1])),
                   scale=f"{st.n_train[-1]} training images, read at the validation optimum",
                   trend=trend_of(per_scale), tolerance=TRAINING, tests=tuple(tests),
                   gates=(gate,), per_seed=per_seed)
