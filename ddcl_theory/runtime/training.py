"""The one training loop every experiment uses: the run contract in one place.

:func:`fit` runs ``epochs`` rounds of optimiser steps over the batches a caller draws, with

* a progress bar (:mod:`ddcl_theory.runtime.progress`: on in the paper profile);
* no host synchronisation per step: the step losses are read once per round;
* bf16 autocast on CUDA in the paper profile (:func:`autocast`; a no-op on CPU) and the
  optional ``torch.compile`` of the forward (:func:`maybe_compile`, ``DDCL_COMPILE=1``);
* checkpoints in the experiment's run directory (:class:`RunDir`): modules, optimisers,
  schedulers, every random generator, the loop position and the history, saved every
  ``checkpoint_every`` rounds, so a killed run resumes at its last save and, on CPU, ends with
  the numbers an uninterrupted run gives, bit for bit.

A "round" is an epoch for epoch-based loops, or a block of steps for step-based ones (a
``batches`` that yields one batch per round makes rounds steps). Seeding is the caller's: seed
(:func:`ddcl_theory.runtime.profile.seed_everything`) before building the model, so that the
initialisation is seeded too, and pass the generators ``batches`` draws from, so that a resumed
run draws what the uninterrupted run would have drawn.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from ddcl_theory.runtime import data_parallel
from ddcl_theory.runtime.precision import autocast, maybe_compile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.stacked import StackedModels
from ddcl_theory.runtime.progress import progress

_STEPS = [0]          # optimiser steps taken by fit in this process (read by the smoke run)
_COUNTING: list[dict | None] = [None]       # the totals of an active :func:`counting_flops`


def steps_taken() -> int:
    """Optimiser steps :func:`fit` has taken in this process so far (for seconds per step)."""
    return _STEPS[0]


@contextlib.contextmanager
def counting_flops() -> Iterator[dict]:
    """Count what :func:`fit`'s training steps compute inside the block: yields running totals
    ``{"flops", "steps", "examples", "models": {key: {"flops", "steps", "examples"}}}``,
    per model class (:func:`flops_key`) as well (an experiment that trains several kinds of
    model, a network and its linear probes, costs differently per example of each). FLOPs are
    torch's
    ``FlopCounterMode`` count (matrix products, convolutions, attention) of each step's
    forward and backward pass; examples are :func:`batch_examples`. Off by default: counting
    slows the steps."""
    if _COUNTING[0] is not None:
        raise RuntimeError("counting_flops: already counting (the blocks do not nest)")
    totals = {"flops": 0, "steps": 0, "examples": 0, "models": {}}
    _COUNTING[0] = totals
    try:
        yield totals
    finally:
        _COUNTING[0] = None


def flops_key(model: torch.nn.Module) -> str:
    """The name a model's counts are kept under: its class name, and for a stack of seeds its
    width too (``"StackedModels[d=384]"``): one study stacks models of several widths, whose
    FLOPs per example differ (the width of the template's first LayerNorm; none without one)."""
    name = type(model).__name__
    if not isinstance(model, StackedModels):
        return name
    norms = [m for m in model.template.modules() if isinstance(m, torch.nn.LayerNorm)]
    return f"{name}[d={norms[0].normalized_shape[-1]}]" if norms else name


def _count_step(totals: dict, model: torch.nn.Module, flops: int, examples: int) -> None:
    mine = totals["models"].setdefault(flops_key(model),
                                       {"flops": 0, "steps": 0, "examples": 0})
    for record in (totals, mine):
        record["flops"] += flops
        record["steps"] += 1
        record["examples"] += examples


def _tensors(batch: Any) -> Iterator[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, Mapping):
        for item in batch.values():
            yield from _tensors(item)
    elif isinstance(batch, (tuple, list)):
        for item in batch:
            yield from _tensors(item)


def batch_examples(batch: Any) -> int:
    """The examples in a batch as :func:`fit` receives it (tensors found depth first through
    tuples, lists and dicts): the elements of its largest integer tensor (indices, labels or
    token ids: one per example, per token of a sequence, or per seed and example of a stack of
    seeds), else the first dimension of its first tensor (the data itself); 0 without tensors.
    """
    tensors = list(_tensors(batch))
    whole = [t for t in tensors if not (t.dtype.is_floating_point or t.dtype.is_complex
                                        or t.dtype == torch.bool)]
    if whole:
        return max(int(t.numel()) for t in whole)
    if tensors:
        return int(tensors[0].shape[0]) if tensors[0].dim() else 1
    return 0


@dataclass
class TrainLog:
    """What :func:`fit` returns.

    Attributes:
        losses: the loss of every optimiser step, per round: ``losses[r][i]``.
        metrics: what ``end_of_round`` returned after each round (``{}`` when it returned None).
        resumed_at: the round the loop resumed at (0 for a fresh run).
    """

    losses: list[list[float]] = field(default_factory=list)
    metrics: list[dict] = field(default_factory=list)
    resumed_at: int = 0

    @property
    def last_round_losses(self) -> list[float]:
        return self.losses[-1] if self.losses else []

    @property
    def step_losses(self) -> list[float]:
        return [x for round_losses in self.losses for x in round_losses]


def fit(model: torch.nn.Module, optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer],
        *, rounds: int, batches: Callable[[int], Iterable[Any]],
        loss: Callable[[Callable, Any], torch.Tensor], device: str | torch.device,
        run: RunDir | None = None, name: str = "state",
        schedulers: Sequence[Any] = (), generators: Mapping[str, torch.Generator] | None = None,
        modules: Mapping[str, torch.nn.Module] | None = None,
        clip_grad_norm: float | None = None,
        after_step: Callable[[], None] | None = None,
        end_of_round: Callable[[int], dict | None] | None = None,
        stop_if: Callable[[dict], bool] | None = None,
        checkpoint_every: int = 1, desc: str = "training", compile: bool = True,
        train_mode: bool = True) -> TrainLog:
    """Train ``model``; return the per-step losses and per-round metrics.

    Args:
        model: the module trained (its forward, possibly compiled, is handed to ``loss``); a
            ``DistributedDataParallel`` wrapper under data-parallel training
            (:mod:`ddcl_theory.runtime.data_parallel`: ``batches`` then yields this rank's
            shares, and its checkpoints hold the wrapped module, written by rank 0).
        optimizers: one optimiser or several (all step after each backward pass, in order).
        rounds: number of rounds (epochs, or blocks of steps).
        batches: ``round -> iterable of batches``; draw from the generators in ``generators``.
        loss: ``(forward, batch) -> scalar loss``, evaluated under autocast.
        device: where the model lives (autocast applies on CUDA only).
        run: the experiment's run directory; None or disabled (cpu profile): no checkpoints.
        name: the key of this loop's state in ``run`` (one per (setting, seed) unit).
        schedulers: stepped once after each optimiser step, in order.
        generators: the generators ``batches`` draws from, saved and restored with the state.
        modules: further modules whose state must be checkpointed (e.g. an EMA teacher).
        clip_grad_norm: clip the gradient norm of ``model`` before each step when given.
        after_step: called after each optimiser step (e.g. a temperature schedule's tick).
        end_of_round: ``round -> dict | None`` after each round (validation, usage, ...).
        stop_if: ``metrics of the round -> bool`` after ``end_of_round``; True ends the loop
            after that round (e.g. a diverged loss), as if ``rounds`` were reached.
        checkpoint_every: rounds between saves (the last round is never saved: its result is).
        desc: the progress bar's label.
        compile: compile the forward when ``DDCL_COMPILE=1`` (set False for models that must
            run eagerly).
        train_mode: put ``model`` in training mode first (and evaluation mode at the end).
    """
    opts = [optimizers] if isinstance(optimizers, torch.optim.Optimizer) else list(optimizers)
    if not opts:
        raise ValueError("optimizers: expected at least one optimiser")
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 0:
        raise ValueError(f"rounds: expected an int >= 0, got {rounds!r}")
    if not isinstance(checkpoint_every, int) or checkpoint_every < 1:
        raise ValueError(f"checkpoint_every: expected an int >= 1, got {checkpoint_every!r}")
    state = dict(modules={"model": model, **dict(modules or {})},
                 optimizers={f"opt{i}": o for i, o in enumerate(opts)},
                 schedulers={f"sched{i}": s for i, s in enumerate(schedulers)},
                 generators=dict(generators or {}))
    log = TrainLog()
    if run is not None and (saved := run.load_state(name, **state)) is not None:
        log.resumed_at = int(saved[0])
        log.losses, log.metrics = [list(x) for x in saved[1]["losses"]], list(saved[1]["metrics"])
    forward = maybe_compile(model) if compile else model
    if train_mode:
        model.train()
    for r in progress(range(log.resumed_at, rounds), desc=desc, total=rounds - log.resumed_at):
        # the step losses stay on the device until the round ends: one host read per round,
        # not one per step (a GPU would otherwise wait for every step before queueing the next)
        round_losses: list[torch.Tensor] = []
        for batch in batches(r):
            counting = _COUNTING[0]
            with FlopCounterMode(display=False) if counting is not None else \
                    contextlib.nullcontext() as counter:
                with autocast(device):              # bf16 on CUDA (paper), no-op on CPU
                    value = loss(forward, batch)
                for opt in opts:
                    opt.zero_grad(set_to_none=True)
                value.backward()
            if counting is not None:
                _count_step(counting, data_parallel.unwrap(model), counter.get_total_flops(),
                            batch_examples(batch))
            if clip_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
            for opt in opts:
                opt.step()
            for sched in schedulers:
                sched.step()
            if after_step is not None:
                after_step()
            round_losses.append(value.detach())
        _STEPS[0] += len(round_losses)
        log.losses.append(torch.stack(round_losses).tolist() if round_losses else [])
        log.metrics.append((end_of_round(r) if end_of_round is not None else None) or {})
        if stop_if is not None and stop_if(log.metrics[-1]):
            break
        if run is not None and (r + 1) % checkpoint_every == 0 and r + 1 < rounds:
            run.save_state(name, position=r + 1,
                           extra={"losses": log.losses, "metrics": log.metrics}, **state)
    if run is not None:
        run.clear_state(name)
    if train_mode:
        model.eval()
    return log
