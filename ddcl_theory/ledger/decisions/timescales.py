"""Claims of the two-time-scale chapter: :func:`decide_d8` and :func:`decide_d9`.

D8 reads the linear analysis (an object with ``model.m``, ``model.n`` and ``settings.eps_grid``,
``settings.eta_p``) and what the chapter derived from it: fitted slopes of the slow-eigenvalue
error, inertias of J(eps) per equilibrium, continuous and discrete critical ratios.

D9 reads two sweeps, Adam and plain SGD, each trained at three run lengths (``settings``,
``by_length``: run length -> sweep, ``longest``). A sweep has ``settings`` (``optimiser``,
``eps_values``, ``lr_p``, ``epochs``), ``by_eps(eps)`` -> runs (``seed``, ``separation_ratio``,
``diverged``) and the methods ``collapse_fraction``, ``divergence_fraction``,
``smallest_collapsing_eps``, ``stability_boundary``, ``failure_modes``. The Adam reading decides
the word by the registered rule (:func:`ddcl_theory.ledger.claims.rule_of`); the SGD reading is
decided by the same tests (:data:`ddcl_theory.ledger.rules.D9_SGD_READING`) beside it.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ddcl_theory.ledger import stats
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.design import Gate, Rule, TestResult
from ddcl_theory.ledger.rules import D9_SGD_READING
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict

D8_RULE = ("refuted: a fitted slope of the first-order error is more than 0.05 away from 2; "
           "confirmed: a continuous-time critical ratio exists and every one lies in [0.1, 1]; "
           "qualified otherwise")
#: The eps the D9 tests read: the two of "separation grows for eps <= 0.1" and the large one
#: of "collapse at eps = 1"; eps = 0.5 (one source's version) is shown beside.
SMALL_EPS, STABLE_EPS, MIDDLE_EPS, LARGE_EPS = 0.01, 0.1, 0.5, 1.0
#: The D9 statistics are censored at the collapse rule's separation threshold
#: (``eps_ablation.COLLAPSE_SEPARATION_RATIO``): a run whose separation fell below this fraction
#: of its start (two prototypes met), or whose loss became non-finite (diverged), has collapsed
#: and enters with log(S_end / S_start) = log COLLAPSE_RATIO, however deep it went.
COLLAPSE_RATIO = 0.05
#: The settling gate: over the last SETTLE_PART of a run, |change of log S| averaged over the
#: seeds of each eps a test reads stays below SETTLE_TOLERANCE (S moved by less than 5%).
SETTLE_PART, SETTLE_TOLERANCE = 0.25, 0.05
PAPER = "stable for eps <= 0.1 (practical range [0.01, 0.1]); prototype collapse for eps near 1"
#: D9 prints seed means of log separation ratios and their t intervals: across the kernel sets
#: they moved by less than 1e-3 (the cpu pilot's runs); 0.05 is a tenth of their per-seed sd.
D9_TOLERANCE = Tolerance(abs=0.05, rel=0.05,
                         reason="seed means and t intervals of log separation ratios: less "
                                "than 1e-3 across the kernel sets, a tenth of their per-seed "
                                "sd (0.3 to 1)")


def decide_d8(lin, *, slopes: Mapping[str, float], inertias: Mapping[str, set],
              crit_cont: Mapping[str, float | None],
              eps_c_shared: Mapping[float, float]) -> Verdict:
    """D8 (the two-time-scale reduction makes small eps stable) from the linear analysis.

    ``slopes``: equilibrium -> fitted log-log slope of the slow-eigenvalue error; ``inertias``:
    equilibrium -> set of inertias of J(eps) over the grid (``"merged"`` is read for its number
    of unstable directions); ``crit_cont``: equilibrium -> continuous-time critical eps or
    None; ``eps_c_shared``: eta_P -> discrete critical eps of the shared minimum.
    """
    expansion_ok = all(abs(s - 2) < 0.05 for s in slopes.values())
    continuous_crit = [v for v in crit_cont.values() if v is not None]
    if not expansion_ok:
        word = "refuted"
    elif continuous_crit and all(0.1 <= v <= 1 for v in continuous_crit):
        word = "confirmed"
    else:
        word = "qualified"
    unstable_merged = next(iter(inertias["merged"])).positive
    eps_grid, eta_p = np.asarray(lin.settings.eps_grid), lin.settings.eta_p
    return Verdict(
        "D8", word,
        f"Tikhonov's first-order reduction holds on a {lin.model.m + lin.model.n}-parameter "
        "encoder+prototype model on CIFAR-10 tokens (slow eigenvalues = eps*eig(-S) + "
        f"O(eps^2), fitted slopes {min(slopes.values()):.3f}-{max(slopes.values()):.3f}). But "
        "with one loss for both blocks (backprop of a total loss) J(eps) = -diag(I, eps I) H "
        "has the inertia of -H for every eps (Sylvester): the minimum is stable and the "
        f"merged-prototype saddle has {unstable_merged} unstable directions for all eps in "
        f"[{eps_grid.min():.0e}, {eps_grid.max():.0e}]. With prototypes on L_q alone no "
        "eigenvalue crosses the imaginary axis either. eps matters through discrete steps: "
        "rho(I + eta_P J) = 1 at eps_c = "
        + ", ".join(f"{eps_c_shared[e]:.2f}" for e in eta_p)
        + f" for eta_P = {', '.join(str(e) for e in eta_p)}, i.e. a bound on eta_theta = "
        "eps*eta_P (about 2/lambda_max of the encoder block), not on the ratio.",
        our_value=f"eps-independent in continuous time; discrete eps_c = "
                  f"{eps_c_shared[1.0]:.2f} at eta_P = 1, {eps_c_shared[0.25]:.2f} at "
                  "eta_P = 0.25",
        paper_value="stable for eps << 1; practical range [0.01, 0.1]",
        numbers={"slopes": dict(slopes), "unstable_merged": unstable_merged,
                 "eps_c_shared": {str(k): v for k, v in eps_c_shared.items()}},
        rule=D8_RULE)


# ------------------------------------------------------------------------------------------ D9

def sweep_name(result) -> str:
    """``"adam, eta_P=0.01"``: a sweep's optimiser and prototype step size."""
    return f"{result.settings.optimiser}, eta_P={result.settings.lr_p:g}"


def log_growth(run) -> float:
    """log(S_end / S_start) of one run (S = the smallest distance between two prototypes),
    censored at log :data:`COLLAPSE_RATIO`: a run that collapsed (its separation below that
    fraction of its start) or diverged (non-finite loss or separation) enters at the
    threshold."""
    ratio = float(np.asarray(run.separation_ratio, dtype=float)[-1])
    if _ended(run):
        return math.log(COLLAPSE_RATIO)
    return math.log(ratio)


def _ended(run) -> bool:
    """The run diverged or collapsed: its statistic is the censoring value, not its curve."""
    ratio = float(np.asarray(run.separation_ratio, dtype=float)[-1])
    return bool(run.diverged or not math.isfinite(ratio) or ratio < COLLAPSE_RATIO)


def _by_seed(result, eps: float) -> list:
    runs = sorted(result.by_eps(eps), key=lambda r: r.seed)
    if not runs:
        raise ValueError(f"result: {sweep_name(result)} has no run at eps = {eps:g}")
    return runs


def contrast(result, eps: float) -> np.ndarray:
    """log S_end(eps) - log S_end(0.1) per seed, shape (n_seeds,): the same seed starts every
    eps from the same encoder and prototypes, so S_start cancels."""
    large, stable = _by_seed(result, eps), _by_seed(result, STABLE_EPS)
    if [r.seed for r in large] != [r.seed for r in stable]:
        raise ValueError(f"result: the runs at eps = {eps:g} and {STABLE_EPS:g} of "
                         f"{sweep_name(result)} must have the same seeds")
    return np.array([log_growth(a) - log_growth(b) for a, b in zip(large, stable)])


def d9_samples(result) -> list[np.ndarray]:
    """Per-seed values of the three D9 tests on one sweep, in the rule's order (each of shape
    (n_seeds,)): log(S_end / S_start) at eps = 0.1 and at eps = 0.01, and the paired
    :func:`contrast` at eps = 1."""
    return [np.array([log_growth(r) for r in _by_seed(result, STABLE_EPS)]),
            np.array([log_growth(r) for r in _by_seed(result, SMALL_EPS)]),
            contrast(result, LARGE_EPS)]


def settle_changes(result, eps: float) -> np.ndarray:
    """|log S_end - log S a quarter of the run earlier| of each run at ``eps`` that neither
    diverged nor collapsed, shape (n_read,) (a run that did has its censored value, fixed)."""
    out = []
    for r in _by_seed(result, eps):
        if _ended(r):
            continue
        ratio = np.asarray(r.separation_ratio, dtype=float)
        back = max(1, math.ceil(SETTLE_PART * (len(ratio) - 1)))
        out.append(abs(math.log(ratio[-1]) - math.log(ratio[-1 - back])))
    return np.array(out)


def settle_gate(result) -> Gate:
    """The settling gate of one sweep (the longest run length): at each eps a test reads, the
    seeds' mean |change of log S| over the last quarter of the run is below
    :data:`SETTLE_TOLERANCE`."""
    means = {eps: settle_changes(result, eps) for eps in (SMALL_EPS, STABLE_EPS, LARGE_EPS)}
    means = {eps: float(v.mean()) for eps, v in means.items() if v.size}
    passed = all(m < SETTLE_TOLERANCE for m in means.values())
    moved = ", ".join(f"{m:.3f} at eps = {e:g}" for e, m in means.items()) or "none read"
    detail = (f"{sweep_name(result)}: mean |change of log S| over the last quarter of the "
              f"{result.settings.epochs}-epoch runs {moved} (below {SETTLE_TOLERANCE:g} to "
              "pass)")
    if not passed:
        detail += "; longer runs or a lower final learning rate would let S settle"
    return Gate("separation settled", passed, detail)


@dataclass(frozen=True)
class Reading:
    """One reading of D9 decided: its sweep's name, word, tests at the longest run (``tests``,
    as :func:`ddcl_theory.ledger.report.tests_rows` reads them), settling gate, and per test
    the trend over run lengths (``{"<n> epochs": [estimate, low, high]}``)."""

    name: str
    word: str
    tests: tuple[TestResult, ...]
    gate: Gate
    trends: tuple[dict, ...]


def decide_reading(rule: Rule, sweep) -> Reading:
    """The tests of ``rule`` on ``sweep`` (``by_length``: run length -> sweep) at every run
    length, decided at the longest with its settling gate."""
    if not sweep.by_length:
        raise ValueError("sweep: expected at least one run length")
    per_length = {length: rule.evaluate(d9_samples(res))
                  for length, res in sorted(sweep.by_length.items())}
    tests = per_length[max(per_length)]
    gate = settle_gate(sweep.longest)
    trends = tuple({f"{length} epochs": [round(r[i].estimate, 4), round(r[i].interval[0], 4),
                                         round(r[i].interval[1], 4)]
                    for length, r in per_length.items()} for i in range(len(rule.tests)))
    return Reading(sweep_name(sweep.longest), rule.word(tests, [gate]), tuple(tests), gate,
                   trends)


def critical_step_brackets(results: Sequence) -> dict[str, tuple[float, float]]:
    """SGD sweep name -> (last stable, first failing] encoder step eta_theta = eps * eta_P, for
    the sweeps where some eps fails for half the seeds or more."""
    brackets = {}
    for res in results:
        ok, fail = res.stability_boundary()
        if ok is not None and fail is not None:
            brackets[sweep_name(res)] = (ok * res.settings.lr_p, fail * res.settings.lr_p)
    return brackets


def _interval(values: np.ndarray) -> list[float]:
    """[estimate, low, high] of the t interval of per-seed ``values`` (a point for one)."""
    if values.size < 2:
        return [float(values.mean())] * 3
    iv = stats.one_sample_t(values)
    return [iv.estimate, iv.low, iv.high]


def _why(t: TestResult) -> str:
    """What a word means for one test, in a few words."""
    low, high = t.interval
    if t.word == "reproduced":
        return "reaches the SESOI" if t.reaches_sesoi else "beyond the margin, short of the SESOI"
    if t.word == "inconclusive":
        return "holds the margin and the SESOI"
    if t.side == ">":
        return "wrong sign" if high < t.margin else "smaller than the SESOI"
    return "wrong sign (larger at eps = 1)" if low > 0 else "far smaller than tenfold"


#: Short names of the three D9 tests, for the evidence.
TEST_NAMES = ("growth at eps = 0.1", "growth at eps = 0.01", "log S_end(1) - log S_end(0.1)")


def _reading_text(tests: Sequence[TestResult]) -> str:
    return "; ".join(f"({i}) {name} {t.estimate:+.2f} [{t.interval[0]:+.2f}, "
                     f"{t.interval[1]:+.2f}], {t.word} ({_why(t)})"
                     for i, (name, t) in enumerate(zip(TEST_NAMES, tests), 1))


def decide_d9(adam, sgd, beside: Sequence = ()) -> Verdict:
    """D9 (separation grows for eps <= 0.1, prototypes collapse at eps = 1) by the registered
    rule, on the Adam reading.

    ``adam`` and ``sgd``: the two readings' sweeps at three run lengths (``settings``,
    ``by_length``, ``longest``); ``beside``: further SGD sweeps at the longest length (other
    eta_P), for the critical encoder step. The word is ``rule_of("D9").word`` of the three
    tests at the longest Adam run with the settling gate; the SGD reading is decided by
    :data:`~ddcl_theory.ledger.rules.D9_SGD_READING` on the same statistics and shown in the
    evidence and ``numbers``.
    """
    rule = rule_of("D9")
    ours, other = decide_reading(rule, adam), decide_reading(D9_SGD_READING, sgd)
    tests, gate, word = ours.tests, ours.gate, ours.word
    binding = rule.binding(tests)
    n = tests[binding].n_seeds
    sweeps = [adam.longest, sgd.longest, *beside]
    eps_values = adam.settings.eps_values
    collapse = {sweep_name(r): {e: r.collapse_fraction(e) for e in r.settings.eps_values}
                for r in sweeps}
    diverged = {sweep_name(r): {e: r.divergence_fraction(e) for e in r.settings.eps_values}
                for r in sweeps}
    middle = {sweep_name(r): _interval(contrast(r, MIDDLE_EPS)) for r in sweeps
              if MIDDLE_EPS in r.settings.eps_values}
    sgd_sweeps = [r for r in sweeps if r.settings.optimiser == "sgd"]
    brackets = critical_step_brackets(sgd_sweeps)
    first_fail = {sweep_name(r): r.smallest_collapsing_eps() for r in sweeps}
    overlap = (len(brackets) == len(sgd_sweeps) > 1
               and max(b[0] for b in brackets.values()) < min(b[1] for b in brackets.values()))
    eps_moves = len({first_fail[sweep_name(r)] for r in sgd_sweeps}) > 1
    counts = {sweep_name(r): r.failure_modes() for r in sweeps}
    seen = {k: sorted(mode for mode, c in m.items() if c) for k, m in counts.items()}
    reasons = []
    if not gate.passed:
        reasons.append(f"the separation had not settled ({gate.detail})")
    if n < rule.n_seeds:
        reasons.append(f"{n} seeds, fewer than the rule's {rule.n_seeds}")
    st, sg = adam.settings, sgd.settings
    fail_text = "; ".join(
        f"{k}: " + ", ".join(f"{collapse[k][e]:.1f}" for e in eps_values) for k in collapse)
    evidence = (
        f"MLP encoder + DDCL layer on CIFAR-10 patch tokens, {n} seeds, cosine-decayed rates, "
        f"run lengths {', '.join(str(x) for x in sorted(adam.by_length))} epochs. Decided on "
        f"the Adam reading (eta_P = {st.lr_p:g}) at {st.epochs} epochs: {word}. Growth "
        f"log(S_end/S_start) is claimed > 0 (SESOI {rule.tests[0].s:.2f}), the contrast < "
        f"log 0.1 = {rule.tests[2].margin:.2f}: {_reading_text(tests)}. Beside, the SGD "
        f"reading (eta_P = {sg.lr_p:g}), the same tests: {_reading_text(other.tests)}; "
        f"{other.word}. A run that diverged or whose prototypes met enters at log "
        f"{COLLAPSE_RATIO:g}. Fraction of runs failed (diverged, prototypes met, or one "
        f"prototype taking every token) at eps = {', '.join(f'{e:g}' for e in eps_values)}: "
        f"{fail_text}. "
        + (f"Critical encoder step eps*eta_P: "
           + ", ".join(f"({lo:.3g}, {hi:.3g}] ({k})" for k, (lo, hi) in brackets.items())
           + ("; the critical eps moves with eta_P" if eps_moves else "")
           + ("; the step brackets overlap, as the discrete analysis predicts" if overlap
              else "") + ". " if brackets else "")
        + (f"Why {word}: {'; '.join(reasons)}. " if reasons and word == "inconclusive" else "")
        + f"Paper: {PAPER}.")
    c, sc = tests[2], other.tests[2]
    per_seed = {t.statistic: values.tolist() for sweep, reading in ((adam, ours), (sgd, other))
                for t, values in zip(reading.tests, d9_samples(sweep.longest))}
    return Verdict(
        "D9", word, evidence,
        our_value=f"Adam: log S_end(1) - log S_end(0.1) = {c.estimate:+.2f} "
                  f"[{c.interval[0]:+.2f}, {c.interval[1]:+.2f}]; SGD (eta_P = {sg.lr_p:g}): "
                  f"{sc.estimate:+.2f} [{sc.interval[0]:+.2f}, {sc.interval[1]:+.2f}] "
                  f"({n} seeds)",
        paper_value=PAPER,
        numbers={"readings": {"adam": ours, "sgd": other},
                 "middle": middle,
                 "collapse": collapse, "diverged": diverged, "first_fail": first_fail,
                 "brackets": brackets, "overlap": overlap, "eps_moves": eps_moves,
                 "modes": seen, "failure_counts": counts},
        rule=rule.text, n_seeds=n, interval=tuple(tests[binding].interval),
        scale=f"{st.epochs} epochs", trend=ours.trends[binding],
        tolerance=D9_TOLERANCE, tests=tuple(tests), gates=(gate,), per_seed=per_seed)
