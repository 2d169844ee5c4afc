"""The one profile switch, device choice and seeding.

Every experiment reads its scale from :func:`current` and nowhere else. The profile is chosen by
the environment variable ``DDCL_PROFILE``:

* ``cpu`` (default): everything runs on CPU in minutes; the committed goldens use it.
* ``paper``: paper-scale settings on a GPU (``cuda`` when available).
* ``reference``: the same code on CPU at the scale the verdict rules demand (more seeds, longer
  runs, a scale sweep); resumable like ``paper`` (run directories on) and written to
  ``results/reference/`` so that its committed verdicts sit beside the cpu ones. An experiment
  that gives no ``reference`` value to :meth:`Profile.pick` runs its cpu value.

Running the paper profile (a chapter's :func:`configure_torch`, ``make paper``) needs a CUDA
device: without one it stops with a message, unless ``DDCL_ALLOW_CPU=1`` asks for the CPU
explicitly (:func:`check_device`). Reading paper settings needs no device.

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
ALLOW_CPU_ENV = "DDCL_ALLOW_CPU"
PROFILES = ("cpu", "paper", "reference")
DEFAULT_PROFILE = "cpu"

T = TypeVar("T")


@dataclass(frozen=True)
class Profile:
    """The active run profile.

    Attributes:
        name: ``"cpu"``, ``"paper"`` or ``"reference"``.
        device: torch device string the experiments use.
        smoke: the paper profile's smoke test (``DDCL_SMOKE=1``).
    """

    name: str
    device: str
    smoke: bool = False

    @property
    def is_paper(self) -> bool:
        return self.name == "paper"

    @property
    def is_reference(self) -> bool:
        return self.name == "reference"

    @property
    def keeps_runs(self) -> bool:
        """Whether experiments checkpoint into run directories and resume (paper, reference)."""
        return self.name in ("paper", "reference")

    @property
    def results_subdir(self) -> str:
        """The folder inside ``results/`` this profile writes to: ``""`` for cpu, else its name."""
        return "" if self.name == "cpu" else self.name

    def pick(self, *, cpu: T, paper: T, smoke: T | None = None,
             reference: T | None = None) -> T:
        """Return the value for this profile: ``profile.pick(cpu=3, paper=10, reference=5)``.

        ``smoke`` (for budgets only: epochs, steps, seeds) replaces the paper value in the paper
        profile's smoke test; sizes and shapes leave it out and stay at paper scale.
        ``reference`` is the reference profile's value; left out (None), the cpu value is used.
        """
        if self.is_paper:
            return smoke if (self.smoke and smoke is not None) else paper
        if self.is_reference and reference is not None:
            return reference
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


def check_device(prof: Profile | None = None) -> Profile:
    """The profile (default the active one), after checking that it can run where it is: the
    paper profile (not its smoke test) needs CUDA unless ``DDCL_ALLOW_CPU=1``; ``RuntimeError``
    saying how to proceed otherwise."""
    prof = prof or current()
    if prof.is_paper and not prof.smoke and prof.device != "cuda" \
            and not env_flag(ALLOW_CPU_ENV, False):
        raise RuntimeError(
            f"{PROFILE_ENV}=paper runs the papers' scale, which needs a CUDA GPU, and torch sees "
            "none (a CPU build of torch, or no device). Install a CUDA build (make setup "
            f"TORCH=cuda), or set {ALLOW_CPU_ENV}=1 to run it on the CPU anyway (days), or use "
            f"{PROFILE_ENV}=reference for the CPU-sized confirmatory run.")
    return prof


def configure_torch() -> Profile:
    """Set torch up for the active profile and return it (after :func:`check_device`).

    Under ``cpu`` torch uses one thread: the chapters' tensors are small, so threads cost more
    than they give on a shared two-core host, and a fixed reduction order keeps the printed
    digits of the goldens identical on every machine. ``paper`` leaves torch's defaults alone.
    """
    prof = check_device()
    if not prof.is_paper:
        torch.set_num_threads(1)
    elif prof.device == "cuda":
        # TF32 for matrix products outside the DDCL layer's float32 island (its distances,
        # softmax and losses run in float32 whatever autocast or TF32 say)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return prof


def describe() -> str:
    """One line naming the profile, for the first cell of every notebook."""
    prof = current()
    return f"profile={prof.name} device={prof.device} torch={torch.__version__.split('+')[0]}"
