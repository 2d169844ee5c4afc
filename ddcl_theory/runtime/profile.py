"""The one profile switch, device choice and seeding.

Every experiment reads its scale from :func:`current` and nowhere else. The profile is chosen by
the environment variable ``DDCL_PROFILE``:

* ``cpu`` (default): everything runs on CPU in minutes; the committed goldens use it.
* ``paper``: paper-scale settings on a GPU (``cuda`` when available).

``DDCL_SMOKE=1`` beside ``DDCL_PROFILE=paper`` is the paper profile's smoke test: paper-scale
shapes and data, but the budgets (epochs, steps, seeds) that an experiment declares with
``pick(..., smoke=...)`` shrink to a handful, so a shape error or a missing data set shows on a
CPU in seconds instead of on someone's GPU.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

PROFILE_ENV = "DDCL_PROFILE"
SMOKE_ENV = "DDCL_SMOKE"
PROFILES = ("cpu", "paper")
DEFAULT_PROFILE = "cpu"

T = TypeVar("T")


@dataclass(frozen=True)
class Profile:
    """The active run profile.

    Attributes:
        name: ``"cpu"`` or ``"paper"``.
        device: torch device string the experiments use.
    """

    name: str
    device: str
    smoke: bool = False

    @property
    def is_paper(self) -> bool:
        return self.name == "paper"

    def pick(self, *, cpu: T, paper: T, smoke: T | None = None) -> T:
        """Return the value for this profile: ``profile.pick(cpu=3, paper=10, smoke=1)``.

        ``smoke`` (for budgets only: epochs, steps, seeds) replaces the paper value in the paper
        profile's smoke test; sizes and shapes leave it out and stay at paper scale.
        """
        if self.is_paper:
            return smoke if (self.smoke and smoke is not None) else paper
        return cpu


def env_flag(name: str, default: bool) -> bool:
    """The boolean environment switch ``name``: unset or blank -> ``default``; ``0``, ``false``,
    ``no``, ``off`` (any case) -> False; anything else -> True."""
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


def current() -> Profile:
    """Read the profile from ``DDCL_PROFILE``; raise on an unknown name."""
    name = os.environ.get(PROFILE_ENV, DEFAULT_PROFILE).strip().lower() or DEFAULT_PROFILE
    if name not in PROFILES:
        raise ValueError(f"{PROFILE_ENV}={name!r}: expected one of {PROFILES}")
    smoke = os.environ.get(SMOKE_ENV, "").strip().lower() not in ("", "0", "false", "no")
    if smoke and name != "paper":
        raise ValueError(f"{SMOKE_ENV}=1 is the paper profile's smoke test: set "
                         f"{PROFILE_ENV}=paper too")
    if name == "paper" and torch.cuda.is_available() and not smoke:
        device = "cuda"
    else:
        device = "cpu"
    return Profile(name=name, device=device, smoke=smoke)


def require(name: str) -> Profile:
    """Return the current profile, raising ``RuntimeError`` unless it is ``name``."""
    prof = current()
    if prof.name != name:
        raise RuntimeError(
            f"this run needs the {name!r} profile but {PROFILE_ENV}={prof.name!r}; "
            f"the committed goldens were recorded under 'cpu'"
        )
    return prof


def seed_everything(seed: int) -> torch.Generator:
    """Seed python, numpy and torch; return a torch generator seeded with ``seed``."""
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected a non-negative int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def configure_torch() -> Profile:
    """Set torch up for the active profile and return it.

    Under ``cpu`` torch uses one thread: the chapters' tensors are small, so threads cost more
    than they give on a shared two-core host, and a fixed reduction order keeps the printed
    digits of the goldens identical on every machine. ``paper`` leaves torch's defaults alone.
    """
    prof = current()
    if not prof.is_paper:
        torch.set_num_threads(1)
    return prof


def describe() -> str:
    """One line naming the profile, for the first cell of every notebook."""
    prof = current()
    return f"profile={prof.name} device={prof.device} torch={torch.__version__.split('+')[0]}"
