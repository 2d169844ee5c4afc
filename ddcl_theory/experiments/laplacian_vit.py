"""Laplacian-head sweep on a small ViT (claims L6, L7, L8 of Zhang & Papyan 2026).

For every head setting (number of Laplacian heads per layer: none, one, half, all) and seed, a
ViT (:class:`ddcl_theory.models.vit.ViT`, mean pooling) is trained on the CIFAR-10 subset
(:func:`ddcl_theory.data.load_cifar10`) and evaluated on the test images: accuracy, the ANOVA
split of the last layer's token representations, Neural Collapse metrics of their sequence means
and the spectral decay k99 of the tokens.

"Last-layer token representations" are the outputs of the final LayerNorm (B, T, d): what the
classifier reads (its input is their sequence mean). The within-sequence share and k99 are also
recorded on the residual stream before that LayerNorm (fields ``*_stream``).
"""
from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ddcl_theory import data
from ddcl_theory.experiments import require_positive_ints
from ddcl_theory.metrics import geometry as metrics

# the decision rules' comparison beyond the seed spread, re-exported here for orbital_debris
from ddcl_theory.metrics.seeds import compare
from ddcl_theory.models.transformer import value_output_maps
from ddcl_theory.models.vit import ViT
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.training import TrainLog, fit

__all__ = ["HEAD_SETTINGS", "laplacian_count", "ViTSettings", "ViTRun", "ViTSweep", "run",
           "summarise", "compare", "num_threads", "head_sign_balances", "prepare_patches",
           "train_vit"]

HEAD_SETTINGS = ("0", "1", "half", "all")
#: Training and test images of the paper smoke test (one batch of the paper's size each).
SMOKE_IMAGES = 128
#: Head settings of the paper smoke test: no, some and only Laplacian heads (every code path).
SMOKE_HEAD_SETTINGS = ("0", "half", "all")


def laplacian_count(setting: str, heads: int) -> int:
    """Laplacian heads per layer for a setting name: ``"half"``, ``"all"`` or a digit string
    ``"k"`` with ``0 <= k <= heads`` (e.g. ``"0"``, ``"1"``, ``"5"``)."""
    counts = {"half": heads // 2, "all": heads}
    if setting in counts:
        return counts[setting]
    if isinstance(setting, str) and setting.isdigit() and int(setting) <= heads:
        return int(setting)
    raise ValueError(f"setting: expected 'half', 'all' or a count in [0, {heads}] as a string, "
                     f"got {setting!r}")


@contextlib.contextmanager
def num_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)`` (None: leave as is); restore after."""
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def summarise(runs: Sequence, field: str, settings: Sequence[str] = HEAD_SETTINGS
              ) -> dict[str, tuple[float, float]]:
    """``{setting: (mean, std)}`` of ``field`` over seeds (population std, ddof=0).

    Runs where the field is ``None`` are skipped; a setting with no value is left out.
    """
    out = {}
    for s in settings:
        values = np.array([v for r in runs if r.setting == s
                           if (v := getattr(r, field)) is not None], dtype=np.float64)
        if values.size:
            out[s] = (float(values.mean()), float(values.std()))
    return out


@dataclass(frozen=True)
class ViTSettings:
    """Scale of the ViT sweep; :meth:`from_profile` picks it from the active profile."""

    n_train: int
    n_test: int
    patch: int
    dim: int
    depth: int
    heads: int
    mlp_ratio: int
    batch_size: int
    epochs: int
    lr: float
    weight_decay: float
    seeds: tuple[int, ...]
    head_settings: tuple[str, ...] = HEAD_SETTINGS
    threads: int | None = 1

    @classmethod
    def from_profile(cls) -> "ViTSettings":
        """cpu and paper scales; the paper smoke test keeps the paper model and shrinks the
        budget: one epoch over :data:`SMOKE_IMAGES` training images, one seed, three head
        settings (none, some, all Laplacian)."""
        p = profile.current()
        return cls(n_train=p.pick(cpu=3000, paper=10000, smoke=SMOKE_IMAGES),
                   n_test=p.pick(cpu=1000, paper=1000, smoke=SMOKE_IMAGES),
                   patch=p.pick(cpu=8, paper=4), dim=p.pick(cpu=32, paper=192),
                   depth=p.pick(cpu=2, paper=6), heads=p.pick(cpu=4, paper=6),
                   mlp_ratio=p.pick(cpu=2, paper=4), batch_size=p.pick(cpu=128, paper=128),
                   epochs=p.pick(cpu=4, paper=60, smoke=1), lr=p.pick(cpu=3e-3, paper=1e-3),
                   weight_decay=p.pick(cpu=0.0, paper=0.05),
                   seeds=p.pick(cpu=(0, 1, 2), paper=(0, 1, 2), smoke=(0,)),
                   head_settings=p.pick(cpu=HEAD_SETTINGS, paper=HEAD_SETTINGS,
                                        smoke=SMOKE_HEAD_SETTINGS),
                   threads=p.pick(cpu=1, paper=None))

    def __post_init__(self) -> None:
        require_positive_ints(self, skip=("lr", "weight_decay", "seeds", "head_settings",
                                          "threads"))
        if not self.seeds:
            raise ValueError("seeds: expected at least one seed")
        for s in self.head_settings:
            laplacian_count(s, self.heads)


@dataclass(frozen=True)
class ViTRun:
    """One trained ViT: its head setting, seed and measurements on the test images."""

    setting: str
    laplacian_heads: int
    seed: int
    train_loss: float          # mean cross-entropy over the last epoch
    test_acc: float
    within_seq: float          # ANOVA fractions of the total token variance
    between_seq: float
    within_class: float
    between_class: float
    nc1: float
    equinorm: float
    cos_mean: float
    k99: int
    within_seq_stream: float   # the same two measures on the residual stream before the final
    k99_stream: int            # LayerNorm (a robustness check of the choice of representation)
    attn_sign_balance: float | None   # mean metrics.sign_balance of M_h = W_V,h W_O,h over the
    lap_sign_balance: float | None    # ordinary / Laplacian heads (None when there are none)


@dataclass
class ViTSweep:
    """All runs of a sweep with the data facts needed to read them."""

    settings: ViTSettings
    runs: list[ViTRun]
    source: str
    num_classes: int
    tokens: int

    def summary(self, field: str) -> dict[str, tuple[float, float]]:
        return summarise(self.runs, field, self.settings.head_settings)


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


def train_one(settings: ViTSettings, setting: str, seed: int, tensors: tuple, num_classes: int,
              device: str, ckpt: RunDir | None = None) -> ViTRun:
    """Train one ViT and measure it; deterministic given the seed (CPU, fixed threads).

    With an enabled ``ckpt`` (the paper profile) the training state is saved after every epoch
    and a saved state of this (setting, seed) is resumed from.
    """
    p_tr, y_tr, p_te, y_te = (t.to(device) for t in tensors)
    gen = profile.seed_everything(seed)
    n_lap = laplacian_count(setting, settings.heads)
    model = ViT(p_tr.shape[1], p_tr.shape[2], num_classes, dim=settings.dim,
                depth=settings.depth, heads=settings.heads, laplacian_heads=n_lap,
                mlp_ratio=settings.mlp_ratio, pool="mean").to(device)
    log = train_vit(model, settings, p_tr, y_tr, gen, device, run=ckpt,
                    name=f"state-setting={setting},seed={seed}",
                    desc=f"ViT {setting} seed {seed}")
    with torch.no_grad():
        logits, states = model(p_te, return_hidden=True)
        tokens = model.norm(states[-1])                           # (N, T, d)
    stream = states[-1].double().cpu().numpy()
    attn_balance, lap_balance = head_sign_balances(model)
    acc = float((logits.argmax(-1) == y_te).float().mean())
    tok = tokens.double().cpu().numpy()
    labels = y_te.cpu().numpy()
    fr = metrics.anova_split(tok, labels).fractions()
    nc = metrics.neural_collapse(tok.mean(axis=1), labels)
    return ViTRun(setting=setting, laplacian_heads=n_lap, seed=seed,
                  train_loss=float(np.mean(log.last_round_losses)), test_acc=acc,
                  within_seq=fr["within_sequence"], between_seq=fr["between_sequence"],
                  within_class=fr["within_class"], between_class=fr["between_class"],
                  nc1=nc.nc1, equinorm=nc.equinorm, cos_mean=nc.cos_mean,
                  k99=metrics.k99(tok.reshape(-1, tok.shape[-1])),
                  within_seq_stream=metrics.anova_split(stream).fractions()["within_sequence"],
                  k99_stream=metrics.k99(stream.reshape(-1, stream.shape[-1])),
                  attn_sign_balance=attn_balance, lap_sign_balance=lap_balance)


def run(settings: ViTSettings | None = None) -> ViTSweep:
    """Train and measure every (head setting, seed) pair of ``settings``.

    In the paper profile every finished (setting, seed) run is checkpointed, and so is the
    training state within a run after every epoch (:class:`RunDir`): a killed sweep resumes
    where it stopped.
    """
    settings = settings or ViTSettings.from_profile()
    device = profile.current().device
    ckpt = RunDir("laplacian_vit", settings)
    with num_threads(settings.threads):
        *tensors, source, num_classes = prepare_patches(settings)
        done = [ckpt.unit(f"setting={s},seed={seed}",
                          functools.partial(train_one, settings, s, seed, tuple(tensors),
                                            num_classes, device, ckpt))
                for s in settings.head_settings for seed in settings.seeds]
    ckpt.finish()
    return ViTSweep(settings, done, source, num_classes, tokens=int(tensors[0].shape[1]))
