"""Claim D12 (the decomposition at every level of stacked DDCL layers): :func:`decide_d12`.

Reads a :class:`ddcl_theory.experiments.stacked_layers.StackedResult`: its ``settings`` (``k1``,
``k2``, ``epochs``), ``n_docs``, ``n_tokens``, ``nmi`` and the per-level ``traces`` (``residual``,
``recomputed_gap``, ``v``, ``step_min_v``).
"""
from __future__ import annotations

import numpy as np

from ddcl_theory.ledger.report import below
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict

#: The float64 rounding level the identity must hold to at every level.
IDENTITY_BOUND = 1e-12

#: How far the numbers of the evidence may move between machines.
TOLERANCE = Tolerance(abs=0.01, rel=0.05, reason="V and NMI after Adam training (float64)")

RULE = ("confirmed: at both levels, after every epoch, |L_q - L_OLS - V| / L_q and the gap to "
        "an independent recomputation of the terms are below 1e-12, and V > 0 at every epoch "
        "end and every training step; refuted otherwise")


def decide_d12(result) -> Verdict:
    """D12 from the traces of both levels: ``confirmed`` when the worst residual and the worst
    gap to the recomputation are below :data:`IDENTITY_BOUND` and the smallest V (over epoch
    ends and training steps) is positive at both levels; ``refuted`` otherwise."""
    traces = result.traces
    if not traces:
        raise ValueError("result: expected the traces of at least one level")
    s = result.settings
    worst = max(max(tr.residual) for tr in traces.values())
    worst_gap = max(float(np.nanmax(tr.recomputed_gap)) for tr in traces.values())
    min_v = {lvl: float(np.nanmin(list(tr.step_min_v) + list(tr.v)))
             for lvl, tr in traces.items()}
    confirmed = (worst < IDENTITY_BOUND and worst_gap < IDENTITY_BOUND
                 and all(v > 0 for v in min_v.values()))
    evidence = (
        f"Two stacked projection-free DDCL layers (K1 = {s.k1} token prototypes, "
        f"K2 = {s.k2} document prototypes on the mean soft centroids) trained jointly in "
        f"float64 on {result.n_docs} 20 Newsgroups documents ({result.n_tokens:,} MiniLM tokens) "
        f"for {s.epochs} epochs: at both levels, after every epoch, |L_q - L_OLS - V| / L_q "
        f"{below(worst, IDENTITY_BOUND)} and the terms agree with an independent recomputation; "
        f"V > 0 at every step (min {min_v[1]:.3g} at level 1, {min_v[2]:.3g} at level 2). A "
        "corollary of the one-level decomposition applied to each level's inputs. Level-1 min "
        "prototype distance shrinks (pairs merge) while V stays positive; level-2 prototypes "
        f"group documents by topic (NMI {result.nmi:.2f}).")
    return Verdict("D12", "confirmed" if confirmed else "refuted", evidence,
                   our_value=(f"max residual {below(worst, IDENTITY_BOUND)}; min V "
                              f"{min_v[1]:.3g} / {min_v[2]:.3g}"),
                   numbers={"worst_residual": worst, "worst_recomputation_gap": worst_gap,
                            "min_v": {str(k): v for k, v in min_v.items()}},
                   rule=RULE, n_seeds=1, tolerance=TOLERANCE)
