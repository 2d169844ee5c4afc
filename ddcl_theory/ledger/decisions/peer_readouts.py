"""The decision of the peer-readouts chapter: claim D17 (Slot Attention and Perceiver latents
have no guarantee against collapse and Slot Attention iterates at inference; DDCL needs
neither).

The rule is the registry's (:func:`ddcl_theory.ledger.claims.rule_of` ``("D17")``), fixed before
the run: the deciding statistic is the normalised usage perplexity of the readout's S slots,
latents or prototypes (:attr:`CollapseRecord.normalised_usage`: exp of the entropy of the
histogram of the tokens' first choices, divided by S), DDCL minus Slot Attention and DDCL minus
Perceiver, paired by seed (same seed, same tokens), on the study's deciding task at the largest
scale (the last epoch) that ran; 95% paired t intervals over the seeds
(:func:`ddcl_theory.ledger.stats.paired_t`); the word from :meth:`Rule.decide`. Then the gates:

* a DDCL run (main runs of every task and the mechanism sweep) whose attention rows collapsed
  (:meth:`CollapseRecord.collapsed`) while its tau ended below the critical temperature of the
  loss it trains (L_q with q differentiated, 4 lambda_max of its current tokens) refutes the
  claim (the rule's ``requires``);
* the requirement itself: every deciding DDCL run keeps tau below that T_c at every epoch; if
  not, the claim was not tested there: ``inconclusive``;
* every deciding run (three readouts, every seed) must reach the plateau of its training
  cross-entropy (:func:`ddcl_theory.metrics.convergence.convergence`, per-epoch means); if not,
  ``inconclusive``.

Reads a study result by attribute (``settings`` with ``decide_task``, ``seeds``, ``epochs``,
``scales()``, ``cost_lengths``, ``sweep_seeds``, ``sweep_epochs``, ``sweep_task``; ``main``;
``sweep``; ``flops``; ``slot_iterations``) and its sweep rows (``variant``, ``outcome``); never
timings.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ddcl_theory.ledger import stats
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict
from ddcl_theory.metrics.convergence import convergence

__all__ = ["D17_TOLERANCE", "PEERS", "d17_gates", "d17_intervals", "d17_parts", "d17_trend",
           "decide_d17", "usage_values"]

#: The peers, in the order of the registry's tests.
PEERS = ("slot", "perceiver")
_NAMES = {"ddcl": "DDCL", "slot": "Slot Attention", "perceiver": "Perceiver"}

#: How far the numbers quoted in the evidence may move between machines.
D17_TOLERANCE = Tolerance(abs=0.06, reason="seed means of usage perplexities and accuracies "
                          "after short trainings; the word is decided on paired intervals")


def _epoch_index(history: Any, epoch: int) -> int:
    """Index of ``epoch`` in ``history.records`` (records[0] is epoch 0, before training)."""
    for i, rec in enumerate(history.records):
        if rec.epoch == epoch:
            return i
    raise ValueError(f"epoch: no record of epoch {epoch} (the run has "
                     f"{history.records[-1].epoch} epochs)")


def usage_values(result: Any, kind: str, epoch: int | None = None) -> np.ndarray:
    """(seeds,) normalised usage perplexity of ``kind`` on the deciding task at ``epoch``
    (default: the last), in seed order."""
    hs = result.main[result.settings.decide_task][kind]
    if epoch is None:
        return np.array([h.final.normalised_usage for h in hs])
    return np.array([h.records[_epoch_index(h, epoch)].normalised_usage for h in hs])


def d17_intervals(result: Any, epoch: int | None = None) -> list[stats.Interval]:
    """The registry's two intervals, in order: paired t of DDCL - Slot Attention and of
    DDCL - Perceiver (normalised usage perplexity, paired by seed) at ``epoch``."""
    ours = usage_values(result, "ddcl", epoch)
    return [stats.paired_t(ours, usage_values(result, peer, epoch)) for peer in PEERS]


def d17_trend(result: Any, peer: str = "slot") -> dict[str, list[float]]:
    """Scale label ("epoch e") -> [estimate, low, high] of DDCL - ``peer`` at each epoch of
    ``settings.scales()``."""
    i = PEERS.index(peer)
    out = {}
    for epoch in result.settings.scales():
        iv = d17_intervals(result, epoch)[i]
        out[f"epoch {epoch}"] = [round(iv.estimate, 4), round(iv.low, 4), round(iv.high, 4)]
    return out


def _ddcl_histories(result: Any) -> list:
    """Every DDCL run's history: the sweep's, then the main runs' of every task."""
    return ([r.history for r in result.sweep if r.variant.readout == "ddcl"]
            + [h for task in result.main for h in result.main[task]["ddcl"]])


def d17_gates(result: Any) -> dict[str, Any]:
    """The gates of the D17 rule.

    * ``refuting``: DDCL runs (sweep and main) that collapsed with tau / T_c < 1 at the end;
    * ``above_tc``: deciding DDCL runs with tau / T_c >= 1 at some epoch (requirement unmet);
    * ``max_ratio``: the largest tau / T_c of the deciding DDCL runs over their epochs;
    * ``unfinished``: deciding runs ("readout/seed") whose training cross-entropy did not reach
      its plateau; ``plateaus``: readout -> [Convergence per seed].
    """
    task = result.settings.decide_task
    refuting = sum(h.final.collapsed("maps") and h.final.critical_ratio < 1
                   for h in _ddcl_histories(result))
    ratios = [h.series("critical_ratio") for h in result.main[task]["ddcl"]]
    above = sum(bool(np.nanmax(r) >= 1) for r in ratios)
    plateaus = {k: [convergence(h.series("loss")[1:]) for h in result.main[task][k]]
                for k in ("ddcl",) + PEERS}
    unfinished = [f"{k}/{seed}" for k in plateaus
                  for seed, c in zip(result.settings.seeds, plateaus[k]) if not c.plateau]
    return {"refuting": int(refuting), "above_tc": int(above),
            "max_ratio": float(max(np.nanmax(r) for r in ratios)),
            "unfinished": unfinished, "plateaus": plateaus}


def d17_parts(result: Any, rows: Sequence[Any]) -> dict[str, bool]:
    """Descriptive parts beside the rule (they decide nothing):

    * ``peers_collapse``: Slot Attention and the Perceiver each have a sweep setting in which
      every run collapsed;
    * ``peers_stay_collapsed``: from near-equal starts most peer runs ended collapsed;
    * ``ddcl_escapes``: some near-equal DDCL setting escaped in every run;
    * ``ddcl_collapses``: some DDCL run collapsed;
    * ``ddcl_threshold``: every collapsed DDCL run ended with tau above T_c of its trained L_q;
    * ``slot_costs_more``: Slot Attention's FLOPs exceed DDCL's at every length.
    """
    by = lambda kind: [r for r in rows if r.variant.readout == kind]
    peer_runs = [r for r in result.sweep if r.variant.readout != "ddcl" and r.variant.near_equal]
    ddcl = [h.final for h in _ddcl_histories(result)]
    flops = result.flops
    return {
        "peers_collapse": all(any(r.outcome == "collapsed" for r in by(k)) for k in PEERS),
        "peers_stay_collapsed": bool(peer_runs) and sum(
            r.history.final.collapsed("maps") for r in peer_runs) > len(peer_runs) / 2,
        "ddcl_escapes": any(r.outcome == "avoided" for r in by("ddcl") if r.variant.near_equal),
        "ddcl_collapses": any(f.collapsed("maps") for f in ddcl),
        "ddcl_threshold": all(f.critical_ratio > 1 for f in ddcl if f.collapsed("maps")),
        "slot_costs_more": all(a > b for a, b in zip(flops["slot"], flops["ddcl"])),
    }


def _interval_text(iv: stats.Interval) -> str:
    return f"{iv.estimate:+.3f} [{iv.low:+.3f}, {iv.high:+.3f}]"


def decide_d17(result: Any, rows: Sequence[Any], titles: Mapping[str, str]) -> Verdict:
    """D17 by the registry's rule from a study ``result`` (see the module docstring), its sweep
    ``rows`` (for the descriptive parts) and the tasks' display ``titles``."""
    rule = rule_of("D17")
    s = result.settings
    task = s.decide_task
    intervals = d17_intervals(result)
    gates = d17_gates(result)
    word = rule.decide(intervals)
    reasons = []
    if gates["refuting"]:
        word = "refuted"
        reasons.append(f"{gates['refuting']} DDCL run(s) collapsed with tau below T_c of L_q")
    elif gates["above_tc"]:
        word = "inconclusive"
        reasons.append(f"{gates['above_tc']} deciding DDCL run(s) reached tau >= T_c of L_q "
                       f"(the rule's requirement)")
    elif gates["unfinished"]:
        word = "inconclusive"
        reasons.append(f"{len(gates['unfinished'])} of {3 * len(s.seeds)} deciding runs had not "
                       f"reached the plateau of their training cross-entropy")
    if len(s.seeds) < rule.n_seeds:
        reasons.append(f"{len(s.seeds)} seeds (the rule asks {rule.n_seeds})")
    ours = usage_values(result, "ddcl")
    peers = {k: usage_values(result, k) for k in PEERS}
    mde = {k: stats.detectable_effect_of(ours - peers[k]) if len(ours) > 1 else math.nan
           for k in PEERS}
    token_ppl = {k: float(np.mean([h.final.token_perplexity / h.final.vectors.count
                                   for h in result.main[task][k]])) for k in ("ddcl",) + PEERS}
    trend = d17_trend(result, "slot")
    first, last = next(iter(trend.values())), trend[f"epoch {s.epochs}"]
    direction = ("widens" if abs(last[0]) > abs(first[0]) else "narrows")
    parts = d17_parts(result, rows)
    flops = result.flops
    slot_flops = [f / d for f, d in zip(flops["slot"], flops["ddcl"])]
    plateau_text = "; ".join(
        f"{_NAMES[k]} {sum(c.plateau for c in cs)} of {len(cs)}"
        for k, cs in gates["plateaus"].items())
    evidence = (
        f"{titles[task]}, {len(s.seeds)} paired seeds, {s.epochs} epochs, S = "
        f"{s.task_shape(task)[1]}: normalised usage perplexity DDCL {ours.mean():.3f}, Slot "
        f"Attention {peers['slot'].mean():.3f}, Perceiver {peers['perceiver'].mean():.3f}. "
        f"DDCL - Slot Attention {_interval_text(intervals[0])} (smallest detectable "
        f"{mde['slot']:.3f}); DDCL - Perceiver {_interval_text(intervals[1])} (smallest "
        f"detectable {mde['perceiver']:.3f}); 95% paired t. Over the epochs "
        f"{', '.join(map(str, s.scales()))} the gap to Slot Attention {direction} "
        f"({first[0]:+.3f} to {last[0]:+.3f}). Per-token perplexity / S beside (1: every token "
        f"shared equally): DDCL {token_ppl['ddcl']:.2f}, Slot Attention {token_ppl['slot']:.2f}, "
        f"Perceiver {token_ppl['perceiver']:.2f}. Plateau of the training cross-entropy: "
        f"{plateau_text}. DDCL trains L_q with q differentiated; its tau / T_c (T_c = 4 "
        f"lambda_max of its current tokens) stayed at most {gates['max_ratio']:.2f}; DDCL runs "
        f"that collapsed below that T_c: {gates['refuting']}. Slot Attention runs "
        f"{result.slot_iterations} iterations at inference, FLOPs "
        f"{min(slot_flops):.2f}-{max(slot_flops):.2f} times DDCL's. The sources give no number. "
        + (f"Inconclusive or refuted because: {'; '.join(reasons)}." if reasons else ""))
    our_value = (f"usage DDCL {ours.mean():.2f} vs Slot Attention {peers['slot'].mean():.2f}, "
                 f"Perceiver {peers['perceiver'].mean():.2f}")
    numbers = dict(parts) | {
        "usage": {"ddcl": float(ours.mean()), **{k: float(v.mean()) for k, v in peers.items()}},
        "interval_perceiver": [intervals[1].low, intervals[1].high],
        "detectable": {k: float(v) for k, v in mde.items()},
        "trend_perceiver": d17_trend(result, "perceiver"),
        "unfinished": len(gates["unfinished"]), "refuting": gates["refuting"],
        "above_tc": gates["above_tc"], "max_ratio": gates["max_ratio"]}
    return Verdict("D17", word, evidence, our_value=our_value,
                   paper_value="not measured in the sources", numbers=numbers, rule=rule.text,
                   n_seeds=len(s.seeds), interval=(intervals[0].low, intervals[0].high),
                   scale=f"epoch {s.epochs}", trend=trend, tolerance=D17_TOLERANCE)
