"""The decision of the peer-readouts chapter: claim D17 (Slot Attention and Perceiver latents
have no guarantee against collapse and Slot Attention iterates at inference; DDCL needs
neither).

The word comes from the amended rule (:func:`ddcl_theory.ledger.claims.amended_rule_of`
``("D17")``): the registered statistic below cannot see collapse (identical Slot Attention slots
split the tokens evenly at random and score its maximum), so the amended rule decides on the
effective rank of the S attention maps / S (:func:`rank_values`, the quantity the collapse rule
reads), paired by seed, and reads tau / T_c at the start of a run as well as at its end (a
DDCL run that starts below T_c and collapses after joint training moved T_c below tau
qualifies the guarantee). The registered rule's word is still decided and shown beside it.

The registered rule (:func:`ddcl_theory.ledger.claims.rule_of` ``("D17")``), fixed before
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
from ddcl_theory.ledger.claims import amended_rule_of, rule_of
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict
from ddcl_theory.metrics.convergence import convergence

__all__ = ["D17_TOLERANCE", "PEERS", "d17_gates", "d17_intervals", "d17_parts",
           "d17_rank_intervals", "d17_trend", "decide_d17", "rank_values", "usage_values"]

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


def rank_values(result: Any, kind: str, epoch: int | None = None) -> np.ndarray:
    """(seeds,) effective rank of the S attention maps / S of ``kind`` on the deciding task at
    ``epoch`` (default: the last), in seed order: 1 when the slots read S different mixtures
    of the tokens, 1/S when they all read the same one (collapse)."""
    hs = result.main[result.settings.decide_task][kind]
    recs = [h.final if epoch is None else h.records[_epoch_index(h, epoch)] for h in hs]
    return np.array([r.maps.effective_rank / r.vectors.count for r in recs])


def d17_rank_intervals(result: Any, epoch: int | None = None) -> list[stats.Interval]:
    """The amended rule's two intervals, in order: paired t of DDCL - Slot Attention and of
    DDCL - Perceiver (effective rank of the maps / S, paired by seed) at ``epoch``."""
    ours = rank_values(result, "ddcl", epoch)
    return [stats.paired_t(ours, rank_values(result, peer, epoch)) for peer in PEERS]


def d17_trend(result: Any, peer: str = "slot", statistic: str = "rank") -> dict[str, list[float]]:
    """Scale label ("epoch e") -> [estimate, low, high] of DDCL - ``peer`` at each epoch of
    ``settings.scales()``, on the amended statistic (``"rank"``) or the registered one
    (``"usage"``)."""
    if statistic not in ("rank", "usage"):
        raise ValueError(f"statistic: expected 'rank' or 'usage', got {statistic!r}")
    i = PEERS.index(peer)
    of = d17_rank_intervals if statistic == "rank" else d17_intervals
    out = {}
    for epoch in result.settings.scales():
        iv = of(result, epoch)[i]
        out[f"epoch {epoch}"] = [round(iv.estimate, 4), round(iv.low, 4), round(iv.high, 4)]
    return out


def _direction(first: Sequence[float], last: Sequence[float]) -> str:
    """How a gap moved from the first scale to the last, on [estimate, low, high]: it widens
    (narrows) only when the two intervals do not overlap."""
    if first[1] <= last[2] and last[1] <= first[2]:
        return "holds"
    return "widens" if abs(last[0]) > abs(first[0]) else "narrows"


def _ddcl_histories(result: Any) -> list:
    """Every DDCL run's history: the sweep's, then the main runs' of every task."""
    return ([r.history for r in result.sweep if r.variant.readout == "ddcl"]
            + [h for task in result.main for h in result.main[task]["ddcl"]])


def d17_gates(result: Any) -> dict[str, Any]:
    """The gates of the D17 rule.

    * ``refuting``: DDCL runs (sweep and main) that collapsed with tau / T_c < 1 at the end;
    * ``drifted``: DDCL runs that started with tau / T_c < 1 (epoch 0) and ended collapsed
      with tau / T_c >= 1: joint training moved T_c of their tokens below tau;
    * ``above_tc``: deciding DDCL runs with tau / T_c >= 1 at some epoch (requirement unmet);
    * ``max_ratio``: the largest tau / T_c of the deciding DDCL runs over their epochs;
    * ``unfinished``: deciding runs ("readout/seed") whose training cross-entropy did not reach
      its plateau; ``plateaus``: readout -> [Convergence per seed].
    """
    task = result.settings.decide_task
    refuting = sum(h.final.collapsed("maps") and h.final.critical_ratio < 1
                   for h in _ddcl_histories(result))
    drifted = sum(h.final.collapsed("maps") and h.final.critical_ratio >= 1
                  and h.records[0].critical_ratio < 1 for h in _ddcl_histories(result))
    ratios = [h.series("critical_ratio") for h in result.main[task]["ddcl"]]
    above = sum(bool(np.nanmax(r) >= 1) for r in ratios)
    plateaus = {k: [convergence(h.series("loss")[1:]) for h in result.main[task][k]]
                for k in ("ddcl",) + PEERS}
    unfinished = [f"{k}/{seed}" for k in plateaus
                  for seed, c in zip(result.settings.seeds, plateaus[k]) if not c.plateau]
    return {"refuting": int(refuting), "drifted": int(drifted), "above_tc": int(above),
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


def _gated(word: str, gates: Mapping[str, Any], n_runs: int, reasons: list[str]) -> str:
    """``word`` after the gates both rules share (refuting, requirement, plateau)."""
    if gates["refuting"]:
        reasons.append(f"{gates['refuting']} DDCL run(s) collapsed with tau below T_c of L_q")
        return "refuted"
    if gates["above_tc"]:
        reasons.append(f"{gates['above_tc']} deciding DDCL run(s) reached tau >= T_c of L_q "
                       f"(the rule's requirement)")
        return "inconclusive"
    if gates["unfinished"]:
        reasons.append(f"{len(gates['unfinished'])} of {n_runs} deciding runs had not reached "
                       f"the plateau of their training cross-entropy")
        return "inconclusive"
    return word


def decide_d17(result: Any, rows: Sequence[Any], titles: Mapping[str, str]) -> Verdict:
    """D17 by the amended rule (and, shown beside, the registered one) from a study ``result``
    (see the module docstring), its sweep ``rows`` (for the descriptive parts) and the tasks'
    display ``titles``."""
    registered = rule_of("D17")
    amended, why = amended_rule_of("D17")
    s = result.settings
    task = s.decide_task
    n_runs = 3 * len(s.seeds)
    gates = d17_gates(result)
    usage_ivs, rank_ivs = d17_intervals(result), d17_rank_intervals(result)
    registered_word = _gated(registered.decide(usage_ivs), gates, n_runs, [])
    reasons: list[str] = []
    word = _gated(amended.decide(rank_ivs), gates, n_runs, reasons)
    if word == "reproduced" and gates["drifted"]:
        word = "qualified"
        reasons.append(f"{gates['drifted']} DDCL run(s) started with tau below T_c and collapsed "
                       f"once joint training had moved T_c below tau")
    if len(s.seeds) < amended.n_seeds:
        reasons.append(f"{len(s.seeds)} seeds (the rule asks {amended.n_seeds})")
    binding = amended.binding(rank_ivs)
    ours = usage_values(result, "ddcl")
    peers = {k: usage_values(result, k) for k in PEERS}
    rank = {k: rank_values(result, k) for k in ("ddcl",) + PEERS}
    mde = {k: stats.detectable_effect_of(rank["ddcl"] - rank[k]) if len(ours) > 1 else math.nan
           for k in PEERS}
    token_ppl = {k: float(np.mean([h.final.token_perplexity / h.final.vectors.count
                                   for h in result.main[task][k]])) for k in ("ddcl",) + PEERS}
    trend = d17_trend(result, "slot")
    first, last = next(iter(trend.values())), trend[f"epoch {s.epochs}"]
    parts = d17_parts(result, rows)
    flops = result.flops
    slot_flops = [f / d for f, d in zip(flops["slot"], flops["ddcl"])]
    plateau_text = "; ".join(
        f"{_NAMES[k]} {sum(c.plateau for c in cs)} of {len(cs)}"
        for k, cs in gates["plateaus"].items())
    n_ddcl = len(_ddcl_histories(result))
    evidence = (
        f"{titles[task]}, {len(s.seeds)} paired seeds, {s.epochs} epochs, S = "
        f"{s.task_shape(task)[1]}. Effective rank of the S attention maps / S (1: the slots "
        f"read S different mixtures of the tokens; 1/S: collapse): DDCL "
        f"{rank['ddcl'].mean():.3f}, Slot Attention {rank['slot'].mean():.3f}, Perceiver "
        f"{rank['perceiver'].mean():.3f}; DDCL - Slot Attention {_interval_text(rank_ivs[0])} "
        f"(smallest detectable {mde['slot']:.3f}), DDCL - Perceiver "
        f"{_interval_text(rank_ivs[1])} (smallest detectable {mde['perceiver']:.3f}); 95% "
        f"paired t. Over the epochs {', '.join(map(str, s.scales()))} the gap to Slot Attention "
        f"{_direction(first, last)} ({first[0]:+.3f} to {last[0]:+.3f}; it widens or narrows "
        f"only when the first and last intervals part). The registered rule "
        f"decided on the normalised usage perplexity of the tokens' first choices: DDCL "
        f"{ours.mean():.3f}, Slot Attention {peers['slot'].mean():.3f}, Perceiver "
        f"{peers['perceiver'].mean():.3f}; DDCL - Slot Attention {_interval_text(usage_ivs[0])}, "
        f"DDCL - Perceiver {_interval_text(usage_ivs[1])}: {registered_word} by that rule. It "
        f"was amended because {why}. Per-token perplexity / S beside (1: every token shared "
        f"equally): DDCL {token_ppl['ddcl']:.2f}, Slot Attention {token_ppl['slot']:.2f}, "
        f"Perceiver {token_ppl['perceiver']:.2f}. Plateau of the training cross-entropy: "
        f"{plateau_text}. DDCL trains L_q with q differentiated; T_c = 4 lambda_max of its "
        f"current tokens. Of {n_ddcl} DDCL runs (main and sweep), {gates['refuting']} collapsed "
        f"with tau below T_c at the end; {gates['drifted']} started below T_c and collapsed "
        f"after joint training moved T_c below tau; the deciding runs' tau / T_c stayed at most "
        f"{gates['max_ratio']:.2f}. Slot Attention runs {result.slot_iterations} iterations at "
        f"inference, FLOPs {min(slot_flops):.2f}-{max(slot_flops):.2f} times DDCL's. The "
        f"sources give no number. "
        + (f"Why {word}: {'; '.join(reasons)}." if reasons else ""))
    our_value = (f"maps rank / S DDCL {rank['ddcl'].mean():.2f} vs Slot Attention "
                 f"{rank['slot'].mean():.2f}, Perceiver {rank['perceiver'].mean():.2f}")
    numbers = dict(parts) | {
        "usage": {"ddcl": float(ours.mean()), **{k: float(v.mean()) for k, v in peers.items()}},
        "maps_rank": {k: float(v.mean()) for k, v in rank.items()},
        "interval_perceiver": [rank_ivs[1].low, rank_ivs[1].high],
        "usage_intervals": {k: [iv.low, iv.high] for k, iv in zip(PEERS, usage_ivs)},
        "registered_word": registered_word,
        "detectable": {k: float(v) for k, v in mde.items()},
        "trend_perceiver": d17_trend(result, "perceiver"),
        "trend_usage": d17_trend(result, "slot", "usage"),
        "unfinished": len(gates["unfinished"]), "refuting": gates["refuting"],
        "drifted": gates["drifted"], "ddcl_runs": n_ddcl,
        "above_tc": gates["above_tc"], "max_ratio": gates["max_ratio"]}
    return Verdict("D17", word, evidence, our_value=our_value,
                   paper_value="not measured in the sources", numbers=numbers,
                   rule=amended.text, n_seeds=len(s.seeds),
                   interval=(rank_ivs[binding].low, rank_ivs[binding].high),
                   scale=f"epoch {s.epochs}", trend=trend, tolerance=D17_TOLERANCE)
