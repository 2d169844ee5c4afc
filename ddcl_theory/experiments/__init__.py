"""Experiments: one module each, a settings dataclass (``Settings.from_profile()``) and ``run``."""
from __future__ import annotations

from dataclasses import fields

from ddcl_theory.runtime.validate import check_positive_int


def require_positive_ints(settings, *, skip: tuple[str, ...] = ()) -> None:
    """Raise ``ValueError`` naming the first field (not in ``skip``) that is not an int >= 1."""
    for f in fields(settings):
        if f.name not in skip:
            check_positive_int(getattr(settings, f.name), f.name)
