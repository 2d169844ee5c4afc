"""Number-aware comparison of printed text, for the notebook regression and the results check.

A golden records the behaviour of the code, not the rounding of one CPU. Two runs of the same
code on two machines print the same words and numbers that agree to a tolerance; this module
compares them that way:

* every non-numeric character must match exactly (verdict words, labels, punctuation);
* an integer literal (no decimal point, no exponent) must match exactly by default: counts,
  sizes and indices are not rounding;
* a decimal literal may differ by one unit of its last printed digit (the rounding of a value
  that sits near a rounding boundary) plus ``rel * |golden|`` and ``abs``.

A cell or a claim declares a looser :class:`Tolerance` where its numbers are outcomes of
training, with the reason beside the declaration. In a notebook code cell the declaration is a
comment line::

    # nbval-tolerance: abs=0.03 rel=0.05 -- test accuracy after 3 epochs moves with the CPU's kernels
    # nbval-tolerance: abs=0.05 count_abs=2 -- accuracies; counts of 9 runs that met a stop rule

Under a declared tolerance an integer may move by ``count_abs + (count_rel + rel) * |golden|
+ abs``: the number of runs that met a rule (a plateau, a collapse, an early stop) is an
outcome of training like an accuracy, and ``count_abs`` is its allowance, in runs
(:func:`count_allowance` derives it from the binomial spread of such a count); ``count_rel``
is the allowance of an integer that scales with an estimated variance, such as the seeds a
power analysis asks for (``n`` times a variance ratio estimated from a few seeds), which moves
in proportion to itself while the decimals beside it stay tight.
"""
from __future__ import annotations

import math
import numbers
import re
from dataclasses import asdict, dataclass

# A number: optional sign, digits with optional fraction (or a bare fraction), optional exponent.
# The look-behind keeps digits inside identifiers ("D13", "x2", "cell-004") out of it.
NUMBER = re.compile(
    r"(?<![A-Za-z_\d.+-])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![A-Za-z_\d])"
)
WHITESPACE = re.compile(r"\s+")
DECLARATION = re.compile(r"^\s*#\s*nbval-tolerance:\s*(?P<spec>.*)$", re.MULTILINE)
_FIELD = re.compile(r"\b(abs|rel|count_abs|count_rel)\s*=\s*([0-9.eE+-]+)")


@dataclass(frozen=True)
class Tolerance:
    """How far a number may move between two machines or runs.

    Attributes:
        abs: absolute tolerance (>= 0).
        rel: tolerance relative to the golden value (>= 0).
        reason: why this much; required whenever any tolerance is non-zero.
        count_abs: how many units an integer literal (a count of runs) may move besides
            ``abs`` and ``rel`` (>= 0; decimals ignore it).
        count_rel: how far an integer literal may move relative to its golden value besides
            the others (>= 0; decimals ignore it).
    """

    abs: float = 0.0
    rel: float = 0.0
    reason: str = ""
    count_abs: float = 0.0
    count_rel: float = 0.0

    def __post_init__(self) -> None:
        for name in ("abs", "rel", "count_abs", "count_rel"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
        if self.declared and not self.reason.strip():
            raise ValueError("reason: a declared tolerance needs its reason")

    @property
    def declared(self) -> bool:
        return bool(self.abs or self.rel or self.count_abs or self.count_rel)

    def to_dict(self) -> dict:
        d = asdict(self)
        for name in ("count_abs", "count_rel"):  # results written before counts had one
            if not d[name]:
                del d[name]
        return d

    def describe(self) -> str:
        """``abs=0.05 rel=0.3 count_abs=2`` (the fields that are set; ``tight`` when none)."""
        parts = [f"{k}={getattr(self, k):g}" for k in ("abs", "rel", "count_abs", "count_rel")
                 if getattr(self, k)]
        return " ".join(parts) or "tight"

    @classmethod
    def from_dict(cls, d: dict | None) -> "Tolerance":
        return cls(**d) if d else cls()


TIGHT = Tolerance()


def parse_declaration(source: str) -> Tolerance:
    """The :class:`Tolerance` declared in a code cell's source (``TIGHT`` when none)."""
    match = DECLARATION.search(source)
    if match is None:
        return TIGHT
    spec = match.group("spec")
    fields, _, reason = spec.partition("--")          # a number in the reason is not a field
    values = {k: float(v) for k, v in _FIELD.findall(fields)}
    if not values:
        raise ValueError(f"nbval-tolerance: expected 'abs=<x>', 'rel=<x>', 'count_abs=<n>' "
                         f"and/or 'count_rel=<x>', got {spec!r}")
    reason = reason.strip()
    return Tolerance(values.get("abs", 0.0), values.get("rel", 0.0), reason,
                     values.get("count_abs", 0.0), values.get("count_rel", 0.0))


def count_allowance(k: int, n: int, sds: float = 2.0) -> int:
    """How far a count of ``k`` of ``n`` runs meeting a rule may move on another machine.

    Another CPU's kernels round differently from the first step on, and over a training run
    the difference grows until each run meets or misses a rule much as a fresh seed would: the
    count is then binomial(n, p). With p estimated as (k + 1) / (n + 2) (never 0 or 1: a rule
    no run met here may still be met elsewhere), the allowance is ``sds`` standard deviations
    sqrt(n p (1 - p)), rounded up to whole runs. E.g. 0 of 9: 2; 17 of 20: 4; 0 of 5: 2."""
    if not (isinstance(n, numbers.Integral) and n >= 1):
        raise ValueError(f"n: expected a number of runs >= 1, got {n!r}")
    if not (isinstance(k, numbers.Integral) and 0 <= k <= n):
        raise ValueError(f"k: expected a count in [0, n={n}], got {k!r}")
    p = (int(k) + 1) / (int(n) + 2)
    return math.ceil(sds * math.sqrt(n * p * (1 - p)) - 1e-9)


def _last_digit_unit(literal: str) -> float:
    """One unit of the last printed digit of a decimal literal (0 for an integer literal)."""
    mantissa, _, exponent = literal.lower().partition("e")
    if "." not in mantissa:
        return 10.0 ** int(exponent) if exponent else 0.0
    decimals = len(mantissa.split(".", 1)[1])
    return 10.0 ** (int(exponent or 0) - decimals)


def _rounding_slack(golden: str, actual: str) -> float:
    """One unit of the finer of two decimals' last printed digits (a rounding flip moves the
    last digit by one unit); 0 for two integers."""
    units = [u for u in (_last_digit_unit(golden), _last_digit_unit(actual)) if u > 0]
    return min(units) if units else 0.0


def allowance(golden: str, actual: str, tol: Tolerance = TIGHT) -> float:
    """How far two number literals may lie apart under ``tol`` (the module docstring)."""
    g = abs(float(golden))
    integers = _last_digit_unit(golden) == 0 and _last_digit_unit(actual) == 0
    if integers:
        return (tol.count_abs + tol.abs + (tol.rel + tol.count_rel) * g) if tol.declared \
            else 0.0
    return _rounding_slack(golden, actual) + tol.abs + tol.rel * g


def numbers_agree(golden: str, actual: str, tol: Tolerance = TIGHT) -> bool:
    """Whether two number literals agree under ``tol`` (see the module docstring)."""
    g, a = float(golden), float(actual)
    if math.isnan(g) or math.isnan(a):
        return math.isnan(g) and math.isnan(a)
    if math.isinf(g) or math.isinf(a):
        return g == a
    return abs(g - a) <= allowance(golden, actual, tol) + 1e-12 * abs(g)


def largest_move(golden: str, actual: str, tol: Tolerance = TIGHT) -> tuple[float, str]:
    """The number that moved most between two texts with the same words, as a fraction of its
    allowance under ``tol`` (0: nothing moved; above 1: it fails), and a line naming it; the
    moves inside the last printed digit of a decimal are not counted. (nan, reason) when the
    words differ."""
    aligned = _aligned_numbers(golden, actual)
    if aligned is None:
        return math.nan, "the words differ"
    worst, where = 0.0, ""
    for i, g, a, context in aligned:
        gv, av = float(g), float(a)
        if not (math.isfinite(gv) and math.isfinite(av)) or gv == av:
            continue
        if abs(gv - av) <= _rounding_slack(g, a) + 1e-12 * abs(gv):
            continue                                   # a rounding flip, not a move
        room = allowance(g, a, tol)
        used = abs(gv - av) / room if room > 0 else math.inf
        if used > worst:
            worst, where = used, f"{context[-50:].strip()!r}: {g} -> {a}"
    return worst, where


def _aligned_numbers(golden: str, actual: str) -> list[tuple[int, str, str, str]] | None:
    """(index, golden literal, actual literal, the golden text up to it) for each number of two
    texts whose words agree up to layout; None when the words differ."""
    g_words, g_nums = split_numbers(golden)
    a_words, a_nums = split_numbers(actual)
    if _layout_free(g_words) != _layout_free(a_words) or len(g_nums) != len(a_nums):
        return None
    return [(i, g, a, "".join(w + n for w, n in zip(g_words[: i + 1], g_nums[:i] + ["<>"])))
            for i, (g, a) in enumerate(zip(g_nums, a_nums))]


def split_numbers(text: str) -> tuple[list[str], list[str]]:
    """(the text with every number replaced by a marker, split at the markers; the numbers)."""
    return NUMBER.split(text), NUMBER.findall(text)


def _layout_free(words: list[str]) -> list[str]:
    return [WHITESPACE.sub(" ", w) for w in words]


def compare_text(golden: str, actual: str, tol: Tolerance = TIGHT) -> list[str]:
    """Differences between two printed texts, as readable lines (empty when they agree).

    Words must match exactly, up to layout: a run of spaces and line breaks equals one space,
    so a line wrapped at another place (a number one digit wider on another CPU moves the
    break of :func:`ddcl_theory.ledger.report.wrap`) or padded differently is the same text."""
    aligned = _aligned_numbers(golden, actual)
    if aligned is None:
        return [_first_text_difference(golden, actual)]
    problems = []
    for i, g, a, context in aligned:
        if not numbers_agree(g, a, tol):
            context = context[-60:]
            problems.append(f"number {i} ({context.strip()!r}): golden {g}, got {a} "
                            f"(allowed: last digit, {tol.describe()})")
    return problems


def _first_text_difference(golden: str, actual: str) -> str:
    g_lines, a_lines = golden.splitlines(), actual.splitlines()
    for i, (g, a) in enumerate(zip(g_lines, a_lines)):
        if g != a and NUMBER.sub("#", g) != NUMBER.sub("#", a):
            return f"text differs at line {i + 1}: golden {g!r}, got {a!r}"
    if len(g_lines) != len(a_lines):
        return f"line count differs: golden {len(g_lines)}, got {len(a_lines)}"
    return "the texts differ in more than numbers"
