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

Under a declared tolerance integers are compared with the same ``abs``/``rel`` as decimals.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

# A number: optional sign, digits with optional fraction (or a bare fraction), optional exponent.
# The look-behind keeps digits inside identifiers ("D13", "x2", "cell-004") out of it.
NUMBER = re.compile(
    r"(?<![A-Za-z_\d.+-])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![A-Za-z_\d])"
)
WHITESPACE = re.compile(r"\s+")
DECLARATION = re.compile(r"^\s*#\s*nbval-tolerance:\s*(?P<spec>.*)$", re.MULTILINE)
_FIELD = re.compile(r"\b(abs|rel)\s*=\s*([0-9.eE+-]+)")


@dataclass(frozen=True)
class Tolerance:
    """How far a number may move between two machines or runs.

    Attributes:
        abs: absolute tolerance (>= 0).
        rel: tolerance relative to the golden value (>= 0).
        reason: why this much; required whenever either tolerance is non-zero.
    """

    abs: float = 0.0
    rel: float = 0.0
    reason: str = ""

    def __post_init__(self) -> None:
        for name in ("abs", "rel"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
        if (self.abs or self.rel) and not self.reason.strip():
            raise ValueError("reason: a declared tolerance needs its reason")

    @property
    def declared(self) -> bool:
        return bool(self.abs or self.rel)

    def to_dict(self) -> dict:
        return asdict(self)

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
    values = {k: float(v) for k, v in _FIELD.findall(spec)}
    if not values:
        raise ValueError(f"nbval-tolerance: expected 'abs=<x>' and/or 'rel=<x>', got {spec!r}")
    reason = spec.split("--", 1)[1].strip() if "--" in spec else ""
    return Tolerance(values.get("abs", 0.0), values.get("rel", 0.0), reason)


def _last_digit_unit(literal: str) -> float:
    """One unit of the last printed digit of a decimal literal (0 for an integer literal)."""
    mantissa, _, exponent = literal.lower().partition("e")
    if "." not in mantissa:
        return 10.0 ** int(exponent) if exponent else 0.0
    decimals = len(mantissa.split(".", 1)[1])
    return 10.0 ** (int(exponent or 0) - decimals)


def numbers_agree(golden: str, actual: str, tol: Tolerance = TIGHT) -> bool:
    """Whether two number literals agree under ``tol`` (see the module docstring)."""
    g, a = float(golden), float(actual)
    if math.isnan(g) or math.isnan(a):
        return math.isnan(g) and math.isnan(a)
    if math.isinf(g) or math.isinf(a):
        return g == a
    integers = _last_digit_unit(golden) == 0 and _last_digit_unit(actual) == 0
    if integers and not tol.declared:
        return g == a
    # the finer of the two printed precisions: a rounding flip moves the last digit by one unit
    units = [u for u in (_last_digit_unit(golden), _last_digit_unit(actual)) if u > 0]
    slack = min(units) if units else 0.0
    return abs(g - a) <= slack + tol.abs + tol.rel * abs(g) + 1e-12 * abs(g)


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
    g_words, g_nums = split_numbers(golden)
    a_words, a_nums = split_numbers(actual)
    if _layout_free(g_words) != _layout_free(a_words) or len(g_nums) != len(a_nums):
        return [_first_text_difference(golden, actual)]
    problems = []
    for i, (g, a) in enumerate(zip(g_nums, a_nums)):
        if not numbers_agree(g, a, tol):
            context = "".join(w + n for w, n in zip(g_words[: i + 1], g_nums[:i] + ["<>"]))[-60:]
            problems.append(f"number {i} ({context.strip()!r}): golden {g}, got {a} "
                            f"(allowed: last digit, abs={tol.abs:g}, rel={tol.rel:g})")
    return problems


def _first_text_difference(golden: str, actual: str) -> str:
    g_lines, a_lines = golden.splitlines(), actual.splitlines()
    for i, (g, a) in enumerate(zip(g_lines, a_lines)):
        if g != a and NUMBER.sub("#", g) != NUMBER.sub("#", a):
            return f"text differs at line {i + 1}: golden {g!r}, got {a!r}"
    if len(g_lines) != len(a_lines):
        return f"line count differs: golden {len(g_lines)}, got {len(a_lines)}"
    return "the texts differ in more than numbers"
