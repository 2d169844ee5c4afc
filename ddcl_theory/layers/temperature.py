"""The temperature tau > 0 of a layer, as a small module: fixed, scheduled or learnable."""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from ddcl_theory import functional as F

__all__ = ["Schedule", "Temperature"]

Schedule = Callable[[int], float]


class Temperature(nn.Module):
    """tau > 0: a fixed float, a schedule ``step -> float``, or learnable tau = exp(log_tau).

    ``Temperature(0.5)``, ``Temperature(schedule)``, ``Temperature(0.5, learnable=True)`` (the
    parameter ``log_tau``, started at log 0.5). Calling the module never reads a tensor on the
    host: fixed and scheduled values are checked in Python when they are set (a bad scheduled
    value makes the next call raise ``ValueError``) and kept in the buffer ``tau``; the schedule's
    step is kept as the buffer ``step`` (saved in the state dict, broadcast by DDP) and as a
    Python int, so that :meth:`advance` reads no tensor either.
    """

    def __init__(self, value: float | Schedule = 1.0, *, learnable: bool = False) -> None:
        super().__init__()
        if callable(value) and learnable:
            raise ValueError("temperature: a schedule cannot also be learnable; pass a float")
        self.schedule: Schedule | None = value if callable(value) else None
        self._step = 0                                  # Python mirror of the buffer ``step``
        self._problem: str | None = None                # why the scheduled value is bad
        start = float(value(0)) if callable(value) else value
        F.check_temperature(start, "temperature")
        self.register_buffer("step", torch.zeros((), dtype=torch.long))
        if learnable:
            self.log_tau = nn.Parameter(torch.tensor(math.log(float(start))))
            self.register_buffer("tau", None)
        else:
            self.log_tau = None
            self.register_buffer("tau", torch.tensor(float(start)))

    def forward(self) -> Tensor:
        """tau, a 0-dim tensor: exp(log_tau) when learnable, else a copy of the buffer (so that
        a later :meth:`set` cannot reach a pending backward pass)."""
        if self._problem is not None:
            raise ValueError(self._problem)
        if self.log_tau is not None:
            return self.log_tau.exp()
        return self.tau.clone()

    @property
    def value(self) -> float:
        """tau as a float (a schedule's own value at the current step)."""
        if self.schedule is not None and self._problem is None:
            return float(self.schedule(self._step))
        return float(self().detach())

    def set(self, value: float) -> None:
        """Fix tau to ``value`` > 0, replacing a schedule; a learnable tau restarts from it."""
        F.check_temperature(value, "value")
        if self.log_tau is not None:
            with torch.no_grad():
                self.log_tau.fill_(math.log(float(value)))
            return
        self.schedule, self._problem = None, None
        self.tau.fill_(float(value))

    def advance(self, steps: int = 1) -> int:
        """Move the step counter by ``steps`` >= 0 and apply the schedule there; the new step."""
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"steps: expected an int >= 0, got {steps!r}")
        self.step += steps
        self._step += steps
        self._apply_schedule()
        return self._step

    def sync_from_buffers(self) -> int:
        """Re-read the step from its buffer (one host read) and apply the schedule; the step.

        Needed after the buffer changed behind the module's back (a collective, see
        :mod:`ddcl_theory.runtime.distributed`); loading a state dict calls it.
        """
        self._step = int(self.step)
        self._apply_schedule()
        return self._step

    def _apply_schedule(self) -> None:
        """Evaluate the schedule at the Python step, check it, store it in the buffer."""
        if self.schedule is None:
            return
        value = float(self.schedule(self._step))
        try:
            F.check_temperature(value, "temperature")
        except ValueError as err:
            self._problem = f"{err} (schedule at step {self._step})"
            return
        self._problem = None
        self.tau.fill_(value)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs) -> None:
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)
        self.sync_from_buffers()

    def extra_repr(self) -> str:
        if self.schedule is not None:
            return "schedule"
        return "learnable" if self.log_tau is not None else f"{self.value:g}"
