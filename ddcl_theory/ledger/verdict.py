"""The one type a claim's decision returns, and the naming rule of the functions that decide.

Every claim is decided by one package function named ``decide_<claim id in lower case>`` (for
example :func:`ddcl_theory.ledger.decisions.eps_ablation.decide_d9`) that takes what the
chapter computed (results of experiments, residuals of identities) and returns a
:class:`Verdict`. Notebooks call it, show ``verdict.evidence`` and record it with
:meth:`ddcl_theory.ledger.claims.Chapter.record`; they never pick the word in ``if``/``else``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddcl_theory.ledger.tolerance import Tolerance

#: The verdict words, strongest first. ``inconclusive``: the evidence neither supports nor
#: excludes the claim at the scale that ran.
VERDICTS = (
    "proved",
    "confirmed",
    "reproduced",
    "qualified",
    "refuted",
    "not reproduced",
    "inconclusive",
    "untested",
)


@dataclass(frozen=True)
class Verdict:
    """A decided claim.

    Args:
        claim: the claim id, e.g. ``"D9"``.
        word: one of :data:`VERDICTS`.
        evidence: one or two sentences a reader can check against the page.
        our_value: our number(s) as shown in the ledger, or None.
        paper_value: the paper's number, or None to use the registry's.
        numbers: the named numbers the decision used (kept in the results file).
        rule: the decision rule, stated before the run (empirical claims).
        n_seeds: seeds behind the deciding statistic (empirical claims).
        interval: ``(low, high)`` of the deciding statistic (empirical claims).
        scale: the scale the verdict was decided at.
        trend: the deciding statistic at each scale, ``{scale: value}``.
        tolerance: how far the numbers in ``our_value``/``evidence`` may move between machines
            (outcomes of training); None for mathematics (tight).
        tests: the decided tests of the rule (:class:`~ddcl_theory.ledger.design.TestResult`),
            in the rule's order (empirical claims).
        gates: the design requirements checked on the run
            (:class:`~ddcl_theory.ledger.design.Gate`).
        per_seed: ``{statistic: [one value per seed]}`` behind each test (the paired
            differences for paired tests; per-item values beside them where the interval is a
            bootstrap over items): committed with a reference verdict so that anyone can
            recompute the interval.
    """

    claim: str
    word: str
    evidence: str
    our_value: str | None = None
    paper_value: str | None = None
    numbers: dict[str, Any] = field(default_factory=dict)
    rule: str | None = None
    n_seeds: int | None = None
    interval: tuple[float, float] | None = None
    scale: str | None = None
    trend: dict[str, Any] | None = None
    tolerance: Tolerance | None = None
    tests: tuple = ()
    gates: tuple = ()
    per_seed: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.word not in VERDICTS:
            raise ValueError(f"word: expected one of {VERDICTS}, got {self.word!r}")
        if not isinstance(self.evidence, str) or not self.evidence.strip():
            raise ValueError("evidence: a verdict needs evidence")
        if self.n_seeds is not None and (not isinstance(self.n_seeds, int) or self.n_seeds < 1):
            raise ValueError(f"n_seeds: expected an int >= 1, got {self.n_seeds!r}")
        if self.interval is not None:
            low, high = self.interval
            if not low <= high:
                raise ValueError(f"interval: expected (low, high) with low <= high, got "
                                 f"{self.interval!r}")

    def __str__(self) -> str:
        return f"{self.claim}: {self.word} - {self.evidence}"


def decided_by(word_if_true: str, condition: bool, word_if_false: str) -> str:
    """``word_if_true`` when ``condition`` holds, else ``word_if_false`` (for decision rules
    that compare one statistic with one threshold)."""
    for w in (word_if_true, word_if_false):
        if w not in VERDICTS:
            raise ValueError(f"word: expected one of {VERDICTS}, got {w!r}")
    return word_if_true if bool(condition) else word_if_false
