"""A layer's temperature tau: fixed, scheduled or learnable, read without host synchronisation.

:class:`TemperatureLayer` is an ``nn.Module`` base class (used by
:class:`~ddcl_theory.layers.ddcl.DDCLAttention`). ``temperature`` is either a positive float
(fixed; change it with :meth:`~TemperatureLayer.set_temperature`), or a callable
``schedule(step: int) -> float`` evaluated at the layer's step counter (advance it with
:meth:`~TemperatureLayer.advance_schedule`; the counter is the buffer ``temperature_step``, saved
in the state dict). ``learnable_temperature=True`` makes tau = exp(log_tau) a parameter
started at the given float. Fixed and scheduled values are checked in Python when they are set
(a bad scheduled value makes the next :meth:`~TemperatureLayer.current_temperature` raise
``ValueError``) and kept in the buffer ``_fixed_temperature``, which the forward pass reads as a
tensor.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from ddcl_theory import functional as F

__all__ = ["Schedule", "TemperatureLayer"]

Schedule = Callable[[int], float]


class TemperatureLayer(nn.Module):
    """Holds tau; subclasses call :meth:`_init_temperature` once in their ``__init__``."""

    def _init_temperature(self, temperature: float | Schedule, learnable: bool) -> None:
        """Register ``temperature_step``, ``_fixed_temperature`` and ``log_temperature``."""
        self._schedule: Schedule | None = None
        self._step = 0                        # Python mirror of the buffer temperature_step
        self._temperature_problem: str | None = None
        self.register_buffer("temperature_step", torch.zeros((), dtype=torch.long))
        if callable(temperature):
            if learnable:
                raise ValueError("temperature: a schedule cannot also be learnable; pass a float")
            self._schedule = temperature
            value = float(temperature(0))
            F.check_temperature(value, "temperature")
            self.register_buffer("_fixed_temperature", torch.tensor(value))
            self.log_temperature = None
        else:
            F.check_temperature(temperature, "temperature")
            if learnable:
                self.log_temperature = nn.Parameter(torch.tensor(math.log(float(temperature))))
                self.register_buffer("_fixed_temperature", torch.tensor(float("nan")))
            else:
                self.log_temperature = None
                self.register_buffer("_fixed_temperature", torch.tensor(float(temperature)))

    def current_temperature(self) -> Tensor:
        """tau now, a 0-dim tensor (carries a gradient when learnable). Never synchronises.

        A fixed or scheduled tau lives in the buffer ``_fixed_temperature``: it was checked in
        Python when it was set (:meth:`set_temperature`, :meth:`advance_schedule`).
        """
        if self._temperature_problem is not None:
            raise ValueError(self._temperature_problem)
        if self.log_temperature is not None:
            return self.log_temperature.exp()
        return self._fixed_temperature

    @property
    def temperature(self) -> float:
        """tau now, as a float."""
        if self._schedule is not None and self._temperature_problem is None:
            return float(self._schedule(self._step))
        return float(self.current_temperature().detach())

    def temperature_repr(self) -> str:
        """``schedule``, ``learnable`` or the fixed value (for ``extra_repr``)."""
        if self._schedule is not None:
            return "schedule"
        return "learnable" if self.log_temperature is not None else f"{self.temperature:g}"

    def set_temperature(self, value: float) -> None:
        """Fix tau to ``value`` (> 0); replaces a schedule; sets a learnable tau's current value."""
        F.check_temperature(value, "value")
        if self.log_temperature is not None:
            with torch.no_grad():
                self.log_temperature.fill_(math.log(float(value)))
            return
        self._schedule = None
        self._temperature_problem = None
        self._fixed_temperature.fill_(float(value))

    def advance_schedule(self, steps: int = 1) -> int:
        """Advance the schedule's step counter by ``steps`` (>= 0); return the new step.

        The counter is kept twice, as the buffer ``temperature_step`` (saved in the state dict,
        broadcast by DDP) and as a Python int (so that neither this method nor the forward pass
        reads a tensor); :meth:`sync_temperature_from_buffers` re-reads the buffer. The scheduled
        value is checked here; a bad one is reported by the next forward pass.
        """
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"steps: expected an int >= 0, got {steps!r}")
        self.temperature_step += steps
        self._step += steps
        self._apply_schedule()
        return self._step

    def _apply_schedule(self) -> None:
        """Evaluate the schedule at the Python step, check it, store it in the buffer."""
        if self._schedule is None:
            return
        value = float(self._schedule(self._step))
        try:
            F.check_temperature(value, "temperature")
        except ValueError as err:
            self._temperature_problem = f"{err} (schedule at step {self._step})"
            return
        self._temperature_problem = None
        self._fixed_temperature.fill_(value)

    def sync_temperature_from_buffers(self) -> int:
        """Re-read the step counter from its buffer (one host read) and re-apply the schedule.

        Needed only after the buffer was changed behind the layer's back (e.g. by a collective,
        see :mod:`ddcl_theory.runtime.distributed`); loading a state dict calls it. Returns the
        step.
        """
        self._step = int(self.temperature_step)
        self._apply_schedule()
        return self._step

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs) -> None:
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)
        self.sync_temperature_from_buffers()
