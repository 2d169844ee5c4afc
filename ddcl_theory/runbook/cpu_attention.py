"""Attention in torch's FLOP counter on the CPU.

torch's ``FlopCounterMode`` holds formulas for the GPU kernels of
``scaled_dot_product_attention`` but none for its CPU kernel, so on the CPU the attention of every
model that calls SDPA counts 0. :func:`count_cpu_attention` registers the GPU kernels' formulas
for it; the smoke run's ``--flops`` counts (:mod:`ddcl_theory.runbook.flops`) call it first.
"""
from __future__ import annotations

import torch

__all__ = ["count_cpu_attention"]


def count_cpu_attention() -> None:
    """Teach torch's FLOP counter the CPU kernels of ``scaled_dot_product_attention`` (the
    flash kernel for the CPU and its backward), with the formulas it holds for the GPU kernels:
    without them the attention of every model that calls SDPA counts 0 on the CPU. Idempotent."""
    from torch.utils import flop_counter as fc
    aten = torch.ops.aten
    forward = aten._scaled_dot_product_flash_attention_for_cpu
    backward = aten._scaled_dot_product_flash_attention_for_cpu_backward
    if forward.default in fc.flop_registry or forward in fc.flop_registry:
        return
    fc.register_flop_formula(forward, get_raw=True)(fc.sdpa_flop)          # already shaped
    fc.register_flop_formula(backward, get_raw=True)(fc.sdpa_backward_flop)
