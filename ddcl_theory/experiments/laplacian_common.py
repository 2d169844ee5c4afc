"""What the Laplacian-head experiments share: the head settings, their head counts, summaries.

A *head setting* names how many of the ``heads`` attention heads of each layer are Laplacian:
``"0"`` (none), ``"1"``, ``"half"``, ``"all"`` or any digit string ``"k"`` with ``k <= heads``.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["HEAD_SETTINGS", "SMOKE_HEAD_SETTINGS", "laplacian_count", "bad_head_settings",
           "summarise"]

#: The head settings of the sweeps: none, one, half and all heads Laplacian.
HEAD_SETTINGS = ("0", "1", "half", "all")
#: Head settings of the paper smoke test: no, some and only Laplacian heads (every code path).
SMOKE_HEAD_SETTINGS = ("0", "half", "all")


def laplacian_count(setting: str, heads: int) -> int:
    """Laplacian heads per layer for a setting name: ``"half"``, ``"all"`` or a digit string
    ``"k"`` with ``0 <= k <= heads`` (e.g. ``"0"``, ``"1"``, ``"5"``)."""
    counts = {"half": heads // 2, "all": heads}
    if setting in counts:
        return counts[setting]
    if isinstance(setting, str) and setting.isdigit() and int(setting) <= heads:
        return int(setting)
    raise ValueError(f"setting: expected 'half', 'all' or a count in [0, {heads}] as a string, "
                     f"got {setting!r}")


def bad_head_settings(settings: Sequence[str], heads: int) -> list[str]:
    """The names in ``settings`` that :func:`laplacian_count` refuses for ``heads`` heads (the
    settings classes' check, which names its own field)."""
    bad = []
    for s in settings:
        try:
            laplacian_count(s, heads)
        except ValueError:
            bad.append(s)
    return bad


def summarise(runs: Sequence, field: str, settings: Sequence[str] = HEAD_SETTINGS
              ) -> dict[str, tuple[float, float]]:
    """``{setting: (mean, std)}`` of the attribute ``field`` of ``runs`` (objects with a
    ``setting`` attribute) over seeds (population std, ddof=0).

    Runs where the field is ``None`` are skipped; a setting with no value is left out.
    """
    out = {}
    for s in settings:
        values = np.array([v for r in runs if r.setting == s
                           if (v := getattr(r, field)) is not None], dtype=np.float64)
        if values.size:
            out[s] = (float(values.mean()), float(values.std()))
    return out
