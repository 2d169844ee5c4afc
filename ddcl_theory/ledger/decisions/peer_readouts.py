"""The decision of the peer-readouts chapter: claim D17 (Slot Attention and Perceiver latents
have no guarantee against collapse and Slot Attention iterates at inference; DDCL needs
neither).

Reads a study result (``settings``, ``main``, ``sweep``, ``flops``, ``slot_iterations``) and
its sweep rows (``variant``, ``outcome``) by attribute; never from timings.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict

__all__ = ["D17_RULE", "d17_parts", "decide_d17"]

D17_RULE = ("reproduced: both peers collapse in every run of some sweep setting, DDCL in no "
            "run, and Slot Attention's FLOPs exceed DDCL's at every length; refuted: a peer "
            "never collapses, or a DDCL run collapses with tau below the critical temperature "
            "of its tokens; qualified otherwise")

#: How far the accuracies quoted in the evidence may move between machines.
D17_TOLERANCE = Tolerance(abs=0.06, reason="seed means of test accuracy after short trainings; "
                          "the collapse outcomes are asserted with margins")


def _bound(ratio: float, above: bool) -> str:
    """Words for the extreme tau / T_c ratio of a group of runs, robust to the last digits:
    "more than 10 times" (above, ratio > 10), "less than half of" (below, ratio < 0.5), else the
    value."""
    if not math.isfinite(ratio):
        return "(no such run)"
    if above and ratio > 10:
        return "more than 10 times"
    if not above and ratio < 0.5:
        return "less than half of"
    return f"{ratio:.2g} times"


def _mean_accuracy(result: Any, task: str, kind: str) -> float:
    return float(np.mean([h.final.test_acc for h in result.main[task][kind]]))


def _ddcl_histories(result: Any) -> list:
    """Every DDCL run's history: the sweep's, then the main runs' of every task."""
    return ([r.history for r in result.sweep if r.variant.readout == "ddcl"]
            + [h for task in result.main for h in result.main[task]["ddcl"]])


def d17_parts(result: Any, rows: Sequence[Any]) -> dict[str, bool]:
    """The parts of the D17 decision.

    * ``peers_collapse``: Slot Attention and the Perceiver each have a setting in which every
      run collapsed (no guarantee against collapse);
    * ``peers_stay_collapsed``: from near-equal starts most peer runs (more than half) ended
      collapsed (no restoring force);
    * ``ddcl_escapes``: some near-equal DDCL setting escaped in every run;
    * ``ddcl_collapses``: some DDCL run collapsed;
    * ``ddcl_threshold``: every collapsed DDCL run ended with tau above the critical
      temperature of its tokens (collapse only where its theory allows it: below T_c the
      collapsed bank is a saddle);
    * ``slot_costs_more``: Slot Attention's FLOPs exceed DDCL's at every length.
    """
    by = lambda kind: [r for r in rows if r.variant.readout == kind]
    peer_runs = [r for r in result.sweep if r.variant.readout != "ddcl" and r.variant.near_equal]
    ddcl = [h.final for h in _ddcl_histories(result)]
    flops = result.flops
    return {
        "peers_collapse": all(any(r.outcome == "collapsed" for r in by(k))
                              for k in ("slot", "perceiver")),
        "peers_stay_collapsed": bool(peer_runs) and sum(
            r.history.final.collapsed("maps") for r in peer_runs) > len(peer_runs) / 2,
        "ddcl_escapes": any(r.outcome == "avoided" for r in by("ddcl") if r.variant.near_equal),
        "ddcl_collapses": any(f.collapsed("maps") for f in ddcl),
        "ddcl_threshold": all(f.critical_ratio > 1 for f in ddcl if f.collapsed("maps")),
        "slot_costs_more": all(a > b for a, b in zip(flops["slot"], flops["ddcl"])),
    }


def decide_d17(result: Any, rows: Sequence[Any], titles: Mapping[str, str]) -> Verdict:
    """D17 from a study ``result``, its sweep ``rows`` (one per setting, with ``outcome``
    "collapsed", "avoided" or "mixed") and the tasks' display ``titles``.

    "reproduced": the peers collapse, DDCL never does, Slot Attention costs more. "refuted":
    the peers never collapse, or DDCL collapses where its theory says it cannot (below T_c).
    "qualified" otherwise (in particular: DDCL collapses, but only above T_c). The parts
    (:func:`d17_parts`) are in ``numbers``.
    """
    parts = d17_parts(result, rows)
    if not parts["peers_collapse"] or not parts["ddcl_threshold"]:
        word = "refuted"
    elif not parts["ddcl_collapses"] and parts["slot_costs_more"]:
        word = "reproduced"
    else:
        word = "qualified"
    by = lambda kind: [r for r in rows if r.variant.readout == kind]
    peer_runs = [r for r in result.sweep if r.variant.readout != "ddcl" and r.variant.near_equal]
    stuck = sum(r.history.final.collapsed("maps") for r in peer_runs)

    def listing(kind: str, outcome: str) -> str:
        names = [r.variant.label for r in by(kind) if r.outcome == outcome]
        return "; ".join(names) if names else "none"

    finals = [h.final for h in _ddcl_histories(result)]
    lo = min((f.critical_ratio for f in finals if f.collapsed("maps")), default=float("nan"))
    hi = max((f.critical_ratio for f in finals if not f.collapsed("maps")), default=float("nan"))
    flops = result.flops
    ratios = {k: [f / d for f, d in zip(flops[k], flops["ddcl"])] for k in flops}
    s = result.settings
    accs = "; ".join(
        f"{titles[t]}: " + ", ".join(f"{k} {_mean_accuracy(result, t, k):.2f}"
                                     for k in result.main[t]) for t in result.main)
    evidence = (
        f"Mechanism sweep on {titles[s.sweep_task]} ({len(s.sweep_seeds)} seeds per "
        f"setting, {s.sweep_epochs} epochs; collapse = attention maps with relative min distance "
        f"< 0.05 and effective rank < 1.5). Slot Attention collapsed in every run with: "
        f"{listing('slot', 'collapsed')}; avoided collapse with: {listing('slot', 'avoided')}. "
        f"Perceiver collapsed with: {listing('perceiver', 'collapsed')}; avoided with: "
        f"{listing('perceiver', 'avoided')}. From near-equal starts {stuck} of "
        f"{len(peer_runs)} peer runs ended collapsed. DDCL collapsed in every run with: "
        f"{listing('ddcl', 'collapsed')}; escaped a near-equal start in every run with: "
        + "; ".join(r.variant.label for r in by("ddcl")
                    if r.variant.near_equal and r.outcome == "avoided")
        + f". Every collapsed DDCL run ended with tau {_bound(lo, above=True)} the critical "
        f"temperature of its (moving) tokens, every other DDCL run, the main runs on all tasks "
        f"included, with tau {_bound(hi, above=False)} it: DDCL's protection is T_c, and joint "
        f"training moves T_c. Inference FLOPs per sequence relative to DDCL at T = "
        f"{', '.join(map(str, s.cost_lengths))}: Slot Attention ({result.slot_iterations} "
        f"iterations) {', '.join(f'{x:.2f}' for x in ratios['slot'])}, Perceiver "
        f"{', '.join(f'{x:.2f}' for x in ratios['perceiver'])}; both peers are linear in T like "
        f"DDCL. Test accuracy (mean of {len(s.seeds)} seeds, default settings) - {accs}.")
    our_value = (f"peers collapse: slot in {sum(r.outcome == 'collapsed' for r in by('slot'))}, "
                 f"perceiver in {sum(r.outcome == 'collapsed' for r in by('perceiver'))} "
                 f"settings; DDCL collapses only above T_c; slot FLOPs "
                 f"x{min(ratios['slot']):.2f}-{max(ratios['slot']):.2f} of DDCL")
    return Verdict("D17", word, evidence, our_value=our_value, numbers=dict(parts),
                   rule=D17_RULE, n_seeds=len(s.sweep_seeds), tolerance=D17_TOLERANCE)
