"""D2: how the cost of a DDCL layer and of self-attention grows with sequence length T.

Both layers run side by side on the same input, interleaved within each repeat, so the ratio
and the log-log slopes come from one run on one (noisy) host. Times are reported, never
asserted; the verdict rests on the exact FLOP counts of
:func:`ddcl_theory.experiments.ddcl_layer.operation_counts`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from ddcl_theory.layers.ddcl import DDCLAttention
from ddcl_theory.metrics.fits import loglog_slope
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, setting


@dataclass(frozen=True)
class ScalingSettings(Settings):
    """Sizes of the timing sweep: cpu T = 128 ... 2048 at dim 64, 5 repeats; paper T = 256 ...
    32768 at dim 768, 20 repeats. The paper smoke test times the two shortest paper lengths once
    (the longer ones cost minutes of CPU for self-attention)."""

    seq_lens: tuple[int, ...] = setting((128, 256, 512, 1024, 2048),
                                        paper=(256, 1024, 4096, 16384, 32768),
                                        smoke=(256, 1024), ge=1, nonempty=True)
    dim: int = setting(64, paper=768, ge=1)
    num_prototypes: int = setting(16, ge=1)
    heads: int = setting(2, ge=1)
    attn_heads: int = setting(4, ge=1)
    batch: int = setting(4, ge=1)
    repeats: int = setting(5, paper=20, smoke=1, ge=1)


@dataclass
class ScalingResult:
    """Median seconds per forward pass at each length, and log-log slopes."""

    settings: ScalingSettings
    ddcl: list[float]
    attention: list[float]

    @property
    def ddcl_slope(self) -> float:
        return loglog_slope(self.settings.seq_lens, self.ddcl)

    @property
    def attention_slope(self) -> float:
        """Slope over the two longest lengths, where the T^2 term dominates."""
        return loglog_slope(self.settings.seq_lens[-2:], self.attention[-2:])

    def ratios(self) -> list[float]:
        """t(attention) / t(DDCL) at each length."""
        return [a / d for a, d in zip(self.attention, self.ddcl)]


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(settings: ScalingSettings | None = None) -> ScalingResult:
    """Time one DDCL layer and one ``nn.MultiheadAttention`` (fused kernel) at each length.

    In the paper profile the medians at each finished length are checkpointed
    (:class:`RunDir`), so a killed sweep resumes at the next length.
    """
    s = settings or ScalingSettings.from_profile()
    device = profile.current().device
    profile.seed_everything(0)
    ddcl = DDCLAttention(s.dim, s.num_prototypes, heads=s.heads).to(device).eval()
    attn = torch.nn.MultiheadAttention(s.dim, s.attn_heads, batch_first=True).to(device).eval()
    out = ScalingResult(s, [], [])
    ckpt = RunDir("scaling", s)
    for t in s.seq_lens:
        t_ddcl, t_attn = ckpt.unit(f"T={t}", lambda: _time_length(s, t, ddcl, attn, device))
        out.ddcl.append(t_ddcl)
        out.attention.append(t_attn)
    ckpt.finish()
    return out


def _time_length(s: ScalingSettings, t: int, ddcl: DDCLAttention,
                 attn: torch.nn.MultiheadAttention, device: str) -> tuple[float, float]:
    """Median seconds (DDCL, attention) per forward pass on a (batch, t, dim) input, the two
    interleaved within each repeat after one warm-up call each."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with torch.no_grad():
        x = torch.randn(s.batch, t, s.dim, device=device)
        calls = {"ddcl": lambda: (ddcl(x), sync()),
                 "attention": lambda: (attn(x, x, x, need_weights=False), sync())}
        for fn in calls.values():
            fn()                                        # warm-up
        times = {k: [] for k in calls}
        for r in range(s.repeats):
            order = list(calls) if r % 2 == 0 else list(calls)[::-1]
            for k in order:
                times[k].append(_timed(calls[k]))
    return float(np.median(times["ddcl"])), float(np.median(times["attention"]))
