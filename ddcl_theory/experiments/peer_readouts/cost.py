"""Inference cost of the readouts: interleaved timings (never asserted) and FLOP counts."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ddcl_theory.experiments.peer_readouts.model import build_readout
from ddcl_theory.experiments.peer_readouts.settings import READOUTS, PeerSettings
from ddcl_theory.runtime import profile


@dataclass
class CostResult:
    """Forward times of the readouts at each sequence length, measured interleaved in one run."""

    settings: PeerSettings
    lengths: tuple[int, ...]
    times: dict[str, dict[int, list[float]]]         # kind -> T -> seconds per repeat
    params: dict[str, int]

    def ratio(self, kind: str, length: int) -> float:
        """Median over repeats of t(kind) / t(ddcl), both timed in the same repeat."""
        return float(np.median(np.array(self.times[kind][length])
                               / np.array(self.times["ddcl"][length])))

    def ratios(self) -> dict[str, list[float]]:
        """kind -> [ratio at each length of ``lengths``] (DDCL's is 1)."""
        return {k: [self.ratio(k, t) for t in self.lengths] for k in self.times}


def inference_cost(settings: PeerSettings | None = None) -> CostResult:
    """Time one eval forward pass of each readout (no encoder, no gradient) at every length of
    ``settings.cost_lengths``; the readouts run in a rotating order within each repeat.

    Slot Attention runs its ``slot_iterations`` rounds (with a fixed generator for the initial
    noise). Never asserted: the ratios depend on the host.
    """
    s = settings or PeerSettings.from_profile()
    profile.seed_everything(s.seed)
    device = profile.current().device
    kinds = tuple(dict.fromkeys(("ddcl",) + tuple(s.readouts)))
    layers = {k: build_readout(k, s).to(device).eval() for k in kinds}
    params = {k: sum(p.numel() for p in m.parameters()) for k, m in layers.items()}
    times = {k: {t: [] for t in s.cost_lengths} for k in kinds}

    def call(kind: str, x: Tensor, mask: Tensor) -> float:
        gen = torch.Generator(device=x.device).manual_seed(s.seed) if kind == "slot" else None
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        if gen is not None:
            layers[kind](x, mask, generator=gen)
        else:
            layers[kind](x, mask)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    with torch.no_grad():
        for t in s.cost_lengths:
            x = torch.randn(s.cost_batch, t, s.dim, device=device)
            mask = torch.ones(s.cost_batch, t, dtype=torch.bool, device=device)
            for _ in range(s.cost_warmup):
                for k in kinds:
                    call(k, x, mask)
            for r in range(s.cost_repeats):
                order = kinds[r % len(kinds):] + kinds[:r % len(kinds)]
                for k in order:
                    times[k][t].append(call(k, x, mask))
    return CostResult(s, tuple(s.cost_lengths), times, params)


def flop_counts(settings: PeerSettings | None = None,
                readouts: tuple[str, ...] = READOUTS) -> dict[str, list[int]]:
    """FLOPs of one eval forward pass of each readout on one sequence of each length of
    ``settings.cost_lengths`` (a deterministic count of the matrix products, by
    ``torch.utils.flop_counter``; element-wise work such as softmax is not counted).

    kind -> [FLOPs at each length]. Slot Attention's count includes its ``slot_iterations``
    rounds; unlike a timing it does not depend on the host.
    """
    from torch.utils.flop_counter import FlopCounterMode

    s = settings or PeerSettings.from_profile()
    profile.seed_everything(s.seed)
    out: dict[str, list[int]] = {}
    for kind in readouts:
        layer = build_readout(kind, s).eval().requires_grad_(False)
        counts = []
        for t in s.cost_lengths:
            x = torch.randn(1, t, s.dim)
            mask = torch.ones(1, t, dtype=torch.bool)
            with torch.no_grad(), FlopCounterMode(display=False) as counter:
                if kind == "slot":
                    layer(x, mask, generator=torch.Generator().manual_seed(s.seed))
                else:
                    layer(x, mask)
            counts.append(int(counter.get_total_flops()))
        out[kind] = counts
    return out
