"""Claims whose rule ran a second confirmatory run after an inconclusive first: their words
with both runs decided at half the error rate.

A rule run again on fresh seeds after an inconclusive first run gives an effect that is not
there two chances to be reported. Each run alone errs at about its interval's rate (2.5% on the
side a claim names, for a 95% interval); the two together at up to about twice that (the union
bound). Deciding both runs at a 97.5% interval holds the pair to about one run's rate. A first
run that said inconclusive at 95% says so at 97.5% too (a wider interval still holds both the
margin and the SESOI), so only the run of record needs deciding again: :func:`second_look` does
so from its committed per-seed values and says whether the word stands. The intervals are the
chapters' crossed bootstrap over seeds and pool images
(:func:`~ddcl_theory.ledger.resampling.bootstrap_crossed`), whose coverage is approximate.
The claims are listed by hand (:data:`SECOND_LOOKS`); a rule amended after its first run (X2)
is not such a case: its first run was exploratory for the amended rule.

    >>> looks = second_looks()                       # the committed reference results
    >>> show_table(HEADER, table_rows(looks))        # as the ledger page shows them
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from ddcl_theory.ledger import stats
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions.laplacian_experiments import end_error
from ddcl_theory.ledger.design import combine
from ddcl_theory.ledger.reference import read_reference, reference_dir
from ddcl_theory.ledger.resampling import bootstrap_crossed

__all__ = ["SECOND_LOOKS", "CONFIDENCE", "N_RESAMPLES", "EDGE", "HEADER", "l6_items",
           "second_look", "second_looks", "table_rows"]

#: The claims whose run of record is their rule's second, after a first that said
#: inconclusive: why, and a short name of each binding test.
SECOND_LOOKS = {
    "L6": ("the rule's second run, on fresh seeds, after a first that said inconclusive",
           ("accuracy, all - none", "slope per Laplacian head")),
}
#: Half the error rate of a 95% interval: two runs together err about as one does.
CONFIDENCE = 1.0 - (1.0 - stats.CONFIDENCE) / 2.0
#: Resamples of each interval (an end's Monte Carlo error is shown beside it).
N_RESAMPLES = 1999
#: An interval end within this many Monte Carlo errors of the margin or the SESOI leaves the
#: word undetermined at this number of resamples.
EDGE = 2.0
#: The columns of :func:`table_rows`.
HEADER = ["claim", "why a second run", "word (95%)", "binding test", "97.5% interval",
          "word there", "the word stands"]
_PACKED = re.compile(r"^correct on each pool image, (\d+) Laplacian heads per layer "
                     r"\(numpy\.packbits, hex\)$")


def _unpacked(hexes: list[str], n_items: int) -> np.ndarray:
    return np.stack([np.unpackbits(np.frombuffer(bytes.fromhex(h), dtype=np.uint8))[:n_items]
                     for h in hexes]).astype(float)


def _check_means(items: np.ndarray, per_seed: list[float], name: str) -> None:
    if items.shape[0] != len(per_seed) or not np.allclose(items.mean(axis=1), per_seed,
                                                          atol=1e-9):
        raise ValueError(f"per_seed: the per-image values behind {name!r} do not average to "
                         f"its per-seed values")


def l6_items(per_seed: dict, rule) -> list[np.ndarray]:
    """L6's binding tests' per-image values, each (seeds, images), from the committed
    correctness of every head setting at the deciding count: all - none, and the
    least-squares slope over the settings' Laplacian head counts."""
    packed = {int(m.group(1)): v for k, v in per_seed.items() if (m := _PACKED.match(k))}
    if len(packed) < 2:
        raise ValueError("per_seed: expected the packed correctness of two or more head "
                         "settings at the deciding count")
    gap_name, slope_name = (t.statistic for t in rule.tests)
    n_bits = 8 * len(bytes.fromhex(packed[min(packed)][0]))
    gaps = np.asarray(per_seed[gap_name], dtype=float)
    # the pool's size: the largest count of bits whose gap means match (packbits pads to 8)
    for n_items in range(n_bits, n_bits - 8, -1):
        correct = {k: _unpacked(v, n_items) for k, v in sorted(packed.items())}
        gap = correct[max(correct)] - correct[min(correct)]
        if np.allclose(gap.mean(axis=1), gaps, atol=1e-9):
            break
    _check_means(gap, list(gaps), gap_name)
    x = np.array(list(correct), dtype=float)
    weights = (x - x.mean()) / np.sum((x - x.mean()) ** 2)
    slope = sum(w * c for w, c in zip(weights, correct.values()))
    _check_means(slope, per_seed[slope_name], slope_name)
    return [gap, slope]


_ITEMS = {"L6": l6_items}


def _committed_word(claim_id: str, folder: Path) -> str:
    for entry in read_reference(folder).values():
        for row in entry["verdicts"]:
            if row["id"] == claim_id:
                return row["verdict"]
    raise ValueError(f"claim_id: no committed reference verdict of {claim_id!r} in {folder}")


def second_look(claim_id: str, folder: Path | None = None) -> dict:
    """``claim_id``'s binding tests re-decided at :data:`CONFIDENCE` from its committed
    reference per-seed values (``folder``: the reference folder, default the checkout's).

    Returns ``{"claim", "why", "word" (committed), "strict_word", "stands", "edge", "tests"}``,
    each test ``{"statistic", "name", "interval" [estimate, low, high], "word", "end_error"}``;
    ``edge``: some end lies within :data:`EDGE` Monte Carlo errors of its margin or SESOI.
    """
    if claim_id not in SECOND_LOOKS:
        raise ValueError(f"claim_id: expected one of {sorted(SECOND_LOOKS)}, got {claim_id!r}")
    folder = reference_dir() if folder is None else Path(folder)
    rule = rule_of(claim_id)
    word = _committed_word(claim_id, folder)
    per_seed = json.loads((folder / "seeds" / f"{claim_id}.json").read_text())
    why, names = SECOND_LOOKS[claim_id]
    tests, edge = [], False
    for test, name, items in zip(rule.tests, names, _ITEMS[claim_id](per_seed, rule)):
        iv = bootstrap_crossed(items, confidence=CONFIDENCE, n_resamples=N_RESAMPLES)
        err = end_error(iv, N_RESAMPLES)
        lines = [test.margin] + ([] if test.sesoi is None else [test.sesoi])
        edge |= any(abs(end - line) < EDGE * err for end in (iv.low, iv.high) for line in lines)
        tests.append({"statistic": test.statistic, "name": name,
                      "interval": [iv.estimate, iv.low, iv.high],
                      "word": stats.decide_interval(iv, side=test.side, margin=test.margin,
                                                    sesoi=test.sesoi),
                      "end_error": err})
    strict = combine([t["word"] for t in tests])
    return {"claim": claim_id, "why": why, "word": word,
            "strict_word": strict, "stands": strict == word and not edge, "edge": edge,
            "tests": tests}


def second_looks(folder: Path | None = None) -> list[dict]:
    """:func:`second_look` of every claim of :data:`SECOND_LOOKS`."""
    return [second_look(c, folder) for c in SECOND_LOOKS]


def table_rows(looks: list[dict], scale: float = 100.0) -> list[list[str]]:
    """One row per test: claim, why, the committed word, the test's 97.5% interval (in units
    of ``scale``, its Monte Carlo error beside; as many decimals as that error resolves, at
    least 2), its word there, and whether the word stands."""
    rows = []
    for look in looks:
        for i, t in enumerate(look["tests"]):
            est, low, high = (scale * v for v in t["interval"])
            err = scale * t["end_error"]
            digits = max(2, int(np.ceil(-np.log10(err)))) if err > 0 else 2
            stands = ("yes" if look["stands"] else
                      "undetermined at these resamples" if look["edge"] else "no")
            rows.append([look["claim"] if i == 0 else "", look["why"] if i == 0 else "",
                         look["word"] if i == 0 else "", t["name"],
                         f"{est:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}] "
                         f"(± {err:.{digits}f})",
                         t["word"], stands if i == 0 else ""])
    return rows
