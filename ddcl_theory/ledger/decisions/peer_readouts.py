"""Claim D17: prototype readouts (Slot Attention, Perceiver latents) against DDCL-Attention.

:func:`decide_d17` decides the claim by its registered rule (:data:`ddcl_theory.ledger.rules.
RULES`), whose four tests read collapse two ways on the deciding task, each paired by seed and
by the measured training sequences, at the longest schedule:

1, 2. the effective rank of the S attention maps / S (the primary reading), DDCL - Slot
      Attention and DDCL - Perceiver, 95% bootstrap over seeds and sequences (the per-sequence
      paired differences);
3, 4. the usage perplexity of the tokens' first choices / S, the same pairs, 95% paired t over
      seeds (a statistic of the pooled histogram of first choices, with no per-item part).

The claim is reproduced when all four are, not reproduced when one is (the house's
conjunction, :meth:`ddcl_theory.ledger.design.Rule.word`). The gates (:func:`d17_gates`):
every deciding DDCL run keeps tau below T_c of the L_q it trains at every epoch; each test's
seed-mean paired difference is settled over the last quarter of the schedule; every deciding
run learned the task. Slot Attention's iterations and FLOPs, and DDCL runs of the mechanism
sweep that collapsed, are reported beside and decide nothing.

Reads a study result by attribute (``settings`` with ``seeds``, ``epochs``, ``scales()``;
``main``: schedule -> readout -> histories whose records carry ``maps_rank``,
``normalised_usage``, ``maps_rank_items``, ``critical_ratio``, ``test_acc``; ``sweep``;
``flops``; ``slot_iterations``); never timings.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ddcl_theory.ledger import stats
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.design import Gate, TestResult
from ddcl_theory.ledger.report import interval_text
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict

__all__ = ["D17_TOLERANCE", "PEERS", "STATISTICS", "TESTS", "d17_gates", "d17_items",
           "d17_samples", "d17_trend", "decide_d17", "per_seed"]

#: The peers, in the order of the rule's tests.
PEERS = ("slot", "perceiver")
#: The two readings of collapse: record attribute, in the order of the rule's tests.
STATISTICS = ("maps_rank", "normalised_usage")
#: (statistic, peer) of each registered test, in order.
TESTS = tuple((stat, peer) for stat in STATISTICS for peer in PEERS)
NAMES = {"ddcl": "DDCL", "slot": "Slot Attention", "perceiver": "Perceiver"}
_SHORT = {"maps_rank": "maps rank / S", "normalised_usage": "usage / S"}
#: The gates' thresholds: the share of the schedule the settled gate reads, and how far above
#: chance every deciding run's test accuracy must be.
SETTLED_SHARE = 0.25
LEARNED_ABOVE_CHANCE = 0.1

#: How far the numbers of the verdict may move between machines: seed means of the readings
#: after short trainings (their largest seed sd in the cpu run is about 0.06, of a mean of
#: three about 0.035); the seeds each test needs, which follow the square of the seed spread
#: (they moved by up to 20% between kernel sets); the count of collapsed sweep runs (7 of 20
#: DDCL runs: two binomial sd, :func:`~ddcl_theory.ledger.tolerance.count_allowance`, is 5).
D17_TOLERANCE = Tolerance(abs=0.05, rel=0.25, count_abs=5,
                          reason="seed means and paired differences of collapse readings "
                          "after short trainings; seeds needed follow the square of the "
                          "seed spread; counts of collapsed sweep runs (two binomial sd); "
                          "the tests' words stand clear of their margins")


def _runs(result: Any, kind: str, epochs: int | None) -> list:
    s = result.settings
    return result.main[s.epochs if epochs is None else epochs][kind]


def per_seed(result: Any, kind: str, statistic: str, epochs: int | None = None,
             epoch: int | None = None) -> np.ndarray:
    """(seeds,) ``statistic`` (a name of :data:`STATISTICS`) of ``kind``'s main runs of
    ``epochs`` epochs (default: the deciding schedule) at ``epoch`` (default: the last), in
    seed order."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic: expected one of {STATISTICS}, got {statistic!r}")
    out = []
    for h in _runs(result, kind, epochs):
        rec = h.final if epoch is None else next(
            (r for r in h.records if r.epoch == epoch), None)
        if rec is None:
            raise ValueError(f"epoch: no record of epoch {epoch} (runs of "
                             f"{h.final.epoch} epochs)")
        out.append(float(getattr(rec, statistic)))
    return np.array(out)


def d17_items(result: Any, peer: str, epochs: int | None = None) -> list[np.ndarray]:
    """Per seed, the per-sequence paired differences of the maps' effective rank / S, DDCL -
    ``peer``, on the same measured sequences (final records of the runs of ``epochs``)."""
    ours, theirs = _runs(result, "ddcl", epochs), _runs(result, peer, epochs)
    out = []
    for a, b in zip(ours, theirs):
        x, y = np.asarray(a.final.maps_rank_items), np.asarray(b.final.maps_rank_items)
        if x.size == 0 or x.shape != y.shape:
            raise ValueError(f"result: DDCL and {peer} runs need per-sequence maps ranks on the "
                             f"same sequences, got {x.size} and {y.size}")
        out.append(x - y)
    return out


def d17_samples(result: Any, epochs: int | None = None) -> list:
    """What :meth:`~ddcl_theory.ledger.design.Rule.evaluate` takes, in test order: for the
    rank tests ``(bootstrap interval over seeds and sequences, per-seed sd)`` (the per-seed
    differences alone with one seed), for the usage tests the per-seed paired differences."""
    ours = {stat: per_seed(result, "ddcl", stat, epochs) for stat in STATISTICS}
    samples = []
    for stat, peer in TESTS:
        diffs = ours[stat] - per_seed(result, peer, stat, epochs)
        if stat == "maps_rank" and diffs.size >= 2:
            interval = stats.bootstrap_seeds_items(d17_items(result, peer, epochs))
            samples.append((interval, float(np.std(diffs, ddof=1))))
        else:
            samples.append(diffs)
    return samples


def d17_trend(result: Any, test: int = 0) -> dict[str, list[float]]:
    """Schedule label ("<e> epochs") -> [estimate, low, high] of the rule's test ``test``
    (index into :data:`TESTS`) at each schedule of ``settings.scales()`` (separate runs)."""
    rule = rule_of("D17")
    if not 0 <= test < len(TESTS):
        raise ValueError(f"test: expected an index below {len(TESTS)}, got {test!r}")
    out = {}
    for epochs in result.settings.scales():
        r = rule.evaluate(d17_samples(result, epochs))[test]
        out[f"{epochs} epochs"] = [round(r.estimate, 4), round(r.interval[0], 4),
                                   round(r.interval[1], 4)]
    return out


def _series(h: Any, statistic: str) -> np.ndarray:
    if statistic == "maps_rank":
        return np.array([r.maps_rank for r in h.records])
    return np.array([r.normalised_usage for r in h.records])


def d17_gates(result: Any, chance: float) -> list[Gate]:
    """The rule's gates on the deciding runs (``chance``: the task's chance accuracy):

    * ``tau below T_c``: every DDCL run's tau / T_c of L_q below 1 at every epoch (the start
      and the end reported);
    * ``settled``: each test's seed-mean paired difference moved by less than half the SESOI
      over the last :data:`SETTLED_SHARE` of the schedule;
    * ``learned``: every run's test accuracy at least :data:`LEARNED_ABOVE_CHANCE` above
      ``chance``.
    """
    rule = rule_of("D17")
    s = result.settings
    ratios = np.array([[r.critical_ratio for r in h.records] for h in _runs(result, "ddcl", None)])
    start, end, top = (float(np.max(ratios[:, 0])), float(np.max(ratios[:, -1])),
                       float(np.max(ratios)))
    below = bool(np.all(np.isfinite(ratios)) and top < 1)
    gates = [Gate("tau below T_c", below,
                  f"tau / T_c of L_q over the {ratios.shape[0]} deciding DDCL runs: at most "
                  f"{start:.3g} at the start, {end:.3g} at the end, {top:.3g} at any epoch"
                  + ("" if below else "; a DDCL run with tau at or above T_c does not test "
                     "the guarantee (start it further below T_c)"))]
    back = max(1, round(SETTLED_SHARE * s.epochs))
    moves = []
    for (stat, peer), test in zip(TESTS, rule.all_tests):
        diff = np.mean([_series(a, stat) - _series(b, stat) for a, b in
                        zip(_runs(result, "ddcl", None), _runs(result, peer, None))], axis=0)
        moves.append(abs(float(diff[-1] - diff[-1 - back])))
    half = min(t.s - t.margin for t in rule.all_tests) / 2
    settled = max(moves) < half
    gates.append(Gate("settled", settled,
                      f"largest move of a test's seed-mean paired difference over the last "
                      f"{back} of {s.epochs} epochs: {max(moves):.3g} (allowed below {half:g})"
                      + ("" if settled else "; a longer schedule would let it settle")))
    accs = {k: min(h.final.test_acc for h in _runs(result, k, None)) for k in ("ddcl",) + PEERS}
    learned = all(a >= chance + LEARNED_ABOVE_CHANCE for a in accs.values())
    gates.append(Gate("learned", learned,
                      "lowest test accuracy of a deciding run: " + ", ".join(
                          f"{NAMES[k]} {a:.3f}" for k, a in accs.items())
                      + f" (chance {chance:.3f})"
                      + ("" if learned else "; a readout that did not learn the task "
                         "voids the comparison")))
    return gates


def _sweep_collapses(result: Any) -> tuple[int, int, int]:
    """(DDCL sweep runs, those that collapsed, those that collapsed although they started
    with tau below T_c): beside the rule."""
    runs = [r.history for r in result.sweep if r.variant.readout == "ddcl"]
    collapsed = [h for h in runs if h.final.collapsed("maps")]
    started_below = sum(h.records[0].critical_ratio < 1 for h in collapsed)
    return len(runs), len(collapsed), started_below


def _test_line(stat: str, peer: str, r: TestResult) -> str:
    return f"{_SHORT[stat]}, DDCL - {NAMES[peer]} {interval_text(r)} ({r.word})"


def decide_d17(result: Any, *, chance: float, task: str) -> Verdict:
    """D17 by its registered rule from a study ``result`` (see the module docstring);
    ``chance``: the deciding task's chance accuracy; ``task``: its name for the evidence."""
    if not 0 < chance < 1:
        raise ValueError(f"chance: expected a probability in (0, 1), got {chance!r}")
    rule = rule_of("D17")
    s = result.settings
    results = rule.evaluate(d17_samples(result))
    gates = d17_gates(result, chance)
    word = rule.word(results, gates)
    binding = rule.binding(results)
    means = {(k, stat): float(per_seed(result, k, stat).mean())
             for k in ("ddcl",) + PEERS for stat in STATISTICS}
    trend = d17_trend(result, binding)
    flops = result.flops
    slot_flops = [f / d for f, d in zip(flops["slot"], flops["ddcl"])]
    n_sweep, n_collapsed, n_below = _sweep_collapses(result)
    failed = [g.name for g in gates if not g.passed]
    short = [r.n_seeds for r in results if r.n_seeds < rule.n_seeds]
    why = []
    if failed:
        why.append(f"gate(s) not met: {', '.join(failed)}")
    if short:
        why.append(f"{short[0]} seeds, the rule asks {rule.n_seeds}")
    readings = "; ".join(
        f"{_SHORT[stat]}: " + ", ".join(f"{NAMES[k]} {means[(k, stat)]:.3f}"
                                         for k in ("ddcl",) + PEERS)
        for stat in STATISTICS)
    grid = len(getattr(result, "tuning", {}).get("ddcl", {})) or 1
    tuned = (f"each readout at the learning rate and temperature its validation accuracy "
             f"chose from a grid of {grid}" if grid > 1 else
             "one learning rate and each readout's default temperature (no tuning)")
    evidence = (
        f"{task}, {len(s.seeds)} paired seeds, {s.epochs} epochs, {tuned}. Seed means: "
        f"{readings}. Tests: "
        + "; ".join(_test_line(stat, peer, r) for (stat, peer), r in zip(TESTS, results))
        + f". The deciding gaps at {', '.join(trend)}: "
        + ", ".join(f"{v[0]:+.3f}" for v in trend.values())
        + f" ({_SHORT[TESTS[binding][0]]}, DDCL - {NAMES[TESTS[binding][1]]}). Slot Attention "
        f"runs {result.slot_iterations} rounds at inference, {min(slot_flops):.2f} to "
        f"{max(slot_flops):.2f} times DDCL's FLOPs. Beside the rule: {n_collapsed} of "
        f"{n_sweep} DDCL runs of the mechanism sweep collapsed, {n_below} of them from a start "
        f"below T_c. The sources give no number."
        + (f" Why {word}: {'; '.join(why)}." if why else ""))
    our_value = (f"maps rank / S DDCL {means[('ddcl', 'maps_rank')]:.2f}, Slot Attention "
                 f"{means[('slot', 'maps_rank')]:.2f}, Perceiver "
                 f"{means[('perceiver', 'maps_rank')]:.2f}; usage / S "
                 f"{means[('ddcl', 'normalised_usage')]:.2f}, "
                 f"{means[('slot', 'normalised_usage')]:.2f}, "
                 f"{means[('perceiver', 'normalised_usage')]:.2f}")
    samples = d17_samples(result)
    seeds_values = {}
    for (stat, peer), test, sample in zip(TESTS, rule.all_tests, samples):
        diffs = (per_seed(result, "ddcl", stat) - per_seed(result, peer, stat))
        seeds_values[test.statistic] = [float(v) for v in diffs]
        if stat == "maps_rank":
            seeds_values[test.statistic + ", per sequence"] = [
                [float(v) for v in item] for item in d17_items(result, peer)]
    numbers = {"means": {f"{k} {stat}": v for (k, stat), v in means.items()},
               "slot_flops": slot_flops, "sweep_ddcl_collapsed": n_collapsed,
               "sweep_ddcl_runs": n_sweep, "sweep_collapsed_from_below": n_below}
    r = results[binding]
    return Verdict("D17", word, evidence, our_value=our_value,
                   paper_value="not measured in the sources", numbers=numbers,
                   rule=rule.text, n_seeds=r.n_seeds, interval=tuple(r.interval),
                   scale=f"{s.epochs} epochs", trend=trend, tolerance=D17_TOLERANCE,
                   tests=tuple(results), gates=tuple(gates), per_seed=seeds_values)
