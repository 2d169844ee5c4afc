"""Claims L6-L9 of Zhang & Papyan 2026 with paired seeds, plateau flags and a scale trend.

Two studies, each a set of (head setting, seed) runs whose seeds are paired: seed s gives every
head setting the same initialisation stream (a Laplacian head has no parameter of its own, so the
models of all settings draw the same weights) and the same batches.

* **ViT** (L6, L7, L8): the ViT of :mod:`ddcl_theory.experiments.laplacian_vit`, trained by its
  one training path :func:`~ddcl_theory.experiments.laplacian_vit.train_vit` (AdamW, cosine
  schedule over the whole run) on the first ``n_train`` CIFAR-10 images; the next ``n_val``
  training images are a validation split whose loss is recorded after every epoch (the plateau
  curve). At the epochs in ``checkpoints`` (the scales of the trend; the last is the end of the
  run) the test images are measured: accuracy, the ANOVA shares of the last layer's token
  representations, NC1 of their sequence means, the participation ratio and k99 of the tokens,
  and training accuracy and NC1 on ``n_train_eval`` training images (how close the run is to the
  terminal phase).
* **GPT** (L9): the character GPT of :mod:`ddcl_theory.models.char_gpt` on Tiny Shakespeare,
  none vs ``l9_setting`` Laplacian heads per layer (5, as in the paper), trained for ``steps``
  steps in ``rounds`` rounds; after every round (and before the first) the fixed validation
  windows give the validation loss and the CDNV of next-character classes, so the CDNV can be
  compared at a matched validation loss (:func:`ddcl_theory.metrics.matched.at_matched_loss`).
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from threadpoolctl import threadpool_limits

from ddcl_theory.experiments import laplacian_vit as lv
from ddcl_theory.experiments.laplacian_common import bad_head_settings, laplacian_count
from ddcl_theory.experiments.laplacian_gpt import (
    next_char_loss,
    next_char_windows,
    text_splits,
)
from ddcl_theory.metrics import geometry as metrics
from ddcl_theory.metrics.convergence import convergence
from ddcl_theory.metrics.participation import participation_ratio
from ddcl_theory.models.char_gpt import CharGPT
from ddcl_theory.models.vit import ViT
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, nested, setting
from ddcl_theory.runtime.threads import num_threads
from ddcl_theory.runtime.training import fit

__all__ = ["ViTStudySettings", "ViTPoint", "ViTStudyRun", "ViTStudy", "GPTStudySettings",
           "GPTPoint", "GPTStudyRun", "GPTStudy", "run_vit", "run_gpt", "train_vit_run",
           "train_gpt_run"]


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
class ViTStudySettings(Settings):
    """The ViT study: ``vit`` (model, optimiser, run length ``vit.epochs``, seeds, head
    settings), the validation split, the checkpoint epochs (scales) and the training images on
    which training accuracy and NC1 are measured.

    cpu: the small run (3000 images, 4 epochs, 3 seeds) measured after epochs 1, 2 and 4;
    reference: the same model on 3000 images for 20 epochs, 5 paired seeds (the rules' number),
    measured after epochs 5, 10 and 20; paper: the paper-profile ViT for 60 epochs, 5 seeds."""

    vit: lv.ViTSettings = nested(
        lv.ViTSettings,
        epochs=setting(4, reference=20, paper=60, smoke=1),
        seeds=setting((0, 1, 2), reference=(0, 1, 2, 3, 4), paper=(0, 1, 2, 3, 4), smoke=(0,)))
    n_val: int = setting(500, paper=1000, smoke=64, ge=1)
    checkpoints: tuple[int, ...] = setting((1, 2, 4), reference=(5, 10, 20), paper=(15, 30, 60),
                                           smoke=(1,), ge=1, nonempty=True)
    n_train_eval: int = setting(500, reference=1000, paper=2000, smoke=64, ge=1)

    def check(self) -> None:
        cps = self.checkpoints
        if list(cps) != sorted(set(cps)) or cps[-1] != self.vit.epochs:
            raise ValueError(f"ViTStudySettings.checkpoints: expected increasing epochs >= 1 "
                             f"ending at vit.epochs={self.vit.epochs}, got {cps!r}")
        if "0" not in self.vit.head_settings:
            raise ValueError(f"ViTStudySettings.vit.head_settings: expected '0' (no Laplacian "
                             f"head, the study's baseline) among them, got "
                             f"{self.vit.head_settings!r}")

    @property
    def scales(self) -> tuple[str, ...]:
        """Labels of the checkpoints, e.g. ``"6 ep"``."""
        return tuple(f"{e} ep" for e in self.checkpoints)


@dataclass(frozen=True)
class ViTPoint:
    """Measurements of one run after ``epoch`` epochs (test images unless named train)."""

    epoch: int
    val_loss: float
    test_acc: float
    train_acc: float
    within_seq: float
    between_class: float
    nc1: float
    nc1_train: float
    pr: float               # participation ratio of the tokens after the final LayerNorm
    k99: int
    pr_stream: float        # the same on the residual stream before the final LayerNorm


@dataclass(frozen=True)
class ViTStudyRun:
    setting: str
    laplacian_heads: int
    seed: int
    curve: tuple[float, ...]         # validation loss after every epoch (the plateau curve)
    train_curve: tuple[float, ...]   # mean training loss of every epoch
    points: tuple[ViTPoint, ...]     # one per checkpoint, in order
    plateau: bool                    # convergence(curve).plateau at the end of the run
    change: float                    # convergence(curve).change
    attn_sign_balance: float | None
    lap_sign_balance: float | None

    @property
    def final(self) -> ViTPoint:
        return self.points[-1]


@dataclass
class ViTStudy:
    settings: ViTStudySettings
    runs: list[ViTStudyRun]
    source: str
    num_classes: int
    tokens: int

    def by(self, setting: str) -> list[ViTStudyRun]:
        """The runs of one head setting in seed order."""
        return sorted((r for r in self.runs if r.setting == setting), key=lambda r: r.seed)

    def values(self, setting: str, field: str, at: int = -1) -> np.ndarray:
        """(seeds,) of a :class:`ViTPoint` field at checkpoint index ``at``."""
        return np.array([getattr(r.points[at], field) for r in self.by(setting)], dtype=float)

    def counts(self) -> dict[str, int]:
        """Laplacian heads per layer of each setting."""
        return {s: laplacian_count(s, self.settings.vit.heads)
                for s in self.settings.vit.head_settings}


def _vit_tensors(settings: ViTStudySettings) -> tuple:
    """(fit patches, fit labels, val patches, val labels, test patches, test labels, source,
    classes): the first ``n_train`` training images are fitted, the next ``n_val`` validate."""
    st = settings.vit
    both = dataclasses.replace(st, n_train=st.n_train + settings.n_val)
    p_tr, y_tr, p_te, y_te, source, classes = lv.prepare_patches(both)
    n = st.n_train
    return p_tr[:n], y_tr[:n], p_tr[n:], y_tr[n:], p_te, y_te, source, classes


def _measure_vit(model: ViT, epoch: int, val_loss: float, p_te, y_te, p_ev, y_ev) -> ViTPoint:
    with torch.no_grad():
        logits, states = model(p_te, return_hidden=True)
        tokens = model.norm(states[-1])
        ev_logits, ev_states = model(p_ev, return_hidden=True)
        ev_means = model.norm(ev_states[-1]).mean(1)
    tok = tokens.double().cpu().numpy()
    flat = tok.reshape(-1, tok.shape[-1])
    labels = y_te.cpu().numpy()
    fr = metrics.anova_split(tok, labels).fractions()
    stream = states[-1].double().cpu().numpy()
    return ViTPoint(
        epoch=epoch, val_loss=val_loss,
        test_acc=float((logits.argmax(-1) == y_te).float().mean()),
        train_acc=float((ev_logits.argmax(-1) == y_ev).float().mean()),
        within_seq=fr["within_sequence"], between_class=fr["between_class"],
        nc1=metrics.neural_collapse(tok.mean(axis=1), labels).nc1,
        nc1_train=metrics.neural_collapse(ev_means.double().cpu().numpy(),
                                          y_ev.cpu().numpy()).nc1,
        pr=participation_ratio(flat), k99=metrics.k99(flat),
        pr_stream=participation_ratio(stream.reshape(-1, stream.shape[-1])))


def train_vit_run(settings: ViTStudySettings, setting: str, seed: int, tensors: tuple,
                  num_classes: int, device: str, ckpt: RunDir | None = None) -> ViTStudyRun:
    """Train one ViT of the study and measure it at every checkpoint; deterministic given the
    seed; resumable after every epoch through ``ckpt``."""
    p_tr, y_tr, p_va, y_va, p_te, y_te = (t.to(device) for t in tensors)
    st = settings.vit
    gen = profile.seed_everything(seed)
    n_lap = laplacian_count(setting, st.heads)
    model = ViT(p_tr.shape[1], p_tr.shape[2], num_classes, dim=st.dim, depth=st.depth,
                heads=st.heads, laplacian_heads=n_lap, mlp_ratio=st.mlp_ratio,
                pool="mean").to(device)
    p_ev, y_ev = p_tr[:settings.n_train_eval], y_tr[:settings.n_train_eval]

    def end_of_round(r: int) -> dict:
        model.eval()
        with torch.no_grad():
            val = float(F.cross_entropy(model(p_va), y_va))
        out: dict = {"val_loss": val}
        if r + 1 in settings.checkpoints:
            out["point"] = dataclasses.asdict(_measure_vit(model, r + 1, val, p_te, y_te,
                                                           p_ev, y_ev))
        model.train()
        return out

    log = lv.train_vit(model, st, p_tr, y_tr, gen, device, end_of_round=end_of_round,
                       run=ckpt, name=f"study-setting={setting},seed={seed}",
                       desc=f"ViT {setting} seed {seed}")
    curve = tuple(float(m["val_loss"]) for m in log.metrics)
    conv = convergence(curve)
    attn, lap = lv.head_sign_balances(model)
    return ViTStudyRun(setting, n_lap, seed, curve,
                       tuple(float(np.mean(x)) for x in log.losses),
                       tuple(ViTPoint(**m["point"]) for m in log.metrics if "point" in m),
                       conv.plateau, float(conv.change), attn, lap)


def run_vit(settings: ViTStudySettings | None = None) -> ViTStudy:
    """Every (head setting, seed) run of the ViT study; finished runs are kept in the run
    directory (reference and paper profiles) and a killed sweep resumes."""
    settings = settings or ViTStudySettings.from_profile()
    device = profile.current().device
    ckpt = RunDir("laplacian_study_vit", settings)
    with _threads(settings.vit.threads):
        *tensors, source, classes = _vit_tensors(settings)
        runs = [ckpt.unit(f"setting={s},seed={seed}",
                          lambda s=s, seed=seed: train_vit_run(settings, s, seed, tuple(tensors),
                                                               classes, device, ckpt))
                for seed in settings.vit.seeds for s in settings.vit.head_settings]
    ckpt.finish()
    return ViTStudy(settings, runs, source, classes, tokens=int(tensors[0].shape[1]))


# ============================================================================================
# GPT
# ============================================================================================

@dataclass(frozen=True)
class GPTStudySettings(Settings):
    """The GPT study (L9): model and budget, the rounds of evaluation and which of them are the
    trend's scales (``checkpoints``, 1-based, the last is the end of the run).

    cpu: width 32, 8 heads (5 Laplacian, the paper's count), 150 steps, 3 seeds; reference: the
    same model for 600 steps, 5 paired seeds, scales after 150, 300 and 600 steps; paper: the
    paper-profile GPT (block 256, width 384, 6 layers, 12 heads), 5000 steps."""

    block_size: int = setting(32, paper=256, ge=1)
    dim: int = setting(32, paper=384, ge=1)
    depth: int = setting(2, paper=6, ge=1)
    heads: int = setting(8, paper=12, ge=1)
    mlp_ratio: int = setting(4, ge=1)
    batch_size: int = setting(32, paper=64, smoke=4, ge=1)
    steps: int = setting(150, reference=600, paper=5000, smoke=2, ge=1)
    rounds: int = setting(6, reference=12, paper=20, smoke=2, ge=1)
    checkpoints: tuple[int, ...] = setting((2, 3, 6), reference=(3, 6, 12), paper=(5, 10, 20),
                                           smoke=(1, 2), ge=1, nonempty=True)
    lr: float = setting(3e-3, paper=1e-3, gt=0)
    eval_windows: int = setting(128, paper=512, smoke=16, ge=1)
    cdnv_min_count: int = setting(10, ge=1)
    seeds: tuple[int, ...] = setting((0, 1, 2), reference=(0, 1, 2, 3, 4),
                                     paper=(0, 1, 2, 3, 4), smoke=(0,), ge=0, nonempty=True)
    l9_setting: str = setting("5")
    threads: int | None = setting(1, paper=None, ge=1)

    def check(self) -> None:
        if bad_head_settings((self.l9_setting,), self.heads):
            raise ValueError(f"GPTStudySettings.l9_setting: expected 'half', 'all' or a count "
                             f"in [0, heads={self.heads}] as a string, got {self.l9_setting!r}")
        if self.steps % self.rounds:
            raise ValueError(f"GPTStudySettings.rounds: expected a divisor of "
                             f"steps={self.steps}, got {self.rounds}")
        cps = self.checkpoints
        if list(cps) != sorted(set(cps)) or cps[-1] != self.rounds:
            raise ValueError(f"GPTStudySettings.checkpoints: expected increasing rounds >= 1 "
                             f"ending at rounds={self.rounds}, got {cps!r}")

    @property
    def head_settings(self) -> tuple[str, str]:
        return ("0", self.l9_setting)

    @property
    def scales(self) -> tuple[str, ...]:
        per = self.steps // self.rounds
        return tuple(f"{c * per} steps" for c in self.checkpoints)


@dataclass(frozen=True)
class GPTPoint:
    step: int
    val_loss: float
    cdnv: float
    pr: float


@dataclass(frozen=True)
class GPTStudyRun:
    setting: str
    laplacian_heads: int
    seed: int
    points: tuple[GPTPoint, ...]     # before training, then after every round
    train_curve: tuple[float, ...]   # mean training loss of every round
    plateau: bool                    # convergence of the validation curve (rounds)
    change: float

    @property
    def curve(self) -> tuple[float, ...]:
        """Validation loss after every round (the plateau curve)."""
        return tuple(p.val_loss for p in self.points[1:])


@dataclass
class GPTStudy:
    settings: GPTStudySettings
    runs: list[GPTStudyRun]
    source: str
    vocab_size: int

    def by(self, setting: str) -> list[GPTStudyRun]:
        return sorted((r for r in self.runs if r.setting == setting), key=lambda r: r.seed)


def train_gpt_run(settings: GPTStudySettings, setting: str, seed: int, train_ids: torch.Tensor,
                  val_ids: torch.Tensor, vocab_size: int, device: str,
                  ckpt: RunDir | None = None) -> GPTStudyRun:
    """Train one GPT and measure it before training and after every round; deterministic given
    the seed; resumable after every round through ``ckpt``."""
    gen = profile.seed_everything(seed)
    n_lap = laplacian_count(setting, settings.heads)
    block = settings.block_size
    model = CharGPT(vocab_size, block, dim=settings.dim, depth=settings.depth,
                    heads=settings.heads, laplacian_heads=n_lap,
                    mlp_ratio=settings.mlp_ratio).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=settings.steps)
    per = settings.steps // settings.rounds
    starts = torch.linspace(0, len(val_ids) - block - 2, settings.eval_windows).long().to(device)
    x_val, y_val = next_char_windows(val_ids, starts, block)

    def measure(step: int) -> dict:
        model.eval()
        with torch.no_grad():
            logits, states = model(x_val, return_hidden=True)
            flat = model.norm(states[-1]).reshape(-1, settings.dim).double().cpu().numpy()
            loss = float(F.cross_entropy(logits.reshape(-1, vocab_size), y_val.reshape(-1)))
        model.train()
        return dataclasses.asdict(GPTPoint(
            step, loss, metrics.cdnv(flat, y_val.reshape(-1).cpu().numpy(),
                                     min_count=settings.cdnv_min_count),
            participation_ratio(flat)))

    first = measure(0)

    def batches(_r: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for _ in range(per):
            s = torch.randint(0, len(train_ids) - block - 1, (settings.batch_size,),
                              generator=gen).to(device)
            yield next_char_windows(train_ids, s, block)

    log = fit(model, opt, rounds=settings.rounds, batches=batches,
              loss=lambda forward, xy: next_char_loss(forward, *xy), device=device, run=ckpt,
              name=f"study-setting={setting},seed={seed}", schedulers=[sched],
              generators={"gen": gen}, end_of_round=lambda r: measure((r + 1) * per),
              desc=f"GPT {setting} seed {seed}")
    points = (GPTPoint(**first),) + tuple(GPTPoint(**m) for m in log.metrics)
    conv = convergence([p.val_loss for p in points[1:]])
    return GPTStudyRun(setting, n_lap, seed, points,
                       tuple(float(np.mean(x)) for x in log.losses), conv.plateau,
                       float(conv.change))


def run_gpt(settings: GPTStudySettings | None = None) -> GPTStudy:
    """Every (head setting, seed) run of the GPT study (none and ``l9_setting`` Laplacian
    heads); resumable like :func:`run_vit`."""
    settings = settings or GPTStudySettings.from_profile()
    device = profile.current().device
    train_ids, val_ids, vocab, source = text_splits(device)
    ckpt = RunDir("laplacian_study_gpt", settings)
    with _threads(settings.threads):
        runs = [ckpt.unit(f"setting={s},seed={seed}",
                          lambda s=s, seed=seed: train_gpt_run(settings, s, seed, train_ids,
                                                               val_ids, len(vocab), device, ckpt))
                for seed in settings.seeds for s in settings.head_settings]
    ckpt.finish()
    return GPTStudy(settings, runs, source, len(vocab))
