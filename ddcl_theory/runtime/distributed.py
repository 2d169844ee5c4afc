"""Data-parallel training with DDCL layers: ``torch.distributed``, DDP, torchrun.

Run the example on one machine with two CPU processes (gloo), or on GPUs (nccl)::

    torchrun --nproc_per_node=2 -m ddcl_theory.runtime.distributed [--steps 20]

How :class:`~ddcl_theory.layers.ddcl.DDCLAttention` stays identical on every replica under
``torch.nn.parallel.DistributedDataParallel`` (DDP):

* **Parameters** (projections, prototypes, LayerNorm, a learnable log-temperature). DDP
  broadcasts rank 0's parameters and buffers when it wraps the model and averages the gradients
  in every backward pass, so replicas that step the same optimizer stay equal. The layer's
  forward pass has no data-dependent shapes and no host reads, so every rank runs the same graph.
* **Buffers.** ``temperature_step`` (the schedule's step counter) and ``_fixed_temperature`` (the
  current tau, which the forward pass reads). DDP's default ``broadcast_buffers=True`` copies rank
  0's buffers to all ranks at every forward, so tau is rank 0's everywhere. The layer also keeps
  the step as a Python int (so that neither the forward pass nor ``advance_schedule`` reads a
  tensor); it stays equal on all ranks when every rank calls ``advance_schedule`` equally often,
  as a training loop does, and then nothing needs communicating. For the other cases (resuming
  ranks from different checkpoints, ranks that skipped steps) :func:`sync_temperature_steps` is
  the one documented collective: an all-reduce (MAX) of every layer's counter, after which each
  rank re-evaluates its schedule.
* **k-means initialisation.** ``init_prototypes_from`` draws from the tokens it is given, so on
  rank-local data every rank gets a different bank. Either initialise before wrapping in DDP (its
  constructor broadcasts rank 0's parameters) or use :func:`init_prototypes_distributed`, which
  initialises locally and then broadcasts rank ``src``'s banks (one broadcast per layer).
  :func:`broadcast_module` does the same for a whole model.

:func:`replica_max_difference` (an all-gather) checks that replicas agree; the test suite runs
:func:`train` in two gloo processes and compares every parameter and buffer.
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
from ddcl_theory.runtime.progress import progress

__all__ = ["ddcl_layers", "sync_temperature_steps", "broadcast_module",
           "init_prototypes_distributed", "replica_max_difference", "DDPSettings",
           "TinyReadoutClassifier", "train", "main"]


def _require_initialised() -> None:
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("torch.distributed is not initialised: call "
                           "torch.distributed.init_process_group first (torchrun sets the "
                           "environment for it)")


def _unwrap(module: nn.Module) -> nn.Module:
    return module.module if isinstance(module, nn.parallel.DistributedDataParallel) else module


def ddcl_layers(module: nn.Module) -> list[DDCLAttention]:
    """Every DDCLAttention inside ``module`` (DDP wrapper or not), in module order."""
    return [m for m in _unwrap(module).modules() if isinstance(m, DDCLAttention)]


def sync_temperature_steps(module: nn.Module, group=None) -> list[int]:
    """All-reduce (MAX) each DDCL layer's step counter, then re-apply its schedule on every rank.

    One collective on a 1-D long tensor of all the model's counters. Returns the steps.
    """
    _require_initialised()
    layers = ddcl_layers(module)
    if not layers:
        return []
    steps = torch.stack([layer.temperature_step.detach().clone() for layer in layers])
    dist.all_reduce(steps, op=dist.ReduceOp.MAX, group=group)
    out = []
    with torch.no_grad():
        for layer, step in zip(layers, steps):
            layer.temperature_step.copy_(step)
            out.append(layer.sync_temperature_from_buffers())
    return out


def broadcast_module(module: nn.Module, src: int = 0, group=None) -> None:
    """Copy rank ``src``'s parameters and buffers to every rank (one broadcast per tensor).

    DDCL layers then re-read their step counters (their Python mirrors follow the buffers).
    """
    _require_initialised()
    with torch.no_grad():
        for t in [*_unwrap(module).parameters(), *_unwrap(module).buffers()]:
            dist.broadcast(t.data, src=src, group=group)
    for layer in ddcl_layers(module):
        layer.sync_temperature_from_buffers()


def init_prototypes_distributed(layer: DDCLAttention, x: Tensor, mask: Tensor | None = None,
                                generator: torch.Generator | None = None, src: int = 0,
                                group=None, measure_spread: bool = False) -> float | None:
    """k-means++ on this rank's tokens (x (B, T, dim), mask (B, T)), then rank ``src``'s banks
    everywhere: the documented synchronisation of the prototype initialisation (one broadcast).

    With ``measure_spread`` it first all-gathers the rank-local banks and returns how far they
    were apart (max |difference| to rank 0's); otherwise returns None.
    """
    _require_initialised()
    layer.init_prototypes_from(x, mask, generator=generator)
    spread = (_max_difference(layer.prototypes.detach().reshape(-1).double(), group)
              if measure_spread else None)
    with torch.no_grad():
        dist.broadcast(layer.prototypes.data, src=src, group=group)
    return spread


def _flat_state(module: nn.Module) -> Tensor:
    parts = [t.detach().reshape(-1).to(torch.float64)
             for t in [*_unwrap(module).parameters(), *_unwrap(module).buffers()]]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def _max_difference(flat: Tensor, group=None) -> float:
    """max over ranks and entries of |flat - rank 0's flat| (NaN equals NaN); an all-gather."""
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, flat.contiguous(), group=group)
    ref = gathered[0]
    worst = 0.0
    for other in gathered[1:]:
        both_nan = torch.isnan(ref) & torch.isnan(other)
        diff = torch.where(both_nan, torch.zeros_like(ref), (other - ref).abs())
        worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
    return worst


def replica_max_difference(module: nn.Module, group=None) -> float:
    """max over ranks and entries of |state - rank 0's state| (parameters and buffers).

    An all-gather of the flattened state (for checks, not for the training loop).
    """
    _require_initialised()
    return _max_difference(_flat_state(module), group)


# --------------------------------------------------------------------------------- example
def cooling_schedule(step: int) -> float:
    """The example's temperature schedule: tau = 1 * 0.9^step, floored at 0.1."""
    return max(0.1, 0.9 ** step)


@dataclass(frozen=True)
class DDPSettings:
    """Sizes of the data-parallel example (values from the profile)."""

    steps: int = 4
    batch: int = 4                 # per rank
    seq_len: int = 12
    dim: int = 16
    num_prototypes: int = 4
    heads: int = 2
    classes: int = 3
    lr: float = 0.05
    seed: int = 0

    @classmethod
    def from_profile(cls) -> "DDPSettings":
        prof = profile.current()
        return cls(steps=prof.pick(cpu=4, paper=200), batch=prof.pick(cpu=4, paper=64),
                   seq_len=prof.pick(cpu=12, paper=256), dim=prof.pick(cpu=16, paper=256),
                   num_prototypes=prof.pick(cpu=4, paper=64), heads=prof.pick(cpu=2, paper=4))


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
    The report holds this rank's final ``state`` (CPU tensors), ``step`` (the Python mirror of the
    schedule counter), ``init_spread`` (how far the rank-local k-means banks were apart, before
    the broadcast), ``after_init_difference`` (replicas after it, before DDP) and
    ``replica_max_difference`` after training, and the shared ``initial_prototypes``.
    """
    _require_initialised()
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
    for step in progress(range(s.steps), desc=f"rank {rank}", total=s.steps):
        x, mask, y = (t.to(device) for t in _local_batch(s, rank, step))
        logits, l_q = ddp(x, mask)
        loss = nn.functional.cross_entropy(logits, y) + 0.1 * l_q
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        layer.advance_schedule(1)                     # every rank, every step: no collective
    return {"rank": rank, "world_size": world, "loss": float(loss.detach()),
            "step": layer.advance_schedule(0), "temperature": layer.temperature,
            "init_spread": init_spread, "after_init_difference": after_init,
            "initial_prototypes": initial,
            "replica_max_difference": replica_max_difference(model),
            "state": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}}


def main(argv: list[str] | None = None) -> int:
    """torchrun entry point: ``torchrun --nproc_per_node=N -m ddcl_theory.runtime.distributed``."""
    ap = argparse.ArgumentParser(prog="torchrun --nproc_per_node=N -m ddcl_theory.runtime.distributed")
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
        s = DDPSettings.from_profile()
        if args.steps is not None:
            s = DDPSettings(**{**s.__dict__, "steps": args.steps})
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
