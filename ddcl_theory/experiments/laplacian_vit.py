"""The ViT of the Laplacian-head studies (claims L6, L7, L8 of Zhang & Papyan 2026).

Its settings (:class:`ViTSettings`: data, model, optimiser, run length, seeds, head settings),
its data (:func:`prepare_patches`: the CIFAR-10 subset as normalised patch tokens), its one
training path (:func:`train_vit`: AdamW, a cosine schedule, through
:func:`ddcl_theory.runtime.training.fit`) and the sign balance of its heads
(:func:`head_sign_balances`). The studies that train it are
:func:`ddcl_theory.experiments.laplacian_study.run_vit` (:class:`~ddcl_theory.models.vit.ViT`,
mean pooling) and :func:`ddcl_theory.experiments.laplacian_readout.run` (with a DDCL readout).

The head-count study trains the seeds of one setting together
(:func:`train_vit_stack`: :class:`~ddcl_theory.runtime.stacked.StackedModels`, the same AdamW
and cosine schedule, early stopping at each seed's validation optimum) on the images of
:func:`load_study_images`: the CIFAR-10 subset less a validation split carved from its end, and
the evaluation pool of :func:`ddcl_theory.data.cifar10_eval_pool` (never trained on).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ddcl_theory import data
from ddcl_theory.experiments.laplacian_common import (
    HEAD_SETTINGS,
    SMOKE_HEAD_SETTINGS,
    bad_head_settings,
)
from ddcl_theory.metrics import geometry as metrics
from ddcl_theory.models.transformer import value_output_maps
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, setting
from ddcl_theory.runtime.stacked import PerSeedLoss, StackedModels, stacked_batches
from ddcl_theory.runtime.training import TrainLog, fit

__all__ = ["SMOKE_IMAGES", "ViTSettings", "head_sign_balances", "prepare_patches", "train_vit",
           "StudyImages", "load_study_images", "study_patches", "BestStates", "StackLog",
           "train_vit_stack"]

#: Training and test images of the paper smoke test (one batch of the paper's size each).
SMOKE_IMAGES = 128


@dataclass(frozen=True)
class ViTSettings(Settings):
    """Data, model and training of the ViT: cpu and paper scales; the paper smoke test keeps
    the paper model and shrinks the budget: one epoch over :data:`SMOKE_IMAGES` training
    images, one seed, three head settings (none, some, all Laplacian)."""

    n_train: int = setting(3000, paper=10000, smoke=SMOKE_IMAGES, ge=1)
    n_test: int = setting(1000, smoke=SMOKE_IMAGES, ge=1)
    patch: int = setting(8, paper=4, ge=1)
    dim: int = setting(32, paper=192, ge=1)
    depth: int = setting(2, paper=6, ge=1)
    heads: int = setting(4, paper=6, ge=1)
    mlp_ratio: int = setting(2, paper=4, ge=1)
    batch_size: int = setting(128, ge=1)
    epochs: int = setting(4, paper=60, smoke=1, ge=1)
    lr: float = setting(3e-3, paper=1e-3, gt=0)
    weight_decay: float = setting(0.0, paper=0.05, ge=0)
    seeds: tuple[int, ...] = setting((0, 1, 2), smoke=(0,), ge=0, nonempty=True)
    head_settings: tuple[str, ...] = setting(HEAD_SETTINGS, smoke=SMOKE_HEAD_SETTINGS,
                                             nonempty=True)
    threads: int | None = setting(1, paper=None, ge=1)

    def check(self) -> None:
        if bad := bad_head_settings(self.head_settings, self.heads):
            raise ValueError(f"{type(self).__name__}.head_settings: expected 'half', 'all' or "
                             f"counts in [0, heads={self.heads}] as strings, got {bad}")


def prepare_patches(settings: ViTSettings) -> tuple:
    """The CIFAR-10 subset of ``settings`` as normalised patches: ``(train patches (N, T, p),
    train labels (N,), test patches, test labels, source, number of classes)``."""
    d = data.load_cifar10()
    size = d.x_train.shape[1]
    # the fallback digits are 8x8: use 2x2 patches there (16 tokens) instead of one token
    patch = settings.patch if size % settings.patch == 0 and size >= 2 * settings.patch \
        else max(1, size // 4)
    x_tr, y_tr = d.x_train[: settings.n_train], d.y_train[: settings.n_train]
    x_te, y_te = d.x_test[: settings.n_test], d.y_test[: settings.n_test]
    mean = x_tr.mean(axis=(0, 1, 2), keepdims=True)
    std = x_tr.std(axis=(0, 1, 2), keepdims=True) + 1e-6
    p_tr = data.image_patches((x_tr - mean) / std, patch)
    p_te = data.image_patches((x_te - mean) / std, patch)
    return (torch.from_numpy(np.ascontiguousarray(p_tr, dtype=np.float32)),
            torch.from_numpy(y_tr), torch.from_numpy(np.ascontiguousarray(p_te, dtype=np.float32)),
            torch.from_numpy(y_te), d.source, len(d.label_names))


def head_sign_balances(model: torch.nn.Module) -> tuple[float | None, float | None]:
    """Mean :func:`metrics.sign_balance` of the value-output maps of the ordinary and of the
    Laplacian heads of every block in ``model.stack`` (None for a kind with no head)."""
    ordinary, laplacian = [], []
    for block in model.stack.blocks:
        maps = value_output_maps(block.attn)
        for h in range(block.attn.heads):
            target = laplacian if h >= block.attn.attention_heads else ordinary
            target.append(metrics.sign_balance(maps[h]))
    return (float(np.mean(ordinary)) if ordinary else None,
            float(np.mean(laplacian)) if laplacian else None)


def _cross_entropy(forward: Callable, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(forward(x), y)


def train_vit(model: torch.nn.Module, settings: ViTSettings, x: torch.Tensor, y: torch.Tensor,
              gen: torch.Generator, device: str, *,
              objective: Callable[[Callable, torch.Tensor, torch.Tensor], torch.Tensor]
              = _cross_entropy,
              end_of_round: Callable[[int], dict | None] | None = None,
              run: RunDir | None = None, name: str = "state",
              desc: str = "ViT") -> TrainLog:
    """The one ViT training path: AdamW on the trainable parameters, a cosine schedule over all
    steps, ``settings.epochs`` epochs of batches of ``settings.batch_size`` in an order drawn
    from ``gen`` each epoch, through :func:`ddcl_theory.runtime.training.fit` (autocast on CUDA,
    optional compile, checkpoints in ``run`` under ``name`` after every epoch).

    Args:
        model: on ``device``, seeded before it was built.
        x, y: training patches (N, T, p) and labels (N,) on ``device``.
        objective: ``(forward, x batch, y batch) -> scalar loss`` (default: cross-entropy of
            ``forward(x)``).
        end_of_round: called after every epoch (its dicts land in ``TrainLog.metrics``).
    """
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=settings.lr,
                            weight_decay=settings.weight_decay)
    n = x.shape[0]
    steps_per_epoch = math.ceil(n / settings.batch_size)
    total = settings.epochs * steps_per_epoch
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: 0.5 * (1 + math.cos(math.pi * min(step, total) / total)))
    size = settings.batch_size

    def batches(_epoch: int) -> Iterator[torch.Tensor]:
        order = torch.randperm(n, generator=gen).to(device)
        return (order[i * size:(i + 1) * size] for i in range(steps_per_epoch))

    return fit(model, opt, rounds=settings.epochs, batches=batches,
               loss=lambda forward, idx: objective(forward, x[idx], y[idx]), device=device,
               run=run, name=name, schedulers=[sched], generators={"gen": gen},
               end_of_round=end_of_round, desc=desc)


# ============================================================================================
# The head-count study: its images, and S seeds trained together to their validation optima
# ============================================================================================

@dataclass(frozen=True)
class StudyImages:
    """The images of the head-count study: float32 (N, H, W, C) in [0, 1], int64 labels (N,).

    ``fit``: the images runs train on (a run at n images takes the first n); ``val``: the
    validation split carved from the training images (early stopping reads it); ``eval``: the
    evaluation pool, drawn from images no run trains on.
    """

    x_fit: np.ndarray
    y_fit: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_eval: np.ndarray
    y_eval: np.ndarray
    source: str
    num_classes: int

    def __post_init__(self) -> None:
        for name in ("fit", "val", "eval"):
            x, y = getattr(self, f"x_{name}"), getattr(self, f"y_{name}")
            if x.ndim != 4 or y.shape != (x.shape[0],):
                raise ValueError(f"x_{name}, y_{name}: expected (N, H, W, C) images and (N,) "
                                 f"labels, got {x.shape} and {y.shape}")


def load_study_images(n_val: int, n_eval: int) -> StudyImages:
    """The CIFAR-10 subset less its last ``n_val`` images (the fit pool), those ``n_val``
    images (the validation split) and the evaluation pool of ``n_eval`` images of the rest of
    the training set (:func:`ddcl_theory.data.cifar10_eval_pool`, never trained on)."""
    d = data.load_cifar10()
    if not 0 < n_val < len(d.y_train):
        raise ValueError(f"n_val: expected 0 < n_val < {len(d.y_train)}, got {n_val!r}")
    pool = data.cifar10_eval_pool(n_eval)
    cut = len(d.y_train) - n_val
    return StudyImages(d.x_train[:cut], d.y_train[:cut], d.x_train[cut:], d.y_train[cut:],
                       pool.float_images(), pool.y, d.source, len(d.label_names))


def study_patches(images: StudyImages, n_train: int, patch: int) -> dict[str, torch.Tensor]:
    """The first ``n_train`` fit images, the validation split and the evaluation pool as
    patches (N, T, p*p*C), each channel standardised by the statistics of the ``n_train``
    training images; keys ``x_fit, y_fit, x_val, y_val, x_eval, y_eval``."""
    if not 0 < n_train <= len(images.y_fit):
        raise ValueError(f"n_train: expected 0 < n_train <= {len(images.y_fit)} (the fit "
                         f"pool), got {n_train!r}")
    x_fit = images.x_fit[:n_train]
    mean = x_fit.mean(axis=(0, 1, 2), keepdims=True)
    std = x_fit.std(axis=(0, 1, 2), keepdims=True) + 1e-6

    def patches(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(data.image_patches((x - mean) / std, patch),
                                                     dtype=np.float32))

    return {"x_fit": patches(x_fit), "y_fit": torch.from_numpy(images.y_fit[:n_train]),
            "x_val": patches(images.x_val), "y_val": torch.from_numpy(images.y_val),
            "x_eval": patches(images.x_eval), "y_eval": torch.from_numpy(images.y_eval)}


class BestStates(nn.Module):
    """Per seed of a :class:`StackedModels`: the lowest validation loss so far, its epoch
    (1-based; 0 before the first) and the seed's parameters then. All are buffers, so the
    training loop checkpoints them with the model and a resumed run keeps them.

    Shapes: ``best_loss`` (S,), ``best_epoch`` (S,), ``p<i>`` the stack's i-th parameter (S, ...).
    """

    def __init__(self, stack: StackedModels) -> None:
        super().__init__()
        self.names = [name for name, _ in stack.stacked.named_parameters()]
        self.register_buffer("best_loss", torch.full((stack.num_seeds,), math.inf,
                                                     dtype=torch.float64))
        self.register_buffer("best_epoch", torch.zeros(stack.num_seeds, dtype=torch.long))
        for i, p in enumerate(stack.stacked.parameters()):
            self.register_buffer(f"p{i}", p.detach().clone())

    @torch.no_grad()
    def update(self, stack: StackedModels, losses: torch.Tensor, epoch: int) -> None:
        """Keep each seed whose validation loss ``losses`` (S,) is its lowest so far."""
        better = losses.to(self.best_loss) < self.best_loss
        self.best_loss[better] = losses.to(self.best_loss)[better]
        self.best_epoch[better] = epoch
        for i, p in enumerate(stack.stacked.parameters()):
            getattr(self, f"p{i}")[better] = p.detach()[better]

    @torch.no_grad()
    def restore(self, stack: StackedModels) -> None:
        """Put each seed's best parameters back into the stack."""
        for i, p in enumerate(stack.stacked.parameters()):
            p.copy_(getattr(self, f"p{i}"))

    def waited(self, epoch: int) -> torch.Tensor:
        """Epochs each seed has gone without a new lowest validation loss, (S,)."""
        return epoch - self.best_epoch


@dataclass(frozen=True)
class StackLog:
    """Curves of S seeds trained together: the mean training loss of every epoch (epochs run,
    S); the validation loss and accuracy after every epoch with early stopping, else after the
    last only (validated epochs, S); per seed, the epoch (1-based) at which its model was read
    (its lowest validation loss, else the last)."""

    val_loss: np.ndarray
    val_acc: np.ndarray
    train_loss: np.ndarray
    best_epoch: np.ndarray

    @property
    def epochs_run(self) -> int:
        return int(self.train_loss.shape[0])


@torch.no_grad()
def _stack_scores(stack: StackedModels, x: torch.Tensor, y: torch.Tensor,
                  chunk: int = 500) -> tuple[torch.Tensor, torch.Tensor]:
    """Per seed, the mean cross-entropy and accuracy of the stack on the shared images
    ``x`` (N, T, p) with labels ``y`` (N,): two tensors (S,)."""
    s = stack.num_seeds
    loss = torch.zeros(s, dtype=torch.float64, device=x.device)
    right = torch.zeros(s, dtype=torch.float64, device=x.device)
    for i in range(0, x.shape[0], chunk):
        xb, yb = x[i:i + chunk], y[i:i + chunk]
        logits = stack(xb.expand(s, *xb.shape))                         # (S, b, classes)
        ce = F.cross_entropy(logits.flatten(0, 1), yb.repeat(s), reduction="none")
        loss += ce.view(s, -1).double().sum(1)
        right += (logits.argmax(-1) == yb).double().sum(1)
    return loss / x.shape[0], right / x.shape[0]


def train_vit_stack(make_model: Callable[[int], nn.Module], seeds: Sequence[int],
                    x: torch.Tensor, y: torch.Tensor, x_val: torch.Tensor, y_val: torch.Tensor,
                    device: str, *, epochs: int, lr: float, weight_decay: float,
                    batch_size: int, patience: int | None, run: RunDir | None = None,
                    name: str = "stack", desc: str = "ViT stack"
                    ) -> tuple[list[nn.Module], StackLog]:
    """Train the S ``seeds`` of one model together (:class:`StackedModels`): each seed a
    sequential run's twin (its initialisation, its own batch order from its generator), AdamW
    on each seed's cross-entropy, a cosine schedule over ``epochs`` epochs, the validation loss
    and accuracy of every seed after every epoch.

    With ``patience`` (early stopping): each seed is read at its lowest validation loss, and
    the stack stops once every seed has gone ``patience`` epochs without a new lowest (else
    at ``epochs``). Without: each seed is read at the end, and validated there only.
    Resumable after every epoch through ``run`` (the best states are checkpointed with the
    model).

    Args:
        make_model: ``seed -> model``, built right after ``seed_everything(seed)``.
        x, y: training patches (N, T, p) and labels (N,) on ``device``, shared by the seeds.
        x_val, y_val: the validation split.

    Returns:
        The S models (seed order, evaluation mode) and their :class:`StackLog`.
    """
    if patience is not None and patience < 1:
        raise ValueError(f"patience: expected an int >= 1 or None, got {patience!r}")
    stack = StackedModels(make_model, seeds).to(device)
    opt = torch.optim.AdamW(stack.parameters(), lr=lr, weight_decay=weight_decay)
    n = x.shape[0]
    steps_per_epoch = math.ceil(n / batch_size)
    total = epochs * steps_per_epoch
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: 0.5 * (1 + math.cos(math.pi * min(step, total) / total)))
    best = BestStates(stack).to(device)
    per_seed = PerSeedLoss(lambda forward, b: torch.vmap(F.cross_entropy)(forward(b[0]), b[1]),
                           stack.num_seeds)

    def one_seed(gen: torch.Generator) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = torch.randperm(n, generator=gen).to(device)
        for i in range(steps_per_epoch):
            idx = order[i * batch_size:(i + 1) * batch_size]
            yield x[idx], y[idx]

    def end_of_round(r: int) -> dict:
        train = per_seed.curves()[-steps_per_epoch:].double().mean(0)
        per_seed.steps.clear()
        if patience is None and r + 1 < epochs:
            return {"train_loss": train.tolist(), "stop": False}
        stack.eval()
        loss, acc = _stack_scores(stack, x_val, y_val)
        stack.train()
        best.update(stack, loss, r + 1)
        done = patience is not None and bool((best.waited(r + 1) >= patience).all())
        return {"val_loss": loss.tolist(), "val_acc": acc.tolist(),
                "train_loss": train.tolist(), "stop": done}

    log = fit(stack, opt, rounds=epochs, loss=per_seed, device=device, run=run, name=name,
              batches=lambda _r: stacked_batches([one_seed(g) for g in stack.generators]),
              schedulers=[sched], generators=stack.named_generators(),
              modules={"best": best}, end_of_round=end_of_round,
              stop_if=lambda m: m["stop"], desc=desc, compile=False)
    if patience is not None:
        best.restore(stack)
    curves = {k: np.array([m[k] for m in log.metrics if k in m], dtype=float)
              for k in ("val_loss", "val_acc", "train_loss")}
    best_epoch = (best.best_epoch.cpu().numpy() if patience is not None
                  else np.full(stack.num_seeds, len(log.metrics)))
    models = [m.eval() for m in stack.unstack()]
    return models, StackLog(curves["val_loss"], curves["val_acc"], curves["train_loss"],
                            best_epoch.astype(int))
