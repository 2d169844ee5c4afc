"""Seconds per step and peak memory of the papers' recipes at their shapes, on one device.

    python -m ddcl_theory.experiments.recipe_check [--device cuda] [--steps N] [--report FILE]
                                                   [--small]

Times optimiser steps of the paper-scale recipes on random data of their shapes:

* GPT-2 small with 5 Laplacian heads of L9 (:mod:`ddcl_theory.experiments.gpt2_recipe`) at the
  language-model study's batch, once as the study trains it (a stack of one seed, called
  directly, with the loss under ``vmap``) and once as a plain model, each with the attention
  operators and kernels that ran (on CUDA);
* the DeiT-style ViT-S of L6-L8 (:mod:`ddcl_theory.experiments.deit_recipe`: crops, flips,
  mixup or cutmix, AdamW, the seeds of a setting stacked), which no chapter runs yet;
* the DINO+iBOT ViT-S/16 of L10 (:mod:`ddcl_theory.experiments.dino_recipe`: two views, masks,
  the teacher's EMA), which no chapter runs yet.

Each: one warm-up step, then ``--steps`` timed steps (one device synchronisation around them),
under bf16 autocast on CUDA. It prints and records the seconds per step, examples (images or
tokens) per second, the peak device memory (CUDA) or the process's peak resident set (CPU),
and, for the ViT, the hours of one stack's full schedule at that speed (for DINO, one arm's).
A recipe that fails (out of device memory, say) is recorded with its error and the
others still run; the check then exits with status 1.
``--small`` runs the cpu profile's shapes instead (the plumbing check of the tests). Part of
the prepared GPU check (``scripts/gpu_check.sh``).
"""
from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from ddcl_theory.data import augment
from ddcl_theory.experiments import deit_recipe, dense_features, dino_recipe, gpt2_recipe
from ddcl_theory.experiments.laplacian_lm import LMSettings
from ddcl_theory.experiments.optim_groups import decay_groups
from ddcl_theory.runtime.precision import amp_enabled, autocast
from ddcl_theory.models.hf_vit import draw_drop_scale, drop_path_rates
from ddcl_theory.runtime.stacked import StackedModels

__all__ = ["time_deit", "time_gpt2", "main"]

#: Training images of the largest ViT setting (CIFAR-100 less its validation split).
DEIT_IMAGES = 49_000
#: Imagenette's training images, DINO's pre-training set.
DINO_IMAGES = 9_469


def _peak_mib(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _measured_on(device: str) -> dict:
    """The device and software a report was measured with, and the day (UTC)."""
    import datetime

    import transformers
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    return {"device": device, "device_name": name, "torch": torch.__version__,
            "cuda": torch.version.cuda, "transformers": transformers.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat()}


def _timed(step, device: str, steps: int) -> float:
    """Seconds per call of ``step`` over ``steps`` calls after one warm-up call."""
    step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def time_deit(device: str, steps: int, *, seeds: int = 2, recipe=None) -> dict:
    """A stack of ``seeds`` ViTs (all heads Laplacian) under the recipe, one batch a step."""
    recipe = recipe or deit_recipe.DeiTRecipe.from_profile()
    stack = StackedModels(lambda _s: recipe.model(100, recipe.heads), range(seeds)).to(device)
    opt = torch.optim.AdamW(deit_recipe.param_groups(stack.stacked, recipe.weight_decay,
                                                     stacked=True), lr=1e-4)
    b, size = recipe.batch_size, recipe.image_size
    x = torch.randn(seeds, b, 3, size, size, device=device)
    y = torch.randint(0, 100, (seeds, b), device=device)
    gen = torch.Generator().manual_seed(0)

    rates = drop_path_rates(recipe.drop_path, recipe.depth)

    def step() -> None:
        pairs = [deit_recipe.augmented_batch(recipe, x[s], y[s], 100, gen) for s in range(seeds)]
        images = torch.stack([p[0] for p in pairs])
        targets = torch.stack([p[1] for p in pairs])
        scale = torch.stack([draw_drop_scale(rates, b, gen) for _ in range(seeds)]).to(device)
        with autocast(device):
            loss = torch.vmap(augment.soft_cross_entropy)(stack(images, scale), targets).sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    seconds = _timed(step, device, steps)
    per_epoch = math.ceil(DEIT_IMAGES / b)
    return {"recipe": "deit", "shapes": f"ViT d={recipe.dim} depth={recipe.depth} "
            f"heads={recipe.heads} patch={recipe.patch}", "seeds": seeds, "batch": b,
            "seconds_per_step": seconds, "examples_per_second": seeds * b / seconds,
            "peak_mib": _peak_mib(device),
            "hours_per_stack": seconds * per_epoch * recipe.epochs / 3600}


def attention_kernels(step) -> list[str]:
    """The attention operators and CUDA kernels of one call of ``step``: torch's SDPA operators
    (``aten::_scaled_dot_product_*``, which name the backend: flash, efficient, cuDNN or math)
    and the kernels whose names say flash, fmha or cuDNN's SDPA."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    ops = ("aten::_scaled_dot_product", "aten::_flash_attention", "aten::_efficient_attention",
           "aten::_cudnn_attention")
    words = ("flash", "fmha", "sdpa")
    names = {e.key for e in prof.key_averages()
             if e.key.startswith(ops) or (not e.key.startswith("aten::")
                                          and any(w in e.key.lower() for w in words))}
    return sorted(n[:100] for n in names)


def time_gpt2(device: str, steps: int, *, batch: int = 8, shapes=None,
              stacked: bool = False) -> dict:
    """GPT-2 with 5 Laplacian heads a block, next-token cross-entropy, one batch a step; with
    ``stacked``, as the language-model study trains it: a stack of one seed, called directly
    (``StackedModels(..., direct_single=True)``), its loss under ``vmap``, the study's optimiser
    (the active profile's :class:`LMSettings`: AdamW with weight decay on the matrices and
    embeddings, each seed's gradient clipped); else plain AdamW on every parameter."""
    shapes = shapes or gpt2_recipe.GPT2Shapes.from_profile()
    vocab = 50257
    if stacked:
        model = StackedModels(lambda _s: shapes.model(vocab, shapes.laplacian_heads), (0,),
                              direct_single=True).to(device)
        ids = torch.randint(0, vocab, (1, batch, shapes.block_size + 1), device=device)

        def loss_of() -> torch.Tensor:
            return torch.vmap(lambda logits, y: F.cross_entropy(
                logits.reshape(-1, vocab).float(), y.reshape(-1)))(
                    model(ids[..., :-1]), ids[..., 1:]).sum()
    else:
        model = shapes.model(vocab, shapes.laplacian_heads).to(device)
        ids = torch.randint(0, vocab, (batch, shapes.block_size + 1), device=device)

        def loss_of() -> torch.Tensor:
            logits = model(ids[:, :-1])
            return F.cross_entropy(logits.reshape(-1, vocab).float(), ids[:, 1:].reshape(-1))
    if stacked:
        lm = LMSettings.from_profile()
        groups = (decay_groups(model.stacked, lm.weight_decay, stacked=True)
                  if lm.decay_matrices_only else list(model.parameters()))
        opt = torch.optim.AdamW(groups, lr=lm.lr, weight_decay=lm.weight_decay)
        if lm.grad_clip is not None:
            model.clip_before_step(opt, lm.grad_clip)
        optimiser = (f"AdamW lr {lm.lr:g}, weight decay {lm.weight_decay:g}"
                     f"{' on the matrices and embeddings' if lm.decay_matrices_only else ''}"
                     f"{f', each seed clipped at {lm.grad_clip:g}' if lm.grad_clip else ''}")
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        optimiser = "AdamW lr 0.0001, weight decay 0.01 on every parameter"

    def step() -> None:
        with autocast(device):
            loss = loss_of()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    seconds = _timed(step, device, steps)
    row = {"recipe": "gpt2 stacked" if stacked else "gpt2",
           "shapes": f"GPT-2 d={shapes.dim} depth={shapes.depth} heads={shapes.heads} "
           f"context={shapes.block_size} attention={shapes.attention}", "batch": batch,
           "seconds_per_step": seconds,
           "examples_per_second": batch * shapes.block_size / seconds,
           "peak_mib": _peak_mib(device), "optimiser": optimiser,
           "param_groups": len(opt.param_groups)}
    if device.startswith("cuda"):
        row["attention_kernels"] = attention_kernels(step)
    del model, opt
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return row


def time_dino(device: str, steps: int, *, recipe=None) -> dict:
    """DINO+iBOT (all heads Laplacian) at the recipe's shapes and head: two augmented views,
    iBOT masks, clipped gradients, the teacher's EMA step, one batch a step. The training step
    only: the images on the device, the feature extraction and the ADE20K probe come on top."""
    from ddcl_theory.models.dino import random_masks
    r = recipe or dino_recipe.DinoRecipe.from_profile()
    pair = dino_recipe.build_pair(r, "all", 0).to(device)
    opt = torch.optim.AdamW([*pair.student.parameters(), *pair.student_head.parameters()],
                            lr=1e-4)
    x = torch.randn(r.batch_size, 3, r.image_size, r.image_size, device=device)
    gen = torch.Generator().manual_seed(0)

    def step() -> None:
        a, b = dense_features.two_views(x, gen)
        masks = random_masks(2 * r.batch_size, r.tokens, gen).to(device)
        with autocast(device):
            loss = pair(dense_features.to_patches(a, r.patch),
                        dense_features.to_patches(b, r.patch), masks[:r.batch_size],
                        masks[r.batch_size:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(pair.parameters(), 3.0)
        opt.step()
        pair.update_teacher()

    seconds = _timed(step, device, steps)
    per_epoch = DINO_IMAGES // r.batch_size
    return {"recipe": "dino", "shapes": f"ViT d={r.dim} depth={r.depth} heads={r.heads} "
            f"patch={r.patch} image={r.image_size}", "batch": r.batch_size,
            "seconds_per_step": seconds, "examples_per_second": r.batch_size / seconds,
            "peak_mib": _peak_mib(device),
            "hours_per_arm": seconds * per_epoch * r.epochs / 3600}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--report", type=Path, default=None)
    parser.add_argument("--small", action="store_true",
                        help="the cpu profile's shapes (a plumbing check), not the paper's")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps: expected at least 1, got {args.steps}")
    from ddcl_theory.experiments.smoke import scoped_env
    from ddcl_theory.runtime import profile
    # the paper profile throughout (bf16 autocast on CUDA); --small: the cpu profile's shapes
    with scoped_env(**{profile.PROFILE_ENV: "paper", profile.SMOKE_ENV: None,
                       profile.ALLOW_CPU_ENV: "1"}):
        if args.small:
            recipe, shapes = deit_recipe.DeiTRecipe(), gpt2_recipe.GPT2Shapes()
            dino = dino_recipe.DinoRecipe()
        else:
            recipe = deit_recipe.DeiTRecipe.from_profile()
            shapes = gpt2_recipe.GPT2Shapes.from_profile()
            dino = dino_recipe.DinoRecipe.from_profile()
        lm_batch = 2 if args.small else LMSettings.from_profile().batch_size
        timings = {
            "gpt2 stacked": lambda: time_gpt2(args.device, args.steps, shapes=shapes,
                                              batch=lm_batch, stacked=True),
            "gpt2": lambda: time_gpt2(args.device, args.steps, shapes=shapes, batch=lm_batch),
            "deit": lambda: time_deit(args.device, args.steps, recipe=recipe),
            "dino": lambda: time_dino(args.device, args.steps, recipe=dino)}
        rows = []
        for name, timing in timings.items():
            try:
                rows.append(timing())
            except Exception as error:       # noqa: BLE001 -- the others still run, and say so
                kind = ("out of memory" if isinstance(error, torch.OutOfMemoryError)
                        else "failed")
                rows.append({"recipe": name, "outcome": kind, "error": f"{type(error).__name__}: "
                             f"{str(error).splitlines()[0] if str(error) else ''}"})
                print(f"recipe_check: {name} {kind}: {rows[-1]['error']}")
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
        for r in rows:
            r["bf16"] = amp_enabled(args.device)
    for r in rows:
        if "error" in r:
            continue
        extra = (f", {r['hours_per_stack']:.2f} h a stack of {r['seeds']} for the schedule"
                 if "hours_per_stack" in r else
                 f", {r['hours_per_arm']:.2f} h an arm for the schedule"
                 if "hours_per_arm" in r else "")
        print(f"recipe_check: {r['recipe']:5s} {r['shapes']}, batch {r['batch']}"
              f"{', bf16' if r['bf16'] else ''}: "
              f"{r['seconds_per_step'] * 1000:.1f} ms/step, {r['examples_per_second']:.0f} "
              f"examples/s, peak {r['peak_mib']:.0f} MiB{extra}")
        for kernel in r.get("attention_kernels", ()):
            print(f"recipe_check:   attention kernel {kernel}")
    if args.report:
        args.report.write_text(json.dumps({**_measured_on(args.device), "steps": args.steps,
                                           "recipes": rows}, indent=1) + "\n",
                               encoding="utf-8")
    return int(any("error" in r for r in rows))


if __name__ == "__main__":
    sys.exit(main())
