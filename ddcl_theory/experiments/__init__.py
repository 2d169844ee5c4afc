"""Experiments: one module each, a settings dataclass (``Settings.from_profile()``) and ``run``."""
from __future__ import annotations

from dataclasses import fields


def require_positive_ints(settings, *, skip: tuple[str, ...] = ()) -> None:
    """Raise ``ValueError`` naming the first field (not in ``skip``) that is not an int >= 1."""
    for f in fields(settings):
        if f.name in skip:
            continue
        v = getattr(settings, f.name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{f.name}: expected a positive int, got {v!r}")
