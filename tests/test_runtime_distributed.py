"""Data-parallel training with DDCL layers (ddcl_theory.runtime.distributed, exercised by
ddcl_theory.experiments.ddp_check): two CPU processes with the gloo backend train a few DDP
steps on different data and end with identical parameters and buffers; the k-means
initialisation and the schedule's step counter are kept in sync."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ddcl_theory.experiments import ddp_check
from ddcl_theory.runtime import distributed as ddp_tools

WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, out_dir: str, steps: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    try:
        report = ddp_check.train(ddp_check.DDPSettings(steps=steps))
        # a rank that advanced its schedule differently is realigned by the one collective
        model = ddp_check.TinyReadoutClassifier(ddp_check.DDPSettings())
        model.ddcl.temperature.advance(3 + rank)            # rank 1 is one step ahead
        report["synced_steps"] = ddp_tools.sync_temperature_steps(model)
        report["synced_temperature"] = model.ddcl.temperature.value
        torch.save(report, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_ranks_end_with_identical_parameters_and_buffers(tmp_path):
    steps = 4
    mp.spawn(_worker, args=(_free_port(), str(tmp_path), steps), nprocs=WORLD, join=True)
    reports = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    a, b = reports

    # rank-local k-means banks differed; one broadcast made them equal before DDP wrapped
    assert a["init_spread"] > 1e-3
    assert a["after_init_difference"] == 0.0 and b["after_init_difference"] == 0.0

    # after training on different data: every parameter and buffer equal, bit for bit
    assert a["state"].keys() == b["state"].keys()
    for name in a["state"]:
        assert torch.equal(a["state"][name], b["state"][name]), name
    assert a["replica_max_difference"] == 0.0
    assert a["step"] == b["step"] == steps
    assert int(a["state"]["ddcl.temperature.step"]) == steps
    assert a["temperature"] == pytest.approx(ddp_check.cooling_schedule(steps))

    # training moved the prototypes away from the (shared) initial bank
    assert torch.equal(a["initial_prototypes"], b["initial_prototypes"])
    assert float((a["state"]["ddcl.prototypes"] - a["initial_prototypes"]).abs().max()) > 1e-4
    assert torch.isfinite(torch.tensor(a["loss"]))
    assert a["loss"] != b["loss"]                                # the ranks saw different data

    # sync_temperature_steps: MAX of the counters, schedule re-applied on both ranks
    assert a["synced_steps"] == b["synced_steps"] == [4]
    assert a["synced_temperature"] == b["synced_temperature"] == pytest.approx(
        ddp_check.cooling_schedule(4))


def test_helpers_refuse_to_run_without_a_process_group():
    model = ddp_check.TinyReadoutClassifier(ddp_check.DDPSettings())
    for fn in (ddp_tools.sync_temperature_steps, ddp_tools.broadcast_module,
               ddp_tools.replica_max_difference):
        with pytest.raises(RuntimeError, match="init_process_group"):
            fn(model)
    assert [type(m).__name__ for m in ddp_tools.temperatures(model)] == ["Temperature"]
