"""Laplacian-head sweep on a character-level GPT (claims L8, L9 of Zhang & Papyan 2026).

For every head setting (Laplacian heads per layer: none, one, half, all) and seed, a
:class:`ddcl_theory.models.char_gpt.CharGPT` is trained on Tiny Shakespeare
(:func:`ddcl_theory.data.load_text`; first 90% train, last 10% validation) for a fixed number of
steps and measured on fixed validation windows: validation loss, the within-sequence share of
the token variance (ANOVA without classes), the spectral decay k99 of the last layer's token
representations, and the CDNV between next-character classes (Wu & Papyan 2024): how separable
the representations of positions that share the same next character are.

"Last-layer token representations" are the outputs of the final LayerNorm (B, T, d), which the
language-model head reads. The within-sequence share and k99 are also recorded on the residual
stream before that LayerNorm (fields ``*_stream``).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from ddcl_theory import data
from ddcl_theory.experiments import require_positive_ints
from ddcl_theory.experiments.laplacian_vit import (
    HEAD_SETTINGS,
    head_sign_balances,
    laplacian_count,
    num_threads,
    summarise,
)
from ddcl_theory.metrics import geometry as metrics
from ddcl_theory.models.char_gpt import CharGPT
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.training import fit

__all__ = ["GPTSettings", "GPTRun", "GPTSweep", "encode", "text_splits", "run", "STATE_SAVES"]


@dataclass(frozen=True)
class GPTSettings:
    """Scale of the GPT sweep; :meth:`from_profile` picks it from the active profile."""

    block_size: int
    dim: int
    depth: int
    heads: int
    mlp_ratio: int
    batch_size: int
    steps: int
    lr: float
    eval_windows: int
    cdnv_min_count: int
    seeds: tuple[int, ...]
    head_settings: tuple[str, ...] = HEAD_SETTINGS
    threads: int | None = 1
    l9_setting: str = "half"    # the setting compared with no Laplacian heads for L9

    @classmethod
    def from_profile(cls) -> "GPTSettings":
        """cpu and paper scales; the paper smoke test keeps the paper model (block 256, width
        384, 6 layers, 12 heads) and shrinks the budget: 2 steps of 4 windows, 16 validation
        windows, one seed, three head settings (none, 5 of 12 and all Laplacian)."""
        p = profile.current()
        return cls(block_size=p.pick(cpu=32, paper=256), dim=p.pick(cpu=32, paper=384),
                   depth=p.pick(cpu=2, paper=6), heads=p.pick(cpu=4, paper=12),
                   mlp_ratio=4, batch_size=p.pick(cpu=32, paper=64, smoke=4),
                   steps=p.pick(cpu=150, paper=5000, smoke=2), lr=p.pick(cpu=3e-3, paper=1e-3),
                   eval_windows=p.pick(cpu=128, paper=512, smoke=16), cdnv_min_count=10,
                   seeds=p.pick(cpu=(0, 1, 2), paper=(0, 1, 2), smoke=(0,)),
                   head_settings=p.pick(cpu=HEAD_SETTINGS, paper=("0", "1", "5", "half", "all"),
                                        smoke=("0", "5", "all")),
                   threads=p.pick(cpu=1, paper=None), l9_setting=p.pick(cpu="half", paper="5"))

    def __post_init__(self) -> None:
        require_positive_ints(self, skip=("lr", "seeds", "head_settings", "threads", "l9_setting"))
        if not self.seeds:
            raise ValueError("seeds: expected at least one seed")
        for s in self.head_settings:
            laplacian_count(s, self.heads)
        if self.l9_setting not in self.head_settings:
            raise ValueError(f"l9_setting: {self.l9_setting!r} is not one of {self.head_settings}")


@dataclass(frozen=True)
class GPTRun:
    """One trained character GPT: head setting, seed and validation measurements."""

    setting: str
    laplacian_heads: int
    seed: int
    train_loss: float          # mean loss over the last 10% of the steps (nats/char)
    val_loss: float            # nats/char on the fixed validation windows
    within_seq: float          # within-sequence share of the token variance
    k99: int
    cdnv: float
    within_seq_stream: float   # the same on the residual stream before the final LayerNorm
    k99_stream: int
    attn_sign_balance: float | None   # see laplacian_vit.ViTRun
    lap_sign_balance: float | None


@dataclass
class GPTSweep:
    settings: GPTSettings
    runs: list[GPTRun]
    source: str
    vocab_size: int

    def summary(self, field: str) -> dict[str, tuple[float, float]]:
        return summarise(self.runs, field, self.settings.head_settings)


def encode(text: str) -> tuple[np.ndarray, list[str]]:
    """Characters to int64 ids over the sorted vocabulary: (ids (len(text),), vocabulary)."""
    if not text:
        raise ValueError("text: empty")
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    points, ids = np.unique(codes, return_inverse=True)
    return ids.astype(np.int64), [chr(int(c)) for c in points]


def text_splits(device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor,
                                                              list[str], str]:
    """Tiny Shakespeare (:func:`ddcl_theory.data.load_text`) as character ids on ``device``:
    ``(train ids (first 90%), validation ids (last 10%), vocabulary, source)``."""
    text, source = data.load_text()
    ids, vocab = encode(text)
    cut = int(0.9 * len(ids))
    return (torch.from_numpy(ids[:cut]).to(device), torch.from_numpy(ids[cut:]).to(device),
            vocab, source)


def _windows(ids: torch.Tensor, starts: torch.Tensor, block: int) -> tuple[torch.Tensor, ...]:
    offsets = torch.arange(block, device=ids.device)
    x = ids[starts[:, None] + offsets]
    y = ids[starts[:, None] + offsets + 1]
    return x, y


#: Saves of the training state per run (paper profile): a killed run resumes at the last save.
STATE_SAVES = 10


def train_one(settings: GPTSettings, setting: str, seed: int, train_ids: torch.Tensor,
              val_ids: torch.Tensor, vocab_size: int, device: str,
              ckpt: RunDir | None = None) -> GPTRun:
    """Train one GPT for ``settings.steps`` steps and measure it; deterministic given the seed.

    The steps run through :func:`ddcl_theory.runtime.training.fit` in :data:`STATE_SAVES` rounds
    of equal length (the last may be shorter). With an enabled ``ckpt`` (the paper profile) the
    training state (model, optimiser, scheduler, sampling generator, losses, next round) is saved
    after every round but the last, and a saved state of this (setting, seed) is resumed from.
    """
    gen = profile.seed_everything(seed)
    n_lap = laplacian_count(setting, settings.heads)
    block = settings.block_size
    model = CharGPT(vocab_size, block, dim=settings.dim, depth=settings.depth,
                    heads=settings.heads, laplacian_heads=n_lap, mlp_ratio=settings.mlp_ratio
                    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=settings.steps)
    tail = max(1, settings.steps // 10)
    every = max(1, settings.steps // STATE_SAVES)

    def batches(r: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for _ in range(r * every, min((r + 1) * every, settings.steps)):
            starts = torch.randint(0, len(train_ids) - block - 1, (settings.batch_size,),
                                   generator=gen).to(device)
            yield _windows(train_ids, starts, block)

    log = fit(model, opt, rounds=math.ceil(settings.steps / every), batches=batches,
              loss=lambda forward, xy: _next_char_loss(forward, *xy), device=device, run=ckpt,
              name=f"state-setting={setting},seed={seed}", schedulers=[sched],
              generators={"gen": gen}, desc=f"GPT {setting} seed {seed}")
    losses = log.step_losses
    starts = torch.linspace(0, len(val_ids) - block - 2, settings.eval_windows).long().to(device)
    x, y = _windows(val_ids, starts, block)
    with torch.no_grad():
        logits, states = model(x, return_hidden=True)
        tokens = model.norm(states[-1])
        val_loss = float(torch.nn.functional.cross_entropy(logits.reshape(-1, vocab_size),
                                                           y.reshape(-1)))
    tok = tokens.double().cpu().numpy()
    flat = tok.reshape(-1, tok.shape[-1])
    stream = states[-1].double().cpu().numpy()
    attn_balance, lap_balance = head_sign_balances(model)
    return GPTRun(setting=setting, laplacian_heads=n_lap, seed=seed,
                  train_loss=float(np.mean(losses[-tail:])), val_loss=val_loss,
                  within_seq=metrics.anova_split(tok).fractions()["within_sequence"],
                  k99=metrics.k99(flat),
                  cdnv=metrics.cdnv(flat, y.reshape(-1).cpu().numpy(),
                                    min_count=settings.cdnv_min_count),
                  within_seq_stream=metrics.anova_split(stream).fractions()["within_sequence"],
                  k99_stream=metrics.k99(stream.reshape(-1, stream.shape[-1])),
                  attn_sign_balance=attn_balance, lap_sign_balance=lap_balance)


def _next_char_loss(forward: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``CharGPT.loss`` through ``forward`` (the model or its compiled wrapper): mean
    next-character cross-entropy of ``y`` (B, T) given ``x`` (B, T)."""
    logits = forward(x)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def run(settings: GPTSettings | None = None) -> GPTSweep:
    """Train and measure every (head setting, seed) pair of ``settings``.

    In the paper profile every finished (setting, seed) run is checkpointed, and so is the
    training state within a run (:class:`RunDir`): a killed sweep resumes where it stopped.
    """
    settings = settings or GPTSettings.from_profile()
    device = profile.current().device
    train_ids, val_ids, vocab, source = text_splits(device)
    ckpt = RunDir("laplacian_gpt", settings)
    with num_threads(settings.threads):
        done = []
        for s in settings.head_settings:
            for seed in settings.seeds:
                key = f"setting={s},seed={seed}"
                done.append(ckpt.unit(key, functools.partial(
                    train_one, settings, s, seed, train_ids, val_ids, len(vocab), device, ckpt)))
    ckpt.finish()
    return GPTSweep(settings, done, source, len(vocab))
