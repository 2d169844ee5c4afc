"""A data-parallel check of DDCL layers: a tiny readout classifier trained with DDP.

Run on one machine with two CPU processes (gloo), or on GPUs (nccl)::

    torchrun --nproc_per_node=2 -m ddcl_theory.experiments.ddp_check [--steps 20]

Each rank draws its own synthetic data and k-means-initialises the prototypes on it; the
generic helpers of :mod:`ddcl_theory.runtime.distributed` make the banks equal before DDP wraps
the model, and the report says how far the replicas are apart after training (zero: DDP
averages the gradients, and every rank advances the temperature schedule equally).
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ddcl_theory.layers.ddcl import DDCLAttention
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.distributed import (init_prototypes_distributed,
                                             replica_max_difference, require_initialised)
from ddcl_theory.runtime.settings import Settings, setting
from ddcl_theory.runtime.training import fit

__all__ = ["cooling_schedule", "DDPSettings", "TinyReadoutClassifier", "train", "main"]


def cooling_schedule(step: int) -> float:
    """The example's temperature schedule: tau = 1 * 0.9^step, floored at 0.1."""
    return max(0.1, 0.9 ** step)


@dataclass(frozen=True)
class DDPSettings(Settings):
    """Sizes of the data-parallel example: cpu 4 steps on batches of 4 sequences of 12 tokens
    of width 16; paper 200 steps, 64 sequences of 256 tokens of width 256."""

    steps: int = setting(4, paper=200, ge=1)
    batch: int = setting(4, paper=64, ge=1)                 # per rank
    seq_len: int = setting(12, paper=256, ge=1)
    dim: int = setting(16, paper=256, ge=1)
    num_prototypes: int = setting(4, paper=64, ge=1)
    heads: int = setting(2, paper=4, ge=1)
    classes: int = setting(3, ge=1)
    lr: float = setting(0.05, gt=0)
    seed: int = setting(0, ge=0)

    def check(self) -> None:
        if self.num_prototypes > self.seq_len:
            raise ValueError(f"DDPSettings.num_prototypes: expected <= seq_len {self.seq_len} "
                             f"(every sequence keeps at least that many tokens), got "
                             f"{self.num_prototypes}")


class TinyReadoutClassifier(nn.Module):
    """A DDCL layer (scheduled temperature) and a linear head on its pooled summary and the mean
    of its output tokens, so that every parameter gets a gradient (DDP's default needs that)."""

    def __init__(self, s: DDPSettings) -> None:
        super().__init__()
        self.ddcl = DDCLAttention(s.dim, s.num_prototypes, heads=s.heads,
                                  temperature=cooling_schedule)
        self.head = nn.Linear(s.dim, s.classes)

    def forward(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        out = self.ddcl(x, mask)
        w = mask.unsqueeze(-1).to(out.output.dtype)
        tokens = (out.output * w).sum(1) / w.sum(1).clamp_min(1.0)
        return self.head(out.pooled + tokens), out.losses.l_q


def _local_batch(s: DDPSettings, rank: int, step: int) -> tuple[Tensor, Tensor, Tensor]:
    """Rank- and step-specific synthetic data: class-dependent token means, random padding."""
    g = torch.Generator().manual_seed(s.seed * 1_000_003 + rank * 10_007 + step)
    y = torch.randint(s.classes, (s.batch,), generator=g)
    centres = torch.randn(s.classes, s.dim, generator=torch.Generator().manual_seed(s.seed))
    x = centres[y][:, None, :] + 0.5 * torch.randn(s.batch, s.seq_len, s.dim, generator=g)
    lengths = torch.randint(s.num_prototypes, s.seq_len + 1, (s.batch,), generator=g)
    mask = torch.arange(s.seq_len)[None, :] < lengths[:, None]
    return x, mask, y


def train(s: DDPSettings | None = None, device: str | None = None) -> dict:
    """Train :class:`TinyReadoutClassifier` with DDP on this rank; return a report.

    Needs an initialised process group. Each rank draws its own data and k-means-initialises on
    it; :func:`init_prototypes_distributed` makes the banks equal before DDP wraps the model.
    The loop is :func:`ddcl_theory.runtime.training.fit` (one batch per round; the schedule
    advances after every step on every rank, so no collective is needed for it).
    The report holds this rank's final ``state`` (CPU tensors), ``step`` (the Python mirror of the
    schedule counter), ``init_spread`` (how far the rank-local k-means banks were apart, before
    the broadcast), ``after_init_difference`` (replicas after it, before DDP) and
    ``replica_max_difference`` after training, and the shared ``initial_prototypes``.
    """
    require_initialised()
    s = s or DDPSettings.from_profile()
    rank, world = dist.get_rank(), dist.get_world_size()
    device = device or ("cuda" if dist.get_backend() == "nccl" else "cpu")
    profile.seed_everything(s.seed)                   # same initial weights on every rank
    model = TinyReadoutClassifier(s).to(device)
    x0, m0, _ = _local_batch(s, rank, step=-1)
    layer = model.ddcl
    gen = torch.Generator().manual_seed(s.seed + rank)
    init_spread = init_prototypes_distributed(layer, x0.to(device), m0.to(device),
                                              generator=gen, src=0, measure_spread=True)
    after_init = replica_max_difference(model)
    initial = layer.prototypes.detach().cpu().clone()
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=s.lr)

    def batches(step: int):                           # one batch per round: rounds are steps
        yield tuple(t.to(device) for t in _local_batch(s, rank, step))

    def loss(forward, batch) -> Tensor:
        x, mask, y = batch
        logits, l_q = forward(x, mask)
        return nn.functional.cross_entropy(logits, y) + 0.1 * l_q

    log = fit(ddp, opt, rounds=s.steps, batches=batches, loss=loss, device=device,
              after_step=lambda: layer.temperature.advance(1),   # every rank, every step
              desc=f"rank {rank}", compile=False)
    return {"rank": rank, "world_size": world, "loss": log.step_losses[-1],
            "step": int(layer.temperature.step), "temperature": layer.temperature.value,
            "init_spread": init_spread, "after_init_difference": after_init,
            "initial_prototypes": initial,
            "replica_max_difference": replica_max_difference(model),
            "state": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}}


def main(argv: list[str] | None = None) -> int:
    """The torchrun entry point: parse ``--steps``/``--backend``, train, print rank 0's report."""
    ap = argparse.ArgumentParser(
        prog="torchrun --nproc_per_node=N -m ddcl_theory.experiments.ddp_check")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--backend", choices=("gloo", "nccl"))
    args = ap.parse_args(argv)
    if "RANK" not in os.environ:
        raise SystemExit("run me under torchrun (it sets RANK, WORLD_SIZE, MASTER_ADDR, ...)")
    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend)
    try:
        steps = {} if args.steps is None else {"steps": args.steps}
        s = DDPSettings.from_profile(**steps)
        report = train(s)
        if report["rank"] == 0:
            print(f"world size {report['world_size']}: {s.steps} steps, last loss "
                  f"{report['loss']:.4f}, tau {report['temperature']:.3g} at step "
                  f"{report['step']}; rank-local k-means banks differed by up to "
                  f"{report['init_spread']:.3g} before the broadcast; replicas differ by "
                  f"{report['replica_max_difference']:.3g} after training")
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
