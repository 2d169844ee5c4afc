"""Claim D12 (stacked DDCL layers: the decomposition at every level): :func:`decide_d12`.

D12 has no registry rule (it is a mathematical claim checked on one run, not an empirical
comparison). Its rule here: the identity L_q = L_OLS + V and V > 0 must hold at both levels
(else ``refuted``); and since the claim is that stacked layers *work*, each level's bank must
also stay separated: a level whose smallest prototype distance falls more than tenfold from the
start (the collapse margin of claim D9, log(0.1)) has lost distinct prototypes, and the verdict
is then ``qualified`` with that condition named; ``confirmed`` when no level collapses.

Reads a :class:`ddcl_theory.experiments.stacked_layers.StackedResult`: its ``settings`` (``k1``,
``k2``, ``epochs``), ``n_docs``, ``n_tokens``, ``nmi`` and the per-level ``traces``
(``residual``, ``recomputed_gap``, ``v``, ``step_min_v``, ``sep_min``, ``sep_mean``, ``used``).
"""
from __future__ import annotations

import numpy as np

from ddcl_theory.ledger.report import below
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict

#: The float64 rounding level the identity must hold to at every level.
IDENTITY_BOUND = 1e-12
#: A level collapses when its smallest prototype distance ends below this share of its start.
COLLAPSE_RATIO = 0.1

#: How far the numbers of the evidence may move between machines.
TOLERANCE = Tolerance(abs=0.01, rel=0.05, reason="V, separations and NMI after Adam training "
                      "(float64)")

RULE = ("refuted unless, at both levels, after every epoch, |L_q - L_OLS - V| / L_q and the gap "
        "to an independent recomputation of the terms are below 1e-12, and V > 0 at every "
        "epoch end and every training step; then qualified when a level's smallest prototype "
        "distance ends below 0.1 of its start (distinct prototypes lost: the stack keeps its "
        "identity but not its bank), confirmed otherwise")


def collapsed_levels(traces) -> dict[int, float]:
    """level -> end/start ratio of its smallest prototype distance, for the levels whose ratio
    is below :data:`COLLAPSE_RATIO`."""
    ratios = {lvl: tr.sep_min[-1] / tr.sep_min[0] for lvl, tr in traces.items()}
    return {lvl: r for lvl, r in ratios.items() if r < COLLAPSE_RATIO}


def decide_d12(result) -> Verdict:
    """D12 from the traces of both levels (see the module docstring for the rule)."""
    traces = result.traces
    if not traces:
        raise ValueError("result: expected the traces of at least one level")
    s = result.settings
    worst = max(max(tr.residual) for tr in traces.values())
    worst_gap = max(float(np.nanmax(tr.recomputed_gap)) for tr in traces.values())
    min_v = {lvl: float(np.nanmin(list(tr.step_min_v) + list(tr.v)))
             for lvl, tr in traces.items()}
    identity = (worst < IDENTITY_BOUND and worst_gap < IDENTITY_BOUND
                and all(v > 0 for v in min_v.values()))
    fell = collapsed_levels(traces)
    word = "refuted" if not identity else "qualified" if fell else "confirmed"
    separations = "; ".join(
        f"level {lvl}: smallest prototype distance {tr.sep_min[0]:.3g} -> {tr.sep_min[-1]:.3g} "
        f"(x{tr.sep_min[-1] / tr.sep_min[0]:.2g}), mean {tr.sep_mean[0]:.3g} -> "
        f"{tr.sep_mean[-1]:.3g}, {tr.used[-1]:.0%} of the bank in use"
        for lvl, tr in traces.items())
    if not identity:
        condition = "The identity or the sign of V fails at some level."
    elif fell:
        condition = ("Qualified: the identity holds, but the bank of level "
                     + " and ".join(str(lvl) for lvl in fell)
                     + " does not stay separated (its smallest prototype distance falls more "
                     "than tenfold: pairs of prototypes merge, the merging the free-energy "
                     "analysis predicts for a bank larger than its temperature supports); the "
                     "claim holds as an identity, not as a stack of distinct prototypes at "
                     "every level.")
    else:
        condition = "Every level's prototypes stay separated."
    evidence = (
        f"Two stacked projection-free DDCL layers (K1 = {s.k1} token prototypes, "
        f"K2 = {s.k2} document prototypes on the mean soft centroids) trained jointly in "
        f"float64 on {result.n_docs} 20 Newsgroups documents ({result.n_tokens:,} MiniLM tokens) "
        f"for {s.epochs} epochs, one seed: at both levels, after every epoch, "
        f"|L_q - L_OLS - V| / L_q {below(worst, IDENTITY_BOUND)} and the terms agree with an "
        f"independent recomputation (gap {below(worst_gap, IDENTITY_BOUND)}); V > 0 at every "
        f"step (min {min_v[1]:.3g} at level 1, {min_v[2]:.3g} at level 2): a corollary of the "
        f"one-level decomposition applied to each level's inputs. Separation: {separations}. "
        f"{condition} Level-2 prototypes group documents by topic (NMI {result.nmi:.2f}).")
    return Verdict("D12", word, evidence,
                   our_value=(f"max residual {below(worst, IDENTITY_BOUND)}; min V "
                              f"{min_v[1]:.3g} / {min_v[2]:.3g}; level-1 min separation "
                              f"x{traces[1].sep_min[-1] / traces[1].sep_min[0]:.2g}"),
                   numbers={"worst_residual": worst, "worst_recomputation_gap": worst_gap,
                            "min_v": {str(k): v for k, v in min_v.items()},
                            "separation_ratio": {str(lvl): tr.sep_min[-1] / tr.sep_min[0]
                                                 for lvl, tr in traces.items()},
                            "collapsed_levels": sorted(fell)},
                   rule=RULE, n_seeds=1, tolerance=TOLERANCE)
