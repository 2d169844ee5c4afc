"""Optimiser steps of the image experiments, as functions of their settings.

``STEPS[name](settings)`` is the number of optimiser steps that the registry entry ``name``
(:attr:`ddcl_theory.experiments.registry.Experiment.name`) takes through
:func:`ddcl_theory.runtime.training.fit` when run on ``settings``, i.e. what
:func:`~ddcl_theory.runtime.training.steps_taken` grows by. Each formula multiplies the loops
of the run function (seeds, settings, training sizes, epochs, ``ceil(n / batch_size)`` batches,
steps per round, and the extra runs: probes, ceilings, selections, long, terminal and wide
runs); where a loop can stop early (patience, ``stop_if``) it gives the planned maximum. Seeds
trained together as one stacked model count once per step, as ``fit`` counts them. The numbers
are for a fresh run: a run that resumes from a checkpoint or a finished unit takes fewer.

``EXAMPLES[name](settings)`` is ``{model class name: examples}``: the training examples those
steps see, per class of the module passed to ``fit`` (``type(model).__name__``, and the width
of a stack of seeds, ``"StackedModels[d=384]"``: :func:`~ddcl_theory.runtime.training.flops_key`,
as :func:`~ddcl_theory.runtime.training.counting_flops` records ``totals["models"]``), as
:func:`~ddcl_theory.runtime.training.batch_examples` counts them (summed over every step of every
``fit`` call): a batch with integer tensors counts the elements of the largest one (an epoch of
index batches its ``n`` examples, the short last batch at its real size; stacked labels (S, b)
seeds x images; per-patch labels (B, T) or a (B, T) token window every patch or token; a probe's
flat labels every row), a batch of float data alone its first dimension (bool masks do not
count). A class appears only where it takes steps (``{}`` for an entry that trains no model).
Where a run can stop early it is, like ``STEPS``, the planned maximum.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

__all__ = ["STEPS", "EXAMPLES"]


def _batches(n: int, batch_size: int) -> int:
    """Batches of one epoch over ``n`` examples (the last one may be short)."""
    return math.ceil(n / batch_size)


def patch_prototypes(s: Any) -> int:
    """``steps`` full-batch Adam steps (one per round)."""
    return s.steps


def transformer(s: Any) -> int:
    """Sum over ``train_sizes`` n of 3 variants x ``seeds`` x ``epochs`` x ceil(n /
    ``batch_size``); early stopping only picks the best epoch, every epoch is trained."""
    return sum(3 * len(s.seeds) * s.epochs * _batches(n, s.batch_size) for n in s.train_sizes)


def eps_sweep(s: Any) -> int:
    """``eps_values`` x ``seeds`` x ``epochs`` x ceil(``n_train_per_class`` x ``classes`` /
    ``batch_size``). A maximum: a run stops after the first epoch with a non-finite L_q
    (``stop_if``). Assumes the CIFAR-10 subset holds ``n_train_per_class`` images of each class
    (it holds 1,000)."""
    n = s.n_train_per_class * len(s.classes)
    return len(s.eps_values) * len(s.seeds) * s.epochs * _batches(n, s.batch_size)


def eps_scales(s: Any) -> int:
    """:func:`eps_sweep` once per run length of ``s.scales`` (separate runs); a maximum, as
    there."""
    return sum(eps_sweep(s.replace(epochs=epochs)) for epochs in s.scales)


def learned_attention(s: Any) -> int:
    """``steps`` steps (rounds of ``steps // 10`` steps, the last one shorter)."""
    return s.steps


def vit_study(s: Any) -> int:
    """One step per batch of a stack: the seeds of a (part, size, width, setting) train
    together as one stacked model, so seeds do not multiply. Sweep: ``n_train`` x
    ``head_settings`` x ``epochs`` x ceil(n / ``batch_size``); terminal: 2 settings x
    ``terminal.epochs`` x ceil(``terminal.n_train`` / ``batch_size``); wide: ``wide.dims`` x 2
    settings x ``epochs`` x ceil(``wide.n_train`` / ``batch_size``). A maximum: the sweep and
    wide stacks stop once every seed has waited ``patience`` epochs (the terminal ones run to
    the end)."""
    per_epoch = lambda n: _batches(n, s.batch_size)          # noqa: E731
    sweep = sum(len(s.head_settings) * s.epochs * per_epoch(n) for n in s.n_train)
    terminal = 2 * s.terminal.epochs * per_epoch(s.terminal.n_train)
    wide = len(s.wide.dims) * 2 * s.epochs * per_epoch(s.wide.n_train)
    return sweep + terminal + wide


def _dense_runs(s: Any) -> tuple[int, list[int]]:
    """(tuning runs, the length of every deciding run) of :func:`dense_features`."""
    heads = len(s.head_settings)
    tuning = len(s.tune_seeds) * heads * len(s.tune_lrs)
    trend = min(s.trend_seeds, len(s.seeds))
    deciding = [n for n in s.steps[:-1] for _ in range(trend * heads)]
    return tuning, deciding + [s.steps[-1]] * (len(s.seeds) * heads)


def dense_features(s: Any) -> int:
    """The tuning runs (per tuning seed, head setting and rate: a run of the deciding length,
    1 probe at the settling round and 2 on the validation images at its end); per seed the
    floors (3 probes on the raw patches, 3 per head setting on the untrained ViT, and on the
    trend seeds the supervised ceiling's ``ceiling_steps`` per head setting); per deciding run
    (every seed at the longest length, the trend seeds at the shorter ones, each head setting)
    its steps, 1 probe at the settling round and 3 on the trained teacher. Every probe takes
    ``probe_steps``; runs are whole rounds of ``steps_per_round``. The ceiling's early stopping
    only picks the best round: every round is trained."""
    whole = lambda n: (n // s.steps_per_round) * s.steps_per_round    # noqa: E731
    heads, probe = len(s.head_settings), s.probe_steps
    tuning, lengths = _dense_runs(s)
    trend = min(s.trend_seeds, len(s.seeds))
    floors = len(s.seeds) * (3 + 3 * heads) * probe + trend * heads * whole(s.ceiling_steps)
    return (tuning * (whole(s.steps[-1]) + 3 * probe) + floors
            + sum(whole(n) + 4 * probe for n in lengths))


def soft_vq(s: Any) -> int:
    """Selection: one epoch per candidate (2 x ``relative_temperatures`` soft starts +
    ``ema_decays`` x ``ema_thresholds``) at the largest size; deciding runs: ``n_train`` x
    ``seeds`` x 4 arms x ``epochs`` x ceil(n / ``batch_size``); long runs: ``long_seeds`` x
    ``long_epochs`` at the largest size."""
    largest = _batches(s.n_train[-1], s.batch_size)
    grid = 2 * len(s.relative_temperatures) + len(s.ema_decays) * len(s.ema_thresholds)
    deciding = sum(len(s.seeds) * 4 * s.epochs * _batches(n, s.batch_size) for n in s.n_train)
    long_runs = min(s.long_seeds, len(s.seeds)) * s.long_epochs * largest
    return grid * largest + deciding + long_runs


def laplacian_readout(s: Any) -> int:
    """``n_train`` x 2 head settings (``"0"``, ``"all"``) x ``seeds`` x ``epochs`` x
    ceil(n / ``batch_size``). A maximum: a run stops after ``patience`` epochs without a new
    lowest validation loss."""
    return sum(2 * len(s.seeds) * s.epochs * _batches(n, s.batch_size) for n in s.n_train)


def _dino_sizes(s: Any) -> tuple[int, int, int]:
    """(Imagenette training images, those the [CLS] probe fits on, ADE20K training images the
    dense probe fits on) of a :func:`dino_study`: the recipe's limits, or the whole splits."""
    from ddcl_theory.data.ade20k import SPLIT_SIZES as ADE20K
    from ddcl_theory.data.imagenette import SPLIT_SIZES as IMAGENETTE
    r = s.recipe
    images = r.pretrain_images or IMAGENETTE["train"]
    return (images, images - s.image_holdout,
            (r.probe_images or ADE20K["training"]) - s.settle_images)


def _dino_lengths(s: Any) -> list[int]:
    """The epochs of every pre-training run of a :func:`dino_study`, tuning runs first."""
    arms = len(s.head_settings)
    tuning = [s.epochs[-1]] * (len(s.tune_seeds) * len(s.tune_lrs) * arms)
    return tuning + [e for e in s.epochs for _ in range(len(s.seeds_at(e)) * arms)]


def dino_study(s: Any) -> int:
    """Per run (the tuning runs at the longest length; then every seed at the longest length
    and the trend seeds at the shorter ones, each head setting): its epochs of images //
    ``batch_size`` steps, two fits of the ADE20K probe (part-way and at the end,
    ``probe_steps`` each) and one of the [CLS] probe (``cls_probe_steps``); per seed and head
    setting the untrained ViT's two probes."""
    r = s.recipe
    images, _, _ = _dino_sizes(s)
    runs = sum(e * (images // r.batch_size) + 2 * r.probe_steps + s.cls_probe_steps
               for e in _dino_lengths(s))
    return runs + len(s.seeds) * len(s.head_settings) * (r.probe_steps + s.cls_probe_steps)


#: Registry entry name -> ``settings -> optimiser steps through fit``.
STEPS: dict[str, Callable[[Any], int]] = {
    "ddcl_layer.run_patch_prototypes": patch_prototypes,
    "ddcl_layer.run_transformer": transformer,
    "eps_ablation.run_scales": eps_scales,
    "eps_ablation.run_scales[optimiser=sgd]": eps_scales,
    "eps_ablation.run": eps_sweep,
    "learned_attention.run[causal=True]": learned_attention,
    "learned_attention.run[causal=False]": learned_attention,
    "laplacian_study.run_vit": vit_study,
    "dense_features.run": dense_features,
    "dino_study.run": dino_study,
    "soft_vq.run": soft_vq,
    "laplacian_readout.run": laplacian_readout,
}


# ------------------------------------------------------------------------------ examples


def _used(examples: dict[str, int]) -> dict[str, int]:
    """The classes that train at all (``counting_flops`` records a class at its first step)."""
    return {cls: n for cls, n in examples.items() if n > 0}


def patch_prototypes_examples(s: Any) -> dict[str, int]:
    """``steps`` full batches of the ``n_images`` patch-token images (float (N, T, D): its
    first dimension)."""
    return _used({"DDCLAttention": s.steps * s.n_images})


def transformer_examples(s: Any) -> dict[str, int]:
    """Sum over ``train_sizes`` n of 3 variants x ``seeds`` x ``epochs`` x n (index batches)."""
    return _used({"DDCLTransformer": sum(3 * len(s.seeds) * s.epochs * n
                                         for n in s.train_sizes)})


def eps_sweep_examples(s: Any) -> dict[str, int]:
    """``eps_values`` x ``seeds`` x ``epochs`` x ``n_train_per_class`` x ``classes`` (index
    batches). A maximum, as :func:`eps_sweep`, with its assumption on the subset."""
    n = s.n_train_per_class * len(s.classes)
    return _used({"JointModel": len(s.eps_values) * len(s.seeds) * s.epochs * n})


def eps_scales_examples(s: Any) -> dict[str, int]:
    """:func:`eps_sweep_examples` once per run length of ``s.scales``; a maximum."""
    runs = [eps_sweep_examples(s.replace(epochs=epochs)) for epochs in s.scales]
    return _used({"JointModel": sum(run.get("JointModel", 0) for run in runs)})


def learned_attention_examples(s: Any) -> dict[str, int]:
    """``steps`` x ``batch`` x ``seq_len``: every character of the (batch, seq_len) integer
    window (the largest integer tensor of either batch form)."""
    return _used({"_OneLayer": s.steps * s.batch * s.seq_len})


def vit_study_examples(s: Any) -> dict[str, int]:
    """:func:`vit_study`'s epochs, each counting its stack's seeds x n images (the stacked
    labels (S, b)): sweep x ``seeds`` (and ``extra_seeds`` at the largest count), terminal x
    ``terminal.seeds``, wide x ``wide.seeds``; a maximum, as there. Kept per width
    (``StackedModels[d=...]``, :func:`~ddcl_theory.runtime.training.flops_key`): the wide
    runs cost more per example."""
    sweep = sum(len(s.head_settings) * s.epochs * n for n in s.n_train)
    extra = len(s.head_settings) * s.epochs * s.n_train[-1]
    terminal = 2 * s.terminal.epochs * s.terminal.n_train
    out = {f"StackedModels[d={s.dim}]": len(s.seeds) * sweep + len(s.extra_seeds) * extra
           + len(s.terminal.seeds) * terminal}
    for dim in s.wide.dims:
        key = f"StackedModels[d={dim}]"
        out[key] = out.get(key, 0) + len(s.wide.seeds) * 2 * s.epochs * s.wide.n_train
    return _used(out)


def dense_features_examples(s: Any) -> dict[str, int]:
    """:func:`dense_features`'s loops by model: a ``Linear`` probe step sees ``n_train`` x
    ``tokens`` patch labels (11-class and foreground probes) or ``n_train`` image labels (image
    probe); a ceiling step ``batch_size`` x ``tokens`` patch labels; a pre-training step
    ``batch_size`` images (float views)."""
    whole = lambda n: (n // s.steps_per_round) * s.steps_per_round    # noqa: E731
    dense, image = s.probe_steps * s.n_train * s.tokens, s.probe_steps * s.n_train
    heads = len(s.head_settings)
    tuning, lengths = _dense_runs(s)
    trend = min(s.trend_seeds, len(s.seeds))
    probes = (tuning * (2 * dense + image) + len(s.seeds) * (1 + heads) * (2 * dense + image)
              + len(lengths) * (3 * dense + image))
    return _used({"Linear": probes,
                  "SegmentationViT": trend * heads * whole(s.ceiling_steps) * s.batch_size
                  * s.tokens,
                  "SelfDistillation": (tuning * whole(s.steps[-1]) + sum(map(whole, lengths)))
                  * s.batch_size})


def soft_vq_examples(s: Any) -> dict[str, int]:
    """Images (float batches): one epoch per candidate and ``long_seeds`` x ``long_epochs`` at
    the largest size, and ``n_train`` x ``seeds`` x 4 arms x ``epochs`` x n."""
    grid = 2 * len(s.relative_temperatures) + len(s.ema_decays) * len(s.ema_thresholds)
    deciding = sum(len(s.seeds) * 4 * s.epochs * n for n in s.n_train)
    long_runs = min(s.long_seeds, len(s.seeds)) * s.long_epochs
    return _used({"VQVAE": (grid + long_runs) * s.n_train[-1] + deciding})


def laplacian_readout_examples(s: Any) -> dict[str, int]:
    """``n_train`` x 2 head settings x ``seeds`` x ``epochs`` x n (index batches); a maximum,
    as :func:`laplacian_readout`."""
    return _used({"ViTDDCL": sum(2 * len(s.seeds) * s.epochs * n for n in s.n_train)})


def dino_study_examples(s: Any) -> dict[str, int]:
    """:func:`dino_study`'s loops by model: an ADE20K probe step sees every patch of the images
    it fits on (at most: a patch with no labelled pixel is left out), a [CLS] probe step every
    Imagenette image it fits on, a pre-training step ``batch_size`` images."""
    r = s.recipe
    images, cls_fit, segment = _dino_sizes(s)
    dense, image = r.probe_steps * segment * r.tokens, s.cls_probe_steps * cls_fit
    lengths = _dino_lengths(s)
    floors = len(s.seeds) * len(s.head_settings)
    return _used({"Linear": len(lengths) * (2 * dense + image) + floors * (dense + image),
                  "SelfDistillation": sum(e * (images // r.batch_size) for e in lengths)
                  * r.batch_size})


#: Registry entry name -> ``settings -> {model class: training examples through fit}``.
EXAMPLES: dict[str, Callable[[Any], dict[str, int]]] = {
    "ddcl_layer.run_patch_prototypes": patch_prototypes_examples,
    "ddcl_layer.run_transformer": transformer_examples,
    "eps_ablation.run_scales": eps_scales_examples,
    "eps_ablation.run_scales[optimiser=sgd]": eps_scales_examples,
    "eps_ablation.run": eps_sweep_examples,
    "learned_attention.run[causal=True]": learned_attention_examples,
    "learned_attention.run[causal=False]": learned_attention_examples,
    "laplacian_study.run_vit": vit_study_examples,
    "dense_features.run": dense_features_examples,
    "dino_study.run": dino_study_examples,
    "soft_vq.run": soft_vq_examples,
    "laplacian_readout.run": laplacian_readout_examples,
}
