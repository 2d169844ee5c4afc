"""The papers' ViT recipe for L6-L8 at paper scale: transformers' ViT-S on CIFAR-100, trained
DeiT-style, seeds stacked, each read at its validation optimum.

Zhang & Papyan train their ViTs with DeiT(-III) recipes. :class:`DeiTRecipe` holds one: AdamW
with weight decay on the matrices only, a linear warm-up then a cosine decay per step, label
smoothing, mixup or cutmix on every batch, random crops and flips, stochastic depth. The model is
:class:`~ddcl_theory.models.hf_vit.HFViT` (``ViTForImageClassification``, CLS token), its
last ``laplacian_heads`` heads of every block Laplacian.

:func:`train_deit_stack` trains the S seeds of one setting together
(:class:`~ddcl_theory.runtime.stacked.StackedModels`): each seed has its initialisation, batch
order, crops, flips and mixing from its own generator, and is read at its lowest validation loss
(plain cross-entropy on the unaugmented validation split), as the head-count study's
:func:`~ddcl_theory.experiments.laplacian_vit.train_vit_stack` reads its runs.
:func:`deit_stack_runs` measures each seed with the study's
:func:`~ddcl_theory.experiments.vit_runs.measure_vit` (the streams hold the CLS token
first) into :class:`~ddcl_theory.experiments.vit_runs.ViTRun` records, the records the
L6-L8 decisions read. :func:`paper_study_images` gives the images: CIFAR-100's training set less
a validation split from its end, and its 10,000 test images as the evaluation pool.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ddcl_theory.data import augment
from ddcl_theory.experiments import laplacian_vit as lv
from ddcl_theory.experiments.laplacian_common import laplacian_count
from ddcl_theory.experiments.optim_groups import decay_groups
from ddcl_theory.experiments.vit_runs import ViTRun, measure_vit
from ddcl_theory.metrics import geometry as metrics
from ddcl_theory.models.hf_vit import HFViT, draw_drop_scale, drop_path_rates
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.data_parallel import (data_parallel, from_main, mean_over_ranks, shard,
                                               world)
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, setting
from ddcl_theory.runtime.stacked import PerSeedLoss, StackedModels, stacked_batches
from ddcl_theory.runtime.training import fit

__all__ = ["CIFAR100_TRAIN", "CIFAR100_TEST", "DeiTRecipe", "paper_study_images", "study_pixels",
           "param_groups", "lr_factor", "augmented_batch", "train_deit_stack", "cls_collapse",
           "deit_stack_runs"]

#: CIFAR-100's training and test images (the paper profile's fit pool plus validation split, and
#: its evaluation pool).
CIFAR100_TRAIN, CIFAR100_TEST = 50_000, 10_000


@dataclass(frozen=True)
class DeiTRecipe(Settings):
    """Model and recipe. cpu: a small ViT for tests; paper: ViT-S (width 384, 12 blocks, 6
    heads) on 4x4 patches of 32x32 images, 400 epochs (the Laplacian authors' DeiT-III
    length), batch 512, base rate 5e-4 per 512 images, 5 warm-up epochs, weight decay 0.05,
    label smoothing 0.1, mixup 0.8 or cutmix 1.0 on every batch (half each), crops padded by 4
    pixels and left-right flips (``flip``), stochastic depth 0.1; early stopping after 40
    epochs without a new lowest validation loss. The smoke run keeps the shapes and trains one
    epoch.

    ``lr`` is the peak rate per 512 images (DeiT's rule): the peak is ``lr * batch_size /
    512``; ``min_lr`` is the end of the cosine. :meth:`fitting` is the recipe of runs that must
    fit their training images (L7's terminal phase): no augmentation, smoothing or stochastic
    depth.

    Where it differs from DeiT's published recipe: the rate moves every step (warm-up from
    peak / warm-up steps, not 1e-6; the cosine over the steps after the warm-up, with no
    cool-down epochs); no RandAugment, random erasing or repeated augmentation; crops pad the
    standardised images with zeros (the mean colour); 400 epochs as in DeiT-III."""

    image_size: int = setting(32, ge=1)
    patch: int = setting(8, paper=4, ge=1)
    dim: int = setting(32, paper=384, ge=1)
    depth: int = setting(2, paper=12, ge=1)
    heads: int = setting(4, paper=6, ge=1)
    mlp_ratio: int = setting(2, paper=4, ge=1)
    batch_size: int = setting(64, paper=512, smoke=8, ge=1)
    epochs: int = setting(4, paper=400, smoke=1, ge=1)
    warmup_epochs: int = setting(1, paper=5, smoke=0, ge=0)
    lr: float = setting(8e-3, paper=5e-4, gt=0)
    min_lr: float = setting(1e-5, ge=0)
    weight_decay: float = setting(0.05, ge=0)
    label_smoothing: float = setting(0.1, ge=0, le=1)
    mixup_alpha: float = setting(0.8, ge=0)
    cutmix_alpha: float = setting(1.0, ge=0)
    switch_prob: float = setting(0.5, ge=0, le=1)
    mix_prob: float = setting(1.0, ge=0, le=1)
    crop_pad: int = setting(4, ge=0)
    flip: bool = setting(True)
    drop_path: float = setting(0.1, ge=0, lt=1)
    patience: int | None = setting(3, paper=40, ge=1)

    def check(self) -> None:
        name = type(self).__name__
        if self.image_size % self.patch:
            raise ValueError(f"{name}.patch: expected a divisor of image_size="
                             f"{self.image_size}, got {self.patch}")
        if self.dim % self.heads:
            raise ValueError(f"{name}.dim: expected a multiple of heads={self.heads}, got "
                             f"{self.dim}")
        if self.warmup_epochs >= self.epochs and self.warmup_epochs:
            raise ValueError(f"{name}.warmup_epochs: expected fewer than epochs={self.epochs}, "
                             f"got {self.warmup_epochs}")

    def fitting(self) -> DeiTRecipe:
        """The recipe of the terminal-phase runs: the same model, optimiser and schedule with no
        crops, flips, label smoothing, mixing or stochastic depth, each of which keeps a
        network from fitting its training images (Neural Collapse is a property of a network
        trained past zero training error, on plain cross-entropy)."""
        return self.replace(crop_pad=0, flip=False, label_smoothing=0.0, mix_prob=0.0,
                            drop_path=0.0)

    def model(self, num_classes: int, laplacian_heads: int, dim: int | None = None) -> HFViT:
        """A fresh :class:`HFViT` of the recipe's shapes (``dim`` overrides the width)."""
        return HFViT(num_classes, image_size=self.image_size, patch=self.patch,
                     dim=dim or self.dim, depth=self.depth, heads=self.heads,
                     mlp_ratio=self.mlp_ratio, laplacian_heads=laplacian_heads,
                     drop_path=self.drop_path)


def paper_study_images(n_val: int, n_eval: int) -> lv.StudyImages:
    """CIFAR-100 (:func:`ddcl_theory.data.paper.load_cifar100`, the paper profile's data): the
    training images less the last ``n_val`` (the fit pool), those ``n_val`` (validation), and
    the first ``n_eval`` test images (the evaluation pool, never trained on)."""
    from ddcl_theory.data import paper
    try:
        d = paper.load_cifar100()
    except FileNotFoundError as err:
        if not profile.current().smoke:
            raise
        return _smoke_standin(n_val, n_eval, err)
    if not 0 < n_val < len(d.y_train):
        raise ValueError(f"n_val: expected 0 < n_val < {len(d.y_train)}, got {n_val!r}")
    if not 0 < n_eval <= len(d.y_test):
        raise ValueError(f"n_eval: expected 0 < n_eval <= {len(d.y_test)} (CIFAR-100's test "
                         f"images), got {n_eval!r}")
    x_train, x_test = d.float_images()
    cut = len(d.y_train) - n_val
    return lv.StudyImages(x_train[:cut], d.y_train[:cut], x_train[cut:], d.y_train[cut:],
                          x_test[:n_eval], d.y_test[:n_eval], d.source, len(d.label_names))


def _smoke_standin(n_val: int, n_eval: int, err: Exception) -> lv.StudyImages:
    """The smoke run's stand-in where CIFAR-100 is not fetched: the CIFAR-10 subset and its
    evaluation pool under CIFAR-100's 100 classes (the paper's shapes; labels 0-9)."""
    print(f"NOTICE: {err}\nNOTICE: the smoke run reads the CIFAR-10 subset under CIFAR-100's "
          "100 classes in its place")
    images = lv.load_study_images(n_val, n_eval)
    return dataclasses.replace(images, source=f"{images.source} (smoke stand-in for cifar100)",
                               num_classes=100)


def study_pixels(images: lv.StudyImages, n_train: int) -> dict[str, torch.Tensor]:
    """The first ``n_train`` fit images, the validation split and the evaluation pool as
    float32 (N, C, H, W), each channel standardised by the ``n_train`` training images'
    statistics; keys ``x_fit, y_fit, x_val, y_val, x_eval, y_eval``."""
    if not 0 < n_train <= len(images.y_fit):
        raise ValueError(f"n_train: expected 0 < n_train <= {len(images.y_fit)} (the fit "
                         f"pool), got {n_train!r}")
    x_fit = images.x_fit[:n_train]
    mean = x_fit.mean(axis=(0, 1, 2), keepdims=True)
    std = x_fit.std(axis=(0, 1, 2), keepdims=True) + 1e-6

    def pixels(x: np.ndarray) -> torch.Tensor:
        z = np.ascontiguousarray(((x - mean) / std).transpose(0, 3, 1, 2), dtype=np.float32)
        return torch.from_numpy(z)

    return {"x_fit": pixels(x_fit), "y_fit": torch.from_numpy(images.y_fit[:n_train]),
            "x_val": pixels(images.x_val), "y_val": torch.from_numpy(images.y_val),
            "x_eval": pixels(images.x_eval), "y_eval": torch.from_numpy(images.y_eval)}


def param_groups(module: nn.Module, weight_decay: float, stacked: bool = False) -> list[dict]:
    """AdamW groups as DeiT's: weight decay on the weight matrices, none on biases, norms,
    the position embeddings and the CLS token (``stacked``: parameters carry a leading seed
    axis)."""
    return decay_groups(module, weight_decay, stacked=stacked,
                        extra_plain=("position_embeddings", "cls_token"))


def lr_factor(step: int, total: int, warmup: int, floor: float) -> float:
    """The rate over its peak at ``step`` of ``total``: linear from 1/warmup to 1 over the
    first ``warmup`` steps, then a cosine to ``floor`` at the end."""
    if step < warmup:
        return (step + 1) / warmup
    t = min(step - warmup, total - warmup) / max(total - warmup, 1)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * t))


def augmented_batch(recipe: DeiTRecipe, x: torch.Tensor, y: torch.Tensor, num_classes: int,
                    gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One training batch as the recipe sees it: crops (``crop_pad``) and flips (``flip``),
    smoothed one-hot targets, then mixup or cutmix (``mix_prob``); images (B, C, H, W) and
    targets (B, classes)."""
    x = augment.random_crop_flip(x, recipe.crop_pad, gen, flip=recipe.flip)
    targets = augment.smooth_labels(y, num_classes, recipe.label_smoothing)
    return augment.mix_batch(x, targets, gen, mixup_alpha=recipe.mixup_alpha,
                             cutmix_alpha=recipe.cutmix_alpha, switch_prob=recipe.switch_prob,
                             prob=recipe.mix_prob)


def train_deit_stack(make_model: Callable[[int], nn.Module], seeds: Sequence[int],
                     recipe: DeiTRecipe, tensors: dict[str, torch.Tensor], num_classes: int,
                     device: str, *, epochs: int, patience: int | None,
                     run: RunDir | None = None, name: str = "deit", desc: str = "DeiT stack"
                     ) -> tuple[list[nn.Module], lv.StackLog]:
    """Train the S ``seeds`` of one model together under the recipe for ``epochs`` epochs;
    read each at its lowest validation loss (``patience`` epochs without a new lowest end a
    seed, the stack when every seed is done; ``patience=None``: no early stopping, each seed
    read at the end). Resumable after every epoch through ``run``. Under ``torchrun`` each rank
    trains on its share of every batch (:mod:`ddcl_theory.runtime.data_parallel`); with shares
    of equal size the stack trains as it does in one process (an epoch's last batch, when
    partial, drops the images past a multiple of the number of ranks).

    Args:
        make_model: ``seed -> model`` of the recipe's shapes (an :class:`HFViT`:
            ``(pixels, drop_scale) -> logits``), built right after ``seed_everything(seed)``;
            its stochastic depth is drawn from each seed's generator.
        tensors: :func:`study_pixels`'s ``x_fit, y_fit, x_val, y_val`` on ``device``.

    Returns the S models (seed order, evaluation mode) and their
    :class:`~ddcl_theory.experiments.laplacian_vit.StackLog`.
    """
    if patience is not None and patience < 1:
        raise ValueError(f"patience: expected an int >= 1 or None, got {patience!r}")
    if recipe.warmup_epochs and recipe.warmup_epochs >= epochs:
        raise ValueError(f"epochs: expected more than the recipe's warmup_epochs="
                         f"{recipe.warmup_epochs}, got {epochs}")
    x, y = tensors["x_fit"], tensors["y_fit"]
    stack = StackedModels(make_model, seeds).to(device)
    trained = data_parallel(stack, device)           # DDP under torchrun, else the stack
    peak = recipe.lr * recipe.batch_size / 512
    opt = torch.optim.AdamW(param_groups(stack.stacked, recipe.weight_decay, stacked=True),
                            lr=peak)
    n, size = x.shape[0], recipe.batch_size
    ranks = world()[1]
    # equal shares under torchrun: an epoch's last, partial batch drops the images past a
    # multiple of the number of ranks (fewer than one a rank), and is left out when none remain
    last = n % size - n % size % ranks
    steps_per_epoch = n // size + (1 if last else 0)
    if steps_per_epoch == 0:
        raise ValueError(f"tensors: {n} training images do not give each of the {ranks} ranks "
                         "one")
    total, warmup = epochs * steps_per_epoch, recipe.warmup_epochs * steps_per_epoch
    floor = min(recipe.min_lr / peak, 1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: lr_factor(step, total, warmup, floor))
    best = lv.BestStates(stack).to(device)
    per_seed = PerSeedLoss(lambda forward, b: torch.vmap(augment.soft_cross_entropy)(
        forward(b[0], b[2]), b[1]), stack.num_seeds)
    rates = drop_path_rates(recipe.drop_path, recipe.depth)

    def one_seed(gen: torch.Generator) -> Iterator[tuple[torch.Tensor, ...]]:
        order = torch.randperm(n, generator=gen).to(device)
        for i in range(steps_per_epoch):
            idx = order[i * size:(i + 1) * size]
            idx = idx[:len(idx) - len(idx) % ranks]
            images, targets = augmented_batch(recipe, x[idx], y[idx], num_classes, gen)
            drop = draw_drop_scale(rates, len(idx), gen).to(device)
            # every rank draws the whole batch (the same generators), then trains on its share;
            # the indices ride along so that the FLOP counter counts images, not seeds
            yield shard(images), shard(targets), shard(drop), shard(idx)

    def end_of_round(r: int) -> dict:
        train = mean_over_ranks(per_seed.curves()[-steps_per_epoch:].double().mean(0))
        per_seed.steps.clear()
        if patience is None and r + 1 < epochs:
            return {"train_loss": train.tolist(), "stop": False}
        stack.eval()
        loss, acc = lv._stack_scores(stack, tensors["x_val"], tensors["y_val"])
        stack.train()
        scores = from_main({"val_loss": loss.tolist(), "val_acc": acc.tolist()})
        best.update(stack, torch.tensor(scores["val_loss"], dtype=loss.dtype,
                                        device=loss.device), r + 1)
        done = patience is not None and bool((best.waited(r + 1) >= patience).all())
        return {**scores, "train_loss": train.tolist(), "stop": done}

    log = fit(trained, opt, rounds=epochs, loss=per_seed, device=device, run=run, name=name,
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
    return models, lv.StackLog(curves["val_loss"], curves["val_acc"], curves["train_loss"],
                               best_epoch.astype(int))


@torch.no_grad()
def _cls_features(model: HFViT, x: torch.Tensor, chunk: int = 1000) -> np.ndarray:
    """The CLS token after the final LayerNorm (what the classifier reads), float64 (N, d)."""
    out = []
    for i in range(0, x.shape[0], chunk):
        _, states = model(x[i:i + chunk], return_hidden=True)
        out.append(model.norm(states[-1])[:, 0].double().cpu())
    return torch.cat(out).numpy()


def cls_collapse(model: HFViT, x_eval: torch.Tensor, y_eval: torch.Tensor,
                 x_train: torch.Tensor, y_train: torch.Tensor) -> dict[str, float]:
    """Neural Collapse of what a CLS classifier reads: NC1 of the pool's CLS tokens, NC1 and
    the ETF gap of the training images' (the fields of ``ViTRun`` that the study's
    ``measure_vit`` reads off the mean token, which a mean-pooled model classifies)."""
    pool = metrics.neural_collapse(_cls_features(model, x_eval), y_eval.cpu().numpy())
    train = metrics.neural_collapse(_cls_features(model, x_train), y_train.cpu().numpy())
    return {"nc1": pool.nc1, "nc1_train": train.nc1, "etf_gap_train": train.etf_gap}


def deit_stack_runs(recipe: DeiTRecipe, images: lv.StudyImages, part: str, n_train: int,
                    dim: int, setting: str, seeds: Sequence[int], device: str, *,
                    n_train_eval: int, epochs: int | None = None,
                    ckpt: RunDir | None = None) -> list[ViTRun]:
    """The runs of one (part, image count, width, head setting) of the head-count study under
    the recipe: the seeds trained together (:func:`train_deit_stack`; the ``"terminal"`` part
    under :meth:`DeiTRecipe.fitting` without early stopping, for ``epochs``), each measured by
    :func:`~ddcl_theory.experiments.vit_runs.measure_vit` on the evaluation pool and on
    its first ``n_train_eval`` training images (the terminal part: all of them), its Neural
    Collapse fields read on the CLS token the classifier reads (:func:`cls_collapse`)."""
    if part not in ("sweep", "terminal", "wide"):
        raise ValueError(f"part: expected 'sweep', 'terminal' or 'wide', got {part!r}")
    terminal = part == "terminal"
    if terminal:
        recipe = recipe.fitting()
    tensors = {k: v.to(device) for k, v in study_pixels(images, n_train).items()}
    n_lap = laplacian_count(setting, recipe.heads)
    epochs = epochs if epochs is not None else recipe.epochs
    patience = None if terminal else recipe.patience
    key = f"{part},n={n_train},d={dim},setting={setting}"
    models, log = train_deit_stack(
        lambda _seed: recipe.model(images.num_classes, n_lap, dim), seeds, recipe, tensors,
        images.num_classes, device, epochs=epochs, patience=patience, run=ckpt, name=key,
        desc=f"DeiT {key}")
    n_ev = n_train if terminal else min(n_train_eval, n_train)
    x, y = tensors["x_fit"], tensors["y_fit"]
    runs = []
    for i, (seed, model) in enumerate(zip(seeds, models)):
        args = (model, tensors["x_eval"], tensors["y_eval"], x[:n_ev], y[:n_ev])
        measured = {**measure_vit(*args), **cls_collapse(*args)}
        runs.append(ViTRun(
            part=part, n_train=n_train, dim=dim, setting=setting, laplacian_heads=n_lap,
            seed=int(seed), val_loss=tuple(log.val_loss[:, i].tolist()),
            val_acc=tuple(log.val_acc[:, i].tolist()),
            train_loss=tuple(log.train_loss[:, i].tolist()), best_epoch=int(log.best_epoch[i]),
            epochs=epochs, patience=patience, **measured))
    return runs
