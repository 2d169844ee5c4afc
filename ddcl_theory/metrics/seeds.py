"""Summaries over seeds: comparing two settings' seed means against their spread."""
from __future__ import annotations

import math


def compare(summary: dict[str, tuple[float, float]], a: str, b: str) -> int:
    """+1 if setting ``a``'s mean is above ``b``'s by more than the spread, -1 if below, else 0.

    ``summary`` maps a setting to ``(mean, std)`` over seeds. The margin is
    ``sqrt(std_a^2 + std_b^2)`` (the spread of the difference of two single runs), so a
    difference inside the seed-to-seed noise counts as no difference.
    """
    for key in (a, b):
        if key not in summary:
            raise KeyError(f"summary: no setting {key!r}; has {sorted(summary)}")
    (ma, sa), (mb, sb) = summary[a], summary[b]
    margin = math.hypot(sa, sb)
    if ma - mb > margin:
        return 1
    if mb - ma > margin:
        return -1
    return 0
