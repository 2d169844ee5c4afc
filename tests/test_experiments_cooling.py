"""The cooling experiment (tiny runs): G never rises along a cooling schedule while F can; the
annealed run of start 0 is the chapter's annealing run; exact collapse is absorbing; a killed
run resumes from its run directory with the same record."""
from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from ddcl_theory.experiments import annealing, cooling
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.theory.annealing import linear_schedule
from ddcl_theory.metrics.prototypes import kmeans_pp_init
from ddcl_theory.theory.collapse import collapsed, critical_temperature, data_covariance

ANNEAL = annealing.AnnealingSettings(n_tokens=200, n_temperatures=6, max_iters=50)


def tiny(**changes) -> cooling.CoolingSettings:
    base = dict(steps=(3, 30), seeds=(0, 1), longest_seeds=1, anneal_seeds=(0,),
                anneal=ANNEAL)
    return cooling.CoolingSettings(**{**base, **changes})


def test_g_never_rises_under_cooling_while_f_does_and_every_start_is_recorded():
    result = cooling.run(tiny())
    gradient = [r for r in result.runs if r.schedule != "annealed"]
    assert len(gradient) == 2 * 2 + 2 * 1            # two kinds; two seeds at 3, one at 30
    assert max(r.max_g_rise for r in gradient) <= 1e-12
    assert max(r.max_f_rise for r in gradient) > 0    # cooling raises F
    assert result.relative("linear", "min", 3).shape == (2,)
    assert result.relative("exponential", "trace").shape == (1,)
    for r in result.runs:
        assert r.end["min"] <= r.end["mean"]
        assert r.end["trace"] >= 0
    with pytest.raises(ValueError, match="kind"):
        result.relative("linear", "max")


def test_the_annealed_run_of_seed_0_is_the_chapters_annealing_run():
    result = cooling.run(tiny())
    (annealed,) = result.of("annealed")
    reference = annealing.run(ANNEAL)
    assert annealed.end["min"] == pytest.approx(float(reference.separation_min[-1]), abs=1e-12)
    assert annealed.end["mean"] == pytest.approx(float(reference.separation_mean[-1]),
                                                 abs=1e-12)
    assert annealed.settled == bool(reference.settled[-1])


def _tokens():
    z, _ = annealing.patch_tokens(200, 4, 4, 0)
    t_c = critical_temperature(z, objective="free_energy")
    return z, t_c, float(torch.sqrt(torch.trace(data_covariance(z))))


def test_exact_collapse_is_never_left_by_gradient_steps_under_cooling():
    z, t_c, scale = _tokens()
    taus = linear_schedule(1.5 * t_c, 0.05 * t_c, 60)
    end, at_tc, _, g_rise, _, carried = cooling.gradient_run(z, collapsed(z, 4), taus,
                                                             0.9 / 200, t_c, scale)
    assert end["mean"] == 0.0 and at_tc == 0.0 and carried == 0   # a saddle, never left
    assert g_rise <= 1e-12
    spread = collapsed(z, 4) + 1e-3 * torch.randn(4, 4, generator=torch.Generator().manual_seed(0),
                                                  dtype=torch.float64)
    end, *_ = cooling.gradient_run(z, spread, taus, 0.9 / 200, t_c, scale)
    assert end["mean"] > 1e-2                         # a perturbation splits it below T_c


def _both(steps: int):
    z, t_c, scale = _tokens()
    p0 = kmeans_pp_init(z, 4, generator=torch.Generator().manual_seed(0))
    taus = linear_schedule(1.5 * t_c, 0.05 * t_c, steps)
    return scale, [cooling.gradient_run(z, p0, taus, 0.9 / 200, t_c, scale, carry=carry)
                   for carry in (True, False)]


def test_the_first_order_carry_agrees_with_coordinates_where_float64_resolves_the_spread():
    # 550 steps: the spread falls to about 5e-8 sqrt(tr C) above T_c, below the carry's
    # threshold, where coordinates still hold it to about 1e-8 of itself
    scale, (carried, plain) = _both(550)
    assert carried[5] > 100 and plain[5] == 0
    assert carried[1] / scale < cooling.LINEAR_BELOW
    for kind in cooling.SEPARATIONS:
        assert carried[0][kind] == pytest.approx(plain[0][kind], rel=1e-7)
        assert carried[0][kind] > 0.5 * scale ** (2 if kind == "trace" else 1)


def test_through_deep_collapse_the_carried_bank_splits_where_coordinates_cannot():
    # 1,500 steps: the spread at T_c is far below float64 resolution; coordinates lose it
    scale, (carried, plain) = _both(1500)
    assert carried[1] / scale < 1e-18 and plain[1] / scale > 1e-17     # the rounding floor
    assert carried[0]["min"] / scale > 0.5
    assert plain[0]["min"] / scale < 1e-12                             # two stayed merged
    assert carried[3] <= 1e-12                                         # G never rose


def test_a_carried_run_records_its_float64_twin_and_only_a_carried_run_does():
    result = cooling.run(tiny(k=4, steps=(3, 1500), seeds=(0,), anneal_seeds=()))
    deep = result.of("linear")[0]
    _, (carried, plain) = _both(1500)                     # the same start and schedule
    assert deep.linear_steps == carried[5] > 0 and deep.end == carried[0]
    assert deep.float64_end == plain[0] and deep.float64_end["min"] / result.scale < 1e-12
    for r in result.runs:
        assert (r.float64_end is not None) == (r.linear_steps > 0)


def test_a_killed_cooling_run_resumes_to_the_same_record(tmp_path, monkeypatch):
    s = tiny()
    whole = cooling.run(s)
    monkeypatch.setattr(cooling, "RunDir", functools.partial(RunDir, root=tmp_path, enabled=True))
    real, calls = cooling.gradient_run, []

    def run_then_kill(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt                   # killed in the second start
        return real(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(cooling, "gradient_run", run_then_kill)
        with pytest.raises(KeyboardInterrupt):
            cooling.run(s)
    calls.clear()
    monkeypatch.setattr(cooling, "gradient_run", lambda *a, **k: (calls.append(1),
                                                                   real(*a, **k))[1])
    resumed = cooling.run(s)
    assert len(calls) == 2                            # only the second start's two runs
    assert [(r.schedule, r.length, r.seed) for r in resumed.runs] == \
        [(r.schedule, r.length, r.seed) for r in whole.runs]
    for a, b in zip(resumed.runs, whole.runs):
        assert a.end == b.end and a.max_g_rise == b.max_g_rise


def test_the_settings_name_what_is_wrong():
    with pytest.raises(ValueError, match="start_ratio"):
        tiny(start_ratio=0.9)
    with pytest.raises(ValueError, match="steps"):
        tiny(steps=(30, 3))
    with pytest.raises(ValueError, match="length"):
        tiny().seeds_at(7)
    assert tiny().seeds_at(30) == (0,) and tiny().seeds_at(3) == (0, 1)
    assert tiny(longest_seeds=5).seeds_at(30) == (0, 1)          # as many as there are
    np.testing.assert_array_equal(cooling.CoolingSettings().steps, (40, 400, 4000))
    with pytest.raises(ValueError, match="step_n"):
        tiny(step_n=1.0)                              # eta = 1/N: F need not descend
