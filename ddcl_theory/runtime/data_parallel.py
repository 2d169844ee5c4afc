"""Data-parallel training of the paper runs under ``torchrun --nproc_per_node=N``.

Every rank builds the same seeds' models and draws the same full batches from the same
generators; :func:`shard` gives each rank its contiguous share of a batch (the split a
``DistributedSampler`` makes, on data already on the device); :func:`data_parallel` wraps the
model in ``DistributedDataParallel``, which averages the gradients over the ranks, so with
equal shares a step is the single-process step on the whole batch. :func:`from_main` hands
rank 0's round metrics to every rank, so that what is decided on them (early stopping, the
best state so far) is decided alike everywhere. Only rank 0 writes run directories
(:class:`~ddcl_theory.runtime.rundir.RunDir`); every rank reads them.

Without an initialised process group, or with a group of one, every helper is the identity,
so a training function that calls them runs unchanged in one process.

    torchrun --nproc_per_node=8 -m ddcl_theory.experiments.launch laplacian_lm.run
"""
from __future__ import annotations

from typing import TypeVar

import torch
import torch.distributed as dist
from torch import Tensor, nn

__all__ = ["world", "is_main", "barrier", "shard", "data_parallel", "unwrap", "from_main",
           "mean_over_ranks"]

T = TypeVar("T")


def world() -> tuple[int, int]:
    """``(rank, world size)`` of the initialised process group; ``(0, 1)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main() -> bool:
    """Whether this process is rank 0 (the one that writes), or the only process."""
    return world()[0] == 0


def barrier() -> None:
    """Wait for every rank (a no-op with a single rank)."""
    if world()[1] > 1:
        dist.barrier()


def shard(t: Tensor, dim: int = 0) -> Tensor:
    """This rank's contiguous share of ``t`` along ``dim`` (``tensor_split`` into world-size
    parts, whose sizes differ by at most one); ``t`` itself with a single rank.

    Raises ``ValueError`` when ``t`` has fewer entries along ``dim`` than there are ranks.
    """
    rank, size = world()
    if size == 1:
        return t
    if t.shape[dim] < size:
        raise ValueError(f"t: expected at least {size} entries along dim {dim} (one a rank), "
                         f"got shape {tuple(t.shape)}")
    return t.tensor_split(size, dim)[rank]


def data_parallel(module: nn.Module, device: str | torch.device) -> nn.Module:
    """``module`` in ``DistributedDataParallel`` when several ranks train (on CUDA, on this
    rank's current device), else ``module`` itself."""
    if world()[1] == 1:
        return module
    dev = torch.device(device)
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        return nn.parallel.DistributedDataParallel(module, device_ids=[index])
    return nn.parallel.DistributedDataParallel(module)


def unwrap(module: nn.Module) -> nn.Module:
    """The module inside a ``DistributedDataParallel`` wrapper (else ``module``)."""
    return module.module if isinstance(module, nn.parallel.DistributedDataParallel) else module


def from_main(obj: T) -> T:
    """Rank 0's ``obj`` (anything picklable) on every rank; ``obj`` itself with a single rank."""
    if world()[1] == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def mean_over_ranks(t: Tensor) -> Tensor:
    """The mean of ``t`` over the ranks (an all-reduce of a copy, on this rank's GPU under
    NCCL, which reduces CUDA tensors only), on ``t``'s device; ``t`` with a single rank."""
    size = world()[1]
    if size == 1:
        return t
    out = t.detach().clone()
    if dist.get_backend() == "nccl" and out.device.type != "cuda":
        out = out.to(torch.device("cuda", torch.cuda.current_device()))
    dist.all_reduce(out)
    return (out / size).to(t.device)
