"""Temperature schedules and prototype trajectories that record F, G and the entropy.

A trajectory visits pairs (P_t, tau_t), t = 0..T. Step t -> t+1 first sets the temperature to
tau_{t+1}, then makes one update of the prototypes at that temperature:
P_{t+1} = P_t - eta grad F_{tau_{t+1}}(P_t) (``update="gradient"``) or the fixed-point step
(``update="em"``). With a constant schedule this is gradient descent at fixed temperature.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ddcl_theory.theory.free_energy import assignment_entropy, em_step, free_energy, gradient_step

UPDATES = ("gradient", "em")


def _check_ends(tau_start: float, tau_end: float, steps: int) -> None:
    if not (tau_start > 0 and tau_end > 0 and math.isfinite(tau_start) and math.isfinite(tau_end)):
        raise ValueError(f"tau_start, tau_end: expected finite positive temperatures, got "
                         f"{tau_start!r}, {tau_end!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: expected an int >= 1, got {steps!r}")


def constant_schedule(tau: float, steps: int) -> np.ndarray:
    """steps + 1 equal temperatures."""
    _check_ends(tau, tau, steps)
    return np.full(steps + 1, float(tau))


def linear_schedule(tau_start: float, tau_end: float, steps: int) -> np.ndarray:
    """steps + 1 temperatures from tau_start to tau_end, equally spaced."""
    _check_ends(tau_start, tau_end, steps)
    return np.linspace(tau_start, tau_end, steps + 1)


def exponential_schedule(tau_start: float, tau_end: float, steps: int) -> np.ndarray:
    """steps + 1 temperatures from tau_start to tau_end, equally spaced in log tau."""
    _check_ends(tau_start, tau_end, steps)
    return np.geomspace(tau_start, tau_end, steps + 1)


@dataclass
class Trajectory:
    """A recorded trajectory.

    Attributes:
        temperatures: (T+1,) tau_t.
        prototypes: (T+1, K, d) P_t, float64.
        free_energy: (T+1,) F_{tau_t}(P_t).
        lyapunov: (T+1,) G_{tau_t}(P_t) = F + N tau_t log K.
        entropy: (T+1,) H at (P_t, tau_t).
    """

    temperatures: np.ndarray
    prototypes: np.ndarray
    free_energy: np.ndarray
    lyapunov: np.ndarray
    entropy: np.ndarray

    def max_rise(self, which: str = "free_energy") -> float:
        """Largest single-step increase of ``which`` (``free_energy`` or ``lyapunov``);
        <= 0 if none."""
        if which not in ("free_energy", "lyapunov"):
            raise ValueError(f"which: expected 'free_energy' or 'lyapunov', got {which!r}")
        return float(np.diff(getattr(self, which)).max())


def run_flow(z: Tensor, prototypes: Tensor, temperatures: np.ndarray, *, step: float | None = None,
             update: str = "gradient", record_every: int = 1) -> Trajectory:
    """Run the prototype updates along ``temperatures`` (T+1,) from ``prototypes`` (K, d).

    ``step`` is the gradient step size (required for ``update="gradient"``, ignored for
    ``"em"``). Everything is computed in float64. ``record_every`` thins the record (the first
    and last states are always kept).
    """
    if update not in UPDATES:
        raise ValueError(f"update: expected one of {UPDATES}, got {update!r}")
    if update == "gradient" and (step is None or not step > 0):
        raise ValueError(f"step: a positive step size is needed for gradient updates, got {step!r}")
    taus = np.asarray(temperatures, dtype=np.float64)
    if taus.ndim != 1 or taus.size < 1 or not np.all(taus > 0):
        raise ValueError("temperatures: expected a 1-d array of positive temperatures")
    zz = z.detach().to(torch.float64)
    p = prototypes.detach().to(torch.float64).clone()
    n, k = zz.shape[0], p.shape[0]
    keep = [0]
    states = [p.clone()]
    for t in range(1, taus.size):
        tau = float(taus[t])
        p = gradient_step(zz, p, tau, step) if update == "gradient" else em_step(zz, p, tau)
        if t % record_every == 0 or t == taus.size - 1:
            keep.append(t)
            states.append(p.clone())
    f = np.array([float(free_energy(zz, s, float(taus[t]))) for t, s in zip(keep, states)])
    h = np.array([float(assignment_entropy(zz, s, float(taus[t]))) for t, s in zip(keep, states)])
    g = f + n * taus[keep] * math.log(k)
    return Trajectory(taus[keep], torch.stack(states).numpy(), f, g, h)
