"""Seeds at the cost of one: S seeds trained as one stacked model against one seed at a time.

Run ``python -m ddcl_theory.bench.stacked [--models vit,gpt] [--stack-sizes 1,5,10]
[--threads 1,2] [--repeats N] [--steps N] [--tiny]``.

What runs, side by side in one process: one training step (forward, backward, AdamW) of

* **one at a time**: one model on its batch (S seeds one at a time take S such steps);
* **stacked**: :class:`~ddcl_theory.runtime.stacked.StackedModels` of S seeds, each on its own
  batch, with the attention of the stack's copy on the ``explicit`` path (vmap-safe) and, for
  comparison, on the model's own ``fused`` path (``scaled_dot_product_attention``, which vmap
  runs once per seed on the CPU);
* **floor**: one model on a batch of one, the part of a step that does not grow with the work
  (launches, Python, the optimiser's per-tensor loop): the most stacking can save.

for the ViT of the Laplacian chapter's cpu profile (width 32, depth 2, 4 heads of which 2
Laplacian, 8x8 patches of 32x32x3 inputs, batch 128) and the char GPT (width 32, depth 2, 8 heads
of which 4 Laplacian, block 32, batch 32), under each number of torch threads. Inputs are random
(the time of a step does not depend on them). Calls are interleaved (the order rotates every
repeat); the report gives medians of wall-clock time per step and ratios:

* ``S seeds / one``: the time of a stacked step of S seeds over that of one seed's step (median
  of per-repeat ratios; the aim for S = 10 is at most 3); ``(1 thr)``: the same against one
  seed on one thread (the cpu profile's setting);
* ``speed-up``: seeds per second stacked over seeds per second one at a time, ``S / ratio``;
* ``ideal``: ``floor + S (1 - floor)`` in units of one seed's step, the ratio a stack reaches
  when it saves every fixed cost and none of the arithmetic.

Times are never asserted anywhere: the host is shared and noisy, and so are these numbers.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ddcl_theory.bench.timing import paired_ratio
from ddcl_theory.models.char_gpt import CharGPT
from ddcl_theory.models.vit import ViT
from ddcl_theory.runtime.profile import seed_everything
from ddcl_theory.runtime.settings import Settings, setting
from ddcl_theory.runtime.stacked import StackedModels
from ddcl_theory.runtime.threads import num_threads

__all__ = ["MODELS", "PATHS", "StackedBenchSettings", "StepTiming", "StackedBenchResult", "run",
           "report", "main"]

MODELS = ("vit", "gpt")
#: The attention path of the stack's copy: vmap-safe explicit P, or the model's own SDPA.
PATHS = ("explicit", "fused")
ONE, FLOOR = "one", "floor"


@dataclass(frozen=True)
class StackedBenchSettings(Settings):
    """What the stacked-seeds benchmark runs (the same under every profile); :meth:`tiny` is a
    seconds-long configuration for checks."""

    models: tuple[str, ...] = setting(MODELS, choices=MODELS, nonempty=True)
    stack_sizes: tuple[int, ...] = setting((1, 5, 10), ge=1, nonempty=True)
    threads: tuple[int, ...] = setting((1, 2), ge=1, nonempty=True)
    paths: tuple[str, ...] = setting(PATHS, choices=PATHS, nonempty=True)
    steps: int = setting(3, ge=1)                    # optimiser steps per timed call
    repeats: int = setting(7, ge=1)
    lr: float = setting(1e-3, gt=0)
    seed: int = setting(0, ge=0)
    vit_dim: int = setting(32, ge=1)
    vit_depth: int = setting(2, ge=1)
    vit_heads: int = setting(4, ge=1)
    vit_laplacian_heads: int = setting(2, ge=0)
    vit_mlp_ratio: int = setting(2, ge=1)
    vit_patch: int = setting(8, ge=1)
    vit_image: int = setting(32, ge=1)
    vit_channels: int = setting(3, ge=1)
    vit_classes: int = setting(10, ge=2)
    vit_batch: int = setting(128, ge=1)
    gpt_dim: int = setting(32, ge=1)
    gpt_depth: int = setting(2, ge=1)
    gpt_heads: int = setting(8, ge=1)
    gpt_laplacian_heads: int = setting(4, ge=0)
    gpt_mlp_ratio: int = setting(4, ge=1)
    gpt_block: int = setting(32, ge=1)
    gpt_vocab: int = setting(65, ge=2)
    gpt_batch: int = setting(32, ge=1)

    def check(self) -> None:
        name = type(self).__name__
        for kind in ("vit", "gpt"):
            dim, heads = getattr(self, f"{kind}_dim"), getattr(self, f"{kind}_heads")
            if dim % heads:
                raise ValueError(f"{name}.{kind}_dim: expected a multiple of {kind}_heads="
                                 f"{heads}, got {dim}")
            if getattr(self, f"{kind}_laplacian_heads") > heads:
                raise ValueError(f"{name}.{kind}_laplacian_heads: expected at most {kind}_heads="
                                 f"{heads}, got {getattr(self, f'{kind}_laplacian_heads')}")
        if self.vit_image % self.vit_patch:
            raise ValueError(f"{name}.vit_image: expected a multiple of vit_patch="
                             f"{self.vit_patch}, got {self.vit_image}")

    @classmethod
    def tiny(cls, **overrides: Any) -> "StackedBenchSettings":
        """Tiny models, S in (1, 2), one thread, one repeat of one step: seconds."""
        base = dict(stack_sizes=(1, 2), threads=(1,), steps=1, repeats=1, vit_dim=8,
                    vit_heads=2, vit_laplacian_heads=1, vit_patch=4, vit_image=8,
                    vit_batch=4, gpt_dim=8, gpt_heads=2, gpt_laplacian_heads=1, gpt_block=8,
                    gpt_vocab=11, gpt_batch=4)
        return cls(**{**base, **overrides})

    def describe(self, model: str) -> str:
        """One line naming the model and its batch."""
        if model == "vit":
            t = (self.vit_image // self.vit_patch) ** 2
            return (f"ViT: dim {self.vit_dim}, depth {self.vit_depth}, {self.vit_heads} heads "
                    f"({self.vit_laplacian_heads} Laplacian), {t} patches of "
                    f"{self.vit_patch}x{self.vit_patch}x{self.vit_channels}, "
                    f"batch {self.vit_batch}")
        return (f"char GPT: dim {self.gpt_dim}, depth {self.gpt_depth}, {self.gpt_heads} heads "
                f"({self.gpt_laplacian_heads} Laplacian), block {self.gpt_block}, "
                f"vocab {self.gpt_vocab}, batch {self.gpt_batch}")


@dataclass
class StepTiming:
    """Per-step wall-clock and CPU seconds of one case, one entry per repeat.

    ``seeds``: S (1 for one at a time and the floor); ``path``: ``"one"``, ``"floor"`` or the
    stack's attention path (:data:`PATHS`).
    """

    model: str
    threads: int
    seeds: int
    path: str
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)

    @property
    def wall(self) -> float:
        return statistics.median(self.wall_s)


@dataclass
class StackedBenchResult:
    """The timings, and the host's logical CPUs and 1-minute load average before and after."""

    settings: StackedBenchSettings
    timings: list[StepTiming]
    cpus: int | None = None
    load: tuple[float, float] | None = None

    def find(self, model: str, threads: int, seeds: int, path: str) -> StepTiming | None:
        return next((t for t in self.timings if (t.model, t.threads, t.seeds, t.path)
                     == (model, threads, seeds, path)), None)


# ------------------------------------------------------------------------------ workloads
def _workload(s: StackedBenchSettings, model: str
              ) -> tuple[Callable[[int], nn.Module], Callable[[tuple[int, ...]], tuple]]:
    """``(seed -> model, leading shape -> (inputs, targets))`` of one benchmarked model."""
    gen = torch.Generator().manual_seed(s.seed)
    if model == "vit":
        tokens = (s.vit_image // s.vit_patch) ** 2
        patch_dim = s.vit_patch * s.vit_patch * s.vit_channels

        def make(_seed: int) -> nn.Module:
            return ViT(tokens, patch_dim, s.vit_classes, dim=s.vit_dim, depth=s.vit_depth,
                       heads=s.vit_heads, laplacian_heads=s.vit_laplacian_heads,
                       mlp_ratio=s.vit_mlp_ratio)

        def data(lead: tuple[int, ...]) -> tuple:
            return (torch.randn(*lead, tokens, patch_dim, generator=gen),
                    torch.randint(0, s.vit_classes, lead, generator=gen))
        return make, data

    def make_gpt(_seed: int) -> nn.Module:
        return CharGPT(s.gpt_vocab, s.gpt_block, dim=s.gpt_dim, depth=s.gpt_depth,
                       heads=s.gpt_heads, laplacian_heads=s.gpt_laplacian_heads,
                       mlp_ratio=s.gpt_mlp_ratio)

    def text(lead: tuple[int, ...]) -> tuple:
        return tuple(torch.randint(0, s.gpt_vocab, (*lead, s.gpt_block), generator=gen)
                     for _ in range(2))
    return make_gpt, text


def _step(model: nn.Module, x: Tensor, y: Tensor, targets_per_seed: int,
          lr: float) -> Callable[[], None]:
    """One AdamW step on the sum over seeds of each seed's mean cross-entropy."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                        reduction="sum").div(targets_per_seed).backward()
        opt.step()
    return step


def _cases(s: StackedBenchSettings, model: str) -> dict[tuple[int, str], Callable[[], None]]:
    """Every timed case of one model: ``(S, path) -> one training step``."""
    make, data = _workload(s, model)
    batch = s.vit_batch if model == "vit" else s.gpt_batch
    cases = {}
    for key, size in (((1, ONE), batch), ((1, FLOOR), 1)):
        seed_everything(s.seed)
        x, y = data((size,))
        cases[key] = _step(make(s.seed), x, y, y.numel(), s.lr)
    for n in s.stack_sizes:
        x, y = data((n, batch))
        for path in s.paths:
            stack = StackedModels(make, range(s.seed, s.seed + n), vmap_safe=path == "explicit")
            cases[(n, path)] = _step(stack, x, y, y[0].numel(), s.lr)
    return cases


def _timed(step: Callable[[], None], steps: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    return (time.perf_counter() - wall) / steps, (time.process_time() - cpu) / steps


def run(s: StackedBenchSettings) -> StackedBenchResult:
    """Time every case of every model under every number of threads (interleaved)."""
    timings: list[StepTiming] = []
    load_before = _load()
    with warnings.catch_warnings():
        # the fused path's per-seed fallback warns once per call site; it is what is measured
        warnings.filterwarnings("ignore", message=".*batching rule.*")
        for model in s.models:
            for threads in s.threads:
                with num_threads(threads):
                    cases = _cases(s, model)
                    rows = {key: StepTiming(model, threads, key[0], key[1]) for key in cases}
                    for step in cases.values():                 # warm-up, not counted
                        _timed(step, 1)
                    names = list(cases)
                    for r in range(s.repeats):
                        for key in names[r % len(names):] + names[:r % len(names)]:
                            wall, cpu = _timed(cases[key], s.steps)
                            rows[key].wall_s.append(wall)
                            rows[key].cpu_s.append(cpu)
                    timings += rows.values()
                    del cases
    load_after = _load()
    load = None if load_before is None or load_after is None else (load_before, load_after)
    return StackedBenchResult(s, timings, os.cpu_count(), load)


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:                                           # not on every platform
        return None


# ------------------------------------------------------------------------------ report
def _ratios(result: StackedBenchResult, t: StepTiming) -> dict[str, float]:
    one = result.find(t.model, t.threads, 1, ONE)
    floor = result.find(t.model, t.threads, 1, FLOOR)
    one_thread = result.find(t.model, 1, 1, ONE)
    ratio = paired_ratio(t.wall_s, one.wall_s)
    share = min(1.0, floor.wall / one.wall)
    out = {"ratio": ratio, "speedup": t.seeds / ratio,
           "ideal": share + t.seeds * (1.0 - share)}
    if one_thread is not None:
        out["ratio_one_thread"] = t.wall / one_thread.wall
    return out


def report(result: StackedBenchResult) -> str:
    """The table: per model, threads, S and path, ms per step and the ratios (module doc)."""
    s = result.settings
    lines = [f"Stacked seeds: one training step (forward, backward, AdamW), median of "
             f"{s.repeats} interleaved calls of {s.steps} steps; wall-clock"]
    if result.load is not None:
        lines.append(f"host: {result.cpus} logical CPUs, 1-minute load average "
                     f"{result.load[0]:.1f} before and {result.load[1]:.1f} after (a busy core "
                     "stalls every multi-threaded case)")
    head = (f"{'thr':>3} {'S':>3} {'path':>8} {'ms/step':>8} {'seeds/s':>8} "
            f"{'S seeds/one':>11} {'(1 thr)':>7} {'speed-up':>8} {'ideal':>6}")
    for model in s.models:
        lines += ["", s.describe(model), head]
        for threads in s.threads:
            one = result.find(model, threads, 1, ONE)
            floor = result.find(model, threads, 1, FLOOR)
            one_thread = result.find(model, 1, 1, ONE)
            rel = f"{one.wall / one_thread.wall:>7.2f}" if one_thread else f"{'-':>7}"
            lines.append(f"{threads:>3} {1:>3} {'one':>8} {one.wall * 1e3:>8.1f} "
                         f"{1 / one.wall:>8.1f} {1.0:>11.2f} {rel} {1.0:>8.2f} {1.0:>6.2f}")
            lines.append(f"{threads:>3} {1:>3} {'floor':>8} {floor.wall * 1e3:>8.1f} "
                         f"{'':>8} {floor.wall / one.wall:>11.2f}")
            for n in s.stack_sizes:
                for path in s.paths:
                    t = result.find(model, threads, n, path)
                    r = _ratios(result, t)
                    rel = f"{r['ratio_one_thread']:>7.2f}" if "ratio_one_thread" in r \
                        else f"{'-':>7}"
                    lines.append(f"{threads:>3} {n:>3} {path:>8} {t.wall * 1e3:>8.1f} "
                                 f"{n / t.wall:>8.1f} {r['ratio']:>11.2f} {rel} "
                                 f"{r['speedup']:>8.2f} {r['ideal']:>6.2f}")
    lines += ["", "S seeds/one: a stacked step of S seeds over one seed's step, same threads",
              "(1 thr): the same over one seed's step on one thread",
              "speed-up: seeds per second stacked over seeds per second one at a time",
              "ideal: floor + S (1 - floor): every fixed cost saved, none of the arithmetic"]
    return "\n".join(lines)


def _tuple(kind: Callable[[str], Any]) -> Callable[[str], tuple]:
    return lambda v: tuple(kind(t) for t in v.split(","))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ddcl_theory.bench.stacked",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--models", type=_tuple(str))
    ap.add_argument("--stack-sizes", type=_tuple(int))
    ap.add_argument("--threads", type=_tuple(int))
    ap.add_argument("--paths", type=_tuple(str))
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--tiny", action="store_true", help="tiny models: a check in seconds")
    args = ap.parse_args(argv)
    over = {k: v for k, v in vars(args).items() if k != "tiny" and v is not None}
    s = StackedBenchSettings.tiny(**over) if args.tiny else StackedBenchSettings(**over)
    print(report(run(s)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
