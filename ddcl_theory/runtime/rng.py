"""Capturing and restoring every random state a training loop may draw from."""
from __future__ import annotations

import random
from collections.abc import Mapping

import numpy as np
import torch

__all__ = ["rng_state", "set_rng_state"]


def rng_state(generators: Mapping[str, torch.Generator] | None = None) -> dict:
    """Every random state a training loop may draw from: Python's, NumPy's global, torch's CPU
    and CUDA default generators, and the named ``generators`` (e.g. from ``seed_everything``)."""
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "generators": {name: g.get_state() for name, g in (generators or {}).items()},
    }


def set_rng_state(state: Mapping, generators: Mapping[str, torch.Generator] | None = None) -> None:
    """Restore what :func:`rng_state` captured (the named generators must match by name)."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    saved = state.get("generators", {})
    for name, g in (generators or {}).items():
        if name not in saved:
            raise ValueError(f"generators: no saved state for {name!r}; saved: {sorted(saved)}")
        g.set_state(saved[name])
