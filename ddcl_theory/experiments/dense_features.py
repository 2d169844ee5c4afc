"""Claim L10 on a dense-prediction proxy: self-distilled ViT features, probed for segmentation.

For every head setting (Laplacian heads per layer: none, half, all) and seed, a small ViT is
trained without labels by DINO-style self-distillation (:class:`ddcl_theory.models.dino.
SelfDistillation`: student, EMA teacher, centring and sharpening, two augmented views) on the
training images of the dense proxy (:mod:`ddcl_theory.data.dense_proxy`). At the step counts of
``settings.probe_at`` (0: the randomly initialised network, the floor) the teacher's frozen patch
features are read by a linear 1x1 probe (one linear map per patch token) trained on the training
split's patch labels; its predictions, upsampled to pixels, are scored on the test split's exact
pixel labels (mIoU, pixel accuracy). The same probe on the raw (standardised) patches is the
other floor. Seeds are paired: seed s gives every head setting the same initialisation stream,
the same batches and the same augmentations.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from ddcl_theory.data.dense_proxy import NUM_CLASSES, DenseProxy, make_dense_proxy
from ddcl_theory.experiments.laplacian_common import bad_head_settings, laplacian_count
from ddcl_theory.metrics import segmentation
from ddcl_theory.metrics.readouts import effective_rank
from ddcl_theory.models.dino import SelfDistillation, dino_vit, patch_features
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, setting
from ddcl_theory.runtime.threads import num_threads
from ddcl_theory.runtime.training import fit

__all__ = ["HEAD_SETTINGS", "DenseSettings", "ProbeScore", "DenseRun", "DenseSweep",
           "two_views", "standardise", "train_probe", "probe_features", "prepare", "raw_floor",
           "pretrain", "run", "plateaued"]

HEAD_SETTINGS = ("0", "half", "all")
#: Data seeds of the two splits (fixed: every head setting and seed sees the same images).
TRAIN_DATA_SEED, TEST_DATA_SEED = 0, 1
#: Plateau rule: the mean loss of the last two rounds within this fraction of the two before.
PLATEAU_REL = 0.05


@dataclass(frozen=True)
class DenseSettings(Settings):
    """Scale of the experiment. cpu: a few hundred images, 3 paired seeds, probes after 0, 60
    and 120 steps (what CI replays); reference: the same model on 1024 images, 5 paired seeds
    (the L10 rule), probes after 0, 200, 500 and 1000 steps (three trained scales); paper: a
    larger ViT on more images, 10 seeds, probes up to 6000 steps."""

    n_train: int = setting(384, reference=1024, paper=20000, ge=1)
    n_test: int = setting(128, reference=256, paper=2000, ge=1)
    patch: int = setting(8, paper=4, ge=1)
    dim: int = setting(32, paper=192, ge=1)
    depth: int = setting(2, paper=6, ge=1)
    heads: int = setting(4, paper=6, ge=1)
    mlp_ratio: int = setting(2, paper=4, ge=1)
    out_dim: int = setting(64, paper=1024, ge=1)
    batch_size: int = setting(32, paper=128, ge=1)
    steps_per_round: int = setting(20, paper=200, ge=1)
    #: rounds after which the probe reads the teacher (0: at initialisation)
    probe_at: tuple[int, ...] = setting((0, 3, 6), reference=(0, 10, 25, 50),
                                        paper=(0, 5, 10, 20, 30), smoke=(0, 1), ge=0,
                                        nonempty=True)
    lr: float = setting(1e-3, paper=5e-4, gt=0)
    weight_decay: float = setting(0.0, paper=0.04, ge=0)
    momentum: float = setting(0.99, reference=0.996, paper=0.996, ge=0, le=1)
    probe_steps: int = setting(100, reference=200, paper=500, ge=1)
    probe_lr: float = setting(0.1, gt=0)
    seeds: tuple[int, ...] = setting((0, 1, 2), reference=(0, 1, 2, 3, 4),
                                     paper=tuple(range(10)), smoke=(0,), ge=0, nonempty=True)
    head_settings: tuple[str, ...] = setting(HEAD_SETTINGS, nonempty=True)
    threads: int | None = setting(1, paper=None, ge=1)

    def check(self) -> None:
        if 32 % self.patch:
            raise ValueError(f"DenseSettings.patch: expected a divisor of 32, got {self.patch}")
        if list(self.probe_at) != sorted(set(self.probe_at)):
            raise ValueError(f"DenseSettings.probe_at: expected increasing rounds >= 0, got "
                             f"{self.probe_at!r}")
        if bad := bad_head_settings(self.head_settings, self.heads):
            raise ValueError(f"DenseSettings.head_settings: expected 'half', 'all' or counts in "
                             f"[0, heads={self.heads}] as strings, got {bad}")

    @property
    def rounds(self) -> int:
        return max(self.probe_at)

    @property
    def steps(self) -> tuple[int, ...]:
        """Optimiser steps at each probe point (the scales)."""
        return tuple(r * self.steps_per_round for r in self.probe_at)


@dataclass(frozen=True)
class ProbeScore:
    """The probe's scores on the test split after ``steps`` self-distillation steps."""

    steps: int
    miou: float
    pixel_acc: float
    train_acc: float                  # patch accuracy of the dense probe on its training split
    image_acc: float                  # test accuracy of the image-level linear probe


@dataclass(frozen=True)
class DenseRun:
    """One self-distilled ViT: its loss curve, collapse checks and probe scores."""

    setting: str
    laplacian_heads: int
    seed: int
    curve: tuple[float, ...]          # mean DINO loss of each round
    scores: tuple[ProbeScore, ...]    # one per probe point, in order (the first: untrained)
    teacher_entropy: float            # mean per-image entropy of the teacher output (nats)
    teacher_mean_entropy: float       # entropy of the batch-mean teacher output (nats)
    effective_rank: float             # of the test patch features (exp entropy of the spectrum)
    plateau: bool

    @property
    def final(self) -> ProbeScore:
        return self.scores[-1]

    @property
    def untrained(self) -> ProbeScore:
        return self.scores[0]


@dataclass
class DenseSweep:
    """All runs, the raw-patch floor and the data facts needed to read them."""

    settings: DenseSettings
    runs: list[DenseRun]
    raw: ProbeScore
    source: str
    digests: dict[str, str] = field(default_factory=dict)
    log_k: float = 0.0

    def by(self, setting: str) -> list[DenseRun]:
        """The runs of one head setting, in seed order."""
        return sorted((r for r in self.runs if r.setting == setting), key=lambda r: r.seed)

    def values(self, setting: str, field_name: str = "miou", at: int = -1) -> np.ndarray:
        """(seeds,) of a probe score field at probe point ``at`` for one setting."""
        return np.array([getattr(r.scores[at], field_name) for r in self.by(setting)])


def normalise(images: np.ndarray, mean: np.ndarray, std: np.ndarray) -> torch.Tensor:
    """(N, H, W, 3) images in [0, 1] -> standardised (N, 3, H, W) float32 tensor."""
    x = (images - mean) / std
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2), dtype=np.float32))


def to_patches(images: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, (H/p)(W/p), p*p*C), the order of :func:`data.image_patches`."""
    b, c, h, w = images.shape
    x = images.reshape(b, c, h // patch, patch, w // patch, patch).permute(0, 2, 4, 3, 5, 1)
    return x.reshape(b, (h // patch) * (w // patch), patch * patch * c)


def two_views(images: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Two augmented views of standardised images (B, C, H, W): a random resized crop (area
    0.35-1, any position) with a horizontal flip half of the time, then a random brightness shift
    and contrast scale per image. Every draw comes from ``generator``."""
    views = []
    b = images.shape[0]
    for _ in range(2):
        u = torch.rand(b, 6, generator=generator)
        side = torch.sqrt(0.35 + 0.65 * u[:, 0])
        flip = torch.where(u[:, 1] < 0.5, -1.0, 1.0)
        tx, ty = (2 * u[:, 2] - 1) * (1 - side), (2 * u[:, 3] - 1) * (1 - side)
        theta = torch.zeros(b, 2, 3)
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


def standardise(train: torch.Tensor, *others: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Standardise features (..., d) per dimension with the statistics of ``train``."""
    flat = train.reshape(-1, train.shape[-1])
    mean, std = flat.mean(0), flat.std(0) + 1e-6
    return tuple((x - mean) / std for x in (train, *others))


def train_probe(features: torch.Tensor, labels: torch.Tensor, *, steps: int, lr: float,
                seed: int, num_classes: int = NUM_CLASSES) -> torch.nn.Linear:
    """A linear probe (d -> classes) fitted by full-batch Adam, through :func:`fit` (one step
    per round): on patch features (N, T, d) and patch labels (N, T) it is the 1x1 probe; on
    pooled features (N, d) and labels (N,) the image-level probe. Seeded by ``seed`` without
    touching the global random state."""
    if features.shape[:-1] != labels.shape:
        raise ValueError(f"labels: expected shape {tuple(features.shape[:-1])}, got "
                         f"{tuple(labels.shape)}")
    x, y = features.reshape(-1, features.shape[-1]), labels.reshape(-1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        probe = torch.nn.Linear(x.shape[-1], num_classes)
    opt = torch.optim.Adam(probe.parameters(), lr=lr)
    fit(probe, opt, rounds=steps, batches=lambda r: [(x, y)],
        loss=lambda fwd, b: F.cross_entropy(fwd(b[0]), b[1]), device="cpu",
        desc="probe", compile=False)
    return probe


def probe_features(train: torch.Tensor, test: torch.Tensor, d: "_Data",
                   settings: DenseSettings,
                   *, steps: int, seed: int) -> ProbeScore:
    """Both probes on patch features (N, T, d) of the two splits, standardised with the
    training split's statistics: the 1x1 probe on patch labels, scored by mIoU and pixel
    accuracy on the test split's exact pixel labels (patch predictions upsampled to pixels), and
    the image-level probe on the token mean, scored by accuracy on the background class."""
    tr, te = standardise(train, test)
    kw = dict(steps=settings.probe_steps, lr=settings.probe_lr, seed=seed)
    probe = train_probe(tr, d.y_train, **kw)
    pooled_tr, pooled_te = standardise(train.mean(1), test.mean(1))
    image_probe = train_probe(pooled_tr, d.image_train, num_classes=10, **kw)
    with torch.no_grad():
        train_acc = float((probe(tr).argmax(-1) == d.y_train).float().mean())
        pred = probe(te).argmax(-1).numpy()
        image_acc = float((image_probe(pooled_te).argmax(-1) == d.image_test).float().mean())
    h = d.test.pixel_labels.shape[1] // d.test.patch
    pred = segmentation.upsample_labels(pred.reshape(len(d.test), h, -1), d.test.patch)
    conf = segmentation.confusion_matrix(pred, d.test.pixel_labels, NUM_CLASSES)
    return ProbeScore(steps, segmentation.miou(conf), segmentation.pixel_accuracy(conf), train_acc,
                      image_acc)


@dataclass
class _Data:
    train: DenseProxy
    test: DenseProxy
    x_train: torch.Tensor              # standardised (N, 3, H, W)
    x_test: torch.Tensor
    y_train: torch.Tensor              # patch labels (N, T)
    image_train: torch.Tensor          # background classes (N,)
    image_test: torch.Tensor


def prepare(settings: DenseSettings) -> _Data:
    """The two splits of the proxy, standardised with the training split's channel statistics."""
    train = make_dense_proxy(settings.n_train, seed=TRAIN_DATA_SEED, split="train",
                             patch=settings.patch)
    test = make_dense_proxy(settings.n_test, seed=TEST_DATA_SEED, split="test",
                            patch=settings.patch)
    mean = train.images.mean(axis=(0, 1, 2), keepdims=True)
    std = train.images.std(axis=(0, 1, 2), keepdims=True) + 1e-6
    y = torch.from_numpy(train.patch_labels.reshape(len(train), -1))
    return _Data(train, test, normalise(train.images, mean, std), normalise(test.images, mean, std),
                 y, torch.from_numpy(train.image_labels), torch.from_numpy(test.image_labels))


def raw_floor(settings: DenseSettings, d: _Data) -> ProbeScore:
    """The probe on the raw patches (standardised pixels of each patch)."""
    tr, te = to_patches(d.x_train, settings.patch), to_patches(d.x_test, settings.patch)
    return probe_features(tr, te, d, settings, steps=0, seed=0)


def pretrain(settings: DenseSettings, setting: str, seed: int, d: _Data, *,
             run: RunDir | None = None, end_of_round=None) -> DenseRun:
    """Self-distil one ViT and probe it at ``settings.probe_at``; resumable through ``run``.

    ``end_of_round`` (optional, ``round -> None``) is called after the loop's own bookkeeping of
    each round (tests use it to interrupt a run)."""
    st = settings
    lap = laplacian_count(setting, st.heads)
    profile.seed_everything(seed)
    tokens = (32 // st.patch) ** 2
    student = dino_vit(tokens, st.patch * st.patch * 3, st.out_dim, dim=st.dim, depth=st.depth,
                       heads=st.heads, laplacian_heads=lap, mlp_ratio=st.mlp_ratio)
    pair = SelfDistillation(student, momentum=st.momentum)
    opt = torch.optim.AdamW(student.parameters(), lr=st.lr, weight_decay=st.weight_decay)
    gen = torch.Generator().manual_seed(10_000 + seed)
    eval_patches = to_patches(d.x_test[:64], st.patch)
    test_patches = to_patches(d.x_test, st.patch)
    train_patches = to_patches(d.x_train, st.patch)

    def probe_now(rounds_done: int) -> dict:
        pair.eval()
        score = probe_features(patch_features(pair.teacher, train_patches),
                               patch_features(pair.teacher, test_patches), d, st,
                               steps=rounds_done * st.steps_per_round, seed=seed)
        pair.train()
        return dict(score=score.__dict__)

    def batches(r: int):
        for _ in range(st.steps_per_round):
            idx = torch.randint(0, len(d.x_train), (st.batch_size,), generator=gen)
            a, b = two_views(d.x_train[idx], gen)
            yield to_patches(a, st.patch), to_patches(b, st.patch)

    def after_round(r: int) -> dict:
        out = probe_now(r + 1) if r + 1 in st.probe_at else {}
        if end_of_round is not None:
            end_of_round(r)
        return out

    first = [ProbeScore(**probe_now(0)["score"])] if st.probe_at[0] == 0 else []
    log = fit(pair, opt, rounds=st.rounds, batches=batches,
              loss=lambda fwd, b: fwd(b[0], b[1]), device="cpu", run=run,
              name=f"{setting}-seed{seed}", generators={"views": gen},
              after_step=pair.update_teacher, end_of_round=after_round, clip_grad_norm=3.0,
              desc=f"DINO {setting} seed {seed}", compile=False)
    scores = first + [ProbeScore(**m["score"]) for m in log.metrics if "score" in m]
    curve = tuple(float(np.mean(x)) for x in log.losses)
    with torch.no_grad():
        ent, mean_ent = pair.teacher_entropies(eval_patches)
        rank = float(effective_rank(patch_features(pair.teacher, test_patches)
                                    .reshape(-1, st.dim).double()))
    return DenseRun(setting, lap, seed, curve, tuple(scores), ent, mean_ent, rank,
                    plateaued(curve))


def plateaued(curve: Sequence[float], rel: float = PLATEAU_REL) -> bool:
    """True when the mean loss of the last two rounds is within ``rel`` (relative) of the mean of
    the two rounds before (fewer than four rounds: False)."""
    if len(curve) < 4:
        return False
    last, before = float(np.mean(curve[-2:])), float(np.mean(curve[-4:-2]))
    return abs(last - before) <= rel * abs(before)


def run(settings: DenseSettings | None = None, *, run_dir: RunDir | None = None) -> DenseSweep:
    """Every (head setting, seed) run and the raw-patch floor."""
    settings = settings or DenseSettings.from_profile()
    run_dir = run_dir if run_dir is not None else RunDir("dense_features", settings)
    with num_threads(settings.threads):
        d = prepare(settings)
        raw = raw_floor(settings, d)
        runs = [run_dir.unit(f"{s}-seed{seed}",
                             lambda s=s, seed=seed: pretrain(settings, s, seed, d, run=run_dir))
                for seed in settings.seeds for s in settings.head_settings]
    return DenseSweep(settings, runs, raw, d.train.source,
                      {"train": d.train.digest(), "test": d.test.digest()},
                      float(np.log(settings.out_dim)))
