"""Claims L6-L8 of Zhang & Papyan 2026: a head-count study of a ViT with paired seeds.

The study is a set of (head setting, seed) runs whose seeds are paired: seed s gives every head
setting the same initialisation (a Laplacian head has no parameter of its own, so the models of
all settings draw the same weights) and the same batches.

* **ViT** (L6, L7, L8): the ViT of :mod:`ddcl_theory.experiments.laplacian_vit` on CIFAR-10
  (the cpu and reference profiles), or ViT-S under a DeiT-style recipe on CIFAR-100
  (:mod:`ddcl_theory.experiments.deit_recipe`, the paper profile), three parts, every run a
  separate one:

  - the *sweep*: every head setting at each training-image count of ``n_train`` (the scale
    axis), on ``seeds`` at every count and on ``extra_seeds`` too at the largest, each run read
    at its validation optimum (early stopping on a validation split carved from the training
    images, under a cosine schedule) and measured on the evaluation pool
    (``n_test`` images of the training set that no run trains on): accuracy, the absolute ANOVA
    variances of the tokens after every block and after the final LayerNorm, NC1, k99 and the
    participation ratio;
  - the *terminal* runs (L7's Neural Collapse): none and all heads Laplacian on a small training
    set, fitted to about 100% training accuracy by a long schedule without early stopping, NC1
    read on the training images at the end;
  - the *wide* runs (L8's k99): none and all heads Laplacian at each width of ``wide.dims`` on
    ``wide.n_train`` images, whose width-``dim`` twins are the sweep's runs at that count.

  The seeds of one setting train together as one stacked model
  (:func:`~ddcl_theory.experiments.laplacian_vit.train_vit_stack`), each seed the twin of its
  sequential run.

The language-model study of claim L9 is :mod:`ddcl_theory.experiments.laplacian_lm`.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from ddcl_theory.experiments import deit_recipe
from ddcl_theory.experiments import laplacian_vit as lv
from ddcl_theory.experiments.laplacian_common import (
    HEAD_SETTINGS,
    SMOKE_HEAD_SETTINGS,
    bad_head_settings,
    laplacian_count,
)
from ddcl_theory.experiments.vit_runs import ViTRun, measure_vit
from ddcl_theory.models.vit import ViT
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, confirmatory_seeds, nested, setting
from ddcl_theory.runtime.threads import num_threads
from ddcl_theory.runtime.workers import map_units

__all__ = ["SWEEP_SEEDS", "SWEEP_RUN", "DECIDING_SEEDS", "WIDE_SEEDS", "WIDE_RUN",
           "TerminalSettings", "WidthSettings", "ViTStudySettings", "ViTRun", "ViTStudy",
           "run_vit", "train_vit_stack_runs", "measure_vit"]

#: The parts of the ViT study (see the module docstring).
PARTS = ("sweep", "terminal", "wide")
#: The head settings of the terminal and wide runs: the comparison L7 and L8 name.
PAIR = ("0", "all")
#: CIFAR's image side in pixels.
CIFAR_SIDE = 32


@contextlib.contextmanager
def _threads(n: int | None) -> Iterator[None]:
    """torch and the BLAS under numpy (the metrics) limited to ``n`` threads (None: as is); a
    BLAS free to spin on a shared two-core host makes a (16000, 32) covariance take a second."""
    with num_threads(n), (threadpool_limits(limits=n) if n is not None
                          else contextlib.nullcontext()):
        yield


# ============================================================================================
# ViT
# ============================================================================================

@dataclass(frozen=True)
class TerminalSettings(Settings):
    """The terminal-phase runs (L7's Neural Collapse): ``n_train`` images (the first of the fit
    pool) fitted for ``epochs`` epochs under a cosine schedule (after the study's warm-up, if
    any), no early stopping, none and all heads Laplacian, on ``seeds``. Under the DeiT recipe
    they train without augmentation,
    smoothing or stochastic depth (:meth:`~ddcl_theory.experiments.deit_recipe.DeiTRecipe.fitting`);
    paper: 500 epochs, 1,000 steps at batch 512."""

    n_train: int = setting(100, reference=1000, paper=1000, smoke=10, ge=10)
    epochs: int = setting(150, reference=100, paper=500, smoke=1, ge=1)
    seeds: tuple[int, ...] = setting((0, 1, 2), reference=confirmatory_seeds(20),
                                     paper=(0, 1, 2, 3, 4), smoke=(0,), ge=0, nonempty=True)


#: The sweep's confirmatory seeds: ``SWEEP_SEEDS`` at every image count and ``DECIDING_SEEDS``
#: (the L6 rule's n_seeds) at the largest, all of the ``SWEEP_RUN``-th confirmatory run: L6's
#: second, on seeds its first (22 at every count) did not use.
SWEEP_SEEDS = 22
DECIDING_SEEDS = 78
SWEEP_RUN = 2
_SWEEP_CONFIRMATORY = confirmatory_seeds(DECIDING_SEEDS, run=SWEEP_RUN)

#: Seeds of the wide runs' confirmatory run (the L8 rule's n_seeds), and which confirmatory run
#: of that rule the reference makes: the second, on seeds the first did not use.
WIDE_SEEDS = 16
WIDE_RUN = 2


@dataclass(frozen=True)
class WidthSettings(Settings):
    """The wide runs (L8's k99): the study's model at each width of ``dims`` (separate runs,
    increasing; the widest decides), none and all heads Laplacian, at ``n_train`` training
    images (one of the sweep's counts, whose runs give the narrow point), read at the
    validation optimum like the sweep, on ``seeds``."""

    dims: tuple[int, ...] = setting((64,), reference=(64, 128), paper=(768,), ge=1,
                                    nonempty=True)
    n_train: int = setting(400, reference=3000, paper=10_000, smoke=8, ge=1)
    seeds: tuple[int, ...] = setting((0, 1, 2), reference=confirmatory_seeds(WIDE_SEEDS,
                                                                             run=WIDE_RUN),
                                     paper=(0, 1, 2, 3, 4), smoke=(0,), ge=0, nonempty=True)

    @property
    def dim(self) -> int:
        """The widest width, the one that decides."""
        return self.dims[-1]


@dataclass(frozen=True)
class ViTStudySettings(Settings):
    """The ViT study of L6-L8: data, model, optimiser, early stopping, head settings, seeds,
    and its terminal and wide parts.

    ``n_train``: the training-image counts of the sweep (separate runs, the scale axis);
    ``n_val``: the validation split, carved from the end of the training images (the CIFAR-10
    subset; under ``deit``, CIFAR-100's training set); ``n_test``: the evaluation pool, never
    trained on (:func:`ddcl_theory.data.cifar10_eval_pool`; under ``deit``, CIFAR-100's first
    test images); ``n_train_eval``: training images on which training accuracy and NC1 are
    measured; ``epochs``: the cosine schedule's length (the cap); ``patience``: epochs without
    a new lowest validation loss after which a seed is done (the stack stops when every seed
    is); ``lr``: the peak rate (under ``deit``, per 512 images: the peak is ``lr * batch_size
    / 512``, so a larger batch raises it).

    ``recipe``: ``plain``, the package's mean-pooled ViT on the CIFAR-10 subset under AdamW and
    a cosine schedule (:func:`train_vit_stack_runs`); ``deit``, transformers' ViT with a CLS
    token on CIFAR-100 under the DeiT-style recipe of
    :class:`~ddcl_theory.experiments.deit_recipe.DeiTRecipe` (warm-up, label smoothing,
    mixup/cutmix, crops and flips, stochastic depth), whose shapes and budget are this object's
    (:func:`deit_recipe_of`).

    cpu: a small sweep (200, 400 and 800 images, 3 seeds) that CI replays; reference: 1,000,
    3,000 and 9,000 images on 22 seeds of L6's second confirmatory run, and 56 more of them at
    9,000 images (the terminal runs on 20, the wide runs at widths 64 and 128 on 16 seeds of
    L8's second confirmatory run: the rules' seeds), the stacks spread over two processes;
    paper: ViT-S (width 384, 12 blocks, 6 heads, 4x4 patches) under the DeiT recipe for 400
    epochs at 10,000, 25,000 and 49,000 CIFAR-100 images, its wide twin at width 768, the
    evaluation pool CIFAR-100's 10,000 test images."""

    recipe: str = setting("plain", paper="deit", choices=("plain", "deit"))

    n_train: tuple[int, ...] = setting((200, 400, 800), reference=(1000, 3000, 9000),
                                       paper=(10_000, 25_000, 49_000), smoke=(8,), ge=1,
                                       nonempty=True)
    n_val: int = setting(250, reference=1000, paper=1000, smoke=8, ge=1)
    n_test: int = setting(2000, reference=10_000, paper=10_000, smoke=10, ge=10)
    n_train_eval: int = setting(250, reference=1000, paper=1000, smoke=8, ge=1)
    patch: int = setting(8, paper=4, ge=1)
    dim: int = setting(32, paper=384, ge=1)
    depth: int = setting(2, paper=12, ge=1)
    heads: int = setting(4, paper=6, ge=1)
    mlp_ratio: int = setting(2, paper=4, ge=1)
    batch_size: int = setting(128, paper=512, ge=1)
    epochs: int = setting(25, reference=30, paper=400, smoke=1, ge=1)
    patience: int = setting(3, reference=5, paper=40, ge=1)
    lr: float = setting(3e-3, paper=5e-4, gt=0)
    weight_decay: float = setting(0.0, paper=0.05, ge=0)
    #: Epochs of linear warm-up before the cosine (the ``deit`` recipe only; ``plain`` has none).
    warmup_epochs: int = setting(0, paper=5, smoke=0, ge=0)
    head_settings: tuple[str, ...] = setting(HEAD_SETTINGS, smoke=SMOKE_HEAD_SETTINGS,
                                             nonempty=True)
    seeds: tuple[int, ...] = setting((0, 1, 2), reference=_SWEEP_CONFIRMATORY[:SWEEP_SEEDS],
                                     paper=(0, 1, 2, 3, 4), smoke=(0,), ge=0, nonempty=True)
    #: Seeds run at the largest image count only, after ``seeds``: the power of the tests
    #: decided there; the smaller counts give the trend.
    extra_seeds: tuple[int, ...] = setting((), reference=_SWEEP_CONFIRMATORY[SWEEP_SEEDS:],
                                           ge=0)
    terminal: TerminalSettings = nested(TerminalSettings)
    wide: WidthSettings = nested(WidthSettings)
    threads: int | None = setting(1, paper=None, ge=1)
    #: Processes that train the stacks (each on ``threads`` threads): the reference profile
    #: uses both cores of a 2-core machine; the numbers do not depend on it.
    workers: int = setting(1, reference=2, ge=1)

    def check(self) -> None:
        name = type(self).__name__
        if list(self.n_train) != sorted(set(self.n_train)):
            raise ValueError(f"{name}.n_train: expected increasing image counts, got "
                             f"{self.n_train!r}")
        if bad := bad_head_settings(self.head_settings, self.heads):
            raise ValueError(f"{name}.head_settings: expected 'half', 'all' or counts in "
                             f"[0, heads={self.heads}] as strings, got {bad}")
        if not set(PAIR) <= set(self.head_settings):
            raise ValueError(f"{name}.head_settings: expected {PAIR} (none and all heads "
                             f"Laplacian, the comparisons of L6-L8) among them, got "
                             f"{self.head_settings!r}")
        if len(set(self.seeds + self.extra_seeds)) != len(self.seeds) + len(self.extra_seeds):
            raise ValueError(f"{name}.extra_seeds: expected seeds distinct from each other and "
                             f"from seeds={self.seeds!r}, got {self.extra_seeds!r}")
        if list(self.wide.dims) != sorted(set(self.wide.dims)) or self.wide.dims[0] <= self.dim:
            raise ValueError(f"{name}.wide.dims: expected increasing widths above dim="
                             f"{self.dim}, got {self.wide.dims!r}")
        for field, dim in (("dim", self.dim), *(("wide.dims", d) for d in self.wide.dims)):
            if dim % self.heads:
                raise ValueError(f"{name}.{field}: expected a multiple of heads={self.heads}, "
                                 f"got {dim}")
        if self.wide.n_train not in self.n_train:
            raise ValueError(f"{name}.wide.n_train: expected one of n_train={self.n_train} "
                             f"(its runs are the narrow point), got {self.wide.n_train}")
        if self.recipe == "plain" and self.n_test % 10:      # a pool of every class alike
            raise ValueError(f"{name}.n_test: expected a multiple of CIFAR-10's 10 classes, "
                             f"got {self.n_test}")
        if self.recipe == "deit":
            self._check_deit(name)

    def _check_deit(self, name: str) -> None:
        """CIFAR-100's sizes and the warm-up, which the runs would meet only when their unit
        starts."""
        if CIFAR_SIDE % self.patch:
            raise ValueError(f"{name}.patch: expected a divisor of CIFAR-100's image side "
                             f"{CIFAR_SIDE}, got {self.patch}")
        fit_pool = deit_recipe.CIFAR100_TRAIN - self.n_val
        for field, n in (("n_train", self.n_train[-1]), ("terminal.n_train",
                                                          self.terminal.n_train)):
            if n > fit_pool:
                raise ValueError(f"{name}.{field}: expected at most {fit_pool} images (CIFAR-100's "
                                 f"{deit_recipe.CIFAR100_TRAIN} training images less n_val="
                                 f"{self.n_val}), got {n}")
        if self.n_test > deit_recipe.CIFAR100_TEST:
            raise ValueError(f"{name}.n_test: expected at most CIFAR-100's "
                             f"{deit_recipe.CIFAR100_TEST} test images, got {self.n_test}")
        for field, epochs in (("epochs", self.epochs), ("terminal.epochs", self.terminal.epochs)):
            if self.warmup_epochs and epochs <= self.warmup_epochs:
                raise ValueError(f"{name}.{field}: expected more than warmup_epochs="
                                 f"{self.warmup_epochs}, got {epochs}")

    @property
    def scales(self) -> tuple[str, ...]:
        """Labels of the sweep's image counts, e.g. ``"3000 images"``."""
        return tuple(f"{n} images" for n in self.n_train)


def train_vit_stack_runs(settings: ViTStudySettings, images: lv.StudyImages, part: str,
                         n_train: int, dim: int, setting: str, seeds: Sequence[int],
                         device: str, ckpt: RunDir | None = None) -> list[ViTRun]:
    """The runs of one (part, image count, width, head setting): its seeds trained together
    (:func:`~ddcl_theory.experiments.laplacian_vit.train_vit_stack`), early stopped at their
    validation optima (the terminal part: to the end of its schedule), each measured by
    :func:`measure_vit`. Deterministic given the seeds; resumable after every epoch."""
    if part not in PARTS:
        raise ValueError(f"part: expected one of {PARTS}, got {part!r}")
    terminal = part == "terminal"
    tensors = {k: v.to(device) for k, v in lv.study_patches(images, n_train,
                                                            settings.patch).items()}
    x, y = tensors["x_fit"], tensors["y_fit"]
    n_lap = laplacian_count(setting, settings.heads)

    def make(_seed: int) -> ViT:
        return ViT(x.shape[1], x.shape[2], images.num_classes, dim=dim, depth=settings.depth,
                   heads=settings.heads, laplacian_heads=n_lap, mlp_ratio=settings.mlp_ratio,
                   pool="mean")

    epochs = settings.terminal.epochs if terminal else settings.epochs
    patience = None if terminal else settings.patience
    key = f"{part},n={n_train},d={dim},setting={setting}"
    models, log = lv.train_vit_stack(
        make, seeds, x, y, tensors["x_val"], tensors["y_val"], device, epochs=epochs,
        lr=settings.lr, weight_decay=settings.weight_decay, batch_size=settings.batch_size,
        patience=patience, run=ckpt, name=key, desc=f"ViT {key}")
    n_ev = n_train if terminal else min(settings.n_train_eval, n_train)
    runs = []
    for i, (seed, model) in enumerate(zip(seeds, models)):
        measured = measure_vit(model, tensors["x_eval"], tensors["y_eval"], x[:n_ev], y[:n_ev])
        runs.append(ViTRun(
            part=part, n_train=n_train, dim=dim, setting=setting, laplacian_heads=n_lap,
            seed=int(seed), val_loss=tuple(log.val_loss[:, i].tolist()),
            val_acc=tuple(log.val_acc[:, i].tolist()),
            train_loss=tuple(log.train_loss[:, i].tolist()), best_epoch=int(log.best_epoch[i]),
            epochs=epochs, patience=patience, **measured))
    return runs


@dataclass
class ViTStudy:
    """Every run of the ViT study, and what the decisions read of the data."""

    settings: ViTStudySettings
    runs: list[ViTRun]
    source: str
    num_classes: int
    tokens: int

    def by(self, setting: str, *, part: str = "sweep", n_train: int | None = None,
           dim: int | None = None) -> list[ViTRun]:
        """The runs of one head setting in one part, in seed order (``n_train`` default: the
        sweep's largest count, else the part's own; ``dim`` default: the part's width)."""
        st = self.settings
        if n_train is None:
            n_train = {"sweep": st.n_train[-1], "terminal": st.terminal.n_train,
                       "wide": st.wide.n_train}[part]
        if dim is None:
            dim = st.wide.dim if part == "wide" else st.dim
        return sorted((r for r in self.runs if (r.part, r.setting, r.n_train, r.dim)
                       == (part, setting, n_train, dim)), key=lambda r: r.seed)

    def values(self, field: str, setting: str, **where) -> np.ndarray:
        """(seeds,) of a :class:`ViTRun` attribute, or ``"final.<part>"`` / ``"stream.<l>.<part>"``
        of its ANOVA splits, for the runs :meth:`by` selects."""
        def get(run: ViTRun) -> float:
            obj = run
            for part in field.split("."):
                obj = obj[int(part)] if part.lstrip("-").isdigit() else getattr(obj, part)
            return float(obj)
        return np.array([get(r) for r in self.by(setting, **where)], dtype=float)

    def counts(self) -> dict[str, int]:
        """Laplacian heads per layer of each head setting of the sweep."""
        return {s: laplacian_count(s, self.settings.heads) for s in self.settings.head_settings}


def study_images(settings: ViTStudySettings) -> lv.StudyImages:
    """The images of the study's ``recipe``: ``plain``, the CIFAR-10 subset and its evaluation
    pool (:func:`~ddcl_theory.experiments.laplacian_vit.load_study_images`); ``deit``, CIFAR-100
    (:func:`~ddcl_theory.experiments.deit_recipe.paper_study_images`)."""
    if settings.recipe == "deit":
        return deit_recipe.paper_study_images(settings.n_val, settings.n_test)
    return lv.load_study_images(settings.n_val, settings.n_test)


def deit_recipe_of(settings: ViTStudySettings, image_size: int = 32
                   ) -> deit_recipe.DeiTRecipe:
    """The :class:`~ddcl_theory.experiments.deit_recipe.DeiTRecipe` of ``recipe="deit"``: the
    profile's augmentation, label smoothing and stochastic depth, with the study's shapes,
    batch, epochs, warm-up, rate (the peak per 512 images), weight decay and patience."""
    return deit_recipe.DeiTRecipe.from_profile(
        image_size=image_size, patch=settings.patch, dim=settings.dim, depth=settings.depth,
        heads=settings.heads, mlp_ratio=settings.mlp_ratio, batch_size=settings.batch_size,
        epochs=settings.epochs, warmup_epochs=settings.warmup_epochs, lr=settings.lr,
        weight_decay=settings.weight_decay, patience=settings.patience)


@functools.lru_cache(maxsize=1)
def _worker_images(settings: ViTStudySettings) -> lv.StudyImages:
    """The study's images, loaded once per worker process."""
    return study_images(settings)


def _stack_unit(settings: ViTStudySettings, images: lv.StudyImages | None, part: str,
                n_train: int, dim: int, setting: str, seeds: Sequence[int], device: str,
                ckpt: RunDir | None = None) -> list[ViTRun]:
    """The runs of one unit under the study's recipe and thread limit, in any process
    (``images`` None: the study's own, loaded here)."""
    images = images or _worker_images(settings)
    with _threads(settings.threads):
        if settings.recipe == "deit":
            epochs = settings.terminal.epochs if part == "terminal" else settings.epochs
            recipe = deit_recipe_of(settings, images.x_fit.shape[1])
            return deit_recipe.deit_stack_runs(
                recipe, images, part, n_train, dim, setting, seeds, device,
                n_train_eval=settings.n_train_eval, epochs=epochs, ckpt=ckpt)
        return train_vit_stack_runs(settings, images, part, n_train, dim, setting, seeds,
                                    device, ckpt)


def run_vit(settings: ViTStudySettings | None = None,
            images: lv.StudyImages | None = None) -> ViTStudy:
    """Every run of the ViT study: the sweep (each image count, each head setting), the
    terminal runs and the wide runs, the seeds of each stacked, under the settings' ``recipe``.
    ``images`` default: :func:`study_images`. Finished stacks are kept
    in the run directory (reference and paper profiles) and a killed study resumes."""
    settings = settings or ViTStudySettings.from_profile()
    injected = images is not None
    images = images or study_images(settings)
    device = profile.current().device
    ckpt = RunDir("laplacian_study_vit", settings)
    largest = settings.n_train[-1]
    jobs = [("sweep", n, settings.dim, s,
             settings.seeds + (settings.extra_seeds if n == largest else ()))
            for n in settings.n_train for s in settings.head_settings]
    jobs += [("terminal", settings.terminal.n_train, settings.dim, s, settings.terminal.seeds)
             for s in PAIR]
    jobs += [("wide", settings.wide.n_train, dim, s, settings.wide.seeds)
             for dim in settings.wide.dims for s in PAIR]
    shared = images if injected or settings.workers == 1 else None    # workers load their own
    units = [(f"{part},n={n},d={dim},setting={s}",
              (settings, shared, part, n, dim, s, seeds, device, ckpt))
             for part, n, dim, s, seeds in jobs]
    costs = [n * dim ** 2 * len(seeds) * (settings.terminal.epochs if part == "terminal"
                                          else settings.epochs)
             for part, n, dim, _, seeds in jobs]
    with _threads(settings.threads):
        stacks = map_units(ckpt, _stack_unit, units, workers=settings.workers,
                           desc="ViT stacks", costs=costs)
    runs = [run for stack in stacks for run in stack]
    ckpt.finish()
    tokens = (images.x_fit.shape[1] // settings.patch) ** 2 + (settings.recipe == "deit")
    return ViTStudy(settings, runs, images.source, images.num_classes, tokens)
