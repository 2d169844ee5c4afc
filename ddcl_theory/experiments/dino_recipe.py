"""L10 at paper scale: DINO with iBOT's masked-patch loss pre-trains a ViT-S/16 on Imagenette,
and a linear probe reads ADE20K's 150 classes from its frozen patch tokens.

The pieces are the dense-features chapter's (:mod:`ddcl_theory.experiments.dense_features`):
its :class:`~ddcl_theory.models.dino.DenseViT` and
:class:`~ddcl_theory.models.dino.SelfDistillation` (EMA teacher, centring, [CLS] and
masked-patch losses), its two augmented views and iBOT masks, its warm-up and cosine schedule
and its training loop; here at the papers' shapes (:class:`DinoRecipe`, paper: width 384, 12
blocks, 6 heads, 16 x 16 patches on 160 x 160 images, AdamW at 5e-4 per 256 images with weight
decay 0.04, 10% warm-up, teacher momentum rising from 0.996 to 1 on a cosine, 100 epochs of
Imagenette's 9,469 training images) on real images: Imagenette (160 px) for pre-training and
ADE20K resized to the same 160 x 160 for the probe (:mod:`ddcl_theory.experiments.ade20k_probe`).
One arm (a head setting: none or all of the heads Laplacian) and one seed per call
(:func:`run_arm`).

    >>> recipe = DinoRecipe.from_profile()                  # DDCL_PROFILE=paper: the shapes above
    >>> arm = run_arm(recipe, "all", seed=0, device="cuda")  # DinoArm: losses, mIoU, accuracy
"""
from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ddcl_theory.data.ade20k import SegmentationSet
from ddcl_theory.experiments import ade20k_probe
from ddcl_theory.experiments.dense_features import (
    normalise,
    standardise,
    to_patches,
    two_views,
    warmup_cosine,
)
from ddcl_theory.experiments.laplacian_common import laplacian_count
from ddcl_theory.models.dino import (
    DenseViT,
    DinoHead,
    SelfDistillation,
    patch_features,
    random_masks,
)
from ddcl_theory.runtime.settings import Settings, setting
from ddcl_theory.runtime.training import fit
from ddcl_theory.runtime.validate import check_divisible

__all__ = ["DinoRecipe", "DinoArm", "momentum_at", "pretrain", "probe_ade20k", "run_arm"]


@dataclass(frozen=True)
class DinoRecipe(Settings):
    """DINO+iBOT pre-training and the ADE20K probe. cpu: a tiny model for tests; paper: ViT-S/16
    at 160 px, 100 epochs of Imagenette, every ADE20K image; the smoke run keeps the shapes on
    a few hundred images."""

    title = "DINO+iBOT ViT-S/16 on Imagenette, ADE20K linear probe"

    image_size: int = setting(32, paper=160, ge=1)
    patch: int = setting(8, paper=16, ge=1)
    dim: int = setting(32, paper=384, ge=1)
    depth: int = setting(2, paper=12, ge=1)
    heads: int = setting(4, paper=6, ge=1)
    mlp_ratio: int = setting(2, paper=4, ge=1)
    out_dim: int = setting(64, paper=4096, ge=1)
    head_hidden: int = setting(128, paper=2048, ge=1)     # DINO's projection head: 2048, 256
    head_bottleneck: int = setting(64, paper=256, ge=1)
    epochs: int = setting(1, paper=100, smoke=1, ge=1)
    batch_size: int = setting(8, paper=256, smoke=8, ge=1)
    lr: float = setting(5e-4, gt=0)              # per 256 images, scaled by batch_size / 256
    warmup: float = setting(0.1, ge=0, lt=1)     # share of the steps
    weight_decay: float = setting(0.04, ge=0)
    momentum: float = setting(0.996, ge=0, le=1)  # the teacher's first; it rises to 1
    patch_weight: float = setting(1.0, ge=0)
    pretrain_images: int | None = setting(32, paper=None, smoke=16, ge=1)
    probe_images: int | None = setting(8, paper=None, smoke=16, ge=1)
    probe_val_images: int | None = setting(4, paper=None, smoke=8, ge=1)
    probe_steps: int = setting(30, paper=1000, smoke=10, ge=1)
    probe_lr: float = setting(1e-2, gt=0)

    def check(self) -> None:
        check_divisible(self.image_size, "DinoRecipe.image_size", self.patch, "patch")
        check_divisible(self.dim, "DinoRecipe.dim", self.heads, "heads")

    @property
    def tokens(self) -> int:
        return (self.image_size // self.patch) ** 2


@dataclass(frozen=True)
class DinoArm:
    """One pre-trained ViT and its probe: the setting and seed, the mean loss of each epoch,
    the ADE20K validation mIoU and pixel accuracy of the teacher's patch tokens."""

    setting: str
    laplacian_heads: int
    seed: int
    losses: tuple[float, ...]
    miou: float
    pixel_accuracy: float


def momentum_at(step: int, total: int, base: float) -> float:
    """The teacher's momentum at ``step`` of ``total``: DINO's cosine rise from ``base`` to 1."""
    return 1.0 - (1.0 - base) * 0.5 * (1.0 + math.cos(math.pi * min(step, total) / max(total, 1)))


def _stats(images: np.ndarray, chunk: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Channel means and deviations of uint8 images (N, S, S, 3) scaled to [0, 1], float32,
    summed ``chunk`` images at a time in float64 (so standardising a split stays float32 and no
    float copy of every pixel is made)."""
    total, squares, count = np.zeros(3), np.zeros(3), 0
    for i in range(0, len(images), chunk):
        x = images[i:i + chunk].reshape(-1, 3).astype(np.float64) / 255.0
        total += x.sum(0)
        squares += (x * x).sum(0)
        count += x.shape[0]
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - mean ** 2, 0.0)) + 1e-6
    return mean.astype(np.float32), std.astype(np.float32)


def _standardised(images: np.ndarray, stats) -> torch.Tensor:
    return normalise(images.astype(np.float32) / 255.0, *stats)


def build_pair(recipe: DinoRecipe, setting: str, seed: int) -> SelfDistillation:
    """A fresh student (``setting``'s Laplacian heads), its projection head at the recipe's
    sizes and their teacher copies, initialised from ``seed`` (the CPU generator only: no other
    random state is read or reset)."""
    r = recipe
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        student = DenseViT(r.tokens, 3 * r.patch ** 2, dim=r.dim, depth=r.depth, heads=r.heads,
                           laplacian_heads=laplacian_count(setting, r.heads),
                           mlp_ratio=r.mlp_ratio)
        pair = SelfDistillation(student, r.out_dim, momentum=r.momentum,
                                patch_weight=r.patch_weight)
        pair.student_head = DinoHead(r.dim, r.out_dim, hidden=r.head_hidden,
                                     bottleneck=r.head_bottleneck)
    pair.teacher_head = copy.deepcopy(pair.student_head).requires_grad_(False)
    return pair


def pretrain(recipe: DinoRecipe, images: np.ndarray, setting: str, seed: int,
             device: str | torch.device = "cpu", *,
             end_of_round: Callable[[int, SelfDistillation], dict | None] | None = None
             ) -> tuple[SelfDistillation, list[float]]:
    """Self-distil one ViT on ``images`` (N, S, S, 3) uint8 for ``recipe.epochs`` epochs (each a
    seeded permutation in batches); returns the pair and each epoch's mean loss.
    ``end_of_round(epoch, pair)`` runs after each epoch (e.g. a probe part-way through); it
    must draw no random number from the global generators."""
    r = recipe
    if images.ndim != 4 or images.shape[1:] != (r.image_size, r.image_size, 3):
        raise ValueError(f"images: expected (N, {r.image_size}, {r.image_size}, 3), got "
                         f"{images.shape}")
    if len(images) < r.batch_size:
        raise ValueError(f"images: expected at least batch_size={r.batch_size}, got "
                         f"{len(images)}")
    gen = torch.Generator().manual_seed(seed)
    pair = build_pair(r, setting, seed).to(device)
    x = _standardised(images, _stats(images)).to(device)
    per_epoch = len(images) // r.batch_size
    total = per_epoch * r.epochs
    params = [*pair.student.parameters(), *pair.student_head.parameters()]
    opt = torch.optim.AdamW(params, lr=r.lr * r.batch_size / 256, weight_decay=r.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(total, r.warmup))
    done = [0]

    def after_step() -> None:
        pair.update_teacher()
        done[0] += 1
        pair.momentum = momentum_at(done[0], total, r.momentum)

    def batches(_r: int):
        order = torch.randperm(len(images), generator=gen)
        for i in range(per_epoch):
            idx = order[i * r.batch_size:(i + 1) * r.batch_size].to(device)
            a, b = two_views(x[idx], gen)
            masks = random_masks(2 * r.batch_size, r.tokens, gen).to(device)
            yield (to_patches(a, r.patch), to_patches(b, r.patch),
                   masks[:r.batch_size], masks[r.batch_size:])

    log = fit(pair, opt, rounds=r.epochs, batches=batches, loss=lambda fwd, b: fwd(*b),
              device=device, schedulers=[sched], generators={"views": gen},
              after_step=after_step, clip_grad_norm=3.0,
              end_of_round=None if end_of_round is None else lambda e: end_of_round(e, pair),
              desc=f"DINO+iBOT {setting} seed {seed}", compile=False)
    return pair, [float(np.mean(epoch)) for epoch in log.losses]


def _patch_features(encoder: DenseViT, images: np.ndarray, stats, patch: int,
                    device: str | torch.device, chunk: int = 1024) -> torch.Tensor:
    """(N, T, dim) frozen patch tokens, ``chunk`` images standardised and cut at a time (the
    whole split is never held as float32 pixels)."""
    return torch.cat([patch_features(encoder, to_patches(
        _standardised(images[i:i + chunk], stats).to(device), patch))
        for i in range(0, len(images), chunk)])


def probe_ade20k(recipe: DinoRecipe, encoder: DenseViT, train: SegmentationSet,
                 val: SegmentationSet, stats, seed: int,
                 device: str | torch.device = "cpu") -> tuple[float, float]:
    """(mIoU, pixel accuracy) on ``val`` of a linear probe fitted on ``train``'s patch targets
    from ``encoder``'s frozen patch tokens (images standardised with ``stats``, the
    pre-training images' channel means and deviations; features with the training images')."""
    r = recipe
    encoder.eval()
    feats = [_patch_features(encoder, s.images, stats, r.patch, device) for s in (train, val)]
    tr, va = standardise(*feats)
    del feats
    probe = ade20k_probe.fit_probe(tr, ade20k_probe.patch_targets(train.labels, r.patch),
                                   steps=r.probe_steps, lr=r.probe_lr, seed=seed)
    return ade20k_probe.probe_scores(probe, va, val.labels, r.patch)


def run_arm(recipe: DinoRecipe, setting: str, seed: int, *,
            images: np.ndarray | None = None, probe_sets: Sequence[SegmentationSet] | None = None,
            device: str | torch.device = "cpu") -> DinoArm:
    """Pre-train one arm and probe its teacher. ``images`` default: Imagenette's training
    images (:func:`~ddcl_theory.data.imagenette.imagenette_arrays`); ``probe_sets`` default:
    ADE20K's training and validation splits at the same size
    (:func:`~ddcl_theory.data.ade20k.ade20k_arrays`)."""
    r = recipe
    if images is None:
        from ddcl_theory.data.imagenette import imagenette_arrays
        images, _ = imagenette_arrays("train", r.image_size, r.pretrain_images)
    if probe_sets is None:
        from ddcl_theory.data.ade20k import ade20k_arrays
        probe_sets = (ade20k_arrays("training", r.image_size, r.probe_images),
                      ade20k_arrays("validation", r.image_size, r.probe_val_images))
    pair, losses = pretrain(r, images, setting, seed, device)
    miou, acc = probe_ade20k(r, pair.teacher, *probe_sets, _stats(images), seed, device)
    return DinoArm(setting, laplacian_count(setting, r.heads), seed, tuple(losses), miou, acc)
