"""The one type for symbolic results: :class:`SymbolicCheck`, and the two ways to build one.

Every SymPy derivation in :mod:`ddcl_theory.theory` returns a ``SymbolicCheck`` whose ``holds`` is
computed from its ``residual`` (the simplified difference of the two sides), never assumed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import sympy as sp


@dataclass(frozen=True)
class SymbolicCheck:
    """Outcome of one symbolic check.

    Attributes:
        statement: what was checked, in words.
        holds: True when ``residual`` is exactly zero under the stated hypotheses.
        residual: the simplified difference of the two sides (a SymPy expression; a ``Tuple`` or
            ``Matrix`` when several identities are checked together).
        details: named SymPy expressions worth showing (computed limits or coefficients, the
            residual before a hypothesis is used, ...); empty when there is nothing more.
    """

    statement: str
    holds: bool
    residual: Any
    details: Mapping[str, Any] = field(default_factory=dict)


def is_zero(residual: Any) -> bool:
    """True when a SymPy expression, ``Tuple`` or ``Matrix`` is exactly zero (no simplification)."""
    if isinstance(residual, sp.MatrixBase):
        return residual.is_zero_matrix is True
    if isinstance(residual, (sp.Tuple, tuple, list)):
        return all(is_zero(r) for r in residual)
    return bool(residual == 0)


def identity(statement: str, residual: Any, **details: Any) -> SymbolicCheck:
    """A check that ``residual`` (already simplified by the caller) is exactly zero."""
    return SymbolicCheck(statement, is_zero(residual), residual, dict(details))


def compare(statement: str, computed: Mapping[str, sp.Expr],
            expected: Mapping[str, sp.Expr]) -> SymbolicCheck:
    """Computed expressions against the values a claim predicts, name by name.

    ``residual`` is the ``Tuple`` of ``simplify(computed[name] - expected[name])`` in the order of
    ``expected``; ``details`` are the computed expressions.
    """
    missing = [name for name in expected if name not in computed]
    if missing:
        raise ValueError(f"computed: no entry for the expected names {missing}")
    residual = sp.Tuple(*[sp.simplify(computed[name] - expected[name]) for name in expected])
    return SymbolicCheck(statement, is_zero(residual), residual, dict(computed))
