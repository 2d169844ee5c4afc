"""A DDCL readout on a small ViT with and without Laplacian heads (claim X2, ours).

Question: Laplacian heads smooth the token representations within a sequence (the chapter
``laplacian_experiments``); does that help the prototypes of a DDCL readout on top? For each
head setting (``"0"``: no Laplacian head, ``"all"``: every head Laplacian) and seed, a
:class:`ddcl_theory.models.vit_readout.ViTDDCL` (the ViT encoder of :mod:`laplacian_vit`, the
DDCL readout with residual and LayerNorm, a linear classifier on ``pooled``) is trained on
CIFAR-10 patches with cross-entropy + beta L_q on the ViT's one training path
(:func:`laplacian_vit.train_vit`), the banks seeded by k-means++ on the tokens that reach them.
Measured: test accuracy; on the test tokens the bank usage (fraction of prototypes that are some
token's argmax) and perplexity, averaged over the readout's heads; the prototype separation (min
and mean pairwise distance, trace) per epoch; the within-sequence share of the variance of the
tokens that reach the readout (ANOVA of :func:`ddcl_theory.metrics.geometry.anova_split`), to
confirm that the Laplacian encoder does smooth them. The verdict is
:func:`ddcl_theory.ledger.decisions.laplacian_readout.decide_x2`.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ddcl_theory.experiments import laplacian_vit as lv
from ddcl_theory.experiments.laplacian_common import laplacian_count, summarise
from ddcl_theory.metrics import geometry as metrics
from ddcl_theory.metrics.prototypes import (
    SEPARATION_KINDS,
    perplexity,
    separation,
    usage,
)
from ddcl_theory.models.vit_readout import ViTDDCL
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, nested, setting
from ddcl_theory.runtime.threads import num_threads

__all__ = ["SETTINGS", "ReadoutSettings", "ReadoutRun", "ReadoutSweep", "run", "train_one"]

SETTINGS = ("0", "all")
#: training and test images of each smoke-test model: four paper-size ViTs (two settings, two
#: seeds, the pairing needs two) on the ViT's 128 took a quarter of the smoke run
SMOKE_IMAGES = 32


@dataclass(frozen=True)
class ReadoutSettings(Settings):
    """Scale of the X2 experiment: the ViT's settings (data, encoder, training) in ``vit``
    and what the readout adds.

    ``vit`` is the ViT's with longer training (10 epochs in the cpu and reference profiles), two
    head settings (none or all Laplacian) and paired seeds: 3 in the cpu profile (a regression
    run, fewer than the X2 rule's 5), 5 in the reference and paper profiles. The paper smoke
    test runs its four models on :data:`SMOKE_IMAGES` images."""

    vit: lv.ViTSettings = nested(
        lv.ViTSettings,
        epochs=setting(10, paper=60, smoke=1),
        seeds=setting((0, 1, 2), reference=(0, 1, 2, 3, 4), paper=(0, 1, 2, 3, 4),
                      smoke=(0, 1)),
        n_train=setting(3000, paper=10000, smoke=SMOKE_IMAGES),
        n_test=setting(1000, smoke=SMOKE_IMAGES),
        head_settings=SETTINGS)
    num_prototypes: int = setting(16, ge=1)
    ddcl_heads: int = setting(2, ge=1)
    temperature: float = setting(1.0, gt=0)
    beta: float = setting(0.01, ge=0)

    def check(self) -> None:
        if len(self.vit.seeds) < 2:
            raise ValueError(f"ReadoutSettings.vit.seeds: expected at least two seeds (for a "
                             f"spread), got {self.vit.seeds!r}")

    @property
    def scales(self) -> tuple[int, ...]:
        """The epochs at which the trend reads the runs (checkpoints of the same runs after
        about a quarter, a half and all of the epochs)."""
        e = self.vit.epochs
        return tuple(sorted({max(1, e // 4), max(1, e // 2), e}))


@dataclass(frozen=True)
class ReadoutRun:
    """One trained model, measured on the test images.

    ``separation_*`` are means over the readout's heads; ``separation_path`` is
    {kind: (epochs + 1,)} (before training, then after every epoch, S_min mean over heads etc.).
    """

    setting: str
    laplacian_heads: int
    seed: int
    test_acc: float
    fraction_used: float
    perplexity: float
    separation_min: float
    separation_mean: float
    separation_trace: float
    separation_path: dict
    within_seq: float
    l_q: float
    v: float
    train_loss: tuple[float, ...] = ()    # mean training loss (CE + beta L_q) of each epoch
    acc_path: tuple[float, ...] = ()      # test accuracy after each epoch
    within_path: tuple[float, ...] = ()   # within-sequence share of the test tokens, each epoch


@dataclass
class ReadoutSweep:
    settings: ReadoutSettings
    runs: list[ReadoutRun]
    source: str
    num_classes: int
    tokens: int

    def summary(self, field: str) -> dict[str, tuple[float, float]]:
        return summarise(self.runs, field, self.settings.vit.head_settings)

    def paired(self, field: str, setting: str, epoch: int | None = None) -> np.ndarray:
        """(n_seeds,) values of ``field`` for ``setting`` in seed order (so that two settings'
        arrays pair by seed); with ``epoch`` (1-based) ``field`` is ``"test_acc"`` or
        ``"within_seq"``, read from its per-epoch path."""
        runs = sorted((r for r in self.runs if r.setting == setting), key=lambda r: r.seed)
        if epoch is None:
            return np.array([getattr(r, field) for r in runs], dtype=float)
        path = {"test_acc": "acc_path", "within_seq": "within_path"}[field]
        return np.array([getattr(r, path)[epoch - 1] for r in runs], dtype=float)


def _separations(model: ViTDDCL) -> dict[str, float]:
    bank = model.readout.prototypes.detach()                      # (H, K, d)
    return {k: float(separation(bank, k).mean()) for k in SEPARATION_KINDS}


def train_one(s: ReadoutSettings, setting: str, seed: int, tensors: tuple, num_classes: int,
              device: str, ckpt: RunDir | None = None) -> ReadoutRun:
    """Train one ViT + DDCL readout on the ViT's one training path
    (:func:`laplacian_vit.train_vit`, loss cross-entropy + beta L_q) and measure it
    (deterministic given the seed on CPU)."""
    p_tr, y_tr, p_te, y_te = (t.to(device) for t in tensors)
    gen = profile.seed_everything(seed)
    n_lap = laplacian_count(setting, s.vit.heads)
    model = ViTDDCL(p_tr.shape[1], p_tr.shape[2], num_classes, dim=s.vit.dim,
                    depth=s.vit.depth, heads=s.vit.heads, laplacian_heads=n_lap,
                    mlp_ratio=s.vit.mlp_ratio, num_prototypes=s.num_prototypes,
                    ddcl_heads=s.ddcl_heads, temperature=s.temperature).to(device)
    model.init_prototypes_from(p_tr[:200], generator=gen)
    before = _separations(model)

    def objective(forward, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = forward(x)
        return F.cross_entropy(out.logits, y) + s.beta * out.readout.losses.l_q

    def end_of_round(_epoch: int) -> dict:
        was_training = model.training
        model.eval()
        with torch.no_grad():
            out = model(p_te)
        model.train(was_training)
        return {**_separations(model),
                "test_acc": float((out.logits.argmax(-1) == y_te).float().mean()),
                "within_seq": metrics.anova_split(
                    out.tokens.double().cpu().numpy()).fractions()["within_sequence"]}

    log = lv.train_vit(model, s.vit, p_tr, y_tr, gen, device, objective=objective,
                       end_of_round=end_of_round, run=ckpt,
                       name=f"state-setting={setting},seed={seed}",
                       desc=f"ViT+DDCL {setting} seed {seed}")
    path = {k: np.array([before[k]] + [m[k] for m in log.metrics]) for k in before}
    model.eval()
    with torch.no_grad():
        out = model(p_te)
    q = out.readout.assignments                                   # (B, H, T, K)
    heads = q.shape[1]
    used = float(np.mean([usage(q[:, h]).fraction_used for h in range(heads)]))
    ppl = float(np.mean([float(perplexity(q[:, h])) for h in range(heads)]))
    tok = out.tokens.double().cpu().numpy()
    sep = _separations(model)
    return ReadoutRun(setting=setting, laplacian_heads=n_lap, seed=seed,
                      test_acc=float((out.logits.argmax(-1) == y_te).float().mean()),
                      fraction_used=used, perplexity=ppl, separation_min=sep["min"],
                      separation_mean=sep["mean"], separation_trace=sep["trace"],
                      separation_path=path,
                      within_seq=metrics.anova_split(tok).fractions()["within_sequence"],
                      l_q=float(out.readout.losses.l_q), v=float(out.readout.losses.v),
                      train_loss=tuple(float(np.mean(r)) for r in log.losses),
                      acc_path=tuple(m["test_acc"] for m in log.metrics),
                      within_path=tuple(m["within_seq"] for m in log.metrics))


def run(settings: ReadoutSettings | None = None) -> ReadoutSweep:
    """Train and measure every (head setting, seed).

    In the paper profile every finished (setting, seed) run is checkpointed, and so is the
    training state within a run after every epoch (:class:`RunDir`).
    """
    s = settings or ReadoutSettings.from_profile()
    device = profile.current().device
    ckpt = RunDir("laplacian_readout", s)
    with num_threads(s.vit.threads):
        *tensors, source, num_classes = lv.prepare_patches(s.vit)
        done = [ckpt.unit(f"setting={setting},seed={seed}",
                          functools.partial(train_one, s, setting, seed, tuple(tensors),
                                            num_classes, device, ckpt))
                for setting in s.vit.head_settings for seed in s.vit.seeds]
    ckpt.finish()
    return ReadoutSweep(s, done, source, num_classes, tokens=int(tensors[0].shape[1]))
