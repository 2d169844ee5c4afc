"""Claim D12 (stacked DDCL layers: the decomposition and V >= 0 at every level at once):
:func:`decide_d12`, by the registered rule (:data:`ddcl_theory.ledger.rules.RULES` ``["D12"]``).

Per run (one seed at one scale) two statistics, the registered tests' (:func:`d12_values`):

1. log10 of the largest relative residual |L_q - L_OLS - V| / L_q of either level over every
   training step, every full-data evaluation and the gap to an independent recomputation of the
   three terms, floored at :data:`~ddcl_theory.ledger.rules.D12_RESIDUAL_FLOOR` (below it the
   digits are the rounding of the CPU's kernels; claimed below -12);
2. the smallest V / L_q of either level over every training step and full-data evaluation
   (claimed above 0).

Their 95% t intervals over the seeds at the largest scale give the word
(:meth:`ddcl_theory.ledger.design.Rule.word`), then, as the rule's note registers:

* a run of any scale whose residual reaches 1e-12 or whose V falls below 0 anywhere is a
  counterexample, and the word is ``not reproduced`` (:func:`counterexamples`);
* a ``reproduced`` word becomes ``qualified`` when, in every run at the largest scale, some
  level has tau at or above the collapse threshold of the loss it trains (4 lambda_max of its
  inputs, at the start or at the end; :func:`levels_above_threshold`).

Reads a :class:`ddcl_theory.experiments.stacked_layers.StackedResult`: ``settings`` (``seeds``,
``scales``, ``epochs``, ``k1``, ``k2``), ``largest``, ``at(scale)`` and ``runs``, each run with
``scale``, ``seed``, ``n_docs``, ``n_tokens``, ``traces`` (``worst_residual``, ``min_v_share``,
``v``, ``sep_min``, ``sep_mean``) and ``thresholds`` (``tau``, ``free_energy``,
``quantisation``, ``ratio``) per level, and ``merged`` (level -> groups with ``local_tc``).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.report import below, interval_text, mean_sd
from ddcl_theory.ledger.rules import D12_RESIDUAL_FLOOR
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict

#: The identity's bound on |L_q - L_OLS - V| / L_q (test 1's margin is its log10).
IDENTITY_BOUND = 1e-12

#: How far the numbers of the evidence may move between machines: V / L_q and tau / T_c of
#: the level-2 summaries are outcomes of float64 Adam training (where the embeddings' rounding
#: changes, one seed's smallest level-2 V / L_q can move by twice the seed spread, 0.045, which
#: moves a mean of ten by 0.005 and a spread by as much); counts of runs with merged prototypes
#: move by a run or two.
TOLERANCE = Tolerance(abs=0.01, rel=0.05, count_abs=2,
                      reason="V / L_q, separations and tau / T_c after float64 Adam training; "
                             "counts of runs with merged prototypes")


def d12_values(runs: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """(log10 largest residual, smallest V / L_q), each of shape (len(runs),), the worst of
    both levels of each run."""
    if not runs:
        raise ValueError("runs: expected at least one run")
    residual = np.array([math.log10(max(max(tr.worst_residual for tr in r.traces.values()),
                                        D12_RESIDUAL_FLOOR)) for r in runs])
    v_share = np.array([min(tr.min_v_share for tr in r.traces.values()) for r in runs])
    return residual, v_share


def counterexamples(runs: Sequence) -> list[str]:
    """``"scale s, seed n, level l"`` for every level of every run where the residual reaches
    :data:`IDENTITY_BOUND` or V / L_q falls below 0."""
    bad = []
    for r in runs:
        for lvl, tr in r.traces.items():
            if not tr.worst_residual < IDENTITY_BOUND or not tr.min_v_share >= 0:
                bad.append(f"scale {r.scale:g}, seed {r.seed}, level {lvl}")
    return bad


def levels_above_threshold(run) -> list[int]:
    """The levels of ``run`` whose tau is at or above 4 lambda_max of their inputs (the
    collapse threshold of the trained L_q) at the start or at the end."""
    return [lvl for lvl, th in run.thresholds.items() if max(th.ratio) >= 1.0]


def _span(values) -> str:
    """``"a"`` or ``"a to b"``: the range of ``values`` to two decimals."""
    low, high = f"{min(values):.2f}", f"{max(values):.2f}"
    return low if low == high else f"{low} to {high}"


def d12_trend(result, binding: int) -> dict[str, list[float]]:
    """The binding test's statistic per scale: ``{"<n> documents": [estimate, low, high]}``."""
    rule = rule_of("D12")
    trend = {}
    for scale in result.settings.scales:
        runs = result.at(scale)
        res = rule.evaluate(list(d12_values(runs)))[binding]
        trend[f"{runs[0].n_docs} documents"] = [res.estimate, *res.interval]
    return trend


def decide_d12(result) -> Verdict:
    """D12 from the runs of the stack (see the module docstring for the rule)."""
    rule = rule_of("D12")
    s = result.settings
    runs = result.largest
    if not runs:
        raise ValueError("result: expected runs at the largest scale")
    residual, v_share = d12_values(runs)
    results = rule.evaluate([residual, v_share])
    word = rule.word(results)
    bad = counterexamples(result.runs)
    above = [levels_above_threshold(r) for r in runs]
    reasons = []
    if bad:
        word = "not reproduced"
        reasons.append(f"counterexample: the identity or the sign of V fails at {len(bad)} "
                       f"level(s) of the runs ({'; '.join(bad[:3])})")
    elif word == "reproduced" and all(above):
        word = "qualified"
        reasons.append("qualified: in every run at the largest scale, level(s) "
                       f"{sorted(set().union(*above))} train at tau at or above the collapse "
                       "threshold of L_q, where V >= 0 holds only as the V = 0 of a bank free "
                       "to collapse")
    if len(runs) < rule.n_seeds:
        reasons.append(f"{len(runs)} seeds (the rule asks {rule.n_seeds}): a pilot")
    binding = rule.binding(results)
    worst = max(tr.worst_residual for r in result.runs for tr in r.traces.values())
    level_v = {lvl: [r.traces[lvl].min_v_share for r in runs] for lvl in (1, 2)}
    ratio = {lvl: np.array([r.thresholds[lvl].ratio for r in runs]) for lvl in (1, 2)}
    tc_f = np.array([r.thresholds[1].tau / r.thresholds[1].free_energy[0] for r in runs])
    local = [g.local_tc / r.thresholds[1].tau for r in runs for g in r.merged[1]]
    with_merges = sum(bool(r.merged[1]) for r in runs)
    sep = np.array([r.traces[1].sep_mean[-1] / r.traces[1].sep_mean[0] for r in runs])
    first = runs[0]
    scales = f"{len(s.scales)} scale" + ("s" if len(s.scales) > 1 else "")
    identity = (f"|L_q - L_OLS - V| / L_q {below(worst, IDENTITY_BOUND)}, the terms agree with "
                f"an independent recomputation to the same bound, and V >= 0" if not bad else
                f"the largest |L_q - L_OLS - V| / L_q is {worst:.3g}")
    below_tc = ("below" if max(ratio[1].max(), ratio[2].max()) < 1 else "not everywhere below")
    merges = f"runs in which level-1 prototypes merge: {with_merges} of {len(runs)}"
    if local:
        merges += (f"; the tokens of {sum(x < 1 for x in local)} of the {len(local)} merged "
                   f"groups have a collapse threshold of L_q below tau_1 (threshold / tau_1 "
                   f"{_span(local)})")
    evidence = (
        f"Two stacked projection-free DDCL levels (K1 = {s.k1} token prototypes, K2 = {s.k2} "
        f"document prototypes on the mean soft centroids) trained jointly in float64 for "
        f"{s.epochs} epochs on {first.n_docs} 20 Newsgroups training messages "
        f"({first.n_tokens:,} MiniLM tokens), {len(runs)} seeds; {len(result.runs)} runs over "
        f"{scales}. At both levels, at every training step and every full-data evaluation of "
        f"every run, {identity}. Smallest V / L_q per run: level 1 "
        f"{mean_sd(level_v[1], '.3f')}, level 2 {mean_sd(level_v[2], '.3f')}; the smaller of "
        f"the two {interval_text(results[1], '.3f')} (95% t). tau / (4 lambda_max of the "
        f"level's inputs, the collapse threshold of the L_q it trains), start and end: level 1 "
        f"{_span(ratio[1].ravel())} (its inputs do not move), level 2 "
        f"{_span(ratio[2].ravel())}, so both levels train {below_tc} it; tau_1 / T_c of the "
        f"free energy (2 lambda_max) "
        f"{_span(tc_f)}. The level-1 bank ends with {_span(sep)} of its mean prototype "
        f"distance; {merges}.")
    if reasons:
        evidence += " " + "; ".join(r[0].upper() + r[1:] for r in reasons) + "."
    return Verdict(
        "D12", word, evidence,
        our_value=(f"residual {below(worst, IDENTITY_BOUND)} and V >= 0 at both levels, every "
                   f"step of {len(result.runs)} runs; tau / T_c(L_q) {ratio[1].max():.2f} and "
                   f"{ratio[2].max():.2f}"),
        numbers={"worst_residual": worst, "counterexamples": bad,
                 "min_v_share": {str(lvl): v for lvl, v in level_v.items()},
                 "tau_over_tc_quantisation": {str(lvl): ratio[lvl].tolist() for lvl in (1, 2)},
                 "tau_over_tc_free_energy_level1": tc_f.tolist(),
                 "runs_with_merged_level1": with_merges,
                 "levels_above_threshold": above},
        rule=rule.text, n_seeds=results[binding].n_seeds,
        interval=tuple(results[binding].interval),
        scale=f"{first.n_docs} documents", trend=d12_trend(result, binding),
        tolerance=TOLERANCE, tests=tuple(results), gates=(),
        per_seed={rule.tests[0].statistic: residual.tolist(),
                  rule.tests[1].statistic: v_share.tolist(), "seed": [r.seed for r in runs]})
