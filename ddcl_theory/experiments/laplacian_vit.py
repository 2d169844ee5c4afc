"""The ViT of the Laplacian-head studies (claims L6, L7, L8 of Zhang & Papyan 2026).

Its settings (:class:`ViTSettings`: data, model, optimiser, run length, seeds, head settings),
its data (:func:`prepare_patches`: the CIFAR-10 subset as normalised patch tokens), its one
training path (:func:`train_vit`: AdamW, a cosine schedule, through
:func:`ddcl_theory.runtime.training.fit`) and the sign balance of its heads
(:func:`head_sign_balances`). The studies that train it are
:func:`ddcl_theory.experiments.laplacian_study.run_vit` (:class:`~ddcl_theory.models.vit.ViT`,
mean pooling) and :func:`ddcl_theory.experiments.laplacian_readout.run` (with a DDCL readout).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

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
from ddcl_theory.runtime.training import TrainLog, fit

__all__ = ["SMOKE_IMAGES", "ViTSettings", "head_sign_balances", "prepare_patches", "train_vit"]

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
