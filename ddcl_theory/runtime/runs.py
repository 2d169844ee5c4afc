"""Runs a researcher can trust: checkpoints, atomic results, provenance, mixed precision.

Everything here is a no-op in the cpu profile (the goldens' numbers never pass through it); the
paper profile uses it so that a long GPU run can be killed and resumed where it stopped.

* :class:`RunDir`: a run directory ``<results>/runs/<experiment>-<settings hash>``. It holds
  finished *units* of work (e.g. one ``(setting, seed)`` training run of a sweep:
  :meth:`RunDir.unit` loads a finished one instead of recomputing it) and, for long loops, a
  training *state* (:meth:`RunDir.save_state` / :meth:`RunDir.load_state`: model, optimisers,
  schedulers, every RNG and the loop position), each file written atomically.
* :func:`write_json` / :func:`atomic_write_bytes`: a file is either its old content or its new
  content, never half of one (write to a temporary file in the same folder, fsync, rename).
* :func:`provenance`: what produced a result (profile, device, versions, commit, code hash,
  seed, settings); it holds no absolute path and no host name.
* :func:`autocast`: bf16 autocast on CUDA in the paper profile, a no-op elsewhere. The DDCL layer
  keeps its distances, softmax and losses in float32 (its float32 island) under autocast.
* :func:`maybe_compile`: ``torch.compile`` when ``DDCL_COMPILE=1``, the module itself otherwise.

Environment: ``DDCL_COMPILE=1`` (compile the training forward), ``DDCL_AMP=0`` (no autocast even on
CUDA), ``DDCL_RESUME=0`` (ignore and replace what a run directory holds).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import io
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from ddcl_theory.runtime import profile
from ddcl_theory.runtime.paths import repo_root, results_dir

T = TypeVar("T")

COMPILE_ENV = "DDCL_COMPILE"
AMP_ENV = "DDCL_AMP"
RESUME_ENV = "DDCL_RESUME"
RUNS_DIRNAME = "runs"
PROVENANCE_NAME = "provenance.json"
#: Provenance fields that say *when*, not *what*: left out when two provenances are compared.
VOLATILE_FIELDS = ("created_utc", "completed_utc", "seconds")
#: Provenance fields a run directory must share with the current process to be resumed from.
RESUME_FIELDS = ("experiment", "profile", "smoke", "device", "torch", "numpy", "code_sha256",
                 "autocast", "settings_hash")


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


# ----------------------------------------------------------------------------- atomic files
def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically: a temporary file beside it, fsync, then rename.

    A reader (or a run killed half-way) sees either the old file or the complete new one.
    The parent folder is created if missing. Returns the path.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"data: expected bytes, got {type(data).__name__}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):           # make the rename itself durable (POSIX)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as JSON (sorted keys, one-space indent, final newline) atomically."""
    return atomic_write_text(path, json.dumps(jsonable(obj), indent=1, sort_keys=True,
                                              ensure_ascii=False) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def atomic_torch_save(path: str | os.PathLike, obj: Any) -> Path:
    """``torch.save(obj)`` to ``path`` atomically."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return atomic_write_bytes(path, buffer.getvalue())


def jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON types: dataclasses and mappings become dicts, tuples lists, numpy
    and torch scalars numbers, paths their name only (never an absolute path); else ``repr``."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, torch.Tensor) and obj.numel() == 1:
        return obj.item()
    if isinstance(obj, os.PathLike):
        return Path(obj).name
    return repr(obj)


# ----------------------------------------------------------------------------- provenance
def settings_dict(settings: Any) -> dict | None:
    """A settings dataclass as a JSON-ready dict, with its class name under ``"__class__"``."""
    if settings is None:
        return None
    if not (dataclasses.is_dataclass(settings) and not isinstance(settings, type)):
        raise ValueError(f"settings: expected a dataclass instance, got {type(settings).__name__}")
    return {"__class__": type(settings).__qualname__, **jsonable(settings)}


def settings_hash(settings: Any) -> str:
    """12 hex digits of the sha256 of :func:`settings_dict` (class name included)."""
    text = json.dumps(settings_dict(settings), sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


@functools.lru_cache(maxsize=1)
def code_hash() -> str:
    """sha256 (16 hex digits) of the package's Python sources: relative paths and contents.

    Computed once per process: the code that runs is the code that was imported."""
    package = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        h.update(path.relative_to(package).as_posix().encode("utf-8") + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _git(*args: str) -> str | None:
    root = repo_root()
    if root is None or shutil.which("git") is None:
        return None
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def git_commit() -> tuple[str | None, bool | None]:
    """(commit hash of the checkout, whether tracked files differ from it); (None, None) outside
    a git checkout. Read once per process."""
    commit = _git("rev-parse", "HEAD")
    if commit is None or not re.fullmatch(r"[0-9a-f]{40}", commit):
        return None, None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return commit, (bool(status) if status is not None else None)


def amp_enabled(device: str | torch.device) -> bool:
    """bf16 autocast is used: a CUDA device, the paper profile, and ``DDCL_AMP`` not ``0``."""
    return (torch.device(device).type == "cuda" and profile.current().is_paper
            and _flag(AMP_ENV, True))


def compile_enabled() -> bool:
    """``DDCL_COMPILE=1`` is set."""
    return _flag(COMPILE_ENV, False)


def _seed_of(settings: Any) -> Any:
    for name in ("seed", "seeds"):
        if hasattr(settings, name):
            return jsonable(getattr(settings, name))
    return None


def provenance(experiment: str | None = None, settings: Any = None, *, seed: Any = None
               ) -> dict:
    """What produced a result, as a JSON-ready dict.

    Fields: experiment, profile, smoke, device, device_name (the accelerator's model, ``"cpu"``
    otherwise), autocast (``"bfloat16"`` or None), compile, python, torch, cuda, numpy,
    git_commit, git_dirty, code_sha256 (:func:`code_hash`), seed (``seed``, else the settings'
    ``seed``/``seeds`` field), settings (:func:`settings_dict`), settings_hash, created_utc.
    No absolute path and no host name appear in it.
    """
    prof = profile.current()
    commit, dirty = git_commit()
    device_name = "cpu"
    if prof.device == "cuda" and torch.cuda.is_available():
        device_name = torch.cuda.get_device_name()
    return {
        "experiment": experiment,
        "profile": prof.name,
        "smoke": prof.smoke,
        "device": prof.device,
        "device_name": device_name,
        "autocast": "bfloat16" if amp_enabled(prof.device) else None,
        "compile": compile_enabled(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "numpy": np.__version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "code_sha256": code_hash(),
        "seed": jsonable(seed) if seed is not None else _seed_of(settings),
        "settings": settings_dict(settings),
        "settings_hash": settings_hash(settings) if settings is not None else None,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def same_provenance(a: Mapping, b: Mapping, fields: tuple[str, ...] | None = None) -> bool:
    """``a`` and ``b`` agree on ``fields`` (default: every field but :data:`VOLATILE_FIELDS`)."""
    keys = fields if fields is not None else sorted((set(a) | set(b)) - set(VOLATILE_FIELDS))
    return all(a.get(k) == b.get(k) for k in keys)


# ----------------------------------------------------------------------------- precision, compile
def autocast(device: str | torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast for a forward pass on CUDA in the paper profile; a no-op context otherwise
    (the cpu profile, the paper smoke test on CPU, ``DDCL_AMP=0``).

    bf16 needs no loss scaling. The DDCL layer computes distances, the softmax and its losses in
    float32 whatever autocast says (its float32 island), so V >= 0 and the decomposition keep
    their float32 accuracy; matrix products elsewhere (projections, attention, MLPs) run in bf16.
    """
    if amp_enabled(device):
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def maybe_compile(module: torch.nn.Module) -> torch.nn.Module:
    """``torch.compile(module)`` when ``DDCL_COMPILE=1``, else ``module`` itself.

    Use the result for the training forward only; keep the original module for ``state_dict``,
    evaluation and checkpoints (the compiled wrapper shares its parameters).
    """
    if not isinstance(module, torch.nn.Module):
        raise ValueError(f"module: expected a torch.nn.Module, got {type(module).__name__}")
    return torch.compile(module) if compile_enabled() else module


# ----------------------------------------------------------------------------- RNG state
def rng_state(generators: Mapping[str, torch.Generator] | None = None) -> dict:
    """Every random state a training loop may draw from: Python's, NumPy's global, torch's CPU
    and CUDA default generators, and the named ``generators`` (e.g. from ``seed_everything``)."""
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "generators": {name: g.get_state() for name, g in (generators or {}).items()},
    }


def set_rng_state(state: Mapping, generators: Mapping[str, torch.Generator] | None = None) -> None:
    """Restore what :func:`rng_state` captured (the named generators must match by name)."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    saved = state.get("generators", {})
    for name, g in (generators or {}).items():
        if name not in saved:
            raise ValueError(f"generators: no saved state for {name!r}; saved: {sorted(saved)}")
        g.set_state(saved[name])


# ----------------------------------------------------------------------------- run directories
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
    return getattr(module, "_orig_mod", module)          # a torch.compile wrapper


class RunDir:
    """The run directory of one experiment with one settings object.

    Args:
        experiment: a short name, e.g. ``"laplacian_vit"`` (letters, digits, ``._-``).
        settings: the experiment's settings dataclass; its hash keys the directory.
        root: folder holding run directories (default ``<results>/runs``, i.e.
            ``results/paper/runs`` in the paper profile).
        enabled: default: on in the paper profile, off in the cpu profile. When off, nothing is
            read or written and :meth:`unit` simply computes.

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
        self.enabled = profile.current().is_paper if enabled is None else bool(enabled)
        self._root = Path(root) if root is not None else None
        self._ready = False
        self.loaded: list[str] = []        # unit keys read back from disk in this process
        self.computed: list[str] = []      # unit keys computed (and saved) in this process

    @property
    def path(self) -> Path:
        root = self._root if self._root is not None else results_dir() / RUNS_DIRNAME
        return root / self.key

    def _open(self) -> None:
        if self._ready:
            return
        here = provenance(self.experiment, self.settings)
        stored_path = self.path / PROVENANCE_NAME
        if self.path.exists() and self.path.resolve() not in _OPENED:
            stale = not _flag(RESUME_ENV, True)
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
        """Store a finished unit's result (any picklable object) atomically under ``key``."""
        if not self.enabled:
            return
        self._open()
        atomic_torch_save(self.unit_path(key), {"key": key, "value": value})

    def unit(self, key: str, compute: Callable[[], T]) -> T:
        """The finished unit ``key``: read back when saved, else ``compute()`` and save it."""
        found, value = self.load_unit(key)
        if found:
            self.loaded.append(key)
            return value
        value = compute()
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
        ``extra`` (e.g. the losses so far)."""
        if not self.enabled:
            return
        self._open()
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
        if self.enabled:
            with contextlib.suppress(FileNotFoundError):
                self.state_path(name).unlink()

    def finish(self, summary: Any = None) -> Path | None:
        """Write ``finished.json``: provenance, the units this process computed and read back,
        and an optional ``summary``."""
        if not self.enabled:
            return None
        self._open()
        record = provenance(self.experiment, self.settings)
        record["units_computed"] = list(self.computed)
        record["units_read_back"] = list(self.loaded)
        record["summary"] = jsonable(summary)
        return write_json(self.path / "finished.json", record)

