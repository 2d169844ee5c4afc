"""Data-parallel helpers for layers with prototypes and temperature schedules: DDP, torchrun.

The helpers duck-type the modules (this module imports no layer): a *temperature* (e.g.
:class:`~ddcl_theory.layers.temperature.Temperature`) has a ``step`` buffer and
``sync_from_buffers()``; a prototype layer has ``prototypes`` and
``init_prototypes_from(x, mask, generator=...)``. A worked example that
trains a DDCL classifier with DDP is :mod:`ddcl_theory.experiments.ddp_check`::

    torchrun --nproc_per_node=2 -m ddcl_theory.experiments.ddp_check [--steps 20]

How :class:`~ddcl_theory.layers.ddcl.DDCLAttention` stays identical on every replica under
``torch.nn.parallel.DistributedDataParallel`` (DDP):

* **Parameters** (projections, prototypes, LayerNorm, a learnable log-temperature). DDP
  broadcasts rank 0's parameters and buffers when it wraps the model and averages the gradients
  in every backward pass, so replicas that step the same optimizer stay equal. The layer's
  forward pass has no data-dependent shapes and no host reads, so every rank runs the same graph.
* **Buffers.** ``temperature.step`` (the schedule's step counter) and ``temperature.tau`` (the
  current tau, which the forward pass reads). DDP's default ``broadcast_buffers=True`` copies rank
  0's buffers to all ranks at every forward, so tau is rank 0's everywhere. The temperature also
  keeps the step as a Python int (so that neither the forward pass nor ``temperature.advance``
  reads a tensor); it stays equal on all ranks when every rank calls ``advance`` equally often,
  as a training loop does, and then nothing needs communicating. For the other cases (resuming
  ranks from different checkpoints, ranks that skipped steps) :func:`sync_temperature_steps` is
  the one documented collective: an all-reduce (MAX) of every temperature's counter, after which
  each rank re-evaluates its schedule.
* **k-means initialisation.** ``init_prototypes_from`` draws from the tokens it is given, so on
  rank-local data every rank gets a different bank. Either initialise before wrapping in DDP (its
  constructor broadcasts rank 0's parameters) or use :func:`init_prototypes_distributed`, which
  initialises locally and then broadcasts rank ``src``'s banks (one broadcast per layer).
  :func:`broadcast_module` does the same for a whole model.

:func:`replica_max_difference` (an all-gather) checks that replicas agree; the test suite runs
:func:`ddcl_theory.experiments.ddp_check.train` in two gloo processes and compares every
parameter and buffer.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ddcl_theory.runtime.data_parallel import unwrap as _unwrap

__all__ = ["require_initialised", "temperatures", "sync_temperature_steps",
           "broadcast_module", "init_prototypes_distributed", "replica_max_difference"]


def require_initialised() -> None:
    """Raise ``RuntimeError`` unless a ``torch.distributed`` process group is initialised."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("torch.distributed is not initialised: call "
                           "torch.distributed.init_process_group first (torchrun sets the "
                           "environment for it)")




def temperatures(module: nn.Module) -> list[nn.Module]:
    """Every temperature submodule of ``module`` (DDP wrapper or not), in module order: those
    with a ``step`` buffer and ``sync_from_buffers()``."""
    return [m for m in _unwrap(module).modules()
            if isinstance(getattr(m, "step", None), Tensor) and hasattr(m, "sync_from_buffers")]


def sync_temperature_steps(module: nn.Module, group=None) -> list[int]:
    """All-reduce (MAX) each temperature's step counter, then re-apply its schedule on every
    rank.

    One collective on a 1-D long tensor of all the model's counters. Returns the steps.
    """
    require_initialised()
    found = temperatures(module)
    if not found:
        return []
    steps = torch.stack([tau.step.detach().clone() for tau in found])
    dist.all_reduce(steps, op=dist.ReduceOp.MAX, group=group)
    out = []
    with torch.no_grad():
        for tau, step in zip(found, steps):
            tau.step.copy_(step)
            out.append(tau.sync_from_buffers())
    return out


def broadcast_module(module: nn.Module, src: int = 0, group=None) -> None:
    """Copy rank ``src``'s parameters and buffers to every rank (one broadcast per tensor).

    Temperatures then re-read their step counters (their Python mirrors follow the buffers).
    """
    require_initialised()
    with torch.no_grad():
        for t in [*_unwrap(module).parameters(), *_unwrap(module).buffers()]:
            dist.broadcast(t.data, src=src, group=group)
    for tau in temperatures(module):
        tau.sync_from_buffers()


def init_prototypes_distributed(layer: nn.Module, x: Tensor, mask: Tensor | None = None,
                                generator: torch.Generator | None = None, src: int = 0,
                                group=None, measure_spread: bool = False) -> float | None:
    """``layer.init_prototypes_from`` (k-means++) on this rank's tokens (x (B, T, dim), mask
    (B, T)), then rank ``src``'s ``layer.prototypes`` everywhere: the documented
    synchronisation of the prototype initialisation (one broadcast).

    With ``measure_spread`` it first all-gathers the rank-local banks and returns how far they
    were apart (max |difference| to rank 0's); otherwise returns None.
    """
    require_initialised()
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
    require_initialised()
    return _max_difference(_flat_state(module), group)
