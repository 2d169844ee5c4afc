"""Temperature: fixed, scheduled or learnable tau, read as a tensor without host reads."""
from __future__ import annotations

import math

import pytest
import torch

from ddcl_theory.layers.temperature import Temperature


def test_fixed_temperature_is_a_buffer_and_set_replaces_it():
    tau = Temperature(2.0)
    assert tau.value == 2.0 and float(tau()) == 2.0 and tau().shape == ()
    assert set(tau.state_dict()) == {"step", "tau"} and not list(tau.parameters())
    tau.set(0.5)
    assert tau.value == 0.5 and float(tau.state_dict()["tau"]) == 0.5


def test_the_call_returns_a_copy_so_a_later_set_cannot_reach_a_pending_backward():
    tau = Temperature(2.0)
    now = tau()
    tau.set(0.5)
    assert float(now) == 2.0


def test_learnable_temperature_is_exp_of_a_parameter_and_gets_a_gradient():
    tau = Temperature(3.0, learnable=True)
    assert [n for n, _ in tau.named_parameters()] == ["log_tau"]
    assert "tau" not in tau.state_dict()
    assert tau.value == pytest.approx(3.0)
    tau().backward()
    assert float(tau.log_tau.grad) == pytest.approx(3.0)              # d exp(s) / ds = tau
    with torch.no_grad():
        tau.log_tau.fill_(-50.0)
    assert tau.value == pytest.approx(math.exp(-50.0))                 # still positive
    tau.set(0.25)                                                      # restarts the parameter
    assert float(tau.log_tau.detach()) == pytest.approx(math.log(0.25))


def test_schedule_follows_the_step_counter_saved_in_the_state_dict():
    tau = Temperature(lambda step: 1.0 / (1 + step))
    assert tau.value == 1.0
    assert tau.advance(3) == 3 and tau.value == 0.25
    assert float(tau()) == 0.25 and int(tau.state_dict()["step"]) == 3
    assert tau.advance(0) == 3
    assert tau.extra_repr() == "schedule"
    tau.set(0.3)                                                       # replaces the schedule
    assert tau.schedule is None and tau.advance(5) == 8 and tau.value == pytest.approx(0.3)


def test_a_bad_scheduled_value_raises_at_the_next_call_until_replaced():
    tau = Temperature(lambda step: 1.0 - 0.25 * step)
    tau.advance(4)                                                     # tau = 0: bad
    with pytest.raises(ValueError, match="temperature.*step 4"):
        tau()
    with pytest.raises(ValueError, match="temperature"):
        _ = tau.value
    tau.set(0.3)
    assert float(tau()) == pytest.approx(0.3)


def test_loading_a_state_dict_resyncs_the_python_step_and_reapplies_the_schedule():
    sched = lambda step: 1.0 - 0.25 * step                              # noqa: E731
    state = Temperature(sched).state_dict()
    state["step"].fill_(3)
    state["tau"].fill_(float("nan"))                                   # a stale value is replaced
    twin = Temperature(sched)
    twin.load_state_dict(state)
    assert twin.advance(0) == 3 and twin.value == 0.25 and float(twin()) == 0.25


def test_sync_from_buffers_follows_a_counter_changed_behind_the_module():
    tau = Temperature(lambda step: 0.5 ** step)
    with torch.no_grad():
        tau.step.fill_(2)                                              # as a collective would
    assert tau.advance(0) == 0                                         # the mirror lags
    assert tau.sync_from_buffers() == 2 and float(tau()) == 0.25


def test_bad_arguments_raise_naming_them():
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="temperature"):
            Temperature(bad)
        with pytest.raises(ValueError, match="value"):
            Temperature(1.0).set(bad)
    with pytest.raises(ValueError, match="temperature"):
        Temperature(lambda step: 0.0)                                  # checked at step 0
    with pytest.raises(ValueError, match="learnable"):
        Temperature(lambda step: 1.0, learnable=True)
    for steps in (-1, 1.5, True):
        with pytest.raises(ValueError, match="steps"):
            Temperature(1.0).advance(steps)


def test_the_call_compiles_into_one_graph_for_every_kind():
    for tau in (Temperature(0.5), Temperature(0.5, learnable=True),
                Temperature(lambda step: 0.5 + step)):
        explained = torch._dynamo.explain(tau)()
        assert explained.graph_count == 1 and explained.graph_break_count == 0
