"""Run directories: finished units of work and resumable training states, kept atomically.

:class:`RunDir` is a run directory ``<results>/runs/<experiment>-<settings hash>``. It holds
finished *units* of work (e.g. one ``(setting, seed)`` training run of a sweep: :meth:`RunDir.unit`
loads a finished one instead of recomputing it) and, for long loops, a training *state*
(:meth:`RunDir.save_state` / :meth:`RunDir.load_state`: model, optimisers, schedulers, every RNG
and the loop position), each file written atomically. Everything here is a no-op in the cpu
profile (the goldens' numbers never pass through it); the paper profile uses it so that a long
GPU run can be killed and resumed where it stopped.

Environment: ``DDCL_RESUME=0`` (ignore and replace what a run directory holds).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch

from ddcl_theory.runtime import data_parallel, profile
from ddcl_theory.runtime.io import atomic_torch_save, jsonable, read_json, write_json
from ddcl_theory.runtime.paths import results_dir
from ddcl_theory.runtime.profile import env_flag
from ddcl_theory.runtime.provenance import provenance, same_provenance, settings_hash
from ddcl_theory.runtime.rng import rng_state, set_rng_state

__all__ = ["RunDir", "RESUME_ENV", "RUNS_DIRNAME", "PROVENANCE_NAME", "RESUME_FIELDS"]

T = TypeVar("T")

RESUME_ENV = "DDCL_RESUME"
RUNS_DIRNAME = "runs"
PROVENANCE_NAME = "provenance.json"
#: Provenance fields a run directory must share with the current process to be resumed from.
RESUME_FIELDS = ("experiment", "profile", "smoke", "device", "torch", "numpy", "code_sha256",
                 "autocast", "settings_hash")
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]")
#: Run directories this process has opened (``DDCL_RESUME=0`` replaces only older ones).
_OPENED: set[Path] = set()


def _file_key(key: str) -> str:
    if not isinstance(key, str) or not key.strip():
        raise ValueError(f"key: expected a non-empty string, got {key!r}")
    safe = _UNSAFE.sub("_", key)
    if safe != key:                        # keep distinct keys distinct after the substitution
        safe += "-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:8]
    return safe


def _unwrap(module: torch.nn.Module) -> torch.nn.Module:
    """The module inside a ``torch.compile`` and a ``DistributedDataParallel`` wrapper."""
    return data_parallel.unwrap(getattr(module, "_orig_mod", module))


class RunDir:
    """The run directory of one experiment with one settings object.

    Args:
        experiment: a short name, e.g. ``"laplacian_vit"`` (letters, digits, ``._-``).
        settings: the experiment's settings dataclass; its hash keys the directory.
        root: folder holding run directories (default ``<results>/runs``, i.e.
            ``results/paper/runs`` in the paper profile).
        enabled: default: on in the paper and reference profiles, off in the cpu profile. When
            off, nothing is read or written and :meth:`unit` simply computes.

    On first use an enabled run directory writes its :func:`provenance`; when it finds one from a
    different code version, device, profile or library version (:data:`RESUME_FIELDS`), or when
    ``DDCL_RESUME=0`` (for directories not opened earlier by this process), it moves the old
    directory aside (``<name>.replaced-N``) and starts afresh, so a resumed run never mixes units
    computed by different code.
    """

    def __init__(self, experiment: str, settings: Any, *, root: str | os.PathLike | None = None,
                 enabled: bool | None = None) -> None:
        if not isinstance(experiment, str) or not re.fullmatch(r"[A-Za-z0-9._-]+", experiment):
            raise ValueError(f"experiment: expected a name of letters, digits and ._-, got "
                             f"{experiment!r}")
        self.experiment = experiment
        self.settings = settings
        self.key = f"{experiment}-{settings_hash(settings)}"
        self.enabled = profile.current().keeps_runs if enabled is None else bool(enabled)
        self._root = Path(root) if root is not None else None
        self._ready = False
        self.loaded: list[str] = []        # unit keys read back from disk in this process
        self.computed: list[str] = []      # unit keys computed (and saved) in this process
        #: wall seconds of each unit computed in this process (or in its workers)
        self.unit_seconds: dict[str, float] = {}

    @property
    def path(self) -> Path:
        root = self._root if self._root is not None else results_dir() / RUNS_DIRNAME
        return root / self.key

    def _open(self) -> None:
        if self._ready:
            return
        if not data_parallel.is_main():     # rank 0 checks and writes; the others wait for it
            data_parallel.barrier()
            self._ready = True
            return
        here = provenance(self.experiment, self.settings)
        stored_path = self.path / PROVENANCE_NAME
        if self.path.exists() and self.path.resolve() not in _OPENED:
            stale = not env_flag(RESUME_ENV, True)
            if not stale:
                try:
                    stale = not same_provenance(read_json(stored_path), here, RESUME_FIELDS)
                except (OSError, ValueError):
                    stale = any(self.path.iterdir())
            if stale:
                n = 1
                while self.path.with_name(f"{self.key}.replaced-{n}").exists():
                    n += 1
                aside = self.path.with_name(f"{self.key}.replaced-{n}")
                self.path.rename(aside)
                print(f"NOTICE: {self.key}: checkpoints from other code, settings or versions "
                      f"(or DDCL_RESUME=0) moved aside to {aside.name}; starting afresh",
                      file=sys.stderr, flush=True)
        if not stored_path.exists():
            write_json(stored_path, here)
        _OPENED.add(self.path.resolve())
        self._ready = True
        data_parallel.barrier()

    # ------------------------------------------------------------------ finished units
    def unit_path(self, key: str) -> Path:
        return self.path / "units" / f"{_file_key(key)}.pt"

    def has_unit(self, key: str) -> bool:
        return self.enabled and self.unit_path(key).is_file()

    def load_unit(self, key: str) -> tuple[bool, Any]:
        """(True, value) for a finished unit saved under ``key``, else (False, None)."""
        if not self.enabled:
            return False, None
        self._open()
        path = self.unit_path(key)
        if not path.is_file():
            return False, None
        stored = torch.load(path, map_location="cpu", weights_only=False)
        if stored.get("key") != key:
            raise ValueError(f"{path.name}: holds unit {stored.get('key')!r}, expected {key!r}")
        return True, stored["value"]

    def save_unit(self, key: str, value: Any) -> None:
        """Store a finished unit's result (any picklable object) atomically under ``key``
        (rank 0 alone, under data-parallel training)."""
        if not self.enabled:
            return
        self._open()
        if data_parallel.is_main():
            atomic_torch_save(self.unit_path(key), {"key": key, "value": value})

    def unit(self, key: str, compute: Callable[[], T]) -> T:
        """The finished unit ``key``: read back when saved, else ``compute()`` and save it."""
        found, value = self.load_unit(key)
        if found:
            self.loaded.append(key)
            return value
        start = time.perf_counter()
        value = compute()
        self.unit_seconds[key] = time.perf_counter() - start
        self.save_unit(key, value)
        self.computed.append(key)
        return value

    def units_done(self) -> list[str]:
        """Keys of the units saved in this directory (in no particular order)."""
        folder = self.path / "units"
        if not self.enabled or not folder.is_dir():
            return []
        return [torch.load(p, map_location="cpu", weights_only=False)["key"]
                for p in sorted(folder.glob("*.pt"))]

    # ------------------------------------------------------------------ training state
    def state_path(self, name: str = "state") -> Path:
        return self.path / f"{_file_key(name)}.ckpt"

    def save_state(self, name: str = "state", *, position: Any,
                   modules: Mapping[str, torch.nn.Module] | None = None,
                   optimizers: Mapping[str, Any] | None = None,
                   schedulers: Mapping[str, Any] | None = None,
                   generators: Mapping[str, torch.Generator] | None = None,
                   extra: Any = None) -> None:
        """Save a loop's state atomically: ``position`` (e.g. the next step), the modules'
        and optimisers' and schedulers' ``state_dict``, every RNG (:func:`rng_state`) and
        ``extra`` (e.g. the losses so far). Rank 0 alone writes, under data-parallel
        training."""
        if not self.enabled:
            return
        self._open()
        if not data_parallel.is_main():
            return
        atomic_torch_save(self.state_path(name), {
            "position": position,
            "modules": {k: _unwrap(m).state_dict() for k, m in (modules or {}).items()},
            "optimizers": {k: o.state_dict() for k, o in (optimizers or {}).items()},
            "schedulers": {k: s.state_dict() for k, s in (schedulers or {}).items()},
            "rng": rng_state(generators),
            "extra": extra,
        })

    def load_state(self, name: str = "state", *,
                   modules: Mapping[str, torch.nn.Module] | None = None,
                   optimizers: Mapping[str, Any] | None = None,
                   schedulers: Mapping[str, Any] | None = None,
                   generators: Mapping[str, torch.Generator] | None = None
                   ) -> tuple[Any, Any] | None:
        """Restore a saved state into the given objects; return ``(position, extra)``, or None
        when nothing is saved (the objects are then untouched)."""
        if not self.enabled:
            return None
        self._open()
        path = self.state_path(name)
        if not path.is_file():
            return None
        state = torch.load(path, map_location="cpu", weights_only=False)
        for kind, objects in (("modules", modules), ("optimizers", optimizers),
                              ("schedulers", schedulers)):
            for k, obj in (objects or {}).items():
                if k not in state[kind]:
                    raise ValueError(f"{kind}: no saved state for {k!r} in {path.name}")
                target = _unwrap(obj) if kind == "modules" else obj
                target.load_state_dict(state[kind][k])
        set_rng_state(state["rng"], generators)
        return state["position"], state["extra"]

    def clear_state(self, name: str = "state") -> None:
        """Remove a saved loop state (e.g. once its unit is finished and saved)."""
        if self.enabled and data_parallel.is_main():
            with contextlib.suppress(FileNotFoundError):
                self.state_path(name).unlink()

    def finish(self, summary: Any = None) -> Path | None:
        """Write ``finished.json``: provenance, the units this process computed and read back,
        and an optional ``summary``."""
        if not self.enabled:
            return None
        self._open()
        if not data_parallel.is_main():
            return None
        record = provenance(self.experiment, self.settings)
        record["units_computed"] = list(self.computed)
        # where a run's time went (this machine's seconds: the run directory is not committed)
        record["unit_seconds"] = {k: round(v, 1) for k, v in self.unit_seconds.items()}
        record["units_read_back"] = list(self.loaded)
        record["summary"] = jsonable(summary)
        return write_json(self.path / "finished.json", record)
