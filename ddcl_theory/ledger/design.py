"""The decision design of an empirical claim: its tests, their smallest effects of interest, the
seeds a power analysis asks for, the gates that qualify a run, and how one word follows.

A :class:`Rule` (the registered rules are data in :mod:`ddcl_theory.ledger.rules`) holds one
:class:`Test` per statistic the claim is decided on. :meth:`Rule.evaluate` turns the per-seed
values of each test (or a ready interval, for a bootstrap over seeds and items) into
:class:`TestResult` rows (interval, three-way word, seeds needed, smallest detectable effect),
and :meth:`Rule.word` combines them with the run's :class:`Gate` checks into the claim's word:

* ``reproduced`` when every test is, ``not reproduced`` when one is, else ``inconclusive``;
* fewer seeds than the rule registers decide nothing beyond ``inconclusive`` (a pilot);
* a gate that failed (a run that did not converge, a premise that did not hold) makes the word
  ``inconclusive``, and the evidence still shows every interval beside it.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ddcl_theory.ledger import stats

__all__ = ["Test", "TestResult", "Gate", "Rule", "WORDS", "combine"]

#: The words an interval test can give.
WORDS = ("reproduced", "not reproduced", "inconclusive")
_DESIGNS = ("paired", "one-sample")


@dataclass(frozen=True)
class Test:
    """One interval test of a rule.

    Attributes:
        statistic: what is computed per seed (pair), e.g. "test accuracy, DDCL - mean pooling".
        side: ``">"`` or ``"<"``: the claim puts the statistic beyond ``margin`` on that side.
        margin: the value the claim must beat (0 for a difference).
        sesoi: the smallest effect of interest, on the claimed side of ``margin`` (or on it,
            where the claim names its own size); None means ``margin``.
        why: the reason for the SESOI (the paper's effect, a stated fraction of it, ...).
        design: ``"paired"`` (both arms share the seed) or ``"one-sample"``.
        method: the 95% interval (one of :data:`ddcl_theory.ledger.stats.METHODS`).
    """

    __test__ = False                     # not a pytest class

    statistic: str
    side: str
    margin: float = 0.0
    sesoi: float | None = None
    why: str = ""
    design: str = "paired"
    method: str = "paired t"

    def __post_init__(self) -> None:
        if self.method not in stats.METHODS:
            raise ValueError(f"method: expected one of {stats.METHODS}, got {self.method!r}")
        if self.design not in _DESIGNS:
            raise ValueError(f"design: expected one of {_DESIGNS}, got {self.design!r}")
        stats.check_sesoi(self.side, self.margin, self.sesoi)
        if self.sesoi is not None and self.sesoi != self.margin and not self.why.strip():
            raise ValueError(f"why: the SESOI of {self.statistic!r} needs its reason")

    @property
    def s(self) -> float:
        """The SESOI (``margin`` when none was given)."""
        return self.margin if self.sesoi is None else self.sesoi

    @property
    def text(self) -> str:
        sesoi = f", SESOI {self.s:g}" if self.s != self.margin else ""
        return (f"{self.statistic} {self.side} {self.margin:g}{sesoi} "
                f"({self.design}, 95% {self.method} interval)")

    def result(self, interval: stats.Interval, spread: float,
               binding: bool = True) -> "TestResult":
        """This test decided on ``interval`` (per-seed standard deviation ``spread``, for the
        power analysis); ``binding`` False for a test decided beside the rule."""
        gap = abs(self.s - self.margin) or abs(interval.estimate - self.margin)
        n = interval.n
        return TestResult(
            statistic=self.statistic, side=self.side, margin=float(self.margin),
            sesoi=float(self.s), interval=[float(interval.low), float(interval.high)],
            estimate=float(interval.estimate), method=interval.method, n_seeds=int(n),
            seeds_needed=stats.seeds_needed(spread, gap) if math.isfinite(spread) else None,
            detectable=(stats.detectable_effect(spread, n)
                        if n >= 2 and math.isfinite(spread) else None),
            word=stats.decide_interval(interval, side=self.side, margin=self.margin,
                                       sesoi=self.sesoi),
            binding=binding)


@dataclass(frozen=True)
class TestResult:
    """A decided :class:`Test` (the ``tests`` rows of ``results/claims.json``).

    ``seeds_needed``: seeds for 80% power to tell the margin from the SESOI at the observed
    per-seed spread (where they coincide, the observed estimate from the margin); None when out
    of reach. ``detectable``: the smallest effect (from the margin) this run's seeds detect with
    80% power.
    """

    __test__ = False

    statistic: str
    side: str
    margin: float
    sesoi: float
    interval: list
    estimate: float
    method: str
    n_seeds: int
    seeds_needed: int | None
    detectable: float | None
    word: str
    binding: bool = True

    @property
    def reaches_sesoi(self) -> bool:
        """The whole interval lies at or beyond the SESOI."""
        low, high = self.interval
        return low >= self.sesoi if self.side == ">" else high <= self.sesoi

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Gate:
    """A design requirement checked on the run (convergence, a premise, a floor).

    ``passed`` False makes the claim's word ``inconclusive``; ``detail`` says what was measured
    and what would make it pass."""

    name: str
    passed: bool
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)


def combine(words: Sequence[str]) -> str:
    """One word from the tests' words: ``reproduced`` when all are, ``not reproduced`` when one
    is, ``inconclusive`` otherwise."""
    if not words or any(w not in WORDS for w in words):
        raise ValueError(f"words: expected words among {WORDS}, got {list(words)}")
    if all(w == "reproduced" for w in words):
        return "reproduced"
    return "not reproduced" if "not reproduced" in words else "inconclusive"


@dataclass(frozen=True)
class Rule:
    """The registered decision design of an empirical claim.

    Attributes:
        tests: the interval tests, in order.
        n_seeds: the seeds the power analysis asks for (at least 10 where a run takes seconds,
            at least 5 otherwise); fewer decide nothing beyond ``inconclusive``.
        scales: the axis of the scale trend (separate runs at each scale).
        power: how ``n_seeds`` follows from the pilot's spread (one sentence).
        gates: the design requirements a run must meet (one sentence each).
        note: what is shown beside the tests.
        beside: tests decided and shown with the same design but not combined into the word
            (a reading the rule names and says, before the run, why it cannot decide).
    """

    tests: tuple[Test, ...]
    n_seeds: int
    scales: str
    power: str = ""
    gates: tuple[str, ...] = ()
    note: str = ""
    beside: tuple[Test, ...] = ()

    def __post_init__(self) -> None:
        if not self.tests:
            raise ValueError("tests: a rule needs at least one interval test")
        if isinstance(self.n_seeds, bool) or not isinstance(self.n_seeds, int) \
                or self.n_seeds < 5:
            raise ValueError(f"n_seeds: the evidence standard asks for at least 5 seeds, got "
                             f"{self.n_seeds!r}")

    @property
    def all_tests(self) -> tuple[Test, ...]:
        """The binding tests, then those decided beside."""
        return self.tests + self.beside

    def evaluate(self, samples: Sequence) -> list[TestResult]:
        """One :class:`TestResult` per test of :attr:`all_tests` from ``samples`` (in that
        order): each either the per-seed values of the statistic (shape ``(n_seeds,)``: the
        paired differences for a paired test; its t interval is computed here), or
        ``(interval, spread)`` for an interval computed elsewhere (a bootstrap over seeds and
        items) with the per-seed standard deviation of its statistic."""
        if len(samples) != len(self.all_tests):
            raise ValueError(f"samples: expected {len(self.all_tests)}, got {len(samples)}")
        out = []
        for i, (test, sample) in enumerate(zip(self.all_tests, samples)):
            if isinstance(sample, tuple) and len(sample) == 2 \
                    and isinstance(sample[0], stats.Interval):
                interval, spread = sample
                if interval.method != test.method:
                    raise ValueError(f"samples: {test.statistic!r} names a {test.method} "
                                     f"interval, got {interval.method}")
            else:
                values = np.asarray(sample, dtype=float)
                interval = _t_interval(values, test)
                spread = float(np.std(values, ddof=1)) if values.size > 1 else math.nan
            out.append(test.result(interval, float(spread), binding=i < len(self.tests)))
        return out

    def word(self, results: Sequence[TestResult], gates: Sequence[Gate] = ()) -> str:
        """The claim's word from its decided tests (the binding ones first; those beside are
        not combined) and the run's gates."""
        if len(results) not in (len(self.tests), len(self.all_tests)):
            raise ValueError(f"results: expected {len(self.tests)} or {len(self.all_tests)}, "
                             f"got {len(results)}")
        results = results[:len(self.tests)]
        word = combine([r.word for r in results])
        if any(not g.passed for g in gates):
            return "inconclusive"
        if any(r.n_seeds < self.n_seeds for r in results):
            return "inconclusive"
        return word

    def binding(self, results: Sequence[TestResult]) -> int:
        """The index of the test that decides the word: the first ``not reproduced``, else the
        first ``inconclusive``, else the first test."""
        words = [r.word for r in results[:len(self.tests)]]
        for w in ("not reproduced", "inconclusive"):
            if w in words:
                return words.index(w)
        return 0

    @property
    def text(self) -> str:
        """The rule in one paragraph (the ``rule`` field of ``results/claims.json``)."""
        tests = "; ".join(f"({i}) {t.text}" for i, t in enumerate(self.tests, 1))
        parts = [f"{self.n_seeds} seeds" + (f" ({self.power})" if self.power else "") + ".",
                 f"Tests: {tests}.",
                 "Each test: not reproduced when its interval lies short of the SESOI, "
                 "reproduced when it lies beyond the margin, inconclusive when it holds both; "
                 "the claim is reproduced when every test is, not reproduced when one is."]
        if self.beside:
            start = len(self.tests) + 1
            parts.append("Decided beside, not combined: " + "; ".join(
                f"({i}) {t.text}" for i, t in enumerate(self.beside, start)) + ".")
        if self.gates:
            parts.append("Gates (a failed one makes the word inconclusive): "
                         + "; ".join(self.gates) + ".")
        parts.append(f"Scale trend over {self.scales}; decided at the largest scale that ran.")
        if self.note:
            parts.append(self.note)
        return " ".join(parts)


def _t_interval(values: np.ndarray, test: Test) -> stats.Interval:
    """The t interval a test names, a point when one seed ran."""
    if values.ndim != 1 or values.size < 1 or not np.all(np.isfinite(values)):
        raise ValueError(f"samples: {test.statistic!r} needs finite per-seed values, got "
                         f"{values.tolist()}")
    if values.size == 1:
        v = float(values[0])
        return stats.Interval(v, v, v, 1, test.method)
    if test.method not in ("paired t", "one-sample t"):
        raise ValueError(f"samples: {test.statistic!r} names a {test.method} interval: pass "
                         "(interval, spread)")
    iv = stats.one_sample_t(values)
    return stats.Interval(iv.estimate, iv.low, iv.high, iv.n, test.method, iv.confidence)
