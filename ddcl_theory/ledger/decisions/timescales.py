"""Claims of the two-time-scale chapter: :func:`decide_d8` and :func:`decide_d9`.

D8 reads the linear analysis (an object with ``model.m``, ``model.n`` and ``settings.eps_grid``,
``settings.eta_p``) and what the chapter derived from it: fitted slopes of the slow-eigenvalue
error, inertias of J(eps) per equilibrium, continuous and discrete critical ratios. D9 reads the
ablation sweeps by name: results with ``settings`` (``eps_values``, ``seeds``, ``lr_p``,
``epochs``, ``scales``), ``runs`` read through ``by_eps`` (``seed``, ``separation_ratio``,
``train_loss``, ``diverged``) and the methods ``collapse_fraction``, ``smallest_collapsing_eps``,
``stability_boundary``, ``failure_modes``; it is decided by the registry's D9 rule
(:func:`ddcl_theory.ledger.claims.rule_of`).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ddcl_theory.ledger import stats
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict
from ddcl_theory.metrics.convergence import convergence

D8_RULE = ("refuted: a fitted slope of the first-order error is more than 0.05 away from 2; "
           "confirmed: a continuous-time critical ratio exists and every one lies in [0.1, 1]; "
           "qualified otherwise")
#: The two eps of the D9 rule: the stable ratio and the large one.
STABLE_EPS, LARGE_EPS = 0.1, 1.0
#: Plateau rule of the D9 runs: the mean training loss of the last four epochs (16 steps in the
#: cpu profile) within 5% of the four before.
PLATEAU_REL, PLATEAU_WINDOW = 0.05, 4
PAPER = "stable for eps <= 0.1 (practical range [0.01, 0.1]); prototype collapse for eps near 1"
#: D9 quotes seed means of log separation ratios and their t intervals (10 seeds). Measured
#: in the cpu run: per-seed sd of log(S_end/S_start) about 0.4, so 3 standard errors of the
#: mean about 0.4; the interval ends move with the spread as well.
D9_TOLERANCE = Tolerance(abs=0.4, rel=0.25, reason="seed means and t intervals of log "
                         "separation ratios (3 standard errors of a 10-seed mean about 0.4)")

#: The main protocol of the ablation and the prefix of the plain-SGD sweeps.
MAIN_SWEEP = "adam, eta_P=0.01"
SGD_PREFIX = "sgd"
MODE_NAMES = {"diverged": "divergence", "separation": "two prototypes met",
              "perplexity": "one prototype took all tokens"}


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


def critical_step_brackets(results: Mapping) -> dict[str, tuple[float, float]]:
    """SGD sweep -> (last stable, first failing] encoder step eta_theta = eps * eta_P."""
    brackets = {}
    for k in (k for k in results if k.startswith(SGD_PREFIX)):
        ok, fail = results[k].stability_boundary()
        if ok is not None and fail is not None:
            lr = results[k].settings.lr_p
            brackets[k] = (ok * lr, fail * lr)
    return brackets


def _log_separation(run, epoch: int | None = None) -> float:
    """log(S_min at ``epoch`` / S_min at the start) of one run (``epoch`` 1-based, the last
    when None); a run that stopped (diverged) before ``epoch`` is read at its last finite
    record, where it ended."""
    ratio = np.asarray(run.separation_ratio, dtype=float)
    if epoch is not None:
        ratio = ratio[: epoch + 1]
    finite = ratio[np.isfinite(ratio) & (ratio > 0)]
    return float(np.log(finite[-1])) if finite.size else float("-inf")


def _by_seed(res, eps: float) -> list:
    return sorted(res.by_eps(eps), key=lambda r: r.seed)


def d9_statistics(main, epoch: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The two deciding statistics per seed at ``epoch`` (the end when None): log(S_end /
    S_start) at eps = 0.1, and log S_end(eps = 1) - log S_end(eps = 0.1) paired by seed (the
    same seed starts both runs from the same encoder and prototypes, so the start cancels)."""
    stable, large = _by_seed(main, STABLE_EPS), _by_seed(main, LARGE_EPS)
    if [r.seed for r in stable] != [r.seed for r in large]:
        raise ValueError("decide_d9: the eps = 0.1 and eps = 1 runs must have the same seeds")
    growth = np.array([_log_separation(r, epoch) for r in stable])
    contrast = np.array([_log_separation(b, epoch) - _log_separation(a, epoch)
                         for a, b in zip(stable, large)])
    return growth, contrast


def _intervals(growth: np.ndarray, contrast: np.ndarray) -> list[stats.Interval]:
    """The rule's two intervals: one-sample t of ``growth``; paired t of log S_end(1) against
    log S_end(0.1) (i.e. of ``contrast``); points when one seed ran."""
    if len(growth) < 2:
        return [stats.Interval(float(growth.mean()), float(growth.mean()),
                               float(growth.mean()), len(growth), "one-sample t"),
                stats.Interval(float(contrast.mean()), float(contrast.mean()),
                               float(contrast.mean()), len(contrast), "paired t")]
    return [stats.one_sample_t(growth), stats.paired_t(growth + contrast, growth)]


def d9_trend(main, which: int = 1) -> dict[str, list[float]]:
    """{"<e> epochs": [estimate, low, high]} of deciding statistic ``which`` (0: growth at eps
    = 0.1, 1: the paired contrast) at each run length of ``main.settings.scales``."""
    out = {}
    for epoch in main.settings.scales:
        iv = _intervals(*d9_statistics(main, epoch))[which]
        out[f"{epoch} epochs"] = [round(iv.estimate, 4), round(iv.low, 4), round(iv.high, 4)]
    return out


def decide_d9(results: Mapping) -> Verdict:
    """D9 (collapse for large eps, none for eps <= 0.1) by the registry's rule.

    ``results`` holds :data:`MAIN_SWEEP` (Adam; eps values include 0.1 and 1, the same seeds at
    both; its runs carry ``seed``, ``separation_ratio``, ``train_loss``, ``diverged``, and its
    settings ``scales``) and the SGD sweeps (names starting with :data:`SGD_PREFIX`), shown
    beside. The word is ``rule_of("D9").decide`` on the one-sample t interval of log(S_end /
    S_start) at eps = 0.1 and the paired t interval of log S_end(1) - log S_end(0.1); then
    the plateau gate: a deciding run (eps = 0.1 or 1) that neither diverged nor reached the
    plateau of its training loss (:func:`~ddcl_theory.metrics.convergence.convergence`,
    :data:`PLATEAU_WINDOW`-epoch windows, rel :data:`PLATEAU_REL`) makes it ``inconclusive``.
    ``numbers`` also carry what the chapter prints of the sweeps: ``brackets``, ``overlap``,
    ``eps_moves``, ``modes``, ``failure_counts``, ``collapse`` (fraction per eps of the main
    sweep).
    """
    rule = rule_of("D9")
    main = results[MAIN_SWEEP]
    eps_values = main.settings.eps_values
    growth, contrast = d9_statistics(main)
    intervals = _intervals(growth, contrast)
    word = rule.decide(intervals)
    deciding = _by_seed(main, STABLE_EPS) + _by_seed(main, LARGE_EPS)
    unfinished = sum(not (r.diverged or convergence(r.train_loss, rel=PLATEAU_REL,
                                                    window=PLATEAU_WINDOW).plateau)
                     for r in deciding)
    reasons = []
    if unfinished:
        word = "inconclusive"
        reasons.append("deciding runs had not reached the plateau of their training loss")
    n = len(growth)
    if n < rule.n_seeds:
        reasons.append(f"{n} seeds, fewer than the rule's {rule.n_seeds}")
    words = [stats.decide_interval(iv, side=t.side, margin=t.margin)
             for iv, t in zip(intervals, rule.tests)]
    order = {"not reproduced": 0, "inconclusive": 1, "reproduced": 2}
    binding = min((1, 0), key=lambda i: order[words[i]])
    mde = [stats.detectable_effect_of(x) if n >= 2 else float("nan") for x in (growth, contrast)]
    sgd_keys = [k for k in results if k.startswith(SGD_PREFIX)]
    first_fail = {k: res.smallest_collapsing_eps() for k, res in results.items()}
    counts = {k: res.failure_modes() for k, res in results.items()}
    brackets = critical_step_brackets(results)
    overlap = (len(brackets) == len(sgd_keys) > 0
               and max(b[0] for b in brackets.values()) < min(b[1] for b in brackets.values()))
    eps_moves = len({first_fail[k] for k in sgd_keys}) > 1
    # how a run fails at the stability boundary (diverging or one prototype taking every token)
    # depends on the last bits of the CPU's arithmetic; which modes occur does not
    seen = {k: sorted(mode for mode, n_ in m.items() if n_) for k, m in counts.items()}
    collapse = {e: main.collapse_fraction(e) for e in eps_values}
    sgd_text = ", ".join(f"{first_fail[k]} ({k})" for k in sgd_keys)
    mode_text = "; ".join(f"{k}: " + (", ".join(MODE_NAMES[m] for m in seen[k]) or "none")
                          for k in counts)
    st = main.settings
    evidence = (
        f"MLP encoder + DDCL layer on CIFAR-10 patch tokens, Adam (eta_P = {st.lr_p:g}), "
        f"{n} seeds, {st.epochs} epochs. (1) log(S_end / S_start) at eps = 0.1: "
        f"{intervals[0].estimate:+.2f}, 95% one-sample t interval [{intervals[0].low:+.2f}, "
        f"{intervals[0].high:+.2f}] (smallest detectable effect {mde[0]:.2f}; claimed > 0). "
        f"(2) log S_end(eps = 1) - log S_end(eps = 0.1), paired by seed: "
        f"{intervals[1].estimate:+.2f}, 95% paired t interval [{intervals[1].low:+.2f}, "
        f"{intervals[1].high:+.2f}] (smallest detectable effect {mde[1]:.2f}; claimed < "
        f"log 0.1 = {rule.tests[1].margin:.2f}). Deciding runs still moving by the plateau "
        f"rule of the training loss ({PLATEAU_WINDOW}-epoch windows, rel {PLATEAU_REL:g}): "
        f"{unfinished} of {len(deciding)}. Collapse fraction (S_min/S_min(0) < 0.05 or "
        "perplexity < 1.5 at the end) "
        + ", ".join(f"{collapse[e]:.1f}" for e in eps_values)
        + f" for eps = {', '.join(str(e) for e in eps_values)}. Plain SGD ("
        f"{len(results[sgd_keys[0]].settings.seeds) if sgd_keys else 0} seeds, beside): the "
        f"smallest eps where half the seeds fail is {sgd_text}"
        + (", so the critical ratio moves with eta_P" if eps_moves else "")
        + (" while the critical encoder step eps*eta_P stays in one bracket, as the discrete "
           "analysis predicts" if overlap else "")
        + f". Failure modes: {mode_text}. "
        + (f"Why {word}: {'; '.join(reasons)}. " if reasons and word == "inconclusive" else "")
        + f"Paper: {PAPER}.")
    return Verdict(
        "D9", word, evidence,
        our_value=f"log S_end(1) - log S_end(0.1) = {intervals[1].estimate:+.2f} "
                  f"[{intervals[1].low:+.2f}, {intervals[1].high:+.2f}]; log(S_end/S_start) "
                  f"at eps = 0.1 {intervals[0].estimate:+.2f} [{intervals[0].low:+.2f}, "
                  f"{intervals[0].high:+.2f}] ({n} seeds)",
        paper_value=PAPER,
        numbers={"growth": intervals[0].as_list() + [intervals[0].estimate],
                 "contrast": intervals[1].as_list() + [intervals[1].estimate],
                 "words": words, "detectable": mde, "unfinished": unfinished,
                 "deciding_runs": len(deciding), "collapse": collapse,
                 "first_fail": first_fail, "brackets": brackets, "overlap": overlap,
                 "eps_moves": eps_moves, "modes": seen, "failure_counts": counts,
                 "trend_growth": d9_trend(main, 0)},
        rule=rule.text, n_seeds=n, interval=tuple(intervals[binding].as_list()),
        scale=f"{st.epochs} epochs", trend=d9_trend(main, 1), tolerance=D9_TOLERANCE)
