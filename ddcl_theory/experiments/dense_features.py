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
paired, and the seed-to-seed spread includes the sampling of the test images. The test
images' backgrounds come from the 40,000 CIFAR-10 training images outside the subset
(:mod:`ddcl_theory.data.cifar10_rest`, ``test_backgrounds="rest"``): no run trains on them, and
thousands of test images per seed keep their sampling a small part of the spread.

Each head setting pre-trains at its own learning rate, tuned before any deciding run
(:func:`tune`, :func:`tuned_lrs`): one run per rate of ``settings.tune_lrs`` on each of the
tuning seeds (never deciding seeds), at the deciding length, scored on their validation images
only; each setting takes the rate of the best mean rank over the validation scores of the two
binding tests (image probe accuracy and foreground mIoU). Both arms are tuned alike: the
comparison is of each arm at its best rate, not of one rate that suits one arm.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import rankdata
import torch
import torch.nn.functional as F

from ddcl_theory.data.cifar10_rest import load_cifar10_rest
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
from ddcl_theory.runtime.workers import map_units

__all__ = ["HEAD_SETTINGS", "IMAGE_CLASSES", "REFERENCE_SEEDS", "SETTLE_AT", "DenseSettings",
           "ProbeScore", "PretrainRun", "CeilingRun", "SeedFloors", "TuningRun", "DenseSweep",
           "CONFIRMATORY_RUN", "TEST_BACKGROUNDS", "two_views", "to_patches", "standardise",
           "train_probe", "probe_features", "validation_scores", "prepare", "test_images",
           "floors", "pretrain", "ceiling", "tune", "tuned_lrs", "warmup_cosine", "run"]

HEAD_SETTINGS = ("0", "all")
#: Classes of the image-level probe: the CIFAR-10 class of each image's background.
IMAGE_CLASSES = 10
#: Where the settling gate reads the validation probe: after this fraction of the schedule.
SETTLE_AT = 0.75
#: Seeds of the reference profile: the registered rule's ``n_seeds`` of claim L10 (a test
#: checks that they agree; experiments do not import the ledger).
REFERENCE_SEEDS = 26
#: The confirmatory run of the rule in force: seeds no earlier run of this chapter used (the
#: first ran 1000-1006 at one shared rate; a second, stopped unread, drew 2000-2029).
CONFIRMATORY_RUN = 3
#: Where the test images' backgrounds come from: CIFAR-10's staged test split (1,000 images)
#: or the 40,000 training images outside the subset (never trained on).
TEST_BACKGROUNDS = ("test", "rest")


@dataclass(frozen=True)
class DenseSettings(Settings):
    """Scale of the experiment. cpu: 256 training images, 2 seeds, runs of 60 and 120 steps
    (what CI replays); reference: 1,024 training images, the rule's confirmatory seeds
    (:data:`REFERENCE_SEEDS`), separate runs of 200, 400 and 800 steps (the shorter ones and
    the ceiling on the first ``trend_seeds`` seeds), 4,096 test images a seed; paper: a wider,
    deeper ViT on 20,000 images."""

    n_train: int = setting(256, reference=1024, paper=20000, smoke=32, ge=8)
    n_val: int = setting(64, reference=256, paper=2000, smoke=16, ge=8)
    n_test: int = setting(256, reference=4096, paper=4096, smoke=16, ge=8)
    #: backgrounds of the test images (:data:`TEST_BACKGROUNDS`)
    test_backgrounds: str = setting("rest")
    patch: int = setting(4, ge=1)
    zoom: int = setting(2, ge=1)
    dim: int = setting(32, paper=192, ge=1)
    depth: int = setting(2, paper=6, ge=1)
    heads: int = setting(4, paper=6, ge=1)
    mlp_ratio: int = setting(2, paper=4, ge=1)
    out_dim: int = setting(128, paper=1024, ge=2)
    batch_size: int = setting(32, paper=128, smoke=8, ge=2)
    #: pre-training lengths in optimiser steps (separate runs: the scale trend)
    steps: tuple[int, ...] = setting((60, 120), reference=(200, 400, 800),
                                     paper=(2000, 4000, 8000), smoke=(8,), ge=1, nonempty=True)
    #: steps per round of the training loop (the loss curve's resolution, the checkpoints)
    steps_per_round: int = setting(15, reference=25, paper=200, smoke=2, ge=1)
    #: the learning-rate grid each head setting is tuned on (increasing; one rate in the cpu
    #: profile, whose two-rate choice could tie and fall either way on other kernels)
    tune_lrs: tuple[float, ...] = setting((2e-3,),
                                          reference=(2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3),
                                          paper=(2.5e-4, 5e-4, 1e-3, 2e-3), smoke=(2e-3,),
                                          gt=0, nonempty=True)
    #: exploratory seeds of the tuning runs (never deciding seeds)
    tune_seeds: tuple[int, ...] = setting((900,), reference=(900, 901), ge=0, nonempty=True)
    #: validation images of a tuning run (its scores tell the rates apart)
    tune_n_val: int = setting(64, reference=2048, paper=4096, smoke=16, ge=8)
    #: the first ``trend_seeds`` seeds also run the shorter lengths and the ceiling
    trend_seeds: int = setting(1, reference=8, paper=4, ge=1)
    weight_decay: float = setting(0.04, ge=0)
    warmup: float = setting(0.1, ge=0, lt=1)
    momentum: float = setting(0.99, paper=0.996, ge=0, lt=1)
    patch_weight: float = setting(1.0, ge=0)
    probe_steps: int = setting(100, paper=500, smoke=5, ge=1)
    probe_lr: float = setting(0.05, gt=0)
    #: optimiser steps of the supervised ceiling (validation read every round, best kept)
    ceiling_steps: int = setting(120, reference=400, paper=8000, smoke=8, ge=1)
    ceiling_lr: float = setting(2e-3, paper=5e-4, gt=0)
    seeds: tuple[int, ...] = setting(
        (0, 1), reference=confirmatory_seeds(REFERENCE_SEEDS, run=CONFIRMATORY_RUN),
        paper=confirmatory_seeds(10, run=CONFIRMATORY_RUN), smoke=(0,), ge=0, nonempty=True)
    head_settings: tuple[str, ...] = setting(HEAD_SETTINGS, nonempty=True)
    threads: int | None = setting(1, paper=None, ge=1)
    #: processes computing the units (each one tuning run, deciding run or seed's floors)
    workers: int = setting(1, reference=2, ge=1)

    def check(self) -> None:
        if 32 % self.patch:
            raise ValueError(f"DenseSettings.patch: expected a divisor of 32, got {self.patch}")
        if 8 * self.zoom > 32:
            raise ValueError(f"DenseSettings.zoom: a digit of {8 * self.zoom} pixels does not "
                             "fit in 32x32 images")
        if list(self.steps) != sorted(set(self.steps)):
            raise ValueError(f"DenseSettings.steps: expected increasing lengths, got "
                             f"{self.steps!r}")
        if list(self.tune_lrs) != sorted(set(self.tune_lrs)):
            raise ValueError(f"DenseSettings.tune_lrs: expected increasing rates, got "
                             f"{self.tune_lrs!r}")
        if shared := sorted(set(self.tune_seeds) & set(self.seeds)):
            raise ValueError(f"DenseSettings.tune_seeds: expected seeds that decide nothing, "
                             f"got {shared} also in seeds")
        if self.test_backgrounds not in TEST_BACKGROUNDS:
            raise ValueError(f"DenseSettings.test_backgrounds: expected one of "
                             f"{TEST_BACKGROUNDS}, got {self.test_backgrounds!r}")
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

    def seeds_at(self, steps: int) -> tuple[int, ...]:
        """The seeds that run a length: all at the longest, the first ``trend_seeds`` at the
        shorter ones."""
        return self.seeds if steps == self.steps[-1] else self.trend

    @property
    def trend(self) -> tuple[int, ...]:
        """The seeds of the scale trend and the ceiling: the first ``trend_seeds``."""
        return self.seeds[:self.trend_seeds]

    @property
    def tune_steps(self) -> int:
        """Length of a tuning run: the deciding length (the longest of ``steps``)."""
        return self.steps[-1]

    def settle_round(self, steps: int) -> int:
        """The round after which a run of ``steps`` steps reads the settling gate's probe."""
        return max(1, round(SETTLE_AT * steps / self.steps_per_round))


@dataclass(frozen=True)
class ProbeScore:
    """The two linear probes on one set of frozen features.

    ``miou``, ``pixel_acc``: the 11-class 1x1 probe on the test images' pixel labels;
    ``val_miou``: the same probe on the validation images (carved from the training split);
    ``fg_miou``, ``val_fg_miou``: the foreground probe (digit tile or background, 2 classes)
    on the test and validation images; ``image_acc``, ``val_image_acc``: the image-level
    probe's test and validation accuracy; ``image_correct``: its per-image 0/1 correctness on
    the test images."""

    miou: float
    pixel_acc: float
    val_miou: float
    fg_miou: float
    val_fg_miou: float
    image_acc: float
    image_correct: tuple[int, ...] = ()
    val_image_acc: float = float("nan")


@dataclass(frozen=True)
class TuningRun:
    """One tuning run: a head setting pre-trained at one rate on a tuning seed, scored on that
    seed's validation images only (its foreground probe's mIoU, its image probe's accuracy)."""

    setting: str
    lr: float
    seed: int
    val_fg_miou: float
    val_image_acc: float


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
    effective_rank: float             # of the validation patch features


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
    ceiling: dict[str, CeilingRun]    # on the trend seeds only (empty on the others)


@dataclass
class DenseSweep:
    """All runs, the floors and ceilings per seed, the tuning runs and the rate each head
    setting pre-trained at, and the data facts needed to read them."""

    settings: DenseSettings
    runs: list[PretrainRun]
    floors: list[SeedFloors]
    source: str
    digests: dict[str, str] = field(default_factory=dict)
    log_k: float = 0.0
    tuning: list[TuningRun] = field(default_factory=list)
    lrs: dict[str, float] = field(default_factory=dict)

    def run(self, setting: str, seed: int, steps: int | None = None) -> PretrainRun:
        steps = self.settings.steps[-1] if steps is None else steps
        for r in self.runs:
            if (r.setting, r.seed, r.steps) == (setting, seed, steps):
                return r
        raise KeyError(f"no run ({setting!r}, seed {seed}, {steps} steps)")

    def values(self, setting: str, field_name: str = "miou", steps: int | None = None
               ) -> np.ndarray:
        """(seeds,) of a probe field of the trained runs of one setting at ``steps`` (default
        the largest), in seed order, over the seeds that ran that length
        (:meth:`DenseSettings.seeds_at`)."""
        steps = self.settings.steps[-1] if steps is None else steps
        return np.array([getattr(self.run(setting, s, steps).score, field_name)
                         for s in self.settings.seeds_at(steps)], dtype=float)

    def floor_values(self, which: str, setting: str | None = None,
                     field_name: str = "miou") -> np.ndarray:
        """(seeds,) of a floor or the ceiling: ``which`` in ``"background"``, ``"raw"``,
        ``"untrained"``, ``"ceiling"`` (the last two per ``setting``; the ceiling over the
        trend seeds only)."""
        out = []
        for f in self.floors:
            if which == "ceiling" and setting not in f.ceiling:
                continue
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

    def tuning_table(self, setting: str, field_name: str) -> np.ndarray:
        """(rates,) mean over the tuning seeds of a tuning score (``"val_fg_miou"`` or
        ``"val_image_acc"``) of one head setting, in the grid's order."""
        return tuning_means(self.tuning, self.settings, setting, field_name)


# ------------------------------------------------------------------------------ data


@dataclass
class _Data:
    train: DenseProxy
    val: DenseProxy
    test: DenseProxy | None            # None for a tuning run: it never sees test images
    x_train: torch.Tensor              # standardised patches (N, T, p*p*3)
    x_val: torch.Tensor
    x_test: torch.Tensor | None
    images_train: torch.Tensor         # standardised images (N, 3, 32, 32), for the views
    y_train: torch.Tensor              # patch labels (N, T)
    y_val: torch.Tensor
    image_train: torch.Tensor          # background classes (N,)
    image_val: torch.Tensor
    image_test: torch.Tensor | None


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


@functools.lru_cache(maxsize=1)
def _rest_backgrounds() -> tuple[np.ndarray, np.ndarray]:
    rest = load_cifar10_rest()
    return rest.float_images(), rest.y


def test_images(settings: DenseSettings, seed: int) -> DenseProxy:
    """Seed ``seed``'s ``n_test`` test images: the test split's digits on backgrounds from
    ``settings.test_backgrounds``."""
    kw = dict(patch=settings.patch, zoom=settings.zoom)
    if settings.test_backgrounds == "rest":
        images, labels = _rest_backgrounds()
        return make_dense_proxy(settings.n_test, seed=2 * seed + 1, split="test",
                                backgrounds=images, background_labels=labels,
                                source="cifar10 (rest of the training set)", **kw)
    return make_dense_proxy(settings.n_test, seed=2 * seed + 1, split="test", **kw)


def prepare(settings: DenseSettings, seed: int, device: str | torch.device = "cpu", *,
            with_test: bool = True) -> _Data:
    """Seed ``seed``'s draws: ``n_train + n_val`` images of the training split (the last
    ``n_val`` are the validation images) and ``n_test`` test images (:func:`test_images`; none
    when ``with_test`` is false, as for a tuning run), standardised with the training images'
    channel statistics, as tensors on ``device`` (every later step runs where they are)."""
    st = settings
    both = make_dense_proxy(st.n_train + st.n_val, seed=2 * seed, split="train",
                            patch=st.patch, zoom=st.zoom)
    train, val = _subset(both, 0, st.n_train), _subset(both, st.n_train, len(both))
    test = test_images(st, seed) if with_test else None
    mean = train.images.mean(axis=(0, 1, 2), keepdims=True)
    std = train.images.std(axis=(0, 1, 2), keepdims=True) + 1e-6
    images = {k: normalise(d.images, mean, std).to(device) for k, d in
              (("train", train), ("val", val), ("test", test)) if d is not None}
    patches = {k: to_patches(v, st.patch) for k, v in images.items()}

    def labels(d: DenseProxy) -> torch.Tensor:
        return torch.from_numpy(d.patch_labels.reshape(len(d), -1)).to(device)

    def classes(d: DenseProxy | None) -> torch.Tensor | None:
        return None if d is None else torch.from_numpy(d.image_labels).to(device)

    return _Data(train, val, test, patches["train"], patches["val"], patches.get("test"),
                 images["train"], labels(train), labels(val), classes(train), classes(val),
                 classes(test))


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


def _hits(probe: torch.nn.Linear, features: torch.Tensor, labels: torch.Tensor
          ) -> tuple[int, ...]:
    with torch.no_grad():
        return tuple((probe(features).argmax(-1) == labels).int().tolist())


def probe_features(dense: Sequence[torch.Tensor], image: Sequence[torch.Tensor] | None,
                   d: _Data, settings: DenseSettings, *, seed: int) -> ProbeScore:
    """The probes: ``dense`` = (train, val, test) patch features (N, T, dim) for the 11-class
    and the foreground 1x1 probes, ``image`` = (train, val, test) image features (N, dim) or
    None (no image-level probe: accuracies NaN). Each is standardised with the training images'
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
    image_acc = val_image_acc = float("nan")
    if image is not None:
        i_tr, i_va, i_te = standardise(*image)
        image_probe = train_probe(i_tr, d.image_train, num_classes=IMAGE_CLASSES, **kw)
        correct = _hits(image_probe, i_te, d.image_test)
        image_acc = float(np.mean(correct))
        val_image_acc = float(np.mean(_hits(image_probe, i_va, d.image_val)))
    return ProbeScore(miou, pixel_acc, val_miou, fg_miou, val_fg_miou, image_acc, correct,
                      val_image_acc)


def validation_scores(dense: Sequence[torch.Tensor], image: Sequence[torch.Tensor] | None,
                      d: _Data, settings: DenseSettings, *, seed: int) -> tuple[float, float]:
    """(foreground mIoU, image probe accuracy) on the validation images, of the probes of
    :func:`probe_features` fitted on the training images: ``dense`` = (train, val) patch
    features, ``image`` = (train, val) image features or None (accuracy NaN). Reads no test
    image: the tuning runs and the settling gate use it."""
    tr, va = standardise(*dense)
    kw = dict(steps=settings.probe_steps, lr=settings.probe_lr, seed=seed)
    fg_probe = train_probe(tr, (d.y_train > 0).long(), num_classes=2, **kw)
    with torch.no_grad():
        val_fg_miou, _ = _score(fg_probe(va).argmax(-1), d.val, foreground=True)
    acc = float("nan")
    if image is not None:
        i_tr, i_va = standardise(*image)
        image_probe = train_probe(i_tr, d.image_train, num_classes=IMAGE_CLASSES, **kw)
        acc = float(np.mean(_hits(image_probe, i_va, d.image_val)))
    return val_fg_miou, acc


def _features(model: DenseViT, xs: Sequence[torch.Tensor]) -> tuple[list, list]:
    """(patch features, [CLS] features) of each input, the model in eval mode."""
    was = model.training
    model.eval()
    dense = [patch_features(model, x) for x in xs]
    image = [cls_features(model, x) for x in xs]
    model.train(was)
    return dense, image


def _probe_model(model: DenseViT, d: _Data, settings: DenseSettings, *, seed: int
                 ) -> ProbeScore:
    dense, image = _features(model, (d.x_train, d.x_val, d.x_test))
    return probe_features(dense, image, d, settings, seed=seed)


def _vit(settings: DenseSettings, setting: str) -> DenseViT:
    st = settings
    return DenseViT(st.tokens, st.patch * st.patch * 3, dim=st.dim, depth=st.depth,
                    heads=st.heads, laplacian_heads=laplacian_count(setting, st.heads),
                    mlp_ratio=st.mlp_ratio)


# ------------------------------------------------------------------------------ floors


def floors(settings: DenseSettings, seed: int, d: _Data, *, run: RunDir | None = None,
           with_ceiling: bool = True) -> SeedFloors:
    """One seed's reference points: the all-background labelling, the probes on the raw
    patches and on each head setting's untrained ViT (the initialisation the trained runs
    start from), and (``with_ceiling``) each head setting's supervised ceiling."""
    st = settings
    zeros = np.zeros((len(d.test), st.tokens), dtype=np.int64)
    device = d.x_train.device
    background, background_acc = _score(zeros, d.test)
    raw = probe_features((d.x_train, d.x_val, d.x_test),
                         (d.x_train.mean(1), d.x_val.mean(1), d.x_test.mean(1)), d, st,
                         seed=seed)
    untrained = {}
    for s in st.head_settings:
        profile.seed_everything(seed)
        untrained[s] = _probe_model(_vit(st, s).to(device), d, st, seed=seed)
    top = ({s: ceiling(st, s, seed, d, run=run) for s in st.head_settings} if with_ceiling
           else {})
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


def _self_distil(settings: DenseSettings, setting: str, seed: int, steps: int, d: _Data,
                 lr: float, *, run: RunDir | None, name: str, end_of_round=None):
    """Self-distil one ViT for ``steps`` steps at rate ``lr`` (its own warm-up and cosine
    decay); returns (the teacher-student pair, the loop's log, the validation foreground mIoU
    at :data:`SETTLE_AT` of the schedule). Reads no test image."""
    st = settings
    profile.seed_everything(seed)
    device = d.x_train.device
    pair = SelfDistillation(_vit(st, setting), st.out_dim, momentum=st.momentum,
                            patch_weight=st.patch_weight).to(device)
    params = [*pair.student.parameters(), *pair.student_head.parameters()]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=st.weight_decay)
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
            dense = [patch_features(pair.teacher, x) for x in (d.x_train, d.x_val)]
            fg, _ = validation_scores(dense, None, d, st, seed=seed)
            out = {"settle_val_fg_miou": fg}
            pair.train()
        if end_of_round is not None:
            end_of_round(r)
        return out

    log = fit(pair, opt, rounds=steps // st.steps_per_round, batches=batches,
              loss=lambda fwd, b: fwd(*b), device=device, run=run, name=name,
              schedulers=[sched], generators={"views": gen}, after_step=pair.update_teacher,
              end_of_round=after_round, clip_grad_norm=3.0,
              desc=f"DINO+iBOT {setting} seed {seed} {steps} steps", compile=False)
    settle_val = next(float(m["settle_val_fg_miou"]) for m in log.metrics
                      if "settle_val_fg_miou" in m)
    return pair, log, settle_val


def pretrain(settings: DenseSettings, setting: str, seed: int, steps: int, d: _Data, *,
             lr: float, run: RunDir | None = None, end_of_round=None) -> PretrainRun:
    """Self-distil one ViT for ``steps`` steps at rate ``lr`` (its own warm-up and cosine
    decay) and probe its teacher at the end (and the foreground probe's validation mIoU at
    :data:`SETTLE_AT` of the schedule); resumable through ``run``. ``end_of_round`` (optional,
    ``round -> None``) is called after the loop's own bookkeeping of each round (tests use it
    to interrupt a run)."""
    st = settings
    pair, log, settle_val = _self_distil(st, setting, seed, steps, d, lr, run=run,
                                         name=f"{setting}-seed{seed}-{steps}",
                                         end_of_round=end_of_round)
    curve = tuple(float(np.mean(x)) for x in log.losses)
    score = _probe_model(pair.teacher, d, st, seed=seed)
    with torch.no_grad():                       # the collapse checks read validation images
        ent, mean_ent = pair.teacher_entropies(d.x_val[:128])
        rank = float(effective_rank(patch_features(pair.teacher, d.x_val)
                                    .reshape(-1, st.dim).double()))
    return PretrainRun(setting, laplacian_count(setting, st.heads), seed, steps, curve, score,
                       settle_val, ent, mean_ent, rank)


# ------------------------------------------------------------------------------ tuning


def tune(settings: DenseSettings, setting: str, lr: float, seed: int, d: _Data, *,
         run: RunDir | None = None) -> TuningRun:
    """One tuning run: ``setting`` pre-trained at ``lr`` for the deciding length on tuning seed
    ``seed``, scored on its validation images only (``d`` is prepared without test images, with
    ``settings.tune_n_val`` validation images in :func:`run`)."""
    if d.test is not None:
        raise ValueError("d: a tuning run reads no test image; prepare it with "
                         "with_test=False")
    st = settings
    pair, _, _ = _self_distil(st, setting, seed, st.tune_steps, d, lr, run=run,
                              name=f"tune-{setting}-lr{lr:g}-seed{seed}")
    dense, image = _features(pair.teacher, (d.x_train, d.x_val))
    fg, acc = validation_scores(dense, image, d, st, seed=seed)
    return TuningRun(setting, lr, seed, fg, acc)


def tuning_means(tuning: Sequence[TuningRun], settings: DenseSettings, setting: str,
                 field_name: str) -> np.ndarray:
    """(rates,) mean over the tuning seeds of ``field_name`` of one head setting's tuning runs,
    in the grid's order; raises when a (rate, seed) run is missing."""
    out = []
    for lr in settings.tune_lrs:
        values = [getattr(t, field_name) for t in tuning
                  if t.setting == setting and t.lr == lr]
        if len(values) != len(settings.tune_seeds):
            raise ValueError(f"tuning: expected {len(settings.tune_seeds)} runs of "
                             f"({setting!r}, lr {lr:g}), got {len(values)}")
        out.append(float(np.mean(values)))
    return np.array(out)


def tuned_lrs(tuning: Sequence[TuningRun], settings: DenseSettings) -> dict[str, float]:
    """Each head setting's rate on the grid ``settings.tune_lrs``: the smallest mean of its two
    ranks (rank 1 the best; ties share the mean rank) on the tuning seeds' mean validation
    image probe accuracy and mean validation foreground mIoU, one score per binding test; ties
    go to the larger sum of the two means, then to the smaller rate."""
    out = {}
    for s in settings.head_settings:
        acc = tuning_means(tuning, settings, s, "val_image_acc")
        fg = tuning_means(tuning, settings, s, "val_fg_miou")
        rank = (rankdata(-acc) + rankdata(-fg)) / 2
        best = min(range(len(settings.tune_lrs)),
                   key=lambda i: (rank[i], -(acc[i] + fg[i]), settings.tune_lrs[i]))
        out[s] = float(settings.tune_lrs[best])
    return out


# ------------------------------------------------------------------------------ the sweep


def _tuning_unit(settings: DenseSettings, setting: str, lr: float, seed: int,
                 run_dir: RunDir | None) -> TuningRun:
    with num_threads(settings.threads):
        wide = dataclasses.replace(settings, n_val=settings.tune_n_val)
        d = prepare(wide, seed, profile.current().device, with_test=False)
        return tune(settings, setting, lr, seed, d, run=run_dir)


def _deciding_unit(kind: str, settings: DenseSettings, seed: int, setting: str, steps: int,
                   lr: float, run_dir: RunDir | None) -> PretrainRun | SeedFloors:
    """``kind`` "pretrain": one deciding run; "floors": the seed's floors (and its ceiling on
    a trend seed)."""
    with num_threads(settings.threads):
        d = prepare(settings, seed, profile.current().device)
        if kind == "floors":
            return floors(settings, seed, d, run=run_dir, with_ceiling=seed in settings.trend)
        return pretrain(settings, setting, seed, steps, d, lr=lr, run=run_dir)


def run(settings: DenseSettings | None = None, *, run_dir: RunDir | None = None) -> DenseSweep:
    """The tuning runs; then each seed's floors (and the trend seeds' ceilings) and every
    deciding (seed, head setting, length) run at its setting's tuned rate. The units spread
    over ``settings.workers`` processes."""
    st = settings or DenseSettings.from_profile()
    run_dir = run_dir if run_dir is not None else RunDir("dense_features", st)
    tuning = map_units(run_dir, _tuning_unit,
                       [(f"tune-{s}-lr{lr:g}-seed{seed}", (st, s, lr, seed, run_dir))
                        for seed in st.tune_seeds for s in st.head_settings
                        for lr in st.tune_lrs],
                       workers=st.workers, desc="L10 tuning")
    lrs = tuned_lrs(tuning, st)
    jobs, costs = [], []
    for seed in st.seeds:
        ceiling_cost = 0.4 * st.ceiling_steps * len(st.head_settings)
        jobs.append((f"floors-seed{seed}", ("floors", st, seed, "", 0, 0.0, run_dir)))
        costs.append(ceiling_cost if seed in st.trend else 1.0)
        for steps in st.steps:
            if seed in st.seeds_at(steps):
                for s in st.head_settings:
                    jobs.append((f"{s}-seed{seed}-{steps}",
                                 ("pretrain", st, seed, s, steps, lrs[s], run_dir)))
                    costs.append(float(steps))
    out = map_units(run_dir, _deciding_unit, jobs, workers=st.workers, desc="L10 runs",
                    costs=costs)
    seed_floors = [u for u in out if isinstance(u, SeedFloors)]
    runs = [u for u in out if isinstance(u, PretrainRun)]
    digests = {}
    for seed in st.seeds:
        train = make_dense_proxy(st.n_train + st.n_val, seed=2 * seed, split="train",
                                 patch=st.patch, zoom=st.zoom)
        digests[f"seed {seed}"] = train.digest()[:16] + test_images(st, seed).digest()[:16]
    return DenseSweep(st, runs, seed_floors, train.source, digests, float(np.log(st.out_dim)),
                      tuning, lrs)
