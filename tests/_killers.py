"""A run directory that dies after its n-th state save: the kill of the kill-and-resume tests."""
from __future__ import annotations

from ddcl_theory.runtime.rundir import RunDir


class Killed(Exception):
    """Raised by :class:`KilledAfter`: stands for the process being killed."""


class KilledAfter(RunDir):
    """A run directory whose process dies right after its ``saves``-th state save."""

    def __init__(self, *args, saves: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.left = saves

    def save_state(self, *args, **kwargs) -> None:
        super().save_state(*args, **kwargs)
        self.left -= 1
        if self.left == 0:
            raise Killed


def killing_fit(monkeypatch, module, after_round: int) -> None:
    """Make ``module.fit`` (an experiment's import of the training loop) raise after round
    ``after_round``: a kill between two checkpoint saves."""
    real = module.fit

    def fit(*args, end_of_round, **kwargs):
        def end(r):
            record = end_of_round(r)
            if r == after_round:
                raise KeyboardInterrupt
            return record
        return real(*args, end_of_round=end, **kwargs)

    monkeypatch.setattr(module, "fit", fit)
