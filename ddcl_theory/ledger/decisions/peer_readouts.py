"""Claim D17: prototype readouts (Slot Attention, Perceiver latents) against DDCL-Attention.

:func:`decide_d17` decides the claim by its registered rule (:data:`ddcl_theory.ledger.rules.
RULES`), whose six tests read collapse on the deciding task, each paired by seed and by the
measured training sequences, at the longest schedule. Each readout runs at two of its
equivalent configurations (:data:`~ddcl_theory.experiments.peer_readouts.SELECTIONS`): the most
collapsed (the deciding runs) and the least collapsed.

1, 2. the effective rank of the S attention maps / S, DDCL - Slot Attention and DDCL -
      Perceiver, each at its most collapsed configuration (the deciding tests), 95% bootstrap
      over seeds and sequences (the per-sequence paired differences);
3, 4. the usage perplexity of the tokens' first choices / S, the same pairs and runs, 95%
      paired t over seeds (a statistic of the pooled histogram of first choices, with no
      per-item part; beside);
5, 6. the maps rank / S of 1 and 2, each readout at its least collapsed configuration (beside).

The claim is reproduced when both deciding tests are, not reproduced when one is (the house's
conjunction, :meth:`ddcl_theory.ledger.design.Rule.word`). The gates (:func:`d17_gates`):
every deciding DDCL run keeps tau below T_c of the L_q it trains at every epoch; each test's
seed-mean paired difference is settled over the last quarter of the schedule; every deciding
run learned the task. Slot Attention's iterations and FLOPs, and DDCL runs of the mechanism
sweep that collapsed, are reported beside and decide nothing.

Reads a study result by attribute (``settings`` with ``seeds``, ``epochs``, ``scales()``;
``main``: schedule -> readout -> histories whose records carry ``maps_rank``,
``normalised_usage``, ``maps_rank_items``, ``critical_ratio``, ``test_acc``; ``least``:
readout -> histories at the deciding schedule; ``sweep``;
``flops``; ``slot_iterations``); never timings.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ddcl_theory.ledger import stats
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.design import Gate, TestResult
from ddcl_theory.ledger.report import interval_text
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict

__all__ = ["D17_TOLERANCE", "PEERS", "SELECTIONS", "STATISTICS", "TESTS", "configurations",
           "d17_gates", "d17_items",
           "d17_samples", "d17_trend", "decide_d17", "per_seed"]

#: The peers, in the order of the rule's tests.
PEERS = ("slot", "perceiver")
#: The two readings of collapse: record attribute, in the order of the rule's tests.
STATISTICS = ("maps_rank", "normalised_usage")
#: Which configuration a test reads: the most or the least collapsed of the equivalent ones.
SELECTIONS = ("most collapsed", "least collapsed")
#: (statistic, peer, selection) of each registered test, in order.
TESTS = tuple((stat, peer, SELECTIONS[0]) for stat in STATISTICS for peer in PEERS) + tuple(
    ("maps_rank", peer, SELECTIONS[1]) for peer in PEERS)
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


def _runs(result: Any, kind: str, epochs: int | None,
          selection: str = SELECTIONS[0]) -> list:
    s = result.settings
    if selection not in SELECTIONS:
        raise ValueError(f"selection: expected one of {SELECTIONS}, got {selection!r}")
    if selection == SELECTIONS[1]:
        if epochs not in (None, s.epochs):
            raise ValueError(f"epochs: the least collapsed configurations run only the "
                             f"deciding schedule ({s.epochs}), got {epochs!r}")
        return result.least[kind]
    return result.main[s.epochs if epochs is None else epochs][kind]


def per_seed(result: Any, kind: str, statistic: str, epochs: int | None = None,
             epoch: int | None = None, selection: str = SELECTIONS[0]) -> np.ndarray:
    """(seeds,) ``statistic`` (a name of :data:`STATISTICS`) of ``kind``'s runs of ``epochs``
    epochs (default: the deciding schedule) at its ``selection`` configuration (one of
    :data:`SELECTIONS`) at ``epoch`` (default: the last), in seed order."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic: expected one of {STATISTICS}, got {statistic!r}")
    out = []
    for h in _runs(result, kind, epochs, selection):
        rec = h.final if epoch is None else next(
            (r for r in h.records if r.epoch == epoch), None)
        if rec is None:
            raise ValueError(f"epoch: no record of epoch {epoch} (runs of "
                             f"{h.final.epoch} epochs)")
        out.append(float(getattr(rec, statistic)))
    return np.array(out)


def d17_items(result: Any, peer: str, epochs: int | None = None,
              selection: str = SELECTIONS[0]) -> list[np.ndarray]:
    """Per seed, the per-sequence paired differences of the maps' effective rank / S, DDCL -
    ``peer``, on the same measured sequences (final records of the runs of ``epochs``, each
    readout at its ``selection`` configuration)."""
    ours = _runs(result, "ddcl", epochs, selection)
    theirs = _runs(result, peer, epochs, selection)
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
    differences alone with one seed), for the usage tests the per-seed paired differences.
    ``epochs`` other than the deciding schedule reads the deciding tests' runs only (the first
    four tests)."""
    s = result.settings
    tests = TESTS if epochs in (None, s.epochs) else TESTS[:2 * len(PEERS)]
    samples = []
    for stat, peer, sel in tests:
        diffs = (per_seed(result, "ddcl", stat, epochs, selection=sel)
                 - per_seed(result, peer, stat, epochs, selection=sel))
        if stat == "maps_rank" and diffs.size >= 2:
            interval = stats.bootstrap_seeds_items(d17_items(result, peer, epochs, sel))
            samples.append((interval, float(np.std(diffs, ddof=1))))
        else:
            samples.append(diffs)
    return samples


def d17_trend(result: Any, test: int = 0) -> dict[str, list[float]]:
    """Schedule label ("<e> epochs") -> [estimate, low, high] of the rule's test ``test``
    (index into the first four of :data:`TESTS`, those of the most collapsed configurations,
    which run at every schedule) at each schedule of ``settings.scales()`` (separate runs)."""
    rule = rule_of("D17")
    read = 2 * len(PEERS)
    if not 0 <= test < read:
        raise ValueError(f"test: expected an index below {read}, got {test!r}")
    short = dataclasses.replace(rule, beside=rule.beside[:len(PEERS)])
    out = {}
    for epochs in result.settings.scales():
        r = short.evaluate(d17_samples(result, epochs)[:read])[test]
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
    * ``settled``: each deciding test's seed-mean paired difference moved by less than half
      the SESOI over the last :data:`SETTLED_SHARE` of the schedule (the largest move of a
      test beside reported);
    * ``learned``: every deciding run's test accuracy at least :data:`LEARNED_ABOVE_CHANCE`
      above ``chance`` (the lowest of the least collapsed runs reported).
    """
    rule = rule_of("D17")
    s = result.settings
    ratios = np.array([[r.critical_ratio for r in h.records] for h in _runs(result, "ddcl", None)])
    start, end, top = (float(np.max(ratios[:, 0])), float(np.max(ratios[:, -1])),
                       float(np.max(ratios)))
    below = bool(np.all(np.isfinite(ratios)) and top < 1)
    least = max(r.critical_ratio for h in _runs(result, "ddcl", None, SELECTIONS[1])
                for r in h.records)
    gates = [Gate("tau below T_c", below,
                  f"tau / T_c of L_q over the {ratios.shape[0]} deciding DDCL runs: at most "
                  f"{start:.3g} at the start, {end:.3g} at the end, {top:.3g} at any epoch; "
                  f"over the least collapsed DDCL runs at most {least:.3g}"
                  + ("" if below else "; a DDCL run with tau at or above T_c does not test "
                     "the guarantee (start it further below T_c)"))]
    back = max(1, round(SETTLED_SHARE * s.epochs))
    moves = []
    for (stat, peer, sel), test in zip(TESTS, rule.all_tests):
        diff = np.mean([_series(a, stat) - _series(b, stat) for a, b in
                        zip(_runs(result, "ddcl", None, sel), _runs(result, peer, None, sel))],
                       axis=0)
        moves.append(abs(float(diff[-1] - diff[-1 - back])))
    deciding, beside = moves[:len(rule.tests)], moves[len(rule.tests):]
    half = min(t.s - t.margin for t in rule.all_tests) / 2
    settled = max(deciding) < half
    gates.append(Gate("settled", settled,
                      f"largest move of a deciding test's seed-mean paired difference over the "
                      f"last {back} of {s.epochs} epochs: {max(deciding):.3g} (allowed below "
                      f"{half:g}); of a test beside: {max(beside):.3g}"
                      + ("" if settled else "; a longer schedule would let it settle")))
    accs = {k: min(h.final.test_acc for h in _runs(result, k, None)) for k in ("ddcl",) + PEERS}
    least = min(h.final.test_acc for k in ("ddcl",) + PEERS
                for h in _runs(result, k, None, SELECTIONS[1]))
    learned = all(a >= chance + LEARNED_ABOVE_CHANCE for a in accs.values())
    gates.append(Gate("learned", learned,
                      "lowest test accuracy of a deciding run: " + ", ".join(
                          f"{NAMES[k]} {a:.3f}" for k, a in accs.items())
                      + f" (chance {chance:.3f}); of a least collapsed run: {least:.3f}"
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


def _kind(peer: str, r: TestResult) -> str:
    """The word of a decided test, and for "not reproduced" which kind (evidence rule 1): the
    peer ahead (the interval wholly on the peer's side of 0) or a lead smaller than the SESOI."""
    if r.word != "not reproduced":
        return r.word
    low, high = r.interval
    behind = high < r.margin if r.side == ">" else low > r.margin
    return f"not reproduced: {NAMES[peer]} ahead" if behind else \
        "not reproduced: a lead smaller than the SESOI"


def _test_line(stat: str, peer: str, sel: str, r: TestResult) -> str:
    return f"{_SHORT[stat]}, DDCL - {NAMES[peer]}, {sel} {interval_text(r)} ({_kind(peer, r)})"


def configurations(result: Any) -> dict[str, dict]:
    """readout -> the tuning as the decision read it: ``equivalent`` (how many configurations),
    and for each selection the configuration ``[lr, temperature factor]``, its validation
    accuracy and the one-standard-error line (``line``), and its tuning run's maps rank / S;
    ``grid_lowest``: the lowest maps rank / S of a tuning run over the whole grid. Empty when
    ``result`` holds no tuning (``tuning`` attribute absent)."""
    tuning = getattr(result, "tuning", None)
    if not tuning:
        return {}
    out = {}
    for kind, runs in tuning.items():
        scores = result.validation_scores(kind)
        entry = {"equivalent": len(result.equivalent(kind)),
                 "line": result.equivalence_line(kind),
                 "grid_lowest": min(float(h.final.maps_rank) for h in runs.values())}
        for sel in SELECTIONS:
            c = result.chosen(kind, sel)
            entry[sel] = {"configuration": [c[0], c[1]], "validation_acc": scores[c][0],
                          "maps_rank": float(runs[c].final.maps_rank)}
        out[kind] = entry
    return out


def _reading(results: list[TestResult]) -> str:
    """How the rows beside qualify a reproduced word: the peers ahead of DDCL, or within the
    SESOI of it, at their least collapsed equivalent configurations."""
    out = []
    for (stat, peer, sel), r in zip(TESTS, results):
        if stat == "maps_rank" and sel == SELECTIONS[1] and r.word == "not reproduced":
            where = "ahead of DDCL" if "ahead" in _kind(peer, r) else "within the SESOI of DDCL"
            out.append(f"{NAMES[peer]} is {where} ({interval_text(r)})")
    if not out:
        return ""
    return (" Read with the rows beside: at its least collapsed equivalent configuration "
            + "; ".join(out) + ", so the word holds for the most collapsed configuration a "
            "user tuning by validation accuracy can get, not for every one.")


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
    least = {k: float(per_seed(result, k, "maps_rank", selection=SELECTIONS[1]).mean())
             for k in ("ddcl",) + PEERS}
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
        for stat in STATISTICS) + "; maps rank / S at the least collapsed: " + ", ".join(
        f"{NAMES[k]} {least[k]:.3f}" for k in ("ddcl",) + PEERS)
    grid = len(getattr(result, "tuning", {}).get("ddcl", {})) or 1
    tuned_at = configurations(result)
    tuned = (f"each readout at the most collapsed of the configurations (learning rate, "
             f"temperature) within one standard error of its best validation accuracy on a "
             f"grid of {grid}, and beside at the least collapsed" if grid > 1 else
             "one learning rate and each readout's default temperature (no tuning)")
    evidence = (
        f"{task}, {len(s.seeds)} paired seeds, {s.epochs} epochs, {tuned}. Seed means at the "
        f"most collapsed: {readings}. Tests: "
        + "; ".join(_test_line(stat, peer, sel, r)
                    for (stat, peer, sel), r in zip(TESTS, results))
        + ". From the most to the least collapsed configuration, maps rank / S moves: "
        + ", ".join(f"{NAMES[k]} {means[(k, 'maps_rank')]:.3f} to {least[k]:.3f}"
                    for k in ("ddcl",) + PEERS)
        + (f". Over its whole grid DDCL's lowest tuning run reads "
           f"{tuned_at['ddcl']['grid_lowest']:.3f}, the peers' most collapsed equivalent "
           f"tuning runs "
           + ", ".join(f"{NAMES[k]} {tuned_at[k][SELECTIONS[0]]['maps_rank']:.3f}" for k in PEERS)
           if tuned_at else "")
        + f". The deciding gaps at {', '.join(trend)}: "
        + ", ".join(f"{v[0]:+.3f}" for v in trend.values())
        + f" ({_SHORT[TESTS[binding][0]]}, DDCL - {NAMES[TESTS[binding][1]]}, "
        f"{TESTS[binding][2]}). Slot Attention "
        f"runs {result.slot_iterations} rounds at inference, {min(slot_flops):.2f} to "
        f"{max(slot_flops):.2f} times DDCL's FLOPs. Beside the rule: {n_collapsed} of "
        f"{n_sweep} DDCL runs of the mechanism sweep collapsed, {n_below} of them from a start "
        f"below T_c. The sources give no number."
        + (f" Why {word}: {'; '.join(why)}." if why else "")
        + (_reading(results) if word == "reproduced" else ""))
    our_value = (f"maps rank / S DDCL {means[('ddcl', 'maps_rank')]:.2f}, Slot Attention "
                 f"{means[('slot', 'maps_rank')]:.2f}, Perceiver "
                 f"{means[('perceiver', 'maps_rank')]:.2f} (least collapsed "
                 f"{least['ddcl']:.2f}, {least['slot']:.2f}, {least['perceiver']:.2f}); "
                 f"usage / S "
                 f"{means[('ddcl', 'normalised_usage')]:.2f}, "
                 f"{means[('slot', 'normalised_usage')]:.2f}, "
                 f"{means[('perceiver', 'normalised_usage')]:.2f}")
    seeds_values = {}
    for (stat, peer, sel), test in zip(TESTS, rule.all_tests):
        diffs = (per_seed(result, "ddcl", stat, selection=sel)
                 - per_seed(result, peer, stat, selection=sel))
        seeds_values[test.statistic] = [float(v) for v in diffs]
        if stat == "maps_rank":
            seeds_values[test.statistic + ", per sequence"] = [
                [float(v) for v in item] for item in d17_items(result, peer, selection=sel)]
    numbers = {"means": {f"{k} {stat}": v for (k, stat), v in means.items()},
               "least collapsed maps_rank": least, "slot_flops": slot_flops, "sweep_ddcl_collapsed": n_collapsed,
               "sweep_ddcl_runs": n_sweep, "sweep_collapsed_from_below": n_below}
    r = results[binding]
    return Verdict("D17", word, evidence, our_value=our_value,
                   paper_value="not measured in the sources", numbers=numbers,
                   rule=rule.text, n_seeds=r.n_seeds, interval=tuple(r.interval),
                   scale=f"{s.epochs} epochs", trend=trend, tolerance=D17_TOLERANCE,
                   tests=tuple(results), gates=tuple(gates), per_seed=seeds_values)
