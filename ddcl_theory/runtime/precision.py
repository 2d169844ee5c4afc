"""Mixed precision and compilation switches for training forwards.

* :func:`autocast`: bf16 autocast on CUDA in the paper profile, a no-op elsewhere. The DDCL layer
  keeps its distances, softmax and losses in float32 (its float32 island) under autocast.
* :func:`maybe_compile`: ``torch.compile`` when ``DDCL_COMPILE=1``, the module itself otherwise.

Environment: ``DDCL_COMPILE=1`` (compile the training forward), ``DDCL_AMP=0`` (no autocast even
on CUDA).
"""
from __future__ import annotations

import contextlib

import torch

from ddcl_theory.runtime import profile
from ddcl_theory.runtime.profile import env_flag

__all__ = ["COMPILE_ENV", "AMP_ENV", "amp_enabled", "compile_enabled", "autocast",
           "maybe_compile"]

COMPILE_ENV = "DDCL_COMPILE"
AMP_ENV = "DDCL_AMP"


def amp_enabled(device: str | torch.device) -> bool:
    """bf16 autocast is used: a CUDA device, the paper profile, and ``DDCL_AMP`` not ``0``."""
    return (torch.device(device).type == "cuda" and profile.current().is_paper
            and env_flag(AMP_ENV, True))


def compile_enabled() -> bool:
    """``DDCL_COMPILE=1`` is set."""
    return env_flag(COMPILE_ENV, False)


def autocast(device: str | torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast for a forward pass on CUDA in the paper profile; a no-op context otherwise
    (the cpu profile, the paper smoke test on CPU, ``DDCL_AMP=0``).

    bf16 needs no loss scaling. The DDCL layer computes distances, the softmax and its losses in
    float32 whatever autocast says (its float32 island), so V >= 0 and the decomposition keep
    their float32 accuracy; matrix products elsewhere (projections, attention, MLPs) run in bf16.
    """
    if amp_enabled(device):
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def maybe_compile(module: torch.nn.Module) -> torch.nn.Module:
    """``torch.compile(module)`` when ``DDCL_COMPILE=1``, else ``module`` itself.

    Use the result for the training forward only; keep the original module for ``state_dict``,
    evaluation and checkpoints (the compiled wrapper shares its parameters).
    """
    if not isinstance(module, torch.nn.Module):
        raise ValueError(f"module: expected a torch.nn.Module, got {type(module).__name__}")
    return torch.compile(module) if compile_enabled() else module
