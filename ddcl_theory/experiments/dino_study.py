"""L10 on the papers' model and probe data, paired over seeds: DINO+iBOT ViTs with and without
Laplacian heads (:mod:`ddcl_theory.experiments.dino_recipe`), read by the probes of L10's
paper-scale rule (:data:`ddcl_theory.ledger.rules.PAPER_RULES`).

For each seed both head settings start from the same initial weights and see the same epochs,
batches, views and masks (the recipe draws them from the seed alone). Each head setting
pre-trains at its own rate, tuned first on a grid (``tune_lrs``) on tuning seeds that decide
nothing, scored on images held out of the training splits only. The teacher is then read by:

* test 1's image-level linear probe on the [CLS] token: Imagenette's 10 classes, fitted on its
  training images less ``image_holdout``, scored image by image on its validation split;
* test 2's dense linear probe: ADE20K's 150 classes (:mod:`~ddcl_theory.experiments.ade20k_probe`),
  fitted on its training split less ``settle_images``, scored on its validation split (the
  benchmark's), with each image's intersections, predictions and labels per class kept, so that
  an interval can resample the images as well as the seeds;
* the gates: the teacher's [CLS] entropies on the held-out Imagenette training images and the
  effective rank of its raw patch features on the held-out ADE20K images (collapse); the dense
  probe's mIoU on those ADE20K images at :data:`SETTLE_AT` of the schedule and at its end
  (settling); the same ViT untrained (the floor each arm must clear). Labelling every pixel with
  ADE20K's most frequent training class is the floor under all of them.

Every split is fixed by a seeded draw (:data:`SPLIT_SEED`), the same for every seed and arm.
Each length in ``epochs`` is a separate run with its own warm-up and cosine decay; the shorter
ones on the first ``trend_seeds`` seeds.

    >>> st = DinoStudySettings.from_profile()       # DDCL_PROFILE=paper: 26 seeds, ViT-S/16
    >>> study = run(st, device="cuda")              # DinoStudy: tuning, runs, floors
    >>> study.values("all", "miou") - study.values("0", "miou")     # test 2, per seed
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.stats import rankdata

from ddcl_theory.data.ade20k import NUM_CLASSES, SegmentationSet
from ddcl_theory.experiments import ade20k_probe
from ddcl_theory.experiments.dense_features import standardise, to_patches, train_probe
from ddcl_theory.experiments.dino_recipe import (
    DinoRecipe,
    _patch_features,
    _standardised,
    _stats,
    build_pair,
    pretrain,
)
from ddcl_theory.experiments.laplacian_common import bad_head_settings, laplacian_count
from ddcl_theory.metrics import segmentation
from ddcl_theory.metrics.readouts import effective_rank
from ddcl_theory.models.dino import DenseViT, SelfDistillation, cls_features
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.progress import progress
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, confirmatory_seeds, nested, setting

__all__ = ["SETTLE_AT", "SPLIT_SEED", "DinoStudySettings", "ProbeData", "DinoRun",
           "TuningRun", "DinoFloor", "DinoStudy", "majority_floor", "cls_probe", "run_one", "tune", "tuned_lrs", "untrained_floor",
           "run"]

#: The share of the schedule after which the settling gate's first probe is read.
SETTLE_AT = 0.75
#: Seeds the draws of the held-out images (one split for every seed and arm).
SPLIT_SEED = 0
#: Imagenette's classes (the [CLS] probe's).
IMAGE_CLASSES = 10
#: Held-out images the collapse checks read (at most).
COLLAPSE_IMAGES = 128


@dataclass(frozen=True)
class DinoStudySettings(Settings):
    """The paired study: seeds, lengths (epochs, each a separate run), the trend seeds, the
    rate grid and its tuning seeds, the training images held out of each split and the [CLS]
    probe's steps. cpu: a tiny study for tests; paper: the rule's 26 seeds at 100 epochs and
    the first 4 also at 25 and 50 (68 runs), after 6 tuning runs of 100 epochs: 6,400 epochs
    of Imagenette in all."""

    title = "L10 on the papers' data: paired DINO+iBOT runs, Imagenette and ADE20K probes"

    #: The pre-training recipe and the probes' budgets; each length of ``epochs`` replaces its
    #: ``epochs`` and each arm's tuned rate its ``lr``.
    recipe: DinoRecipe = nested(DinoRecipe)

    head_settings: tuple[str, ...] = setting(("0", "all"), nonempty=True)
    seeds: tuple[int, ...] = setting((0, 1), paper=confirmatory_seeds(26, run=4), smoke=(0,),
                                     ge=0, nonempty=True)
    epochs: tuple[int, ...] = setting((1, 2), paper=(25, 50, 100), smoke=(1,), ge=1,
                                      nonempty=True)
    trend_seeds: int = setting(1, paper=4, ge=1)
    tune_lrs: tuple[float, ...] = setting((5e-4,), paper=(2.5e-4, 5e-4, 1e-3), smoke=(5e-4,),
                                          gt=0, nonempty=True)
    tune_seeds: tuple[int, ...] = setting((900,), ge=0, nonempty=True)
    settle_images: int = setting(2, paper=2000, smoke=4, ge=1)
    image_holdout: int = setting(4, paper=1000, smoke=4, ge=1)
    cls_probe_steps: int = setting(30, paper=1000, smoke=10, ge=1)
    cls_probe_lr: float = setting(1e-2, gt=0)

    def check(self) -> None:
        if len(set(self.head_settings)) != 2 or "0" not in self.head_settings:
            raise ValueError("DinoStudySettings.head_settings: expected two settings, one of "
                             f"them '0', got {self.head_settings!r}")
        if list(self.epochs) != sorted(set(self.epochs)):
            raise ValueError(f"DinoStudySettings.epochs: expected increasing lengths, got "
                             f"{self.epochs!r}")
        if set(self.tune_seeds) & set(self.seeds):
            raise ValueError("DinoStudySettings.tune_seeds: a tuning seed may decide nothing; "
                             f"{sorted(set(self.tune_seeds) & set(self.seeds))} are also seeds")

    @property
    def trend(self) -> tuple[int, ...]:
        """The seeds that run every length."""
        return self.seeds[:self.trend_seeds]

    def seeds_at(self, epochs: int) -> tuple[int, ...]:
        """The seeds run at ``epochs``: all at the longest, the trend seeds at the others."""
        if epochs not in self.epochs:
            raise ValueError(f"epochs: expected one of {self.epochs}, got {epochs!r}")
        return self.seeds if epochs == self.epochs[-1] else self.trend

    def plan(self) -> str:
        """One sentence on what :func:`run` trains at these settings."""
        r, arms = self.recipe, len(self.head_settings)
        runs = sum(len(self.seeds_at(e)) * arms for e in self.epochs)
        tuning = len(self.tune_lrs) * len(self.tune_seeds) * arms
        epochs = (sum(len(self.seeds_at(e)) * arms * e for e in self.epochs)
                  + tuning * self.epochs[-1])
        shorter = (f", the first {len(self.trend)} also at "
                   f"{', '.join(map(str, self.epochs[:-1]))}" if len(self.epochs) > 1 else "")
        images = (f"{r.pretrain_images:,} Imagenette images" if r.pretrain_images
                  else "every Imagenette training image")
        return (f"{tuning} tuning runs and {runs} deciding runs of a ViT d={r.dim}, {r.depth} "
                f"blocks, {r.heads} heads, {r.patch}x{r.patch} patches at {r.image_size} px on "
                f"{images} ({epochs:,} epochs in all): {len(self.seeds)} seeds at "
                f"{self.epochs[-1]} epochs{shorter}, each with and without Laplacian heads at "
                f"its tuned rate; and the untrained ViT of each seed and arm.")


@dataclass(frozen=True)
class ProbeData:
    """The images the study reads, every split (N, S, S, 3) uint8: Imagenette's training images
    and labels (all pre-train; the [CLS] probe fits on those outside ``image_held``), its
    validation images and labels (test 1's test set); ADE20K's training split less the
    held-out images (``fit``), the held-out images (``settle``) and its validation split
    (``test``, test 2's). ``source`` names where they came from."""

    images: np.ndarray
    labels: np.ndarray
    image_held: np.ndarray
    val_images: np.ndarray
    val_labels: np.ndarray
    fit: SegmentationSet
    settle: SegmentationSet
    test: SegmentationSet
    source: str = "Imagenette (160 px), ADE20K"
    _targets: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def image_fit(self) -> np.ndarray:
        """Indices of the Imagenette training images the [CLS] probe fits on."""
        return np.setdiff1d(np.arange(len(self.images)), self.image_held)

    def fit_targets(self, patch: int) -> np.ndarray:
        """(N, T) :func:`~ddcl_theory.experiments.ade20k_probe.patch_targets` of ``fit``, made
        once per patch size (every probe of a study fits on them)."""
        if patch not in self._targets:
            self._targets[patch] = ade20k_probe.patch_targets(self.fit.labels, patch)
        return self._targets[patch]

    @classmethod
    def load(cls, settings: DinoStudySettings) -> ProbeData:
        """The fetched Imagenette and ADE20K at the recipe's image size and limits; in the
        paper profile's smoke run, where they are not fetched, announced stand-ins
        (:meth:`standin`)."""
        from ddcl_theory.data.ade20k import ade20k_arrays
        from ddcl_theory.data.imagenette import imagenette_arrays
        r = settings.recipe
        try:
            images, labels = imagenette_arrays("train", r.image_size, r.pretrain_images)
            val_images, val_labels = imagenette_arrays("val", r.image_size, r.probe_val_images)
            train = ade20k_arrays("training", r.image_size, r.probe_images)
            test = ade20k_arrays("validation", r.image_size, r.probe_val_images)
        except FileNotFoundError as err:
            if not profile.current().smoke:
                raise
            print(f"NOTICE: {err}\nNOTICE: the smoke run reads the dense proxy (digits on "
                  "CIFAR-10) at the recipe's size in place of Imagenette and ADE20K")
            return cls.standin(settings)
        return cls.split(images, labels, val_images, val_labels, train, test, settings)

    @classmethod
    def standin(cls, settings: DinoStudySettings) -> ProbeData:
        """Stand-ins of the two data sets' formats: the dense proxy's images at the recipe's
        size, labelled by their backgrounds' CIFAR-10 classes (for Imagenette), and its pixel
        labels as ADE20K's class ids (class + 1; id 0 stays unlabelled). The recipe's limits,
        or 64 images where it sets none."""
        from ddcl_theory.data.dense_proxy import make_dense_proxy
        r = settings.recipe

        def proxy(n: int | None, seed: int, split: str):
            d = make_dense_proxy(n or 64, seed=seed, split=split)
            return (_nearest(np.round(d.images * 255).astype(np.uint8), r.image_size),
                    d.image_labels, _nearest(d.pixel_labels.astype(np.uint8) + 1, r.image_size))

        def seg(n: int | None, seed: int, split: str) -> SegmentationSet:
            images, _, labels = proxy(n, seed, split)
            return SegmentationSet(images, labels, tuple(f"{split}-{i}" for i in
                                                        range(len(images))), split)
        images, labels, _ = proxy(r.pretrain_images, 0, "train")
        val_images, val_labels, _ = proxy(r.probe_val_images, 1, "test")
        return cls.split(images, labels, val_images, val_labels,
                         seg(r.probe_images, 2, "train"), seg(r.probe_val_images, 3, "test"),
                         settings, source="stand-in: the dense proxy (digits on CIFAR-10)")

    @classmethod
    def split(cls, images, labels, val_images, val_labels, train: SegmentationSet,
              test: SegmentationSet, settings: DinoStudySettings, *,
              source: str = "Imagenette (160 px), ADE20K") -> ProbeData:
        """Hold out ``settings.settle_images`` of ADE20K's ``train`` and
        ``settings.image_holdout`` of Imagenette's ``images``, each a draw seeded by
        :data:`SPLIT_SEED`, kept in drawn order (the archives are grouped by class or scene,
        so the first held-out images are a random draw, not one class)."""
        st = settings
        if not 1 <= st.settle_images < len(train):
            raise ValueError(f"settle_images: expected 1 to {len(train) - 1} (ADE20K training "
                             f"images less one), got {st.settle_images}")
        if not 1 <= st.image_holdout < len(images):
            raise ValueError(f"image_holdout: expected 1 to {len(images) - 1} (Imagenette "
                             f"training images less one), got {st.image_holdout}")
        for name, x, y in (("labels", images, labels), ("val_labels", val_images, val_labels)):
            if np.asarray(y).shape != (len(x),):
                raise ValueError(f"{name}: expected ({len(x)},) class ids, got "
                                 f"{np.asarray(y).shape}")
        rng = np.random.default_rng(SPLIT_SEED)
        held = rng.permutation(len(train))[:st.settle_images]    # in drawn order: any
        # first k of them (the collapse checks read the first) are a random draw
        keep = np.setdiff1d(np.arange(len(train)), held)

        def part(idx: np.ndarray) -> SegmentationSet:
            return SegmentationSet(train.images[idx], train.labels[idx],
                                   tuple(train.names[i] for i in idx), train.split)
        image_held = rng.permutation(len(images))[:st.image_holdout]
        return cls(images, np.asarray(labels), image_held, val_images, np.asarray(val_labels),
                   part(keep), part(held), test, source)


@dataclass(frozen=True)
class DinoRun:
    """One pre-trained ViT of ``epochs`` epochs at rate ``lr`` and its readings (see the module
    docstring); ``image_correct`` (validation images,) 0/1 and ``segment_counts`` (validation
    images, 3, 150; :func:`~ddcl_theory.metrics.segmentation.image_counts`) the per-image
    values behind ``image_acc`` and ``miou``."""

    setting: str
    laplacian_heads: int
    seed: int
    epochs: int
    lr: float
    losses: tuple[float, ...]         # mean loss of each epoch
    miou: float                       # ADE20K validation mIoU of the linear probe
    pixel_acc: float
    image_acc: float                  # Imagenette validation accuracy of the [CLS] probe
    settle_miou: float                # mIoU on the held-out ADE20K images at SETTLE_AT
    val_miou: float                   # the same at the end
    teacher_entropy: float            # mean per-image entropy of the teacher's [CLS] output
    teacher_mean_entropy: float       # entropy of the batch-mean output (nats)
    effective_rank: float             # raw patch features of held-out ADE20K images
    image_correct: np.ndarray = field(compare=False, repr=False,
                                      default_factory=lambda: np.zeros(0, np.int8))
    segment_counts: np.ndarray = field(compare=False, repr=False,
                                       default_factory=lambda: np.zeros((0, 3, 0), np.int32))


@dataclass(frozen=True)
class TuningRun:
    """A tuning run: ``setting`` at rate ``lr`` on tuning seed ``seed`` for the longest length,
    scored on held-out training images only (ADE20K mIoU, Imagenette [CLS] accuracy)."""

    setting: str
    lr: float
    seed: int
    val_miou: float
    val_image_acc: float


@dataclass(frozen=True)
class DinoFloor:
    """One seed's untrained ViT of one head setting, read by the same probes."""

    setting: str
    seed: int
    miou: float
    pixel_acc: float
    image_acc: float


@dataclass
class DinoStudy:
    """The tuning runs and the rate each head setting took, every run and floor, the
    majority-class floor (mIoU, pixel accuracy), log K of the teacher's output, the split
    sizes and the data's source."""

    settings: DinoStudySettings
    tuning: list[TuningRun]
    lrs: dict[str, float]
    runs: list[DinoRun]
    floors: list[DinoFloor]
    majority: tuple[float, float]
    log_k: float
    sizes: dict[str, int] = field(default_factory=dict)
    source: str = ""

    @property
    def recipe(self) -> DinoRecipe:
        return self.settings.recipe

    def run(self, setting: str, seed: int, epochs: int | None = None) -> DinoRun:
        epochs = self.settings.epochs[-1] if epochs is None else epochs
        for r in self.runs:
            if (r.setting, r.seed, r.epochs) == (setting, seed, epochs):
                return r
        raise KeyError(f"no run ({setting!r}, seed {seed}, {epochs} epochs)")

    def values(self, setting: str, field_name: str = "miou", epochs: int | None = None
               ) -> np.ndarray:
        """(seeds,) of a reading of ``setting``'s runs of ``epochs`` (default the longest), in
        seed order, over the seeds that ran that length."""
        epochs = self.settings.epochs[-1] if epochs is None else epochs
        return np.array([getattr(self.run(setting, s, epochs), field_name)
                         for s in self.settings.seeds_at(epochs)], dtype=float)

    def items(self, setting: str, field_name: str) -> np.ndarray:
        """(seeds, ...) the per-image values (``"image_correct"`` or ``"segment_counts"``) of
        ``setting``'s runs of the longest length, in seed order."""
        return np.stack([getattr(self.run(setting, s), field_name)
                         for s in self.settings.seeds])

    def floor_values(self, setting: str, field_name: str = "miou") -> np.ndarray:
        """(seeds,) of the untrained ViT's reading, in seed order."""
        by_seed = {f.seed: f for f in self.floors if f.setting == setting}
        return np.array([getattr(by_seed[s], field_name) for s in self.settings.seeds],
                        dtype=float)


def _nearest(a: np.ndarray, size: int) -> np.ndarray:
    """Images or label maps (N, H, W, ...) resized to (N, size, size, ...) by nearest
    neighbour."""
    rows = np.arange(size) * a.shape[1] // size
    cols = np.arange(size) * a.shape[2] // size
    return a[:, rows][:, :, cols]


def majority_floor(fit: SegmentationSet, test: SegmentationSet) -> tuple[float, float]:
    """(mIoU, pixel accuracy) on ``test``'s labelled pixels of labelling every pixel with the
    class most frequent among ``fit``'s labelled pixels."""
    counts = sum(np.bincount(fit.labels[i:i + 256].ravel(), minlength=NUM_CLASSES + 1)
                 for i in range(0, len(fit), 256))[1:]
    if not counts.any():
        raise ValueError("fit: no labelled pixel")
    labelled = test.labels > 0
    if not labelled.any():
        raise ValueError("test: no labelled pixel to score")
    truth = test.labels[labelled].astype(np.int64) - 1
    conf = segmentation.confusion_matrix(np.full_like(truth, int(counts.argmax())), truth,
                                         NUM_CLASSES)
    return segmentation.miou(conf), segmentation.pixel_accuracy(conf)


def _cls(encoder: DenseViT, images: np.ndarray, stats, patch: int, device,
         chunk: int = 1024) -> torch.Tensor:
    return torch.cat([cls_features(encoder, to_patches(
        _standardised(images[i:i + chunk], stats).to(device), patch))
        for i in range(0, len(images), chunk)])


def cls_probe(settings: DinoStudySettings, encoder: DenseViT, data: ProbeData, stats,
              seed: int, device, *, test: bool) -> np.ndarray:
    """0/1 per image of a linear probe on the frozen [CLS] token, fitted on Imagenette's
    training images outside the held-out ones (features standardised with their statistics):
    on the validation split (``test``) or on the held-out training images."""
    fit = data.image_fit
    scored = data.val_images if test else data.images[data.image_held]
    truth = data.val_labels if test else data.labels[data.image_held]
    train, other = standardise(*(_cls(encoder, x, stats, settings.recipe.patch, device)
                                 for x in (data.images[fit], scored)))
    labels = torch.as_tensor(data.labels[fit], dtype=torch.long, device=train.device)
    probe = train_probe(train, labels, steps=settings.cls_probe_steps,
                        lr=settings.cls_probe_lr, seed=seed, num_classes=IMAGE_CLASSES)
    with torch.no_grad():
        pred = probe(other).argmax(-1).cpu().numpy()
    return (pred == truth).astype(np.int8)


def _segment(recipe: DinoRecipe, encoder: DenseViT, data: ProbeData, stats, seed: int, device,
             *, test: bool) -> tuple:
    """The ADE20K probe fitted on ``data.fit``: (held-out mIoU, effective rank of the raw patch
    features of the first held-out images) and, with ``test``, its validation (mIoU, pixel
    accuracy, :func:`~ddcl_theory.metrics.segmentation.image_counts`)."""
    parts = [data.fit, data.settle] + ([data.test] if test else [])
    raw = [_patch_features(encoder, p.images, stats, recipe.patch, device) for p in parts]
    held = raw[1][:COLLAPSE_IMAGES]
    rank = float(effective_rank(held.reshape(-1, held.shape[-1]).double()))
    feats = standardise(*raw)
    del raw
    probe = ade20k_probe.fit_probe(feats[0], data.fit_targets(recipe.patch),
                                   steps=recipe.probe_steps, lr=recipe.probe_lr, seed=seed)
    settle, _ = ade20k_probe.probe_scores(probe, feats[1], data.settle.labels, recipe.patch)
    if not test:
        return settle, rank
    miou, pixel_acc = ade20k_probe.probe_scores(probe, feats[2], data.test.labels, recipe.patch)
    grid = recipe.image_size // recipe.patch
    pred = segmentation.upsample_labels(
        ade20k_probe.predict_patches(probe, feats[2]).reshape(-1, grid, grid), recipe.patch)
    return settle, rank, miou, pixel_acc, segmentation.image_counts(
        pred, data.test.labels.astype(np.int64) - 1, NUM_CLASSES)


def _settle_epoch(epochs: int) -> int:
    return max(1, round(SETTLE_AT * epochs))


def _pretrain_probed(settings: DinoStudySettings, data: ProbeData, setting: str, seed: int,
                     epochs: int, lr: float, device):
    """Pre-train ``setting`` at ``lr`` for ``epochs`` epochs, reading the held-out ADE20K mIoU
    at :data:`SETTLE_AT` of the schedule; (the pair in evaluation mode, the losses, that mIoU,
    the recipe at this length and rate, the pre-training images' channel statistics)."""
    r = dataclasses.replace(settings.recipe, epochs=epochs, lr=lr)
    stats = _stats(data.images)
    mid = _settle_epoch(epochs)
    settle: list[float] = []

    def probe_mid(epoch: int, pair: SelfDistillation) -> None:
        if epoch + 1 == mid:
            pair.eval()
            settle.append(_segment(r, pair.teacher, data, stats, seed, device, test=False)[0])
            pair.train()

    pair, losses = pretrain(r, data.images, setting, seed, device, end_of_round=probe_mid)
    return pair.eval(), losses, settle[0], r, stats


def run_one(settings: DinoStudySettings, data: ProbeData, setting: str, seed: int, epochs: int,
            lr: float, device: str | torch.device = "cpu") -> DinoRun:
    """Pre-train ``setting`` on seed ``seed`` for ``epochs`` epochs at rate ``lr`` (the
    recipe's schedule at that length) and read it (see the module docstring)."""
    pair, losses, settle, r, stats = _pretrain_probed(settings, data, setting, seed, epochs, lr,
                                                      device)
    val, rank, miou, pixel_acc, counts = _segment(r, pair.teacher, data, stats, seed, device,
                                                  test=True)
    correct = cls_probe(settings, pair.teacher, data, stats, seed, device, test=True)
    held = data.images[data.image_held[:COLLAPSE_IMAGES]]
    with torch.no_grad():
        ent, mean_ent = pair.teacher_entropies(to_patches(
            _standardised(held, stats).to(device), r.patch))
    return DinoRun(setting, laplacian_count(setting, r.heads), seed, epochs, lr, tuple(losses),
                   miou, pixel_acc, float(correct.mean()), settle, val, ent, mean_ent, rank,
                   correct, counts)


def tune(settings: DinoStudySettings, data: ProbeData, setting: str, lr: float, seed: int,
         device: str | torch.device = "cpu") -> TuningRun:
    """A tuning run: ``setting`` at ``lr`` on tuning seed ``seed`` for the longest length,
    scored on the held-out training images only (no validation split is read)."""
    pair, _, _, r, stats = _pretrain_probed(settings, data, setting, seed,
                                            settings.epochs[-1], lr, device)
    val, _ = _segment(r, pair.teacher, data, stats, seed, device, test=False)
    acc = cls_probe(settings, pair.teacher, data, stats, seed, device, test=False).mean()
    return TuningRun(setting, lr, seed, val, float(acc))


def tuned_lrs(tuning: list[TuningRun], settings: DinoStudySettings) -> dict[str, float]:
    """Each head setting's rate on ``settings.tune_lrs``: the smallest mean of its two ranks
    (rank 1 the best; ties share the mean rank) on the tuning seeds' mean held-out [CLS]
    accuracy and mean held-out ADE20K mIoU, one score per test; ties go to the larger sum of
    the two means, then to the smaller rate."""
    out = {}
    for s in settings.head_settings:
        runs = {lr: [t for t in tuning if t.setting == s and t.lr == lr]
                for lr in settings.tune_lrs}
        if missing := [lr for lr, found in runs.items() if not found]:
            raise ValueError(f"tuning: no run of {s!r} at rate(s) {missing}")
        acc, miou = (np.array([np.mean([getattr(t, f) for t in found])
                               for found in runs.values()])
                     for f in ("val_image_acc", "val_miou"))
        rank = (rankdata(-acc) + rankdata(-miou)) / 2
        best = min(range(len(settings.tune_lrs)),
                   key=lambda i: (rank[i], -(acc[i] + miou[i]), settings.tune_lrs[i]))
        out[s] = float(settings.tune_lrs[best])
    return out


def untrained_floor(settings: DinoStudySettings, data: ProbeData, setting: str, seed: int,
                    device: str | torch.device = "cpu") -> DinoFloor:
    """``setting``'s ViT at seed ``seed``'s initial weights, read by the same probes."""
    r = settings.recipe
    encoder = build_pair(r, setting, seed).teacher.to(device).eval()
    stats = _stats(data.images)
    _, _, miou, pixel_acc, _ = _segment(r, encoder, data, stats, seed, device, test=True)
    correct = cls_probe(settings, encoder, data, stats, seed, device, test=True)
    return DinoFloor(setting, seed, miou, pixel_acc, float(correct.mean()))


def run(settings: DinoStudySettings | None = None, *, data: ProbeData | None = None,
        device: str | torch.device | None = None, run_dir: RunDir | None = None) -> DinoStudy:
    """The tuning runs, then every (seed, head setting, length) run at that setting's tuned
    rate and every seed's untrained floors, each a unit of ``run_dir`` (default the profile's
    ``dense_features_paper`` run directory: a stopped study resumes at its first unfinished
    unit). ``data`` default: :meth:`ProbeData.load`; ``device`` default: the profile's."""
    st = settings or DinoStudySettings.from_profile()
    r = st.recipe
    device = device if device is not None else profile.current().device
    if bad := bad_head_settings(st.head_settings, r.heads):
        raise ValueError(f"settings.head_settings: {bad} name no head count of the recipe's "
                         f"{r.heads} heads")
    d = data if data is not None else ProbeData.load(st)
    run_dir = run_dir if run_dir is not None else RunDir("dense_features_paper", st)
    trials = [(s, lr, seed) for seed in st.tune_seeds for s in st.head_settings
              for lr in st.tune_lrs]
    tuning = [run_dir.unit(f"tune-{s}-lr{lr:g}-seed{seed}",
                           lambda a=(s, lr, seed): tune(st, d, *a, device=device))
              for s, lr, seed in progress(trials, desc="L10 paper tuning")]
    lrs = tuned_lrs(tuning, st)
    jobs = [(s, seed, e) for e in st.epochs for seed in st.seeds_at(e)
            for s in st.head_settings]
    runs = [run_dir.unit(f"{s}-seed{seed}-{e}",
                         lambda a=(s, seed, e): run_one(st, d, *a, lrs[a[0]], device=device))
            for s, seed, e in progress(jobs, desc="L10 paper runs")]
    floors = [run_dir.unit(f"untrained-{s}-seed{seed}",
                           lambda a=(s, seed): untrained_floor(st, d, *a, device=device))
              for seed in st.seeds for s in st.head_settings]
    run_dir.finish({"tuning": len(tuning), "runs": len(runs), "floors": len(floors)})
    sizes = {"imagenette_train": len(d.images), "imagenette_fit": len(d.image_fit),
             "imagenette_val": len(d.val_images), "ade20k_fit": len(d.fit),
             "ade20k_settle": len(d.settle), "ade20k_validation": len(d.test)}
    return DinoStudy(st, tuning, lrs, runs, floors, majority_floor(d.fit, d.test),
                     float(np.log(r.out_dim)), sizes, d.source)
