"""Claim L10 on a dense-prediction proxy: self-distilled ViT features, probed for segmentation.

For every seed, head setting (Laplacian heads per layer: none or all) and pre-training length
(``settings.steps``, separate runs, each with its own warm-up and cosine decay), a small ViT is
trained without labels by DINO + iBOT self-distillation (:class:`ddcl_theory.models.dino.
SelfDistillation`: an EMA teacher, a [CLS] loss across two augmented views and a masked-patch
loss within each) on the training images of the dense proxy (:mod:`ddcl_theory.data.
dense_proxy`). The teacher's frozen features are then read by linear probes: two 1x1 probes
(one linear map on every patch token) fitted on the training images' patch labels and scored
by mIoU on the test images' exact pixel labels (their patch predictions upsampled), one naming
the 11 classes (background and the ten digits), one telling a digit's tile from the background
(foreground segmentation); and an image-level probe on the [CLS] token that names the CIFAR-10
class of the background.

Beside the trained runs, for each seed: the all-background labelling and the probes on the raw
patches and on the untrained ViT (floors), and the same ViT trained with the segmentation labels
(:class:`~ddcl_theory.models.dino.SegmentationViT`, early-stopped at its validation optimum: the
ceiling). Seed ``s`` draws its own training, validation and test images, and gives both head
settings the same images, initialisation stream, batches, augmentations and masks: the arms are
paired, and the seed-to-seed spread includes the sampling of the test images.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from ddcl_theory.data.dense_proxy import NUM_CLASSES, DenseProxy, make_dense_proxy
from ddcl_theory.experiments.laplacian_common import bad_head_settings, laplacian_count
from ddcl_theory.metrics import segmentation
from ddcl_theory.metrics.readouts import effective_rank
from ddcl_theory.models.dino import (DenseViT, SegmentationViT, SelfDistillation, cls_features,
                                     patch_features, random_masks)
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, confirmatory_seeds, setting
from ddcl_theory.runtime.threads import num_threads
from ddcl_theory.runtime.training import fit

__all__ = ["HEAD_SETTINGS", "IMAGE_CLASSES", "REFERENCE_SEEDS", "SETTLE_AT", "DenseSettings",
           "ProbeScore", "PretrainRun", "CeilingRun", "SeedFloors", "DenseSweep", "two_views",
           "to_patches", "standardise", "train_probe", "probe_features", "prepare", "floors",
           "pretrain", "ceiling", "warmup_cosine", "run"]

HEAD_SETTINGS = ("0", "all")
#: Classes of the image-level probe: the CIFAR-10 class of each image's background.
IMAGE_CLASSES = 10
#: Where the settling gate reads the validation probe: after this fraction of the schedule.
SETTLE_AT = 0.75
#: Seeds of the reference profile: the registered rule's ``n_seeds`` of claim L10 (a test
#: checks that they agree; experiments do not import the ledger).
REFERENCE_SEEDS = 7


@dataclass(frozen=True)
class DenseSettings(Settings):
    """Scale of the experiment. cpu: 256 training images, 2 seeds, runs of 60 and 120 steps
    (what CI replays); reference: 1,024 training images, the rule's confirmatory seeds
    (:data:`REFERENCE_SEEDS`), separate runs of 200 and 800 steps; paper: a wider, deeper ViT
    on 20,000 images."""

    n_train: int = setting(256, reference=1024, paper=20000, smoke=32, ge=8)
    n_val: int = setting(64, reference=256, paper=2000, smoke=16, ge=8)
    n_test: int = setting(128, reference=512, paper=2000, smoke=16, ge=8)
    patch: int = setting(4, ge=1)
    zoom: int = setting(2, ge=1)
    dim: int = setting(32, paper=192, ge=1)
    depth: int = setting(2, paper=6, ge=1)
    heads: int = setting(4, paper=6, ge=1)
    mlp_ratio: int = setting(2, paper=4, ge=1)
    out_dim: int = setting(128, paper=1024, ge=2)
    batch_size: int = setting(32, paper=128, smoke=8, ge=2)
    #: pre-training lengths in optimiser steps (separate runs: the scale trend)
    steps: tuple[int, ...] = setting((60, 120), reference=(200, 800),
                                     paper=(2000, 4000, 8000), smoke=(8,), ge=1, nonempty=True)
    #: steps per round of the training loop (the loss curve's resolution, the checkpoints)
    steps_per_round: int = setting(15, reference=25, paper=200, smoke=2, ge=1)
    lr: float = setting(2e-3, paper=5e-4, gt=0)
    weight_decay: float = setting(0.04, ge=0)
    warmup: float = setting(0.1, ge=0, lt=1)
    momentum: float = setting(0.99, paper=0.996, ge=0, lt=1)
    patch_weight: float = setting(1.0, ge=0)
    probe_steps: int = setting(100, paper=500, smoke=5, ge=1)
    probe_lr: float = setting(0.05, gt=0)
    #: optimiser steps of the supervised ceiling (validation read every round, best kept)
    ceiling_steps: int = setting(120, reference=400, paper=8000, smoke=8, ge=1)
    ceiling_lr: float = setting(2e-3, paper=5e-4, gt=0)
    seeds: tuple[int, ...] = setting((0, 1), reference=confirmatory_seeds(REFERENCE_SEEDS),
                                     paper=confirmatory_seeds(10), smoke=(0,), ge=0,
                                     nonempty=True)
    head_settings: tuple[str, ...] = setting(HEAD_SETTINGS, nonempty=True)
    threads: int | None = setting(1, paper=None, ge=1)

    def check(self) -> None:
        if 32 % self.patch:
            raise ValueError(f"DenseSettings.patch: expected a divisor of 32, got {self.patch}")
        if 8 * self.zoom > 32:
            raise ValueError(f"DenseSettings.zoom: a digit of {8 * self.zoom} pixels does not "
                             "fit in 32x32 images")
        if list(self.steps) != sorted(set(self.steps)):
            raise ValueError(f"DenseSettings.steps: expected increasing lengths, got "
                             f"{self.steps!r}")
        for n in (*self.steps, self.ceiling_steps):
            if n % self.steps_per_round:
                raise ValueError(f"DenseSettings.steps_per_round: expected a divisor of every "
                                 f"run length, got {self.steps_per_round} for {n}")
        if bad := bad_head_settings(self.head_settings, self.heads):
            raise ValueError(f"DenseSettings.head_settings: expected 'half', 'all' or counts in "
                             f"[0, heads={self.heads}] as strings, got {bad}")

    @property
    def tokens(self) -> int:
        """Patch tokens per image."""
        return (32 // self.patch) ** 2

    def settle_round(self, steps: int) -> int:
        """The round after which a run of ``steps`` steps reads the settling gate's probe."""
        return max(1, round(SETTLE_AT * steps / self.steps_per_round))


@dataclass(frozen=True)
class ProbeScore:
    """The two linear probes on one set of frozen features.

    ``miou``, ``pixel_acc``: the 11-class 1x1 probe on the test images' pixel labels;
    ``val_miou``: the same probe on the validation images (carved from the training split);
    ``fg_miou``, ``val_fg_miou``: the foreground probe (digit tile or background, 2 classes)
    on the test and validation images; ``image_acc``: the image-level probe's test accuracy;
    ``image_correct``: its per-image 0/1 correctness."""

    miou: float
    pixel_acc: float
    val_miou: float
    fg_miou: float
    val_fg_miou: float
    image_acc: float
    image_correct: tuple[int, ...] = ()


@dataclass(frozen=True)
class PretrainRun:
    """One self-distilled ViT of ``steps`` steps: its loss curve, collapse checks and probes."""

    setting: str
    laplacian_heads: int
    seed: int
    steps: int
    curve: tuple[float, ...]          # mean loss of each round
    score: ProbeScore                 # the probes on the teacher at the end
    settle_val_fg_miou: float         # validation foreground mIoU at SETTLE_AT of the schedule
    teacher_entropy: float            # mean per-image entropy of the teacher's [CLS] output
    teacher_mean_entropy: float       # entropy of the batch-mean [CLS] output (nats)
    effective_rank: float             # of the test patch features


@dataclass(frozen=True)
class CeilingRun:
    """The same ViT trained with the segmentation labels (early-stopped on validation)."""

    setting: str
    seed: int
    miou: float                       # its own head on the test pixel labels
    pixel_acc: float
    best_step: int                    # the step of its best validation mIoU
    val_curve: tuple[float, ...]      # validation mIoU after every round


@dataclass(frozen=True)
class SeedFloors:
    """One seed's reference points: all-background, raw patches, untrained ViT, ceiling."""

    seed: int
    background: float                 # mIoU of labelling every pixel background
    background_pixel_acc: float
    raw: ProbeScore
    untrained: dict[str, ProbeScore]
    ceiling: dict[str, CeilingRun]


@dataclass
class DenseSweep:
    """All runs, the floors and ceilings per seed, and the data facts needed to read them."""

    settings: DenseSettings
    runs: list[PretrainRun]
    floors: list[SeedFloors]
    source: str
    digests: dict[str, str] = field(default_factory=dict)
    log_k: float = 0.0

    def run(self, setting: str, seed: int, steps: int | None = None) -> PretrainRun:
        steps = self.settings.steps[-1] if steps is None else steps
        for r in self.runs:
            if (r.setting, r.seed, r.steps) == (setting, seed, steps):
                return r
        raise KeyError(f"no run ({setting!r}, seed {seed}, {steps} steps)")

    def values(self, setting: str, field_name: str = "miou", steps: int | None = None
               ) -> np.ndarray:
        """(seeds,) of a probe field of the trained runs of one setting at ``steps`` (default
        the largest), in seed order."""
        return np.array([getattr(self.run(setting, s, steps).score, field_name)
                         for s in self.settings.seeds], dtype=float)

    def floor_values(self, which: str, setting: str | None = None,
                     field_name: str = "miou") -> np.ndarray:
        """(seeds,) of a floor or the ceiling: ``which`` in ``"background"``, ``"raw"``,
        ``"untrained"``, ``"ceiling"`` (the last two per ``setting``)."""
        out = []
        for f in self.floors:
            if which == "background":
                out.append(f.background if field_name == "miou" else f.background_pixel_acc)
            elif which == "raw":
                out.append(getattr(f.raw, field_name))
            elif which == "untrained":
                out.append(getattr(f.untrained[setting], field_name))
            elif which == "ceiling":
                out.append(getattr(f.ceiling[setting], field_name))
            else:
                raise ValueError(f"which: expected background, raw, untrained or ceiling, got "
                                 f"{which!r}")
        return np.array(out, dtype=float)


# ------------------------------------------------------------------------------ data


@dataclass
class _Data:
    train: DenseProxy
    val: DenseProxy
    test: DenseProxy
    x_train: torch.Tensor              # standardised patches (N, T, p*p*3)
    x_val: torch.Tensor
    x_test: torch.Tensor
    images_train: torch.Tensor         # standardised images (N, 3, 32, 32), for the views
    y_train: torch.Tensor              # patch labels (N, T)
    y_val: torch.Tensor
    image_train: torch.Tensor          # background classes (N,)
    image_test: torch.Tensor


def _subset(d: DenseProxy, start: int, stop: int) -> DenseProxy:
    return DenseProxy(d.images[start:stop], d.pixel_labels[start:stop],
                      d.patch_labels[start:stop], d.image_labels[start:stop], d.patch, d.source)


def normalise(images: np.ndarray, mean: np.ndarray, std: np.ndarray) -> torch.Tensor:
    """(N, H, W, 3) images in [0, 1] -> standardised (N, 3, H, W) float32 tensor."""
    x = (images - mean) / std
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2), dtype=np.float32))


def to_patches(images: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, (H/p)(W/p), p*p*C), the order of :func:`data.image_patches`."""
    b, c, h, w = images.shape
    x = images.reshape(b, c, h // patch, patch, w // patch, patch).permute(0, 2, 4, 3, 5, 1)
    return x.reshape(b, (h // patch) * (w // patch), patch * patch * c)


def prepare(settings: DenseSettings, seed: int, device: str | torch.device = "cpu") -> _Data:
    """Seed ``seed``'s draws: ``n_train + n_val`` images of the training split (the last
    ``n_val`` are the validation images) and ``n_test`` of the test split, standardised with the
    training images' channel statistics, as tensors on ``device`` (every later step runs where
    they are)."""
    st = settings
    kw = dict(patch=st.patch, zoom=st.zoom)
    both = make_dense_proxy(st.n_train + st.n_val, seed=2 * seed, split="train", **kw)
    train, val = _subset(both, 0, st.n_train), _subset(both, st.n_train, len(both))
    test = make_dense_proxy(st.n_test, seed=2 * seed + 1, split="test", **kw)
    mean = train.images.mean(axis=(0, 1, 2), keepdims=True)
    std = train.images.std(axis=(0, 1, 2), keepdims=True) + 1e-6
    images = {k: normalise(d.images, mean, std).to(device) for k, d in
              (("train", train), ("val", val), ("test", test))}
    patches = {k: to_patches(v, st.patch) for k, v in images.items()}

    def labels(d: DenseProxy) -> torch.Tensor:
        return torch.from_numpy(d.patch_labels.reshape(len(d), -1)).to(device)

    return _Data(train, val, test, patches["train"], patches["val"], patches["test"],
                 images["train"], labels(train), labels(val),
                 torch.from_numpy(train.image_labels).to(device),
                 torch.from_numpy(test.image_labels).to(device))


def two_views(images: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Two augmented views of standardised images (B, C, H, W): a random resized crop (area
    0.35-1, any position) with a horizontal flip half of the time, then a random brightness shift
    and contrast scale per image. Every draw comes from ``generator`` (a CPU generator: the
    same draws whatever device holds ``images``)."""
    views = []
    b = images.shape[0]
    for _ in range(2):
        u = torch.rand(b, 6, generator=generator).to(images.device)
        side = torch.sqrt(0.35 + 0.65 * u[:, 0])
        flip = torch.where(u[:, 1] < 0.5, -1.0, 1.0)
        tx, ty = (2 * u[:, 2] - 1) * (1 - side), (2 * u[:, 3] - 1) * (1 - side)
        theta = torch.zeros(b, 2, 3, device=images.device)
        theta[:, 0, 0], theta[:, 0, 2] = side * flip, tx
        theta[:, 1, 1], theta[:, 1, 2] = side, ty
        grid = F.affine_grid(theta, list(images.shape), align_corners=False)
        view = F.grid_sample(images, grid, mode="bilinear", padding_mode="reflection",
                             align_corners=False)
        contrast = (0.6 + 0.8 * u[:, 4]).view(b, 1, 1, 1)
        shift = (u[:, 5] - 0.5).view(b, 1, 1, 1)
        mean = view.mean(dim=(1, 2, 3), keepdim=True)
        views.append((view - mean) * contrast + mean + shift)
    return tuple(views)


# ------------------------------------------------------------------------------ probes


def standardise(train: torch.Tensor, *others: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Standardise features (..., d) per dimension with the statistics of ``train``."""
    flat = train.reshape(-1, train.shape[-1])
    mean, std = flat.mean(0), flat.std(0) + 1e-6
    return tuple((x - mean) / std for x in (train, *others))


def warmup_cosine(total: int, warmup: float):
    """``step -> factor`` of the learning rate: a linear warm-up over ``warmup`` of ``total``
    steps, then a cosine decay to 0 at ``total``."""
    ramp = max(1, round(warmup * total)) if warmup > 0 else 0

    def factor(step: int) -> float:
        if step < ramp:
            return (step + 1) / ramp
        t = (step - ramp) / max(1, total - ramp)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, t)))
    return factor


def train_probe(features: torch.Tensor, labels: torch.Tensor, *, steps: int, lr: float,
                seed: int, num_classes: int = NUM_CLASSES) -> torch.nn.Linear:
    """A linear probe (d -> classes) fitted by full-batch Adam with a cosine-decayed rate,
    through :func:`fit` (one step per round): on patch features (N, T, d) and patch labels
    (N, T) it is the 1x1 probe; on image features (N, d) and labels (N,) the image-level probe.
    Seeded by ``seed`` without touching the global random state; trained where ``features``
    are."""
    if features.shape[:-1] != labels.shape:
        raise ValueError(f"labels: expected shape {tuple(features.shape[:-1])}, got "
                         f"{tuple(labels.shape)}")
    x, y = features.reshape(-1, features.shape[-1]), labels.reshape(-1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        probe = torch.nn.Linear(x.shape[-1], num_classes).to(x.device)
    opt = torch.optim.Adam(probe.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(steps, 0.0))
    fit(probe, opt, rounds=steps, batches=lambda r: [(x, y)], schedulers=[sched],
        loss=lambda fwd, b: F.cross_entropy(fwd(b[0]), b[1]), device=x.device,
        desc="probe", compile=False)
    return probe


def _score(pred_patches: np.ndarray | torch.Tensor, d: DenseProxy, *,
           foreground: bool = False) -> tuple[float, float]:
    """(mIoU, pixel accuracy) of patch predictions (N, T) (an array, or a tensor on any
    device) upsampled to ``d``'s pixel labels; with ``foreground`` the predictions and labels
    are 0 (background) or 1 (a digit's tile)."""
    if isinstance(pred_patches, torch.Tensor):
        pred_patches = pred_patches.cpu().numpy()
    h = d.pixel_labels.shape[1] // d.patch
    pred = segmentation.upsample_labels(pred_patches.reshape(len(d), h, -1), d.patch)
    target, classes = d.pixel_labels, NUM_CLASSES
    if foreground:
        target, classes = (target > 0).astype(np.int64), 2
    conf = segmentation.confusion_matrix(pred, target, classes)
    return segmentation.miou(conf), segmentation.pixel_accuracy(conf)


def probe_features(dense: Sequence[torch.Tensor], image: Sequence[torch.Tensor] | None,
                   d: _Data, settings: DenseSettings, *, seed: int) -> ProbeScore:
    """The probes: ``dense`` = (train, val, test) patch features (N, T, dim) for the 11-class
    and the foreground 1x1 probes, ``image`` = (train, test) image features (N, dim) or None
    (no image-level probe: accuracy NaN). Each is standardised with the training images'
    statistics."""
    tr, va, te = standardise(*dense)
    kw = dict(steps=settings.probe_steps, lr=settings.probe_lr, seed=seed)
    probe = train_probe(tr, d.y_train, **kw)
    fg_probe = train_probe(tr, (d.y_train > 0).long(), num_classes=2, **kw)
    with torch.no_grad():
        miou, pixel_acc = _score(probe(te).argmax(-1), d.test)
        val_miou, _ = _score(probe(va).argmax(-1), d.val)
        fg_miou, _ = _score(fg_probe(te).argmax(-1), d.test, foreground=True)
        val_fg_miou, _ = _score(fg_probe(va).argmax(-1), d.val, foreground=True)
    correct: tuple[int, ...] = ()
    image_acc = float("nan")
    if image is not None:
        i_tr, i_te = standardise(*image)
        image_probe = train_probe(i_tr, d.image_train, num_classes=IMAGE_CLASSES, **kw)
        with torch.no_grad():
            hits = (image_probe(i_te).argmax(-1) == d.image_test).int().tolist()
        correct, image_acc = tuple(hits), float(np.mean(hits))
    return ProbeScore(miou, pixel_acc, val_miou, fg_miou, val_fg_miou, image_acc, correct)


def _probe_model(model: DenseViT, d: _Data, settings: DenseSettings, *, seed: int
                 ) -> ProbeScore:
    was = model.training
    model.eval()
    dense = [patch_features(model, x) for x in (d.x_train, d.x_val, d.x_test)]
    image = [cls_features(model, x) for x in (d.x_train, d.x_test)]
    model.train(was)
    return probe_features(dense, image, d, settings, seed=seed)


def _vit(settings: DenseSettings, setting: str) -> DenseViT:
    st = settings
    return DenseViT(st.tokens, st.patch * st.patch * 3, dim=st.dim, depth=st.depth,
                    heads=st.heads, laplacian_heads=laplacian_count(setting, st.heads),
                    mlp_ratio=st.mlp_ratio)


# ------------------------------------------------------------------------------ floors


def floors(settings: DenseSettings, seed: int, d: _Data, *, run: RunDir | None = None
           ) -> SeedFloors:
    """One seed's reference points: the all-background labelling, the probes on the raw
    patches and on each head setting's untrained ViT (the initialisation the trained runs
    start from), and each head setting's supervised ceiling."""
    st = settings
    zeros = np.zeros((len(d.test), st.tokens), dtype=np.int64)
    device = d.x_train.device
    background, background_acc = _score(zeros, d.test)
    raw = probe_features((d.x_train, d.x_val, d.x_test),
                         (d.x_train.mean(1), d.x_test.mean(1)), d, st, seed=seed)
    untrained = {}
    for s in st.head_settings:
        profile.seed_everything(seed)
        untrained[s] = _probe_model(_vit(st, s).to(device), d, st, seed=seed)
    top = {s: ceiling(st, s, seed, d, run=run) for s in st.head_settings}
    return SeedFloors(seed, background, background_acc, raw, untrained, top)


def ceiling(settings: DenseSettings, setting: str, seed: int, d: _Data, *,
            run: RunDir | None = None) -> CeilingRun:
    """The ViT of ``setting`` trained with the segmentation labels (cross-entropy on the
    training images' patch labels, AdamW, warm-up and cosine decay), its validation mIoU read
    after every round; the weights of the best round are scored on the test images."""
    st = settings
    profile.seed_everything(seed)
    device = d.x_train.device
    model = SegmentationViT(_vit(st, setting), NUM_CLASSES).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=st.ceiling_lr, weight_decay=st.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(st.ceiling_steps, st.warmup))
    gen = torch.Generator().manual_seed(20_000 + seed)
    best = {"miou": -1.0, "round": -1, "state": None}

    def batches(r: int):
        for _ in range(st.steps_per_round):
            idx = torch.randint(0, st.n_train, (st.batch_size,), generator=gen).to(device)
            yield d.x_train[idx], d.y_train[idx]

    def end_of_round(r: int) -> dict:
        model.eval()
        with torch.no_grad():
            val, _ = _score(model(d.x_val).argmax(-1), d.val)
        model.train()
        if val > best["miou"]:
            best.update(miou=val, round=r, state={k: v.clone()
                                                  for k, v in model.state_dict().items()})
        return {"val_miou": val}

    log = fit(model, opt, rounds=st.ceiling_steps // st.steps_per_round, batches=batches,
              loss=lambda fwd, b: F.cross_entropy(fwd(b[0]).flatten(0, 1), b[1].flatten()),
              device=device, schedulers=[sched], generators={"batches": gen},
              end_of_round=end_of_round, run=run, name=f"ceiling-{setting}-seed{seed}",
              desc=f"ceiling {setting} seed {seed}", compile=False)
    curve = tuple(float(m["val_miou"]) for m in log.metrics)
    best_round = int(np.argmax(curve))
    if best["state"] is not None and best["round"] == best_round:
        model.load_state_dict(best["state"])
    else:                         # resumed past the best round: its weights were not kept
        best_round = len(curve) - 1
    model.eval()
    with torch.no_grad():
        miou, pixel_acc = _score(model(d.x_test).argmax(-1), d.test)
    return CeilingRun(setting, seed, miou, pixel_acc, (best_round + 1) * st.steps_per_round,
                      curve)


# ------------------------------------------------------------------------------ pre-training


def pretrain(settings: DenseSettings, setting: str, seed: int, steps: int, d: _Data, *,
             run: RunDir | None = None, end_of_round=None) -> PretrainRun:
    """Self-distil one ViT for ``steps`` steps (its own warm-up and cosine decay) and probe its
    teacher at the end (and the foreground probe's validation mIoU at :data:`SETTLE_AT` of the
    schedule);
    resumable through ``run``. ``end_of_round`` (optional, ``round -> None``) is called after the
    loop's own bookkeeping of each round (tests use it to interrupt a run)."""
    st = settings
    lap = laplacian_count(setting, st.heads)
    profile.seed_everything(seed)
    device = d.x_train.device
    pair = SelfDistillation(_vit(st, setting), st.out_dim, momentum=st.momentum,
                            patch_weight=st.patch_weight).to(device)
    params = [*pair.student.parameters(), *pair.student_head.parameters()]
    opt = torch.optim.AdamW(params, lr=st.lr, weight_decay=st.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(steps, st.warmup))
    gen = torch.Generator().manual_seed(10_000 + seed)
    settle = st.settle_round(steps)

    def batches(r: int):
        for _ in range(st.steps_per_round):
            idx = torch.randint(0, st.n_train, (st.batch_size,), generator=gen).to(device)
            a, b = two_views(d.images_train[idx], gen)
            masks = random_masks(2 * st.batch_size, st.tokens, gen).to(device)
            yield (to_patches(a, st.patch), to_patches(b, st.patch),
                   masks[:st.batch_size], masks[st.batch_size:])

    def after_round(r: int) -> dict:
        out = {}
        if r + 1 == settle:
            pair.eval()
            dense = [patch_features(pair.teacher, x) for x in (d.x_train, d.x_val, d.x_test)]
            score = probe_features(dense, None, d, st, seed=seed)
            out = {"settle_val_fg_miou": score.val_fg_miou}
            pair.train()
        if end_of_round is not None:
            end_of_round(r)
        return out

    log = fit(pair, opt, rounds=steps // st.steps_per_round, batches=batches,
              loss=lambda fwd, b: fwd(*b), device=device, run=run,
              name=f"{setting}-seed{seed}-{steps}", schedulers=[sched],
              generators={"views": gen}, after_step=pair.update_teacher,
              end_of_round=after_round, clip_grad_norm=3.0,
              desc=f"DINO+iBOT {setting} seed {seed} {steps} steps", compile=False)
    settle_val = next(float(m["settle_val_fg_miou"]) for m in log.metrics
                      if "settle_val_fg_miou" in m)
    curve = tuple(float(np.mean(x)) for x in log.losses)
    score = _probe_model(pair.teacher, d, st, seed=seed)
    with torch.no_grad():
        ent, mean_ent = pair.teacher_entropies(d.x_test[:128])
        rank = float(effective_rank(patch_features(pair.teacher, d.x_test)
                                    .reshape(-1, st.dim).double()))
    return PretrainRun(setting, lap, seed, steps, curve, score, settle_val, ent, mean_ent, rank)


def run(settings: DenseSettings | None = None, *, run_dir: RunDir | None = None) -> DenseSweep:
    """Every (seed, head setting, length) run, and each seed's floors and ceilings."""
    settings = settings or DenseSettings.from_profile()
    run_dir = run_dir if run_dir is not None else RunDir("dense_features", settings)
    runs, seed_floors, digests = [], [], {}
    source = "cifar10"
    device = profile.current().device
    with num_threads(settings.threads):
        for seed in settings.seeds:
            d = prepare(settings, seed, device)
            source = d.train.source
            digests[f"seed {seed}"] = d.train.digest()[:16] + d.test.digest()[:16]
            seed_floors.append(run_dir.unit(
                f"floors-seed{seed}", lambda seed=seed, d=d: floors(settings, seed, d,
                                                                    run=run_dir)))
            for steps in settings.steps:
                for s in settings.head_settings:
                    runs.append(run_dir.unit(
                        f"{s}-seed{seed}-{steps}",
                        lambda s=s, seed=seed, steps=steps, d=d: pretrain(
                            settings, s, seed, steps, d, run=run_dir)))
    return DenseSweep(settings, runs, seed_floors, source, digests,
                      float(np.log(settings.out_dim)))
