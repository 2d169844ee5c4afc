"""Claim L9 of Zhang & Papyan 2026: a GPT with and without Laplacian heads.

Under the paper profile the model is GPT-2 small on FineWeb in GPT-2 BPE tokens, each run of the
longest length also scored on HellaSwag (``LMSettings.model="gpt2"``,
:mod:`ddcl_theory.experiments.lm_data`); the rest of this text describes the cpu and reference
profiles' character model, and holds for both with "token" for "character".

The character GPT of :mod:`ddcl_theory.models.char_gpt` on Tiny Shakespeare
(:func:`~ddcl_theory.experiments.laplacian_gpt.text_parts`: the training text, a validation split
carved from the end of the training 90%, the held-out last 10%), none or ``laplacian_heads`` (5,
the paper's count) of the ``heads`` heads of every layer Laplacian. Seed s gives both arms the
same initial weights (a Laplacian head has no parameter of its own) and the same batches.

Each training length of ``steps`` is a run of its own: AdamW, a linear warm-up and a cosine
decay over that length. After every round of ``steps / rounds`` steps (and before the first) a
run measures, on fixed windows, the validation loss, the held-out loss, the loss of training
windows and the CDNV of the held-out tokens after the final LayerNorm, grouped by the character
that follows them (:func:`ddcl_theory.metrics.geometry.cdnv`). Each seed is read at its lowest
validation loss: there, the whole held-out text gives its loss per window. The seeds of one arm
and length train together as one stacked model
(:class:`~ddcl_theory.runtime.stacked.StackedModels`), each seed the twin of its sequential run.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from threadpoolctl import threadpool_limits
from torch import nn

from ddcl_theory.experiments.laplacian_gpt import (
    TextParts,
    next_char_windows,
    spread_starts,
    tiling_starts,
)
from ddcl_theory.experiments.laplacian_vit import BestStates
from ddcl_theory.experiments.lm_data import LMData, lm_data
from ddcl_theory.experiments.optim_groups import decay_groups
from ddcl_theory.metrics import geometry as metrics
from ddcl_theory.models.char_gpt import CharGPT
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.data_parallel import data_parallel, from_main, is_main, shard
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, confirmatory_seeds, setting
from ddcl_theory.runtime.stacked import PerSeedLoss, StackedModels, stacked_batches
from ddcl_theory.runtime.threads import num_threads
from ddcl_theory.runtime.workers import map_units
from ddcl_theory.runtime.training import fit

__all__ = ["LMSettings", "LMRun", "LMStudy", "lr_factor", "measure", "heldout_window_losses",
           "train_lm_stack", "unit_name", "run"]

#: The seeds of the confirmatory run (the rule L9 registers as many).
REFERENCE_SEEDS = 20


@contextlib.contextmanager
def _threads(n: int | None) -> Iterator[None]:
    """torch and the BLAS under numpy (the CDNV) limited to ``n`` threads (None: as is)."""
    with num_threads(n), (threadpool_limits(limits=n) if n is not None
                          else contextlib.nullcontext()):
        yield


@dataclass(frozen=True)
class LMSettings(Settings):
    """The language-model study (L9): the model, the training lengths (each a run of its own
    schedule), the evaluation windows and the seeds.

    ``model``: ``char``, the character GPT on Tiny Shakespeare; ``gpt2``, GPT-2 (transformers'
    model, :class:`~ddcl_theory.models.hf_gpt.HFGPT`) on ``corpus_tokens`` GPT-2 BPE tokens of
    FineWeb, scored on HellaSwag at the longest length (:mod:`ddcl_theory.experiments.lm_data`).
    ``heldout_tokens``: the first ids of the held-out text that are scored (None: all; the
    smoke run's budget). cpu: width 32, 8 heads (5 Laplacian), runs of 50, 100 and 200 steps, 3
    seeds; reference: width 64, runs of 250, 500 and 1000 steps, the rule's seeds at the longest
    (the shorter lengths on the first ``trend_seeds``); paper: GPT-2 small (context 1,024,
    width 768, 12 layers, 12 heads, about 124M parameters), batches of 64 windows, runs of
    1,250, 2,500 and 5,000 steps (up to 328M tokens), one seed a stack, GPT-2's recipe (decay
    on the matrices only, gradients clipped at norm 1). Its seconds a step and peak memory on a
    GPU are the runbook page's, measured by :mod:`ddcl_theory.experiments.recipe_check`."""

    title = "GPT with none or 5 Laplacian heads per layer"

    model: str = setting("char", paper="gpt2", choices=("char", "gpt2"))
    block_size: int = setting(32, paper=1024, ge=2)
    dim: int = setting(32, reference=64, paper=768, ge=1)
    depth: int = setting(2, paper=12, ge=1)
    heads: int = setting(8, paper=12, ge=1)
    laplacian_heads: int = setting(5, ge=1)
    mlp_ratio: int = setting(4, ge=1)
    #: transformers' attention kernel under the Laplacian one (``gpt2`` only): SDPA on the GPU.
    attention: str = setting("eager", paper="sdpa", choices=("eager", "sdpa"))
    batch_size: int = setting(32, reference=64, paper=64, smoke=1, ge=1)
    steps: tuple[int, ...] = setting((50, 100, 200), reference=(250, 500, 1000),
                                     paper=(1250, 2500, 5000), smoke=(2,), ge=1,
                                     nonempty=True)
    rounds: int = setting(10, smoke=2, ge=2)
    lr: float = setting(3e-3, paper=6e-4, gt=0)
    warmup_fraction: float = setting(0.05, ge=0, lt=1)
    final_lr_fraction: float = setting(0.01, ge=0, le=1)
    weight_decay: float = setting(0.1, ge=0)
    #: GPT-2's recipe (paper): decay on the weight matrices and embeddings only, none on biases
    #: and LayerNorms; False decays every parameter (the character GPT's recipe)
    decay_matrices_only: bool = setting(False, paper=True)
    #: clip each seed's gradient norm to this before every step (paper: 1.0, GPT-2's recipe;
    #: None: no clipping)
    grad_clip: float | None = setting(None, paper=1.0, gt=0)
    #: the validation split: this fraction of the end of the training text
    val_fraction: float = setting(0.05, paper=0.01, gt=0, lt=0.5)
    #: ``gpt2``: the corpus's first tokens and the fraction of its end held out (``char``
    #: holds out Tiny Shakespeare's last 10%)
    corpus_tokens: int | None = setting(None, paper=400_000_000, smoke=200_000, ge=1)
    heldout_fraction: float | None = setting(None, paper=0.01, gt=0, lt=0.5)
    eval_windows: int = setting(128, reference=256, paper=128, smoke=1, ge=1)
    heldout_tokens: int | None = setting(None, smoke=1025, ge=2)
    #: ``gpt2``: the first HellaSwag items scored (None: all 10,042)
    downstream_items: int | None = setting(None, smoke=2, ge=1)
    cdnv_min_count: int = setting(10, ge=1)
    seeds: tuple[int, ...] = setting((0, 1, 2), reference=confirmatory_seeds(REFERENCE_SEEDS),
                                     paper=(0, 1, 2, 3, 4), smoke=(0,), ge=0, nonempty=True)
    trend_seeds: int = setting(3, reference=5, paper=5, smoke=1, ge=1)
    #: seeds trained together as one stacked model (None: all of a length; GPT-2 small keeps
    #: one, its activations at batch 64 filling a GPU)
    stack_size: int | None = setting(None, paper=1, ge=1)
    threads: int | None = setting(1, paper=None, ge=1)
    #: Processes that train the stacks (each on ``threads`` threads): the reference profile
    #: uses both cores of a 2-core machine; the numbers do not depend on it.
    workers: int = setting(1, reference=2, ge=1)
    #: train both arms (False: the Laplacian one alone, as the smoke run does: the arm without
    #: Laplacian heads is the same code with no head converted, at twice the smoke run's cost)
    both_arms: bool = setting(True, smoke=False)

    def check(self) -> None:
        gpt2 = ("corpus_tokens", "heldout_fraction")
        if self.model == "gpt2" and any(getattr(self, f) is None for f in gpt2):
            raise ValueError(f"LMSettings.model='gpt2': expected {' and '.join(gpt2)} set, got "
                             f"{self.corpus_tokens!r} and {self.heldout_fraction!r}")
        if self.model == "char" and any(getattr(self, f) is not None for f in gpt2):
            raise ValueError(f"LMSettings.model='char': {' and '.join(gpt2)} are GPT-2's (the "
                             f"character text holds out its last 10%); expected None")
        if self.laplacian_heads > self.heads:
            raise ValueError(f"LMSettings.laplacian_heads: expected at most heads={self.heads}, "
                             f"got {self.laplacian_heads}")
        if self.dim % self.heads:
            raise ValueError(f"LMSettings.dim: expected a multiple of heads={self.heads}, got "
                             f"{self.dim}")
        if list(self.steps) != sorted(set(self.steps)):
            raise ValueError(f"LMSettings.steps: expected increasing training lengths, got "
                             f"{self.steps!r}")
        if self.heldout_tokens is not None and self.heldout_tokens < self.block_size + 1:
            raise ValueError(f"LMSettings.heldout_tokens: expected None or at least "
                             f"block_size + 1 = {self.block_size + 1}, got {self.heldout_tokens}")
        bad = [s for s in self.steps if s % self.rounds]
        if bad:
            raise ValueError(f"LMSettings.rounds: expected a divisor of every training length, "
                             f"got {self.rounds} for {bad}")

    @property
    def arms(self) -> tuple[int, int]:
        """Laplacian heads per layer of the two arms: none, then ``laplacian_heads``."""
        return (0, self.laplacian_heads)

    @property
    def arms_run(self) -> tuple[int, ...]:
        """The arms :func:`run` trains: both, or the Laplacian one alone (``both_arms=False``)."""
        return self.arms if self.both_arms else self.arms[1:]

    @property
    def scales(self) -> tuple[str, ...]:
        """The trend's labels, one per training length."""
        return tuple(f"{s} steps" for s in self.steps)

    def seeds_at(self, steps: int) -> tuple[int, ...]:
        """The seeds run at a training length: all at the longest, the first ``trend_seeds``
        at the others."""
        return self.seeds if steps == self.steps[-1] else self.seeds[:self.trend_seeds]


@dataclass(frozen=True)
class LMRun:
    """One seed of one arm at one training length.

    Curves (rounds + 1,), measured before training and after every round at ``eval_steps``:
    ``val_loss`` (validation windows), ``heldout_loss`` and ``cdnv`` (held-out windows),
    ``train_loss`` (training windows), in nats per character. ``best`` indexes the lowest
    validation loss (the run's optimum, where it is read); ``heldout_windows`` (n_windows,) is
    the loss of every window of the whole held-out text there.
    """

    laplacian_heads: int
    seed: int
    steps: int
    eval_steps: tuple[int, ...]
    val_loss: tuple[float, ...]
    heldout_loss: tuple[float, ...]
    train_loss: tuple[float, ...]
    cdnv: tuple[float, ...]
    best: int
    heldout_windows: np.ndarray
    #: the downstream task's length-normalised accuracy (acc_norm) at the optimum, where scored
    downstream: float | None = None

    @property
    def heldout(self) -> float:
        """Loss on the whole held-out text at the optimum (nats per character)."""
        return float(self.heldout_windows.mean())

    @property
    def train_at_best(self) -> float:
        return float(self.train_loss[self.best])

    @property
    def gap(self) -> float:
        """Held-out minus training loss at the optimum."""
        return self.heldout - self.train_at_best

    @property
    def best_step(self) -> int:
        return int(self.eval_steps[self.best])


@dataclass
class LMStudy:
    """Every run; the text's ``source``, its vocabulary size and held-out windows; the
    ``downstream`` task's name (empty: none at this profile)."""

    settings: LMSettings
    runs: list[LMRun]
    source: str
    vocab_size: int
    n_heldout_windows: int
    downstream: str = ""

    @property
    def unit(self) -> str:
        """What a loss is per: ``char`` or ``token``."""
        return "char" if self.settings.model == "char" else "token"

    @property
    def model_name(self) -> str:
        return "Character GPT" if self.settings.model == "char" else "GPT-2"

    def by(self, laplacian_heads: int, steps: int | None = None) -> list[LMRun]:
        """The runs of one arm at one training length (default the longest), in seed order."""
        steps = self.settings.steps[-1] if steps is None else steps
        return sorted((r for r in self.runs
                       if r.laplacian_heads == laplacian_heads and r.steps == steps),
                      key=lambda r: r.seed)

    def values(self, field: str, laplacian_heads: int, steps: int | None = None) -> np.ndarray:
        """``field`` of each run of :meth:`by`, shape (seeds,)."""
        return np.array([getattr(r, field) for r in self.by(laplacian_heads, steps)],
                        dtype=float)


# ------------------------------------------------------------------------------ schedule
def lr_factor(step: int, total: int, warmup_fraction: float, final_fraction: float) -> float:
    """The learning rate over its peak at ``step`` of ``total``: a linear rise over the first
    ``warmup_fraction`` of the steps, then a cosine decay to ``final_fraction`` at the end."""
    warm = int(warmup_fraction * total)
    if step < warm:
        return (step + 1) / warm
    t = min(step - warm, total - warm) / max(total - warm, 1)
    return final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * t))


# ------------------------------------------------------------------------------ measures
#: Logit entries one evaluation batch may hold (windows x block x vocabulary): 256 windows of
#: the character GPT, 2 of GPT-2 (1,024 x 50,257 logits a window).
LOGITS_PER_CHUNK = 2 ** 27


@torch.no_grad()
def _losses(model: nn.Module, ids: torch.Tensor, starts: torch.Tensor, block: int,
            chunk: int = 256, features: bool = False) -> tuple[torch.Tensor, np.ndarray | None]:
    """Per window, the mean next-token loss of ``model`` (n,), and with ``features`` the
    tokens after the final LayerNorm (n * block, dim) as float64 (made on the CPU)."""
    out, feats = [], []
    chunk = max(1, min(chunk, LOGITS_PER_CHUNK // (block * model.vocab_size)))
    for i in range(0, len(starts), chunk):
        x, y = next_char_windows(ids, starts[i:i + chunk], block)
        logits, states = model(x, return_hidden=True)
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                             reduction="none")
        out.append(ce.view(len(x), -1).double().mean(1))
        if features:
            feats.append(model.norm(states[-1]).reshape(-1, states[-1].shape[-1]).cpu()
                         .double())
    h = torch.cat(feats).numpy() if features else None
    return torch.cat(out), h


def measure(model: nn.Module, windows: dict[str, tuple[torch.Tensor, torch.Tensor]], block: int,
            min_count: int) -> dict[str, float]:
    """One model on the fixed windows ``{"val" | "heldout" | "train": (ids, starts)}``: the
    mean loss of each part and the CDNV of the held-out tokens after the final LayerNorm by the
    token (character) that follows each."""
    model.eval()
    out = {}
    for part, (ids, starts) in windows.items():
        loss, h = _losses(model, ids, starts, block, features=part == "heldout")
        out[f"{part}_loss"] = float(loss.mean())
        if h is not None:
            labels = next_char_windows(ids, starts, block)[1].reshape(-1).cpu().numpy()
            out["cdnv"] = metrics.cdnv(h, labels, min_count=min_count)
    return out


def heldout_window_losses(model: nn.Module, ids: torch.Tensor, block: int) -> np.ndarray:
    """The loss of every window that tiles the held-out ``ids`` (n_windows,)."""
    model.eval()
    loss, _ = _losses(model, ids, tiling_starts(len(ids), block).to(ids.device), block)
    return loss.cpu().numpy()


# ------------------------------------------------------------------------------ training
def _make_model(settings: LMSettings, vocab_size: int, laplacian_heads: int):
    if settings.model == "gpt2":
        from ddcl_theory.models.hf_gpt import HFGPT
        return lambda _seed: HFGPT(vocab_size, settings.block_size, dim=settings.dim,
                                   depth=settings.depth, heads=settings.heads,
                                   laplacian_heads=laplacian_heads,
                                   mlp_ratio=settings.mlp_ratio, attention=settings.attention)
    return lambda _seed: CharGPT(vocab_size, settings.block_size, dim=settings.dim,
                                 depth=settings.depth, heads=settings.heads,
                                 laplacian_heads=laplacian_heads, mlp_ratio=settings.mlp_ratio)


def _downstream(settings: LMSettings, data: LMData, model: nn.Module, steps: int,
                device: str) -> float | None:
    """acc_norm of ``model`` on the data's downstream items (runs of the longest length only)."""
    if not data.items or steps != settings.steps[-1]:
        return None
    from ddcl_theory.experiments.downstream import score_items
    return score_items(model, data.encode, data.items, settings.block_size, device,
                       desc=data.downstream).accuracy_norm


def train_lm_stack(settings: LMSettings, data: LMData | TextParts, laplacian_heads: int,
                   steps: int, seeds: Sequence[int], device: str, run: RunDir | None = None
                   ) -> list[LMRun]:
    """Train the ``seeds`` of one arm for ``steps`` steps as one stacked model and read each at
    its lowest validation loss (and score it on the downstream task, where ``data`` has one, at
    the longest length); resumable after every round through ``run``. Under ``torchrun`` each
    rank trains on its share of every batch and rank 0 measures
    (:mod:`ddcl_theory.runtime.data_parallel`)."""
    data = data if isinstance(data, LMData) else LMData(data)
    text = data.text
    block = settings.block_size
    # one seed (the paper profile's GPT-2): no vmap, so SDPA keeps its fused kernels on CUDA
    stack = StackedModels(_make_model(settings, len(text.vocab), laplacian_heads), seeds,
                          direct_single=True).to(device)
    trained = data_parallel(stack, device)           # DDP under torchrun, else the stack
    params = (decay_groups(stack.stacked, settings.weight_decay, stacked=True)
              if settings.decay_matrices_only else stack.parameters())
    opt = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)
    if settings.grad_clip is not None:
        stack.clip_before_step(opt, settings.grad_clip)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda k: lr_factor(k, steps, settings.warmup_fraction, settings.final_lr_fraction))
    per_round = steps // settings.rounds
    windows = {part: (ids, spread_starts(len(ids), block, settings.eval_windows).to(device))
               for part, ids in (("val", text.val), ("heldout", text.heldout),
                                 ("train", text.train))}
    best = BestStates(stack).to(device)
    per_seed = PerSeedLoss(
        lambda forward, b: torch.vmap(
            lambda logits, y: F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                              y.reshape(-1)))(forward(b[0]), b[1]),
        stack.num_seeds)

    def measure_all() -> dict[str, list[float]]:
        per_seed.steps.clear()
        if not is_main():                   # under torchrun rank 0 measures, the others wait
            return from_main(None)
        rows = [measure(m, windows, block, settings.cdnv_min_count) for m in stack.unstack()]
        return from_main({k: [r[k] for r in rows] for k in rows[0]})

    first = measure_all()

    def one_seed(gen: torch.Generator) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for _ in range(per_round):
            starts = torch.randint(0, len(text.train) - block - 1, (settings.batch_size,),
                                   generator=gen).to(device)
            # every rank draws the whole batch (the same generators), then trains on its share
            yield next_char_windows(text.train, shard(starts), block)

    def end_of_round(r: int) -> dict:
        m = measure_all()
        best.update(stack, torch.tensor(m["val_loss"]), r + 1)
        return m

    name = unit_name(settings, laplacian_heads, steps, seeds)
    log = fit(trained, opt, rounds=settings.rounds, loss=per_seed, device=device, run=run,
              name=name, batches=lambda _r: stacked_batches([one_seed(g)
                                                             for g in stack.generators]),
              schedulers=[sched], generators=stack.named_generators(), modules={"best": best},
              end_of_round=end_of_round, desc=f"GPT {name}", compile=False)
    best.restore(stack)
    curves = {k: np.array([first[k]] + [m[k] for m in log.metrics], dtype=float)
              for k in first}                                          # (rounds + 1, S)
    eval_steps = tuple(i * per_round for i in range(settings.rounds + 1))
    runs = []
    for i, (seed, model) in enumerate(zip(seeds, stack.unstack())):
        runs.append(LMRun(laplacian_heads, seed, steps, eval_steps,
                          *(tuple(float(v) for v in curves[k][:, i])
                            for k in ("val_loss", "heldout_loss", "train_loss", "cdnv")),
                          int(best.best_epoch[i]),
                          *_final_scores(settings, data, model, steps, device)))
    return runs


def _final_scores(settings: LMSettings, data: LMData, model: nn.Module, steps: int,
                  device: str) -> tuple[np.ndarray, float | None]:
    """The held-out window losses and the downstream score of one trained seed, computed by
    rank 0 alone under ``torchrun`` and shared with the others (which wait: an error on rank 0
    leaves them waiting until the process group's timeout, as in the measurements per round)."""
    if not is_main():
        return from_main(None)
    return from_main((heldout_window_losses(model, data.text.heldout, settings.block_size),
                      _downstream(settings, data, model, steps, device)))


def unit_name(settings: LMSettings, laplacian_heads: int, steps: int,
              seeds: Sequence[int]) -> str:
    """The run directory's name of one stack (its unit and its training state): the arm and
    length, and its seeds where a length trains in several stacks."""
    name = f"lap={laplacian_heads},steps={steps}"
    if settings.stack_size is not None:
        name += f",seeds={seeds[0]}-{seeds[-1]}"
    return name


def _stack_unit(settings: LMSettings, *args) -> list[LMRun]:
    """:func:`train_lm_stack` under the settings' thread limit (one unit, in any process)."""
    with _threads(settings.threads):
        return train_lm_stack(settings, *args)


def run(settings: LMSettings | None = None) -> LMStudy:
    """Every run of the study: both arms at every training length. Finished stacks are kept in
    the run directory (reference and paper profiles) and a killed study resumes."""
    settings = settings or LMSettings.from_profile()
    device = profile.current().device
    data = lm_data(settings, device)
    if settings.heldout_tokens is not None:              # the smoke run scores a short piece
        data = dataclasses.replace(data, text=dataclasses.replace(
            data.text, heldout=data.text.heldout[:settings.heldout_tokens]))
    ckpt = RunDir("laplacian_lm", settings)
    units, costs = [], []
    for steps in settings.steps:
        for lap in settings.arms_run:
            for seeds in _stacks(settings.seeds_at(steps), settings.stack_size):
                units.append((unit_name(settings, lap, steps, seeds),
                              (settings, data, lap, steps, seeds, device, ckpt)))
                costs.append(steps * len(seeds))
    with _threads(settings.threads):
        stacks = map_units(ckpt, _stack_unit, units, workers=settings.workers,
                           desc="GPT stacks", costs=costs)
    runs = [run for stack in stacks for run in stack]
    ckpt.finish()
    text = data.text
    n_windows = len(tiling_starts(len(text.heldout), settings.block_size))
    return LMStudy(settings, runs, text.source, len(text.vocab), n_windows, data.downstream)


def _stacks(seeds: tuple[int, ...], size: int | None) -> list[tuple[int, ...]]:
    """``seeds`` in consecutive stacks of at most ``size`` (None: one stack)."""
    size = size or len(seeds)
    return [seeds[i:i + size] for i in range(0, len(seeds), size)]
