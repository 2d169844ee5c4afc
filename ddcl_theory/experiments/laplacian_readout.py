"""A DDCL readout on a small ViT with and without Laplacian heads (claim X2, ours).

Question: Laplacian heads are said to smooth the tokens within a sequence (the chapter
``laplacian_experiments``); does a DDCL readout on top profit from it? For each training-image
count of ``n_train`` (the scale axis, every count its own runs), head setting (``"0"``: no
Laplacian head, ``"all"``: every head Laplacian) and seed, a
:class:`ddcl_theory.models.vit_readout.ViTDDCL` (the study's ViT encoder, the DDCL readout with
residual and LayerNorm, a linear classifier on ``pooled``) is trained on CIFAR-10 patches with
cross-entropy + beta L_q: AdamW under a cosine schedule over at most ``epochs`` epochs, early
stopped at its lowest validation loss (a split carved from the training images) and read there.

Seeds pair the two encoders: seed s gives both the same initialisation (a Laplacian head has no
parameter of its own), the same k-means++ draws for the banks and the same batch order.

Measured on the evaluation pool (``n_test`` CIFAR-10 training images that no run trains on,
:func:`ddcl_theory.data.cifar10_eval_pool`): the readout's accuracy and per-image correctness;
the absolute ANOVA variances of the encoder's tokens after its final LayerNorm (what the readout
reads) and of the residual stream before it; the readout's bank usage (fraction of prototypes
that are some token's argmax) and perplexity, and the separation of its prototypes, raw and in
units of the spread of the projected tokens they see (:func:`relative_separation`), all averaged
over the readout's heads. The verdict is
:func:`ddcl_theory.ledger.decisions.laplacian_readout.decide_x2`.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from threadpoolctl import threadpool_limits
from torch import nn

from ddcl_theory.experiments import laplacian_vit as lv
from ddcl_theory.experiments.laplacian_common import laplacian_count
from ddcl_theory.metrics import geometry as metrics
from ddcl_theory.metrics.prototypes import perplexity, separation, usage
from ddcl_theory.models.vit_readout import ViTDDCL
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, confirmatory_seeds, setting
from ddcl_theory.runtime.threads import num_threads
from ddcl_theory.runtime.training import fit
from ddcl_theory.runtime.workers import map_units

__all__ = ["SETTINGS", "SMOKE_IMAGES", "CONFIRMATORY_SEEDS", "CONFIRMATORY_RUN",
           "ReadoutSettings", "ReadoutRun", "ReadoutStudy", "BestState", "relative_separation",
           "measure", "train_one", "run"]

#: The head settings compared: no Laplacian head, every head Laplacian.
SETTINGS = ("0", "all")
#: Training images of each smoke-test model (the paper-size ViT on one small batch).
SMOKE_IMAGES = 32
#: Paired seeds of the confirmatory runs (the X2 rule's n_seeds, from its power analysis).
CONFIRMATORY_SEEDS = 43
#: Which confirmatory run of the X2 rule the reference makes: the second, on seeds the first
#: (under the rule before its amendment) did not use.
CONFIRMATORY_RUN = 2
#: Training images whose tokens seed the readout's banks by k-means++.
INIT_IMAGES = 200


@dataclass(frozen=True)
class ReadoutSettings(Settings):
    """Scale of the X2 experiment: data, encoder, readout, training and seeds.

    ``n_train``: the training-image counts (separate runs, the scale axis; a run at n images
    takes the first n of the CIFAR-10 subset less its validation split); ``n_val``: the
    validation split, the subset's last images; ``n_test``: the evaluation pool;
    ``epochs``: the cosine schedule's length (the cap); ``patience``: epochs without a new
    lowest validation loss after which a run stops; ``float64``: the precision of training and
    measuring (float64 in the cpu profile, float32 otherwise).

    cpu: a small pilot (3 seeds, at most 1,200 images) that CI replays; reference: 1,000,
    3,000 and 9,000 images on the confirmatory seeds, scored on 10,000 pool images; paper: the
    paper-profile ViT (width 192, 6 layers, 4x4 patches) on the same counts."""

    n_train: tuple[int, ...] = setting((300, 600, 1200), reference=(1000, 3000, 9000),
                                       paper=(1000, 3000, 9000), smoke=(SMOKE_IMAGES,), ge=1,
                                       nonempty=True)
    n_val: int = setting(500, reference=1000, paper=1000, smoke=SMOKE_IMAGES, ge=1)
    n_test: int = setting(2000, reference=10_000, paper=10_000, smoke=100, ge=10)
    patch: int = setting(8, paper=4, ge=1)
    dim: int = setting(32, paper=192, ge=1)
    depth: int = setting(2, paper=6, ge=1)
    heads: int = setting(4, paper=6, ge=1)
    mlp_ratio: int = setting(2, paper=4, ge=1)
    num_prototypes: int = setting(16, ge=1)
    ddcl_heads: int = setting(2, ge=1)
    temperature: float = setting(1.0, gt=0)
    beta: float = setting(0.01, ge=0)
    batch_size: int = setting(128, ge=1)
    epochs: int = setting(20, reference=30, paper=100, smoke=1, ge=1)
    patience: int = setting(3, reference=4, paper=10, smoke=1, ge=1)
    lr: float = setting(3e-3, paper=1e-3, gt=0)
    weight_decay: float = setting(0.0, paper=0.05, ge=0)
    seeds: tuple[int, ...] = setting((0, 1, 2), reference=confirmatory_seeds(
                                         CONFIRMATORY_SEEDS, run=CONFIRMATORY_RUN),
                                     paper=confirmatory_seeds(CONFIRMATORY_SEEDS), smoke=(0, 1),
                                     ge=0, nonempty=True)
    threads: int | None = setting(1, paper=None, ge=1)
    #: Processes that train the runs (each on ``threads`` threads): the reference profile uses
    #: both cores of a 2-core machine; the numbers do not depend on it.
    workers: int = setting(1, reference=2, ge=1)
    #: Train and measure in float64: the cpu profile's golden then replays on any CPU's kernels
    #: (in float32 their last-bit differences grow over the epochs until an early stop moves).
    float64: bool = setting(True, reference=False, paper=False, smoke=False)

    def check(self) -> None:
        name = type(self).__name__
        if len(self.seeds) < 2 or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"{name}.seeds: expected at least two distinct seeds (paired "
                             f"differences need a spread), got {self.seeds!r}")
        if list(self.n_train) != sorted(set(self.n_train)):
            raise ValueError(f"{name}.n_train: expected increasing image counts, got "
                             f"{self.n_train!r}")
        for field, dim, heads in (("dim", self.dim, self.heads),
                                  ("dim", self.dim, self.ddcl_heads)):
            if dim % heads:
                raise ValueError(f"{name}.{field}: expected a multiple of heads={self.heads} "
                                 f"and ddcl_heads={self.ddcl_heads}, got {dim}")
        if self.n_test % 10:
            raise ValueError(f"{name}.n_test: expected a multiple of the 10 classes, got "
                             f"{self.n_test}")

    @property
    def scales(self) -> tuple[str, ...]:
        """Labels of the image counts, e.g. ``"3000 images"``."""
        return tuple(f"{n} images" for n in self.n_train)


@dataclass(frozen=True)
class ReadoutRun:
    """One trained ViT + DDCL readout, read at its validation optimum (``best_epoch``, 1-based)
    and measured on the evaluation pool.

    ``val_loss``, ``val_acc``: after every epoch run; ``train_loss``: the mean training loss
    (cross-entropy + beta L_q) of every epoch run. ``final``: the absolute ANOVA split of the
    tokens after the final LayerNorm (what the readout reads); ``stream``: of the residual
    stream before it. Readout measures are means over its heads: ``fraction_used`` and
    ``perplexity`` of the pool's assignments; ``separation_min``/``_mean`` of the banks;
    ``relative_min``/``_mean`` the same over the spread of the projected tokens
    (:func:`relative_separation`). ``correct``: the pool's per-image correctness, packed bits
    (:attr:`correct_items`).
    """

    n_train: int
    setting: str
    laplacian_heads: int
    seed: int
    val_loss: tuple[float, ...]
    val_acc: tuple[float, ...]
    train_loss: tuple[float, ...]
    best_epoch: int
    epochs: int
    patience: int
    eval_acc: float
    final: metrics.AnovaSplit
    stream: metrics.AnovaSplit
    fraction_used: float
    perplexity: float
    separation_min: float
    separation_mean: float
    relative_min: float
    relative_mean: float
    l_q: float
    v: float
    correct: bytes
    n_eval: int

    @property
    def epochs_run(self) -> int:
        return len(self.train_loss)

    @property
    def past_optimum(self) -> bool:
        """Stopped by early stopping: ``patience`` epochs without a new lowest validation loss
        followed the optimum before the cap."""
        return self.epochs_run - self.best_epoch >= self.patience

    @property
    def correct_items(self) -> np.ndarray:
        """Per image of the evaluation pool, 1 where the prediction is right, (n_eval,)."""
        return np.unpackbits(np.frombuffer(self.correct, dtype=np.uint8))[: self.n_eval]


@dataclass
class ReadoutStudy:
    """Every run of the X2 experiment, and what the decision reads of the data."""

    settings: ReadoutSettings
    runs: list[ReadoutRun]
    source: str
    num_classes: int
    tokens: int

    def by(self, setting: str, n_train: int | None = None) -> list[ReadoutRun]:
        """The runs of one head setting at ``n_train`` images (default: the largest count), in
        seed order (so that two settings' lists pair by seed)."""
        n = self.settings.n_train[-1] if n_train is None else n_train
        return sorted((r for r in self.runs if (r.setting, r.n_train) == (setting, n)),
                      key=lambda r: r.seed)

    def values(self, field: str, setting: str, n_train: int | None = None) -> np.ndarray:
        """(seeds,) of a :class:`ReadoutRun` attribute, or ``"final.<part>"`` /
        ``"stream.<part>"`` of its ANOVA splits, for the runs :meth:`by` selects."""
        def get(run: ReadoutRun) -> float:
            obj = run
            for part in field.split("."):
                obj = getattr(obj, part)
            return float(obj)
        return np.array([get(r) for r in self.by(setting, n_train)], dtype=float)


def relative_separation(bank: torch.Tensor, z: torch.Tensor, kind: str = "min") -> torch.Tensor:
    """Separation of each head's prototypes in units of the spread of the tokens it sees:
    ``separation(bank[h], kind) / sqrt(mean_t ||z_t - mean z||^2)``, shape (H,).

    The input projection learns the scale of its space, so a raw distance between prototypes
    is not comparable between two models; this ratio is (it does not change when a head's
    space is scaled). ``bank`` (H, K, d); ``z`` (N, H, d) the projected tokens.
    """
    if bank.dim() != 3 or z.dim() != 3 or z.shape[1:] != (bank.shape[0], bank.shape[2]):
        raise ValueError(f"z: expected (N, H, d) tokens matching bank (H, K, d) "
                         f"{tuple(bank.shape)}, got {tuple(z.shape)}")
    z = z.double()
    spread = ((z - z.mean(0)) ** 2).sum(-1).mean(0).sqrt()                  # (H,)
    return separation(bank.double(), kind) / spread


@torch.no_grad()
def measure(model: ViTDDCL, x: torch.Tensor, y: torch.Tensor, chunk: int = 1000) -> dict:
    """The measurements of :class:`ReadoutRun` of one model on the pool ``x`` (N, T, p) with
    labels ``y`` (N,), in evaluation mode and in chunks of ``chunk`` images."""
    was_training = model.training
    model.eval()
    logits, stream, tokens, q, z = [], [], [], [], []
    l_q = v = 0.0
    for i in range(0, x.shape[0], chunk):
        out = model(x[i:i + chunk])
        logits.append(out.logits)
        stream.append(out.stream)
        tokens.append(out.tokens)
        q.append(out.readout.assignments)                                  # (b, H, T, K)
        z.append(out.readout.z)                                            # (b, H, T, d)
        share = out.logits.shape[0] / x.shape[0]
        l_q += share * float(out.readout.losses.l_q)
        v += share * float(out.readout.losses.v)
    model.train(was_training)
    logits, q, z = torch.cat(logits), torch.cat(q), torch.cat(z)
    labels = y.cpu().numpy()
    correct = (logits.argmax(-1) == y).cpu().numpy()
    heads = q.shape[1]
    z_flat = z.transpose(1, 2).reshape(-1, heads, z.shape[-1])            # (N*T, H, d)
    bank = model.readout.prototypes.detach()
    return dict(
        eval_acc=float(correct.mean()),
        final=metrics.anova_split(torch.cat(tokens).double().cpu().numpy(), labels),
        stream=metrics.anova_split(torch.cat(stream).double().cpu().numpy(), labels),
        fraction_used=float(np.mean([usage(q[:, h]).fraction_used for h in range(heads)])),
        perplexity=float(np.mean([float(perplexity(q[:, h])) for h in range(heads)])),
        separation_min=float(separation(bank, "min").mean()),
        separation_mean=float(separation(bank, "mean").mean()),
        relative_min=float(relative_separation(bank, z_flat, "min").mean()),
        relative_mean=float(relative_separation(bank, z_flat, "mean").mean()),
        l_q=l_q, v=v, correct=np.packbits(correct.astype(np.uint8)).tobytes(),
        n_eval=int(len(labels)))


class BestState(nn.Module):
    """The lowest validation loss of a run so far, its epoch (1-based; 0 before the first) and
    a copy of the model's state then. All are buffers, so the training loop checkpoints them
    with the model and a resumed run keeps them."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.keys = list(model.state_dict())
        self.register_buffer("best_loss", torch.tensor(math.inf, dtype=torch.float64))
        self.register_buffer("best_epoch", torch.zeros((), dtype=torch.long))
        for i, value in enumerate(model.state_dict().values()):
            self.register_buffer(f"s{i}", value.detach().clone())

    @torch.no_grad()
    def update(self, model: nn.Module, loss: float, epoch: int) -> bool:
        """Keep the model's state when ``loss`` is the lowest so far; whether it was."""
        if not loss < float(self.best_loss):
            return False
        self.best_loss.fill_(loss)
        self.best_epoch.fill_(epoch)
        for i, value in enumerate(model.state_dict().values()):
            getattr(self, f"s{i}").copy_(value)
        return True

    def restore(self, model: nn.Module) -> None:
        """Put the kept state back into ``model``."""
        model.load_state_dict({k: getattr(self, f"s{i}") for i, k in enumerate(self.keys)})


@torch.no_grad()
def _scores(model: ViTDDCL, x: torch.Tensor, y: torch.Tensor,
            chunk: int = 1000) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of ``model`` on ``x`` (N, T, p), ``y`` (N,)."""
    was_training = model.training
    model.eval()
    loss = right = 0.0
    for i in range(0, x.shape[0], chunk):
        logits = model(x[i:i + chunk]).logits
        loss += float(F.cross_entropy(logits, y[i:i + chunk], reduction="sum"))
        right += float((logits.argmax(-1) == y[i:i + chunk]).sum())
    model.train(was_training)
    return loss / x.shape[0], right / x.shape[0]


def train_one(s: ReadoutSettings, tensors: dict[str, torch.Tensor], n_train: int, setting: str,
              seed: int, num_classes: int, device: str,
              ckpt: RunDir | None = None) -> ReadoutRun:
    """Train one ViT + DDCL readout on the first ``n_train`` images of ``tensors`` (patches of
    :func:`~ddcl_theory.experiments.laplacian_vit.study_patches`: ``x_fit, y_fit, x_val, y_val,
    x_eval, y_eval``), early stopped at its lowest validation loss, and measure it there
    (:func:`measure`). Deterministic given the seed on the CPU; resumable after every epoch
    through ``ckpt``."""
    dtype = torch.float64 if s.float64 else torch.float32
    with _default_dtype(dtype):        # every tensor a run creates, its weights included
        return _train_one(s, tensors, n_train, setting, seed, num_classes, device, ckpt, dtype)


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """torch's default floating dtype set to ``dtype`` inside, restored after."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def _train_one(s: ReadoutSettings, tensors: dict[str, torch.Tensor], n_train: int,
               setting: str, seed: int, num_classes: int, device: str, ckpt: RunDir | None,
               dtype: torch.dtype) -> ReadoutRun:
    x, y = tensors["x_fit"][:n_train].to(device, dtype), tensors["y_fit"][:n_train].to(device)
    x_val, y_val = tensors["x_val"].to(device, dtype), tensors["y_val"].to(device)
    gen = profile.seed_everything(seed)
    n_lap = laplacian_count(setting, s.heads)
    model = ViTDDCL(x.shape[1], x.shape[2], num_classes, dim=s.dim, depth=s.depth,
                    heads=s.heads, laplacian_heads=n_lap, mlp_ratio=s.mlp_ratio,
                    num_prototypes=s.num_prototypes, ddcl_heads=s.ddcl_heads,
                    temperature=s.temperature).to(device, dtype)
    model.init_prototypes_from(x[:INIT_IMAGES], generator=gen)
    best = BestState(model).to(device)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=s.lr,
                            weight_decay=s.weight_decay)
    steps = math.ceil(n_train / s.batch_size)
    total = s.epochs * steps
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: 0.5 * (1 + math.cos(math.pi * min(step, total) / total)))

    def batches(_epoch: int) -> Iterator[torch.Tensor]:
        order = torch.randperm(n_train, generator=gen).to(device)
        return (order[i * s.batch_size:(i + 1) * s.batch_size] for i in range(steps))

    def objective(forward, idx: torch.Tensor) -> torch.Tensor:
        out = forward(x[idx])
        return F.cross_entropy(out.logits, y[idx]) + s.beta * out.readout.losses.l_q

    def end_of_round(r: int) -> dict:
        loss, acc = _scores(model, x_val, y_val)
        best.update(model, loss, r + 1)
        return {"val_loss": loss, "val_acc": acc,
                "stop": r + 1 - int(best.best_epoch) >= s.patience}

    key = f"n={n_train},setting={setting},seed={seed}"
    log = fit(model, opt, rounds=s.epochs, batches=batches, loss=objective, device=device,
              run=ckpt, name=f"state-{key}", schedulers=[sched], generators={"gen": gen},
              modules={"best": best}, end_of_round=end_of_round, stop_if=lambda m: m["stop"],
              desc=f"ViT+DDCL {key}")
    best.restore(model)
    measured = measure(model, tensors["x_eval"].to(device, dtype), tensors["y_eval"].to(device))
    return ReadoutRun(
        n_train=n_train, setting=setting, laplacian_heads=n_lap, seed=int(seed),
        val_loss=tuple(float(m["val_loss"]) for m in log.metrics),
        val_acc=tuple(float(m["val_acc"]) for m in log.metrics),
        train_loss=tuple(float(np.mean(r)) for r in log.losses),
        best_epoch=int(best.best_epoch), epochs=s.epochs, patience=s.patience, **measured)


@contextlib.contextmanager
def _threads(n: int | None) -> Iterator[None]:
    """torch and the BLAS under numpy (the metrics) limited to ``n`` threads (None: as is)."""
    with num_threads(n), (threadpool_limits(limits=n) if n is not None
                          else contextlib.nullcontext()):
        yield


def _unit(s: ReadoutSettings, *args) -> ReadoutRun:
    """:func:`train_one` under the settings' thread limit (one unit, in any process)."""
    with _threads(s.threads):
        return train_one(s, *args)


def run(settings: ReadoutSettings | None = None,
        images: lv.StudyImages | None = None) -> ReadoutStudy:
    """Train and measure every (image count, head setting, seed). ``images`` default:
    :func:`~ddcl_theory.experiments.laplacian_vit.load_study_images` (the CIFAR-10 subset less
    its validation split, and the evaluation pool). Every finished run is kept in the run
    directory (reference and paper profiles), and so is the state within a run after every
    epoch, so a killed experiment resumes."""
    s = settings or ReadoutSettings.from_profile()
    images = images or lv.load_study_images(s.n_val, s.n_test)
    device = profile.current().device
    ckpt = RunDir("laplacian_readout", s)
    jobs = []
    with _threads(s.threads):
        for n in s.n_train:
            tensors = lv.study_patches(images, n, s.patch)
            jobs += [(f"n={n},setting={setting},seed={seed}",
                      (s, tensors, n, setting, seed, images.num_classes, device, ckpt))
                     for setting in SETTINGS for seed in s.seeds]
        runs = map_units(ckpt, _unit, jobs, workers=s.workers, desc="X2 runs")
    ckpt.finish()
    tokens = (images.x_fit.shape[1] // s.patch) ** 2
    return ReadoutStudy(s, runs, images.source, images.num_classes, tokens)
