"""Decision rules of the free-energy chapter (D7, D10) on small hand-built inputs: D10 on
fabricated cooling results on every side of its registered rule."""
from __future__ import annotations

import numpy as np

from ddcl_theory.experiments import cooling
from ddcl_theory.experiments.cooling import CoolingResult, CoolingRun, CoolingSettings
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions import free_energy as dec
from ddcl_theory.ledger.rules import D10_CARRIED, D10_SESOI


def test_d7_refuted_when_v_only_contracts_and_collapse_is_stable_above_the_trained_threshold():
    kw = dict(t_c=0.5, t_hessian=0.5, t_trained=1.0, t_hessian_trained=1.0)
    v = dec.decide_d7([-1.0, 0.0], [1e-3, 1e-12], **kw)
    assert v.word == "refuted"
    assert "threshold of the trained L_q 4 lambda_max = 1 (CIFAR patches)" in v.our_value
    assert "F's T_c = 0.5, sign change at 1.000000 T_c" in v.our_value
    assert "not descent of the free energy F" in v.evidence
    assert dec.decide_d7([-1.0, 1e-3], [1e-3, 1e-12], **kw).word == "qualified"
    assert dec.decide_d7([-1.0], [1e-3, 1e-2], **kw).word == "qualified"


def fake_cooling(ends: dict, *, n: int = 20, g_rise: float = 0.0, move: float = 0.0,
                 settled: bool = True, seed: int = 0,
                 twin: float | None = None) -> CoolingResult:
    """A cooling result whose final S_min / sqrt(tr C) per start at the longest length are
    ``ends[schedule]``: (mean, sd), drawn for ``n`` starts, or the ``n`` values; S_mean is
    zero only where S_min is. ``twin``: the longest linear runs were carried to first order,
    and their float64 twins end with this S_min / sqrt(tr C)."""
    settings = CoolingSettings()
    rng = np.random.default_rng(seed)
    runs = []
    for schedule, end in ends.items():
        (mean, sd), values = (end, None) if len(end) == 2 else ((0.0, 0.0), end)
        for length in (settings.steps[-1],) if schedule == "annealed" else settings.steps:
            for start in range(n):
                v = (values[start] if values is not None
                     else max(float(mean + sd * rng.standard_normal()), 0.0))
                spread = 4 * v + (2.0 if v > 0 else 0.0)      # collapsed only when merged
                carried = twin is not None and schedule == "linear" \
                    and length == settings.steps[-1]
                runs.append(CoolingRun(schedule, length, start, {"min": 2 * v, "mean": spread,
                                                                 "trace": 1.0}, 1.0,
                                       5.0 if schedule != "annealed" else 0.0,
                                       g_rise if schedule == "linear" else -1e-3, move, settled,
                                       100 if carried else 0,
                                       {"min": 2 * twin, "mean": 2 * twin, "trace": 0.0}
                                       if carried else None))
    return CoolingResult(settings, 4.0, 2.0, 1000, runs)


GOOD = {"linear": (0.3, 0.1), "exponential": (0.5, 0.01), "annealed": (0.53, 0.0)}


def test_d10_reproduced_when_every_schedule_ends_separated_beyond_the_sesoi():
    v = dec.decide_d10(fake_cooling(GOOD))
    assert v.word == "reproduced"
    assert [t.word for t in v.tests] == ["reproduced"] * 6
    assert v.rule == rule_of("D10").text and v.n_seeds == 20
    assert len(v.per_seed) == 6 and all(len(x) == 20 for x in v.per_seed.values())
    assert set(v.trend) == {"40 steps", "400 steps", "4000 steps"}
    assert "F itself rose under cooling by up to 5" in v.evidence
    assert "0 of 20 starts below 0.01" in v.evidence and "G never rose" in v.our_value


def test_d10_not_reproduced_when_a_schedule_ends_collapsed_or_negligibly_separated():
    collapsed = dec.decide_d10(fake_cooling({**GOOD, "linear": (0.0, 0.0)}))
    assert collapsed.word == "not reproduced"
    assert collapsed.tests[0].word == "not reproduced" and collapsed.tests[3].word == \
        "not reproduced"                                # the spread reading fails too
    assert "20 of 20 starts below 0.01" in collapsed.evidence
    assert "lies below the SESOI: linear (4000 steps)" in collapsed.evidence
    assert "descent never leaves it" not in collapsed.evidence   # reached T_c spread out
    tiny = dec.decide_d10(fake_cooling({**GOOD, "exponential": (0.002, 0.0005)}))
    assert tiny.word == "not reproduced"                 # real but below the SESOI
    assert tiny.tests[1].word == "not reproduced" and tiny.tests[4].word == "reproduced"


def test_d10_inconclusive_when_an_interval_holds_zero_and_the_sesoi():
    one_apart = [0.0] * 19 + [0.1]                       # one start of 20 ends separated
    v = dec.decide_d10(fake_cooling({**GOOD, "annealed": one_apart}))
    assert v.tests[2].word == "inconclusive"
    assert v.word == "inconclusive" and all(g.passed for g in v.gates)


def test_d10_inconclusive_when_a_gate_fails_or_too_few_starts_ran():
    g = dec.decide_d10(fake_cooling(GOOD, g_rise=1e-6))
    assert g.word == "inconclusive" and not g.gates[0].passed and g.gates[1].passed
    assert "counterexample to the proof" in g.gates[0].detail and "G rose," in g.our_value
    moving = dec.decide_d10(fake_cooling(GOOD, move=0.01))        # 0.005 sqrt(tr C) > 1e-3
    assert moving.word == "inconclusive" and not moving.gates[1].passed
    unsettled = dec.decide_d10(fake_cooling(GOOD, settled=False))
    assert unsettled.word == "inconclusive" and not unsettled.gates[1].passed
    few = dec.decide_d10(fake_cooling(GOOD, n=3))
    assert few.word == "inconclusive" and all(t.word == "reproduced" for t in few.tests)
    assert "3 starts at the longest schedules, the rule registers 20" in few.evidence


def test_d10_qualified_when_a_carried_run_ends_collapsed_in_float64_coordinates():
    v = dec.decide_d10(fake_cooling(GOOD, twin=0.0))
    assert v.word == "qualified" and [t.word for t in v.tests] == ["reproduced"] * 6
    assert "(the 20 carried runs): 20 end with S_min below 0.01" in v.evidence
    assert "not in the floating point a layer is trained in" in v.evidence
    assert v.numbers["float64_twins_below_sesoi"] == 20
    apart = dec.decide_d10(fake_cooling(GOOD, twin=0.3))       # the twins split as well
    assert apart.word == "reproduced" and "(the 20 carried runs): 0 end" in apart.evidence
    failed = dec.decide_d10(fake_cooling({**GOOD, "linear": (0.0, 0.0)}, twin=0.0))
    assert failed.word == "not reproduced"                     # a qualifier never lifts a word


def test_d10_rule_registers_its_carry_threshold_as_the_experiment_applies_it():
    assert D10_CARRIED == cooling.LINEAR_BELOW
    assert "qualified when such a float64 twin ends with S_min" in rule_of("D10").text


def test_d10_rule_registers_its_sesoi_gates_and_twenty_starts():
    rule = rule_of("D10")
    assert rule.n_seeds >= 20 and len(rule.tests) == 3 and len(rule.beside) == 3
    assert all(t.margin == 0 and t.s == D10_SESOI > 0 and t.why for t in rule.all_tests)
    assert len(rule.gates) == 2
