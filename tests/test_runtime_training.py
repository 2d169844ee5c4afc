"""The one training loop (ddcl_theory.runtime.training.fit): the run contract."""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.training import fit


@dataclass
class _Settings:
    rounds: int = 6


def _problem(seed: int = 0):
    gen = profile.seed_everything(seed)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
    x = torch.randn(64, 3)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]])

    def batches(_round):
        order = torch.randperm(64, generator=gen)
        return [order[i:i + 16] for i in range(0, 64, 16)]

    def loss(forward, idx):
        return torch.nn.functional.mse_loss(forward(x[idx]), y[idx])

    return model, opt, sched, gen, batches, loss


def _fit(run=None, rounds=6, stop_after=None):
    model, opt, sched, gen, batches, loss = _problem()
    seen = []

    def end_of_round(r):
        seen.append(r)
        if stop_after is not None and r == stop_after:
            raise KeyboardInterrupt                    # a kill between two saves
        return {"weight0": float(model.weight[0, 0])}

    log = fit(model, opt, rounds=rounds, batches=batches, loss=loss, device="cpu", run=run,
              name="unit", schedulers=[sched], generators={"gen": gen},
              end_of_round=end_of_round)
    return model, log, seen


def test_fit_lowers_the_loss_and_logs_every_step():
    model, log, seen = _fit()
    assert seen == list(range(6)) and len(log.losses) == 6
    assert all(len(r) == 4 for r in log.losses) and len(log.step_losses) == 24
    assert log.losses[-1][-1] < 0.1 * log.losses[0][0]
    assert not model.training


def test_a_killed_fit_resumes_to_the_same_numbers(tmp_path):
    whole, log, _ = _fit()
    run = RunDir("fit-test", _Settings(), root=tmp_path, enabled=True)
    with pytest.raises(KeyboardInterrupt):
        _fit(run=run, stop_after=3)                     # saved after rounds 0, 1, 2
    assert run.state_path("unit").is_file()
    run2 = RunDir("fit-test", _Settings(), root=tmp_path, enabled=True)
    resumed, log2, seen = _fit(run=run2)
    assert seen == [3, 4, 5] and log2.resumed_at == 3
    assert log2.losses == log.losses and log2.metrics == log.metrics
    assert torch.equal(resumed.weight, whole.weight) and torch.equal(resumed.bias, whole.bias)
    assert not run2.state_path("unit").exists()         # cleared once the loop finished


def test_fit_rejects_bad_arguments():
    model, opt, sched, gen, batches, loss = _problem()
    with pytest.raises(ValueError, match="rounds"):
        fit(model, opt, rounds=-1, batches=batches, loss=loss, device="cpu")
    with pytest.raises(ValueError, match="optimizers"):
        fit(model, [], rounds=1, batches=batches, loss=loss, device="cpu")
    with pytest.raises(ValueError, match="checkpoint_every"):
        fit(model, opt, rounds=1, batches=batches, loss=loss, device="cpu", checkpoint_every=0)


def test_stop_if_ends_the_loop_after_the_round_it_is_true_for():
    model, opt, sched, gen, batches, loss = _problem()
    log = fit(model, opt, rounds=6, batches=batches, loss=loss, device="cpu",
              end_of_round=lambda r: {"round": r}, stop_if=lambda m: m["round"] == 2)
    assert [m["round"] for m in log.metrics] == [0, 1, 2] and len(log.losses) == 3
