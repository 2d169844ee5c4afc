"""S seeds of one setting trained together as one stacked model (seeds at the cost of one).

S copies of a model whose parameters are stacked along a new leading axis run every layer once
for all seeds (``torch.func``: ``stack_module_state``, ``functional_call`` under ``vmap``): a
step pays its fixed costs (Python, kernel launches, the optimiser's loop over tensors) once for
S seeds, and its kernels are S times larger (better use of threads). The arithmetic stays S
times that of one seed, so what a stack saves is the share of a step that does not grow with
the work (``python -m ddcl_theory.bench.stacked`` measures it). The seeds stay independent:

* each copy is built right after ``seed_everything(seed)`` (the initialisation a sequential run
  of that seed gets) and keeps that seed's generator for its own data order
  (:attr:`StackedModels.generators`);
* each takes its own batch: the stacked forward maps (S, B, ...) to (S, B, ...);
* the loss of the stack is the *sum* of the per-seed losses (:class:`PerSeedLoss`), so the
  gradient on seed s's slice is the gradient of seed s's own loss;
* one element-wise optimiser over the stacked parameters (SGD, Adam, AdamW, RMSprop, Adagrad:
  each element's update reads only its own gradient and state, plus the step count all seeds
  share) is exactly S independent optimisers. Adam's or AdamW's weight decay is element-wise too.
  Not so for optimisers that couple elements (LBFGS's line search, a norm over a whole tensor)
  and for :func:`torch.nn.utils.clip_grad_norm_`, whose norm would run over the whole stack:
  clip per seed with :meth:`StackedModels.clip_grad_norm_` (or
  :meth:`StackedModels.clip_before_step` with :func:`~ddcl_theory.runtime.training.fit`, and
  no ``clip_grad_norm`` there).

Randomness: random ops in the forward (dropout, stochastic depth) run under
``vmap(randomness="different")`` by default: each seed draws its own masks from torch's global
generator, so the masks differ from those of a sequential run. A model without randomness in its
forward never draws, and the stacked run is deterministic and equal to the sequential one up to
the rounding of batched kernels.

Fast paths without a batching rule: ``F.scaled_dot_product_attention`` has none on the CPU
(vmap falls back to one call per seed, with a warning). A module with such a path names, in its
class attribute ``vmap_safe_switch`` (:data:`VMAP_SAFE_SWITCH`), the bool attribute that selects
a vmap-safe path (``LaplacianAttention.vmap_safe_switch = "explicit"``); the stack switches it
on in its own copy of the model only, never in the models it was given nor in those
:meth:`unstack` returns (``vmap_safe=False`` keeps the fallback). The two paths differ by
rounding only.

Limits: the forward may not branch on tensor values (e.g. a padding mask whose emptiness is
tested with ``bool(...)``), which ``vmap`` refuses (a ``RuntimeError`` naming the model); so
``DDCLAttention`` does not stack (its temperature check reads a value, and its fused autograd
``Function`` has no vmap rule). Buffers are stacked like parameters and passed to every call.

``fit`` drives a stack like any module, checkpoints included (:meth:`StackedModels.state_dict`
holds every seed's parameters and the seeds)::

    stack = StackedModels(lambda seed: ViT(...), seeds).to(device)
    opt = torch.optim.AdamW(stack.parameters(), lr=lr, weight_decay=wd)    # S AdamWs
    stack.clip_before_step(opt, 1.0)                                       # if clipping
    per_seed = PerSeedLoss(lambda forward, b: torch.vmap(F.cross_entropy)(forward(b[0]), b[1]),
                           stack.num_seeds)
    log = fit(stack, opt, rounds=epochs, loss=per_seed, device=device, run=run, name=key,
              batches=lambda r: stacked_batches([epoch_batches(g, r) for g in stack.generators]),
              generators=stack.named_generators())
    models = stack.unstack()                 # per seed, for measuring; per_seed.curves() (steps, S)

``epoch_batches(g, r)`` is a function returning one seed's batches: a generator expression
written inline in the list would see only the last ``g``.
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap
from torch.utils._pytree import tree_map
from torch.utils.hooks import RemovableHandle

from ddcl_theory.runtime.profile import seed_everything
from ddcl_theory.runtime.validate import check_choice, check_positive_float

__all__ = ["StackedModels", "PerSeedLoss", "stack_batches", "stacked_batches",
           "VMAP_SAFE_SWITCH", "RANDOMNESS"]

#: Class attribute naming the bool attribute that selects a module's vmap-safe path.
VMAP_SAFE_SWITCH = "vmap_safe_switch"
#: ``vmap``'s randomness modes: each seed its own draws, one draw for all, or refuse random ops.
RANDOMNESS = ("different", "same", "error")


def _signature(model: nn.Module) -> list[tuple]:
    """What must agree between the stacked models: class, parameter and buffer names, shapes,
    dtypes, devices and ``requires_grad``, and which parameters are tied."""
    rows: list[tuple] = [("class", type(model).__qualname__)]
    rows += [("parameter", n, tuple(p.shape), p.dtype, p.device, p.requires_grad)
             for n, p in model.named_parameters(remove_duplicate=False)]
    rows += [("buffer", n, tuple(b.shape), b.dtype, b.device)
             for n, b in model.named_buffers(remove_duplicate=False)]
    seen: dict[int, str] = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        rows.append(("tied", n, seen.setdefault(id(p), n)))
    return rows


def _check_same_structure(models: Sequence[nn.Module], seeds: Sequence[int]) -> None:
    first = _signature(models[0])
    for seed, model in zip(seeds[1:], models[1:]):
        other = _signature(model)
        if other != first:
            diff = next((a, b) for a, b in zip(first + [None], other + [None]) if a != b)
            raise ValueError(f"make_model: the model of seed {seed} differs in structure from "
                             f"that of seed {seeds[0]}: {diff[1]} instead of {diff[0]}")


def _mirror(names: Iterable[str], root: nn.Module) -> Iterator[tuple[nn.Module, str, str]]:
    """For each dotted name, the (empty) submodule of ``root`` that holds it, made on demand."""
    for name in names:
        *path, leaf = name.split(".")
        owner = root
        for part in path:
            if part not in owner._modules:
                owner.add_module(part, nn.Module())
            owner = owner._modules[part]
        yield owner, leaf, name


class StackedModels(nn.Module):
    """S independent copies of one model, trained as one.

    Args:
        make_model: ``seed -> nn.Module``, called once per seed right after
            ``seed_everything(seed)``; every model must have the same structure.
        seeds: the S seeds (distinct non-negative ints), in the order of the stack's axis 0.
        randomness: ``vmap``'s mode for random ops in the forward, one of :data:`RANDOMNESS`.
        direct_single: with one seed, call the model directly on its slice (no ``vmap``), so
            that kernels ``vmap`` cannot batch stay in use (on an H200, SDPA's flash and cuDNN
            kernels: under ``vmap`` the Laplacian GPT-2 ran SDPA's T x T math path). Off by
            default: the two paths differ by rounding, random ops draw differently, and
            ``randomness="error"`` is not enforced on the direct path.
        vmap_safe: switch on the vmap-safe paths (:data:`VMAP_SAFE_SWITCH`) in the stack's copy
            of the model; False keeps the model's own paths (vmap then runs an op without a
            batching rule once per seed, with a warning).

    Attributes:
        seeds: the seeds, a tuple of S ints.
        generators: per seed, the generator ``seed_everything(seed)`` returned (the data order
            a sequential run of that seed draws from).

    Parameters and buffers keep the model's names, with a leading axis of size S:
    ``state_dict()["stacked.<name>"]`` is (S, *shape). ``parameters()`` are these stacked
    tensors (for one optimiser over all seeds).

    Shapes: ``forward(*tensors (S, B, ...), **shared) -> outputs (S, B, ...)``: positional
    tensors are split along axis 0, one slice per seed; non-tensor positionals and keyword
    arguments are handed unchanged to every seed's call.
    """

    def __init__(self, make_model: Callable[[int], nn.Module], seeds: Iterable[int], *,
                 randomness: str = "different", vmap_safe: bool = True,
                 direct_single: bool = False) -> None:
        super().__init__()
        self.direct_single = bool(direct_single)
        seeds = tuple(seeds)
        if not seeds:
            raise ValueError("seeds: expected at least one seed, got none")
        bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int) or s < 0]
        if bad:
            raise ValueError(f"seeds: expected non-negative ints, got {bad}")
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds: expected distinct seeds, got {seeds}")
        self.randomness = check_choice(randomness, "randomness", RANDOMNESS)
        self.seeds = seeds
        models, generators = [], []
        for seed in seeds:
            generators.append(seed_everything(seed))
            model = make_model(seed)
            if not isinstance(model, nn.Module):
                raise ValueError(f"make_model: expected an nn.Module for seed {seed}, got "
                                 f"{type(model).__name__}")
            models.append(model)
        _check_same_structure(models, seeds)
        self.generators = tuple(generators)
        params, buffers = stack_module_state(models)
        self.stacked = nn.Module()
        for owner, leaf, name in _mirror(params, self.stacked):
            owner.register_parameter(leaf, nn.Parameter(params[name],
                                                        requires_grad=params[name].requires_grad))
        for owner, leaf, name in _mirror(buffers, self.stacked):
            prefix, _, buffer = name.rpartition(".")
            origin = models[0].get_submodule(prefix)
            owner.register_buffer(leaf, buffers[name],
                                  persistent=buffer not in origin._non_persistent_buffers_set)
        template = copy.deepcopy(models[0])
        # (submodule path, switch name, the model's own value): set in the template only
        self._switches = [(path, getattr(type(m), VMAP_SAFE_SWITCH),
                           getattr(m, getattr(type(m), VMAP_SAFE_SWITCH)))
                          for path, m in template.named_modules()
                          if hasattr(type(m), VMAP_SAFE_SWITCH)]
        for path, attr, _ in self._switches if vmap_safe else ():
            setattr(template.get_submodule(path), attr, True)
        object.__setattr__(self, "_template", template)     # not a submodule: no parameters
        self.train(models[0].training)

    # ------------------------------------------------------------------ module plumbing
    @property
    def num_seeds(self) -> int:
        """S, the size of the stack's leading axis."""
        return len(self.seeds)

    @property
    def template(self) -> nn.Module:
        """The model every seed's slice runs through (a copy of the first seed's, its weights
        unused): the structure the stack shares."""
        return self._template

    def named_generators(self) -> dict[str, torch.Generator]:
        """The per-seed generators keyed ``"seed<s>"`` (for ``fit(generators=...)``)."""
        return {f"seed{s}": g for s, g in zip(self.seeds, self.generators)}

    def __repr__(self) -> str:
        per_seed = sum(p[0].numel() for p in self.parameters())
        return (f"{type(self).__name__}(seeds={self.seeds}, model={type(self._template).__name__}"
                f", parameters per seed={per_seed})")

    def train(self, mode: bool = True) -> "StackedModels":
        super().train(mode)
        self._template.train(mode)
        return self

    def _apply(self, fn, recurse=True):                                  # .to(), .double(), ...
        super()._apply(fn, recurse)
        self._template._apply(fn, recurse)
        return self

    def get_extra_state(self) -> dict:
        return {"seeds": list(self.seeds)}

    def set_extra_state(self, state: Any) -> None:
        seeds = tuple(state["seeds"])
        if seeds != self.seeds:
            raise ValueError(f"state_dict: saved for seeds {seeds}, this stack has {self.seeds}")

    def _tensors(self) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        return dict(self.stacked.named_parameters()), dict(self.stacked.named_buffers())

    # ------------------------------------------------------------------ forward
    def forward(self, *args: Any, **shared: Any) -> Any:
        """Every seed's forward on its own slice of each positional tensor (see the class)."""
        if not args:
            raise ValueError("forward: expected at least one positional tensor (S, B, ...)")
        dims = []
        for i, a in enumerate(args):
            if not isinstance(a, Tensor):
                dims.append(None)
                continue
            if a.dim() == 0 or a.shape[0] != self.num_seeds:
                raise ValueError(f"forward: argument {i}: expected a leading seed axis of size "
                                 f"S={self.num_seeds}, got shape {tuple(a.shape)}")
            dims.append(0)
        template = self._template

        def one_seed(params: dict, buffers: dict, *inputs: Any) -> Any:
            return functional_call(template, (params, buffers), inputs, shared)

        params, buffers = self._tensors()
        if self.direct_single and self.num_seeds == 1:
            out = one_seed({k: v[0] for k, v in params.items()},
                           {k: v[0] for k, v in buffers.items()},
                           *(a[0] if isinstance(a, Tensor) else a for a in args))
            return tree_map(lambda t: t.unsqueeze(0) if isinstance(t, Tensor) else t, out)
        try:
            return vmap(one_seed, in_dims=(0, 0, *dims), randomness=self.randomness)(
                params, buffers, *args)
        except RuntimeError as e:
            if "vmap" not in str(e):
                raise
            raise RuntimeError(f"StackedModels: the forward of {type(template).__name__} does "
                               f"not run under torch.vmap: {e}") from e

    # ------------------------------------------------------------------ per-seed gradients
    @torch.no_grad()
    def grad_norms(self, norm_type: float = 2.0) -> Tensor:
        """Per-seed norm of the gradients of all parameters, (S,), as
        :func:`torch.nn.utils.clip_grad_norm_` computes it for one model."""
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        if not grads:
            return torch.zeros(self.num_seeds)
        per_tensor = [torch.linalg.vector_norm(g.flatten(1), norm_type, dim=1) for g in grads]
        return torch.linalg.vector_norm(torch.stack(per_tensor), norm_type, dim=0)

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> Tensor:
        """Clip each seed's gradients to norm ``max_norm`` on their own, as
        ``clip_grad_norm_(model.parameters(), max_norm)`` would for that seed's model alone;
        return the per-seed norms before clipping, (S,)."""
        check_positive_float(max_norm, "max_norm")
        norms = self.grad_norms(norm_type)
        scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
        for p in self.parameters():
            if p.grad is not None:
                p.grad.mul_(scale.to(p.grad).view(-1, *([1] * (p.grad.dim() - 1))))
        return norms

    def clip_before_step(self, optimizer: torch.optim.Optimizer, max_norm: float,
                         norm_type: float = 2.0) -> RemovableHandle:
        """Clip per seed (:meth:`clip_grad_norm_`) just before every ``optimizer.step()``: the
        per-seed clipping for loops such as ``fit`` (which must then get no ``clip_grad_norm``).
        Register it on one optimiser only; returns the hook's handle."""
        check_positive_float(max_norm, "max_norm")

        def clip(*_: Any) -> None:
            self.clip_grad_norm_(max_norm, norm_type)

        return optimizer.register_step_pre_hook(clip)

    # ------------------------------------------------------------------ back to S modules
    @torch.no_grad()
    def unstack(self) -> list[nn.Module]:
        """The S copies as ordinary modules (seed order), holding copies of the current values,
        in the stack's training mode, with every vmap-safe switch as the model had it."""
        params, buffers = self._tensors()
        out = []
        for i in range(self.num_seeds):
            model = copy.deepcopy(self._template)
            for path, attr, default in self._switches:
                setattr(model.get_submodule(path), attr, default)
            for name, p in model.named_parameters():
                p.copy_(params[name][i])
            for name, b in model.named_buffers():
                b.copy_(buffers[name][i])
            out.append(model)
        return out


class PerSeedLoss:
    """``fit``'s loss for a stack: wraps ``per_seed(forward, batch) -> (S,)`` losses.

    Calling it returns their sum, the scalar whose gradient on each seed's slice of the stacked
    parameters is that seed's own loss gradient (so ``fit``'s logged losses are sums over the
    seeds), and keeps each step's per-seed values in :attr:`steps`. The record lives in memory:
    after a resume it starts at the resumed round.
    """

    def __init__(self, per_seed: Callable[[Callable, Any], Tensor], num_seeds: int) -> None:
        self.per_seed = per_seed
        self.num_seeds = num_seeds
        self.steps: list[Tensor] = []

    def __call__(self, forward: Callable, batch: Any) -> Tensor:
        values = self.per_seed(forward, batch)
        if not isinstance(values, Tensor) or tuple(values.shape) != (self.num_seeds,):
            shape = tuple(values.shape) if isinstance(values, Tensor) else type(values).__name__
            raise ValueError(f"per_seed: expected losses of shape (S,)=({self.num_seeds},), "
                             f"got {shape}")
        self.steps.append(values.detach().cpu())
        return values.sum()

    def curves(self) -> Tensor:
        """The recorded per-seed losses, (steps, S)."""
        if not self.steps:
            return torch.zeros(0, self.num_seeds)
        return torch.stack(self.steps)


def stack_batches(batches: Sequence[Any]) -> Any:
    """One batch per seed -> one stacked batch: tensors (B, ...) become (S, B, ...), and tuples,
    lists and dicts of tensors are stacked field by field.

    Raises ``ValueError`` when ``batches`` is empty or the seeds' batches differ in kind, fields
    or shape.
    """
    if not batches:
        raise ValueError("batches: expected one batch per seed, got none")
    first = batches[0]
    if isinstance(first, Tensor):
        shapes = {tuple(b.shape) if isinstance(b, Tensor) else type(b).__name__ for b in batches}
        if len(shapes) != 1:
            raise ValueError(f"batches: expected tensors of one shape, got "
                             f"{sorted(map(str, shapes))}")
        return torch.stack(list(batches))
    if isinstance(first, Mapping):
        if any(not isinstance(b, Mapping) or b.keys() != first.keys() for b in batches):
            raise ValueError(f"batches: expected mappings with the keys {sorted(first)}")
        return {k: stack_batches([b[k] for b in batches]) for k in first}
    if isinstance(first, (tuple, list)):
        if any(not isinstance(b, (tuple, list)) or len(b) != len(first) for b in batches):
            raise ValueError(f"batches: expected sequences of {len(first)} fields")
        return type(first)(stack_batches([b[i] for b in batches]) for i in range(len(first)))
    raise ValueError(f"batches: expected tensors or tuples, lists or dicts of tensors, got "
                     f"{type(first).__name__}")


def stacked_batches(streams: Sequence[Iterable[Any]]) -> Iterator[Any]:
    """Zip one batch stream per seed into stacked batches (:func:`stack_batches`).

    Raises ``ValueError`` when the streams do not all end together.
    """
    if not streams:
        raise ValueError("streams: expected one batch stream per seed, got none")
    iterators = [iter(s) for s in streams]
    done = object()
    while True:
        step = [next(it, done) for it in iterators]
        ended = [i for i, b in enumerate(step) if b is done]
        if len(ended) == len(step):
            return
        if ended:
            raise ValueError(f"streams: the streams of seeds at positions {ended} ended before "
                             "the others")
        yield stack_batches(step)
