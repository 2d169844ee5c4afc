"""The D17 decision (ddcl_theory.ledger.decisions.peer_readouts.decide_d17) on hand-made study
results: every word of the registered rule (reproduced; not reproduced by a clear effect of the
wrong sign and by a negligible one; inconclusive), every gate (tau at or above T_c, a reading
still moving, a readout that did not learn) and too few seeds."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pytest

from ddcl_theory.experiments import peer_readouts as pr
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions.peer_readouts import (
    TESTS,
    d17_gates,
    d17_items,
    d17_samples,
    d17_trend,
    decide_d17,
    per_seed,
)
from ddcl_theory.ledger.rules import D17_RUN, D17_SEEDS, D17_SESOI
from ddcl_theory.metrics import readouts as rm
from ddcl_theory.ledger.verdict import Verdict

S = 20
EPOCHS = 8
ITEMS = 12                          # measured sequences per run
CHANCE = 1 / 20


def _record(epoch, rank, usage, *, ratio, acc, items):
    maps = rm.CollapseMetrics(0.3, 0.5, rank * S, 1.0, 0.3, S)
    vec = rm.CollapseMetrics(0.3, 0.5, 5.0, 1.0, 0.3, S)
    return pr.CollapseRecord(epoch, 1.0, acc, acc, vec, vec, maps, 1.0, 2.0, 2.0, ratio,
                             usage * S, tuple(items))


def _history(kind, rank, usage, seed, *, ratio=0.2, acc=0.4, moving=False):
    """A run whose readings rise linearly to (rank, usage) at its end (the last quarter flat
    unless ``moving``); its per-sequence ranks scatter around ``rank`` (seeded)."""
    rng = np.random.default_rng(seed + 97 * len(kind))
    items = rank + 0.02 * rng.standard_normal(ITEMS)
    items += rank - items.mean()                            # their mean is the run's rank
    flat = EPOCHS - (0 if moving else EPOCHS // 4)
    shape = np.minimum(np.arange(EPOCHS + 1) / flat, 1.0)
    r = ratio if kind == "ddcl" else float("nan")
    return pr.ReadoutHistory(kind, [
        _record(e, 0.3 + (rank - 0.3) * shape[e], 0.5 + (usage - 0.5) * shape[e],
                ratio=r if np.ndim(ratio) == 0 else ratio[e], acc=acc,
                items=items if e == EPOCHS else ())
        for e in range(EPOCHS + 1)])


@dataclass
class _Settings:
    seeds: tuple
    epochs: int = EPOCHS

    def scales(self):
        return (4, EPOCHS)


@dataclass
class _Result:
    settings: _Settings
    main: dict
    least: dict
    sweep: list = field(default_factory=list)
    flops: dict = field(default_factory=lambda: {"ddcl": [10, 20], "slot": [50, 60],
                                                 "perceiver": [12, 22]})
    slot_iterations: int = 3


def _fake(n=D17_SEEDS, *, ddcl=(0.45, 0.70), slot=(0.10, 0.60), perceiver=(0.15, 0.30),
          spread=0.01, least=None, **ddcl_kwargs):
    """A study result: each readout's (rank / S, usage / S) at the end of its most collapsed
    runs, and (``least``: readout -> the same pair, default the most collapsed's) of its
    least collapsed ones, with a per-seed jitter of sd ``spread``; ``ddcl_kwargs`` go to
    DDCL's runs."""
    rng = np.random.default_rng(0)
    most = {"ddcl": ddcl, "slot": slot, "perceiver": perceiver}
    least = {**most, **(least or {})}

    def runs(readings):
        out = {}
        for kind, (rank, usage) in readings.items():
            jitter = spread * rng.standard_normal((n, 2))
            out[kind] = [_history(kind, rank + j[0], usage + j[1], i,
                                  **(ddcl_kwargs if kind == "ddcl" else {}))
                         for i, j in enumerate(jitter)]
        return out

    main = {e: runs(most) for e in (4, EPOCHS)}
    return _Result(_Settings(tuple(range(n))), main, runs(least))


def _decide(result):
    return decide_d17(result, chance=CHANCE, task="20 Newsgroups")


def test_clear_gains_on_both_readings_against_both_peers_reproduce_the_claim():
    v = _decide(_fake())
    assert isinstance(v, Verdict) and v.word == "reproduced"
    assert [t.word for t in v.tests] == ["reproduced"] * 6
    assert all(g.passed for g in v.gates)
    rule = rule_of("D17")
    assert v.rule == rule.text and v.n_seeds == D17_SEEDS == rule.n_seeds
    assert tuple(v.interval) == tuple(v.tests[0].interval)        # the primary test binds
    assert v.tests[0].method == "bootstrap over seeds and items"
    assert v.tests[2].method == "paired t"
    assert v.trend.keys() == {"4 epochs", f"{EPOCHS} epochs"} and v.scale == f"{EPOCHS} epochs"
    assert v.tolerance is not None and v.tolerance.declared
    # per-seed paired differences of every test, per-sequence ones beside the rank tests
    assert set(v.per_seed) >= {t.statistic for t in rule.tests}
    rank_items = v.per_seed[rule.tests[0].statistic + ", per sequence"]
    assert len(rank_items) == D17_SEEDS and len(rank_items[0]) == ITEMS
    assert np.mean(rank_items[0]) == pytest.approx(v.per_seed[rule.tests[0].statistic][0])


def test_a_peer_ahead_on_the_usage_reading_is_shown_beside_and_decides_nothing():
    """Slot Attention ahead on usage (its vectors coincide and split the first choices evenly):
    decided and shown beside the rule; DDCL far ahead on the maps' rank decides."""
    v = _decide(_fake(slot=(0.10, 0.99)))
    assert [t.word for t in v.tests] == ["reproduced", "reproduced", "not reproduced",
                                         "reproduced", "reproduced", "reproduced"]
    assert [t.binding for t in v.tests] == [True, True, False, False, False, False]
    assert v.word == "reproduced" and v.interval == tuple(v.tests[0].interval)
    assert "usage / S, DDCL - Slot Attention" in v.evidence


def test_a_negligible_gain_below_the_sesoi_is_not_reproduced():
    v = _decide(_fake(perceiver=(0.45 - D17_SESOI / 2, 0.30), spread=0.002))
    low, high = v.tests[1].interval
    assert 0 < low and high < D17_SESOI                       # real, but smaller than matters
    assert v.tests[1].word == "not reproduced" and v.word == "not reproduced"


def test_an_interval_holding_both_the_margin_and_the_sesoi_is_inconclusive():
    v = _decide(_fake(perceiver=(0.45 - 1.4 * D17_SESOI, 0.30), spread=0.07))
    low, high = v.tests[1].interval
    assert low < 0 < D17_SESOI < high
    assert v.tests[1].word == "inconclusive" and v.word == "inconclusive"


def test_a_peer_that_a_configuration_keeps_from_collapse_is_shown_beside():
    """Slot Attention at its least collapsed equivalent configuration as spread as DDCL: the
    rows beside say so; the word reads the most collapsed ones, where it collapses."""
    v = _decide(_fake(least={"slot": (0.44, 0.99)}, spread=0.005))
    assert [t.binding for t in v.tests] == [True, True, False, False, False, False]
    assert v.tests[4].word == "not reproduced" and v.tests[4].interval[1] < D17_SESOI
    assert v.tests[0].word == "reproduced" and v.word == "reproduced"
    assert re.search(r"at the least collapsed: DDCL 0\.4\d+, Slot Attention 0\.4", v.evidence)
    assert v.numbers["least collapsed maps_rank"]["slot"] == pytest.approx(0.44, abs=0.01)
    # the least collapsed runs carry their per-seed values too
    assert len(v.per_seed[rule_of("D17").beside[2].statistic]) == D17_SEEDS
    # which kind of "not reproduced", and how the row beside qualifies the word
    assert "least collapsed +0.0" in v.evidence
    assert "(not reproduced: a lead smaller than the SESOI)" in v.evidence
    assert "Slot Attention is within the SESOI of DDCL" in v.evidence
    assert "not for every one." in v.evidence


def test_a_peer_ahead_at_its_least_collapsed_configuration_is_named_beside_the_word():
    v = _decide(_fake(least={"perceiver": (0.52, 0.3)}, spread=0.005))
    assert v.word == "reproduced" and v.tests[5].interval[1] < 0
    assert "least collapsed -0.07" in v.evidence
    assert "(not reproduced: Perceiver ahead)" in v.evidence
    assert "Read with the rows beside: at its least collapsed equivalent configuration " \
        "Perceiver is ahead of DDCL (-0.07" in v.evidence
    # without such a row the word stands alone
    assert "Read with the rows beside" not in _decide(_fake()).evidence
    # a word that is not reproduced needs no such reading
    assert "Read with the rows beside" not in _decide(
        _fake(ddcl=(0.16, 0.7), least={"perceiver": (0.52, 0.3)}, spread=0.005)).evidence


def test_a_peer_collapsed_only_at_its_worst_configuration_still_decides_the_word():
    """DDCL's most collapsed configuration as collapsed as the Perceiver's: not reproduced,
    whatever the least collapsed say."""
    v = _decide(_fake(ddcl=(0.16, 0.70), least={"ddcl": (0.45, 0.7)}, spread=0.005))
    assert v.tests[1].word == "not reproduced" and v.word == "not reproduced"
    assert v.tests[5].word == "reproduced"


def test_fewer_seeds_than_the_rule_registers_decide_nothing():
    v = _decide(_fake(n=5))
    assert [t.word for t in v.tests] == ["reproduced"] * 6
    assert v.word == "inconclusive" and f"the rule asks {D17_SEEDS}" in v.evidence


def test_a_ddcl_run_at_or_above_t_c_fails_the_gate():
    ratio = np.full(EPOCHS + 1, 0.3)
    ratio[EPOCHS] = 1.2                                       # T_c fell below tau at the end
    v = _decide(_fake(ratio=ratio))
    gate = next(g for g in v.gates if g.name == "tau below T_c")
    assert not gate.passed and "1.2 at the end" in gate.detail
    assert v.word == "inconclusive" and "tau below T_c" in v.evidence
    assert [t.word for t in v.tests] == ["reproduced"] * 6   # the intervals are still shown


def test_the_start_and_end_of_tau_over_t_c_are_reported():
    ratio = np.linspace(0.25, 0.1, EPOCHS + 1)
    gate = d17_gates(_fake(ratio=ratio), CHANCE)[0]
    assert gate.passed and "0.25 at the start, 0.1 at the end" in gate.detail


def test_a_reading_still_moving_at_the_end_fails_the_settled_gate():
    v = _decide(_fake(moving=True))
    gate = next(g for g in v.gates if g.name == "settled")
    assert not gate.passed and v.word == "inconclusive"


def test_a_reading_beside_still_moving_is_reported_and_fails_no_gate():
    result = _fake()
    result.least["ddcl"] = [_history("ddcl", 0.45, 0.7, i, moving=True)
                            for i in range(D17_SEEDS)]
    settled = next(g for g in d17_gates(result, CHANCE) if g.name == "settled")
    assert settled.passed
    beside = float(settled.detail.rsplit("of a test beside: ", 1)[1])
    assert beside > 0.025 and _decide(result).word == "reproduced"


def test_a_readout_that_did_not_learn_the_task_fails_the_learned_gate():
    v = _decide(_fake(acc=CHANCE + 0.05))
    gate = next(g for g in v.gates if g.name == "learned")
    assert not gate.passed and v.word == "inconclusive"


def test_samples_pair_the_runs_by_seed_and_sequence():
    result = _fake(n=4)
    ours = per_seed(result, "ddcl", "maps_rank")
    theirs = per_seed(result, "slot", "maps_rank")
    items = d17_items(result, "slot")
    assert np.allclose([d.mean() for d in items], ours - theirs)
    samples = d17_samples(result)
    assert len(samples) == len(TESTS) == 6
    assert len(d17_samples(result, 4)) == 4                   # a shorter schedule: no least
    least = d17_items(result, "slot", selection="least collapsed")
    assert np.allclose([d.mean() for d in least],
                       per_seed(result, "ddcl", "maps_rank", selection="least collapsed")
                       - per_seed(result, "slot", "maps_rank", selection="least collapsed"))
    interval, spread = samples[0]
    assert interval.method == "bootstrap over seeds and items" and interval.n == 4
    assert spread == pytest.approx(np.std(ours - theirs, ddof=1))
    assert np.allclose(samples[2], per_seed(result, "ddcl", "normalised_usage")
                       - per_seed(result, "slot", "normalised_usage"))
    assert list(d17_trend(result, 2)) == ["4 epochs", f"{EPOCHS} epochs"]
    with pytest.raises(ValueError, match="statistic"):
        per_seed(result, "ddcl", "accuracy")
    with pytest.raises(ValueError, match="test"):
        d17_trend(result, 4)
    with pytest.raises(ValueError, match="selection"):
        per_seed(result, "ddcl", "maps_rank", selection="best")
    with pytest.raises(ValueError, match="epochs: the least collapsed"):
        per_seed(result, "ddcl", "maps_rank", epochs=4, selection="least collapsed")
    with pytest.raises(ValueError, match="chance"):
        decide_d17(result, chance=1.5, task="x")


def test_the_registered_rule_matches_the_study_s_confirmatory_seeds():
    from ddcl_theory.runtime import profile
    rule = rule_of("D17")
    assert rule.n_seeds == pr.D17_SEEDS
    ref = pr.StudySettings.for_profile(profile.Profile("reference", "cpu"))
    assert len(ref.seeds) == rule.n_seeds and min(ref.seeds) >= 1000
    assert ref.scales()[-1] == ref.epochs and len(ref.scales()) >= 3
    assert pr.D17_CONFIRMATORY_RUN == D17_RUN and min(ref.seeds) == 1000 * D17_RUN
    assert all(t.s - t.margin == pytest.approx(1 / ref.ng_slots) for t in rule.tests)


def test_the_trend_reads_separate_runs_with_fewer_seeds_at_the_shorter_schedules():
    result = _fake()
    result.main[4] = {k: runs[:3] for k, runs in result.main[4].items()}
    trend = d17_trend(result, 0)
    short, full = trend["4 epochs"], trend[f"{EPOCHS} epochs"]
    assert short[1] <= short[0] <= short[2] and full[1] <= full[0] <= full[2]
    assert short[2] - short[1] > full[2] - full[1]            # three seeds: a wider interval
    result.main[4] = {k: runs[:1] for k, runs in result.main[4].items()}
    one = d17_trend(result, 2)["4 epochs"]
    assert one[0] == one[1] == one[2]                          # one seed: a point
