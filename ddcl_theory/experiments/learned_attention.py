"""Attention matrices P of a small trained model, for the spectral checks of L1 and L11.

A one-layer character model (token + position embedding, one :class:`LaplacianAttention`
sublayer with a residual, LayerNorm, linear read-out) is trained briefly on the Tiny Shakespeare
corpus, either causally (next character) or bidirectionally (masked characters, 15%). Its
attention matrices on held-out text are "real" in the sense that Q and K were learned from data;
they are not those of a large pretrained Transformer.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ddcl_theory.data import load_text
from ddcl_theory.layers.laplacian import LaplacianAttention
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, setting
from ddcl_theory.runtime.training import fit


@dataclass(frozen=True)
class LearnedAttentionSettings(Settings):
    """The one-layer character model: cpu T = 32, width 32, 150 steps; paper T = 128, width
    128, 3,000 steps (paper smoke test: 12 steps). ``causal``: next-character training, else
    masked characters (``mask_rate`` of them)."""

    causal: bool = setting(True)
    seq_len: int = setting(32, paper=128, ge=1)
    dim: int = setting(32, paper=128, ge=1)
    heads: int = setting(4, ge=1)
    laplacian_heads: int = setting(2, ge=0)
    steps: int = setting(150, paper=3000, smoke=12, ge=1)
    batch: int = setting(16, ge=1)
    lr: float = setting(3e-3, gt=0)
    mask_rate: float = setting(0.15, gt=0, lt=1)
    samples: int = setting(8, ge=1)
    seed: int = setting(0, ge=0)

    def check(self) -> None:
        if self.laplacian_heads > self.heads:
            raise ValueError(f"LearnedAttentionSettings.laplacian_heads: expected <= heads "
                             f"{self.heads}, got {self.laplacian_heads}")


@dataclass
class LearnedAttentionResult:
    settings: LearnedAttentionSettings
    attention: np.ndarray        # (samples, heads, T, T) float64 (rows renormalised), held-out text
    first_loss: float            # mean loss of the first 10 steps
    last_loss: float             # mean loss of the last 10 steps
    source: str                  # data source name


class _OneLayer(nn.Module):
    def __init__(self, vocab: int, s: LearnedAttentionSettings) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab + 1, s.dim)      # last id = mask token
        self.pos = nn.Embedding(s.seq_len, s.dim)
        self.attn = LaplacianAttention(s.dim, s.heads, laplacian_heads=s.laplacian_heads,
                                       causal=s.causal)
        self.norm = nn.LayerNorm(s.dim)
        self.out = nn.Linear(s.dim, vocab)

    def forward(self, idx: torch.Tensor, return_attention: bool = False):
        x = self.tok(idx) + self.pos.weight[: idx.shape[1]]
        h, p = self.attn(x, return_attention=True)
        logits = self.out(self.norm(x + h))
        return (logits, p) if return_attention else logits


#: Saves of the training state per run (paper profile): a killed run resumes at the last save.
STATE_SAVES = 10


def run(settings: LearnedAttentionSettings | None = None) -> LearnedAttentionResult:
    """Train the one-layer model and return its attention matrices on held-out text.

    In the paper profile the finished run is checkpointed (:class:`RunDir`), and so is its
    training state :data:`STATE_SAVES` times: a chapter rerun after an interruption reads the
    result back, or resumes the training where it stopped.
    """
    s = settings or LearnedAttentionSettings.from_profile()
    ckpt = RunDir("learned_attention", s)
    result = ckpt.unit("run", lambda: _train(s, ckpt))
    ckpt.finish()
    return result


def _train(s: LearnedAttentionSettings, ckpt: RunDir | None = None
           ) -> LearnedAttentionResult:
    """The training run of :func:`run` on the profile's device, through
    :func:`ddcl_theory.runtime.training.fit` in rounds of ``steps // STATE_SAVES`` steps."""
    device = profile.current().device
    gen = profile.seed_everything(s.seed)
    text, source = load_text()
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    codes = torch.tensor([lookup[c] for c in text[:200_000]], dtype=torch.long)
    cut = int(0.9 * len(codes))
    train, held = codes[:cut], codes[cut:]
    train, held = train.to(device), held.to(device)
    vocab = len(chars)
    model = _OneLayer(vocab, s).to(device)        # initialised on the CPU: same weights
    opt = torch.optim.Adam(model.parameters(), lr=s.lr)

    def batch(data: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = torch.randint(0, len(data) - s.seq_len - 1, (n,), generator=gen)
        win = torch.stack([data[i: i + s.seq_len + 1] for i in start.tolist()])
        return win[:, :-1], win[:, 1:]

    every = max(1, s.steps // STATE_SAVES)

    def batches(r: int) -> Iterator[tuple[torch.Tensor, ...]]:
        for _ in range(r * every, min((r + 1) * every, s.steps)):
            inp, nxt = batch(train, s.batch)
            if s.causal:
                yield inp, nxt
            else:
                hide = (torch.rand(inp.shape, generator=gen) < s.mask_rate).to(device)
                hide[:, 0] |= ~hide.any(dim=1)
                yield inp, hide

    def loss(forward, b: tuple[torch.Tensor, ...]) -> torch.Tensor:
        if s.causal:
            inp, nxt = b
            return F.cross_entropy(forward(inp).reshape(-1, vocab), nxt.reshape(-1))
        inp, hide = b
        logits = forward(inp.masked_fill(hide, vocab))
        return F.cross_entropy(logits[hide], inp[hide])

    log = fit(model, opt, rounds=math.ceil(s.steps / every), batches=batches, loss=loss,
              device=device, run=ckpt, name="state", generators={"gen": gen},
              desc=f"learned attention ({'causal' if s.causal else 'bidirectional'})")
    losses = log.step_losses
    with torch.no_grad():
        inp, _ = batch(held, s.samples)
        _, p = model(inp, return_attention=True)
    p = p.double().cpu()
    p = p / p.sum(dim=-1, keepdim=True)     # remove float32 rounding of the row sums (~1e-7)
    return LearnedAttentionResult(s, p.numpy(), float(np.mean(losses[:10])),
                                  float(np.mean(losses[-10:])), source)
