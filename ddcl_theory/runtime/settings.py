"""One Settings type for every experiment: each field's value per profile and its range beside it.

A settings class is a frozen dataclass that derives from :class:`Settings` and declares each
field with :func:`setting` (or :func:`nested` for a settings object inside another)::

    @dataclass(frozen=True)
    class AblationSettings(Settings):
        epochs: int = setting(12, reference=48, paper=48, smoke=1, ge=1)
        seeds: tuple[int, ...] = setting(tuple(range(10)), smoke=(0,), ge=0, nonempty=True)
        optimiser: str = setting("adam", choices=("sgd", "adam"))

    AblationSettings()                    # the cpu values
    AblationSettings.from_profile()       # the active profile's (DDCL_PROFILE, DDCL_SMOKE)
    AblationSettings.from_profile(epochs=3)   # the same with overrides, checked the same way

A field's value is its ``cpu`` value unless the profile names another: ``reference`` and
``paper`` fall back to ``cpu``, the paper profile's smoke test (``smoke``, for budgets only:
epochs, steps, seeds) falls back to ``paper``. Every value, whichever way it was made, is checked
on construction: its type against the field's annotation (``int`` refuses ``bool``, ``float``
takes ``int``; tuples element by element; ``X | None``), then the declared range (``ge``, ``gt``,
``le``, ``lt``, ``choices``; on every element of a tuple) and ``nonempty``; last the class's own
:meth:`Settings.check` for rules that tie fields together. A failure raises ``ValueError``
naming the class, the field and what was expected.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from ddcl_theory.runtime import profile

__all__ = ["Settings", "setting", "nested", "values", "confirmatory_seeds",
           "CONFIRMATORY_SEED_BASE"]

#: The confirmatory runs' seeds start here: every exploratory run (the cpu profile's pilots and
#: the first edition's reference runs) used seeds below it.
CONFIRMATORY_SEED_BASE = 1000

_SAME = object()
_PROFILE_FIELDS = ("cpu", "reference", "paper", "smoke")


@dataclass(frozen=True)
class _Spec:
    """The per-profile values and the valid range of one field (in the field's metadata)."""

    cpu: Any
    reference: Any = _SAME
    paper: Any = _SAME
    smoke: Any = _SAME
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple | None = None
    nonempty: bool = False

    def pick(self, prof: profile.Profile) -> Any:
        """The value of this field under ``prof``."""
        paper = self.cpu if self.paper is _SAME else self.paper
        if prof.is_paper:
            return paper if not prof.smoke or self.smoke is _SAME else self.smoke
        if prof.is_reference and self.reference is not _SAME:
            return self.reference
        return self.cpu

    def check_range(self, owner: str, name: str, value: Any) -> None:
        items = value if isinstance(value, tuple) else (value,)
        if self.nonempty and isinstance(value, tuple) and not value:
            raise ValueError(f"{owner}.{name}: expected at least one value, got ()")
        bounds = (("ge", ">=", lambda v, b: v >= b), ("gt", ">", lambda v, b: v > b),
                  ("le", "<=", lambda v, b: v <= b), ("lt", "<", lambda v, b: v < b))
        for item in items:
            if item is None:
                continue
            if self.choices is not None and item not in self.choices:
                raise ValueError(f"{owner}.{name}: expected one of {self.choices}, got {value!r}")
            for attr, sign, holds in bounds:
                bound = getattr(self, attr)
                if bound is not None and not holds(item, bound):
                    what = "every value " if isinstance(value, tuple) else ""
                    raise ValueError(f"{owner}.{name}: expected {what}{sign} {bound}, "
                                     f"got {value!r}")


@dataclass(frozen=True)
class _Nested:
    """A settings object inside another: its class and the fields the outer one sets."""

    cls: type
    overrides: Mapping[str, Any]

    def pick(self, prof: profile.Profile) -> Any:
        return self.cls.for_profile(prof, **{k: v.pick(prof) if isinstance(v, _Spec) else v
                                              for k, v in self.overrides.items()})


def setting(cpu: Any, *, reference: Any = _SAME, paper: Any = _SAME, smoke: Any = _SAME,
            ge: float | None = None, gt: float | None = None, le: float | None = None,
            lt: float | None = None, choices: tuple | None = None,
            nonempty: bool = False) -> Any:
    """A settings field: its value per profile and its valid range.

    Args:
        cpu: the value under the cpu profile, and the dataclass default.
        reference, paper: the value under those profiles (default: ``cpu``'s).
        smoke: the value in the paper profile's smoke test (default: ``paper``'s); for budgets
            (epochs, steps, seeds), never for shapes.
        ge, gt, le, lt: bounds on the value (on each element of a tuple); ``None`` values pass.
        choices: the allowed values (of each element of a tuple).
        nonempty: a tuple must hold at least one value.
    """
    spec = _Spec(cpu, reference, paper, smoke, ge, gt, le, lt,
                 None if choices is None else tuple(choices), nonempty)
    return field(default=cpu, metadata={"setting": spec})


def nested(cls: type, **overrides: Any) -> Any:
    """A field holding a ``cls`` settings object, built for the same profile with ``overrides``
    (plain values, or :func:`setting` specs whose per-profile values are picked)."""
    if not (isinstance(cls, type) and issubclass(cls, Settings)):
        raise TypeError(f"cls: expected a Settings subclass, got {cls!r}")
    specs = {k: v.metadata["setting"] if isinstance(v, dataclasses.Field) else v
             for k, v in overrides.items()}
    spec = _Nested(cls, specs)
    return field(default_factory=lambda: spec.pick(profile.Profile("cpu", "cpu")),
                 metadata={"setting": spec})


class Settings:
    """Base of every experiment's settings (a frozen dataclass of :func:`setting` fields)."""

    #: One line shown above the table of :func:`values` (subclasses may set it).
    title: ClassVar[str] = ""

    @classmethod
    def from_profile(cls, **overrides: Any):
        """The settings of the active profile (:func:`ddcl_theory.runtime.profile.current`),
        with ``overrides`` (field name -> value) replacing the profile's values."""
        return cls.for_profile(profile.current(), **overrides)

    @classmethod
    def for_profile(cls, prof: profile.Profile, **overrides: Any):
        """The settings of the profile ``prof`` with ``overrides``; ``ValueError`` naming an
        unknown field."""
        known = {f.name: f for f in fields(cls) if f.init}
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown field(s) {unknown}; fields: "
                             f"{sorted(known)}")
        kwargs = {}
        for name, f in known.items():
            spec = f.metadata.get("setting")
            if name in overrides:
                kwargs[name] = overrides[name]
            elif isinstance(spec, (_Spec, _Nested)):
                kwargs[name] = spec.pick(prof)
        return cls(**kwargs)

    def __post_init__(self) -> None:
        owner = type(self).__name__
        hints = _hints(type(self))
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in hints:
                _check_type(owner, f.name, value, hints[f.name])
            spec = f.metadata.get("setting")
            if isinstance(spec, _Spec):
                spec.check_range(owner, f.name, value)
        self.check()

    def check(self) -> None:
        """Rules that tie fields together; raise ``ValueError`` naming the field. Override."""

    def replace(self, **changes: Any):
        """A copy with ``changes`` (checked like any construction)."""
        return dataclasses.replace(self, **changes)


def values(settings: Settings, prefix: str = "") -> list[tuple[str, Any]]:
    """``[(field name, value), ...]`` of a settings object, nested ones flattened as
    ``outer.inner`` (the rows of a settings table)."""
    if not dataclasses.is_dataclass(settings):
        raise TypeError(f"settings: expected a settings dataclass, got {type(settings).__name__}")
    rows = []
    for f in fields(settings):
        value = getattr(settings, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            rows += values(value, f"{prefix}{f.name}.")
        else:
            rows.append((prefix + f.name, value))
    return rows


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The resolved field annotations of ``cls`` (cached); a field whose annotation names
    something its module cannot see (a class defined inside a function) is left unchecked."""
    if cls not in _HINTS:
        try:
            _HINTS[cls] = typing.get_type_hints(cls)
        except NameError:
            import sys
            hints = {}
            for klass in reversed(cls.__mro__):
                space = vars(sys.modules.get(klass.__module__, object()))
                for name, ann in getattr(klass, "__annotations__", {}).items():
                    try:
                        hints[name] = eval(ann, space) if isinstance(ann, str) else ann
                    except NameError:
                        hints.pop(name, None)
            _HINTS[cls] = hints
    return _HINTS[cls]


def _describe(hint: Any) -> str:
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    return str(hint).replace("typing.", "")


def _check_type(owner: str, name: str, value: Any, hint: Any) -> None:
    """``ValueError`` unless ``value`` fits the annotation ``hint`` (int, float, bool, str,
    None, unions, ``tuple[X, ...]``, ``tuple[X, Y]``, ``Literal``, classes); other hints pass."""
    if not _fits(value, hint):
        raise ValueError(f"{owner}.{name}: expected {_describe(hint)}, got {value!r}")


def _fits(value: Any, hint: Any) -> bool:
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if origin is typing.Literal:
        return value in args
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_fits(v, args[0]) for v in value)
        return not args or (len(args) == len(value)
                            and all(_fits(v, a) for v, a in zip(value, args)))
    if origin is not None:                       # dict[...], Callable[...]: the container only
        return isinstance(origin, type) is False or isinstance(value, origin)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def confirmatory_seeds(n: int, run: int = 1) -> tuple[int, ...]:
    """``n`` seeds no exploratory run used, for the ``run``-th confirmatory run of an
    experiment: ``(1000 run, 1000 run + 1, ...)``; a later confirmatory run (after an
    amendment) draws seeds that no earlier one used."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= CONFIRMATORY_SEED_BASE:
        raise ValueError(f"n: expected an int in [1, {CONFIRMATORY_SEED_BASE}], got {n!r}")
    if isinstance(run, bool) or not isinstance(run, int) or run < 1:
        raise ValueError(f"run: expected an int >= 1, got {run!r}")
    base = CONFIRMATORY_SEED_BASE * run
    return tuple(range(base, base + n))
