"""L5: Laplacian heads add no parameters and (almost) no compute.

Three layers with identical weights are timed side by side: ``laplacian_heads = 0`` (standard
multi-head attention), ``heads // 2`` and ``heads``. Every repeat runs the three variants in a
rotating order (interleaved), and the verdict-relevant numbers are exact: the parameter counts
and the FLOP count of the extra subtraction V - P V. The measured time ratios (median over
repeats of t_variant / t_standard) are reported, never asserted: the host is noisy.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ddcl_theory.layers.laplacian import LaplacianAttention
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, setting


@dataclass(frozen=True)
class OverheadSettings(Settings):
    """Sizes of the timing run: cpu 8 sequences of 256 tokens, width 128, 8 heads, 15 repeats;
    paper 32 x 1024 tokens, width 768, 12 heads, 50 repeats. The paper smoke test times one
    sequence of the paper's shape once, after no warm-up."""

    batch: int = setting(8, paper=32, smoke=1, ge=1)
    seq_len: int = setting(256, paper=1024, ge=1)
    dim: int = setting(128, paper=768, ge=1)
    heads: int = setting(8, paper=12, ge=1)
    causal: bool = setting(False)
    repeats: int = setting(15, paper=50, smoke=1, ge=1)
    warmup: int = setting(3, smoke=0, ge=0)
    seed: int = setting(0, ge=0)

    def check(self) -> None:
        if self.dim % self.heads:
            raise ValueError(f"OverheadSettings.dim: expected a multiple of heads "
                             f"{self.heads}, got {self.dim}")


@dataclass
class OverheadResult:
    """Parameter counts, exact FLOP counts and measured times per variant."""

    settings: OverheadSettings
    variants: tuple[int, ...]                       # laplacian_heads of each variant
    params: dict[int, int]
    flops: dict[int, int]                           # forward FLOPs (multiply-adds count 2)
    times: dict[int, list[float]] = field(default_factory=dict)

    def extra_flop_fraction(self, laplacian_heads: int) -> float:
        """(FLOPs with Laplacian heads - standard FLOPs) / standard FLOPs."""
        return self.flops[laplacian_heads] / self.flops[0] - 1.0

    def median_ratio(self, laplacian_heads: int) -> float:
        """Median over repeats of t(variant) / t(standard), timed in the same repeat."""
        return float(np.median(np.array(self.times[laplacian_heads]) / np.array(self.times[0])))


def forward_flops(batch: int, seq_len: int, dim: int, heads: int, laplacian_heads: int,
                  causal: bool = False) -> int:
    """Forward FLOPs of the sublayer: projections, Q K^T, softmax, P V, the subtraction V - P V.

    Causal masking is counted as dense (fused kernels may skip the upper triangle; the extra
    subtraction is the same either way). The Laplacian heads add exactly
    ``batch * seq_len * laplacian_heads * head_dim`` FLOPs (one subtraction per entry).
    """
    del causal
    head_dim = dim // heads
    proj = 2 * batch * seq_len * dim * (3 * dim) + 2 * batch * seq_len * dim * dim
    scores = 2 * batch * heads * seq_len * seq_len * head_dim
    softmax = 5 * batch * heads * seq_len * seq_len        # scale, max, exp, sum, divide
    mix = 2 * batch * heads * seq_len * seq_len * head_dim
    subtract = batch * seq_len * laplacian_heads * head_dim
    return proj + scores + softmax + mix + subtract


def _build(settings: OverheadSettings, laplacian_heads: int, state: dict | None) -> LaplacianAttention:
    layer = LaplacianAttention(settings.dim, settings.heads, laplacian_heads=laplacian_heads,
                               causal=settings.causal)
    if state is not None:
        layer.load_state_dict(state)
    return layer.eval()


def run(settings: OverheadSettings | None = None) -> OverheadResult:
    """Count parameters and FLOPs, then time the variants interleaved (no_grad forward).

    In the paper profile the finished measurement is checkpointed (:class:`RunDir`).
    """
    s = settings or OverheadSettings.from_profile()
    ckpt = RunDir("overhead", s)
    result = ckpt.unit("run", lambda: _measure(s))
    ckpt.finish()
    return result


def _measure(s: OverheadSettings) -> OverheadResult:
    """The measurement of :func:`run`."""
    profile.seed_everything(s.seed)
    device = profile.current().device
    variants = (0, s.heads // 2, s.heads)
    base = _build(s, 0, None)
    layers = {k: _build(s, k, base.state_dict()).to(device) for k in variants}
    params = {k: sum(p.numel() for p in m.parameters()) for k, m in layers.items()}
    flops = {k: forward_flops(s.batch, s.seq_len, s.dim, s.heads, k, s.causal) for k in variants}
    x = torch.randn(s.batch, s.seq_len, s.dim, device=device)
    result = OverheadResult(s, variants, params, flops, {k: [] for k in variants})

    def timed(layer: LaplacianAttention) -> float:
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        layer(x)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    with torch.no_grad():
        for _ in range(s.warmup):
            for k in variants:
                timed(layers[k])
        for r in range(s.repeats):
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            for k in order:
                result.times[k].append(timed(layers[k]))
    return result
