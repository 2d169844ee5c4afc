"""What produced a result: profile, device, versions, commit, code hash, seed, settings.

* :func:`provenance`: the record a run directory or a result file keeps beside its numbers; it
  holds no absolute path and no host name. :func:`same_provenance` compares two of them.
* :func:`settings_dict` / :func:`settings_hash`: a settings dataclass as JSON and its short hash.
* :func:`code_hash`, :func:`git_commit`: which code ran.
* :func:`machine`, :func:`package_version`: the host's CPU, memory and load, and library
  versions (for benchmarks, whose numbers depend on them).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ddcl_theory.runtime import profile
from ddcl_theory.runtime.io import jsonable
from ddcl_theory.runtime.paths import repo_root
from ddcl_theory.runtime.precision import amp_enabled, compile_enabled

__all__ = ["VOLATILE_FIELDS", "settings_dict", "settings_hash", "code_hash", "git_commit",
           "provenance", "same_provenance", "machine", "package_version"]

#: Provenance fields that say *when*, not *what*: left out when two provenances are compared.
VOLATILE_FIELDS = ("created_utc", "completed_utc", "seconds")


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
    """(commit hash of the checkout, whether tracked files outside ``results/`` differ from it:
    the code and chapters, not the results a run writes); (None, None) outside a git checkout.
    Read once per process."""
    commit = _git("rev-parse", "HEAD")
    if commit is None or not re.fullmatch(r"[0-9a-f]{40}", commit):
        return None, None
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".",
                  ":(exclude)results")
    return commit, (bool(status) if status is not None else None)


def _seed_of(settings: Any) -> Any:
    """The settings' ``seed``, else its ``seeds`` followed by any ``extra_seeds`` (seeds some
    runs add, e.g. at one scale only), else None."""
    if hasattr(settings, "seed"):
        return jsonable(settings.seed)
    if hasattr(settings, "seeds"):
        seeds, extra = settings.seeds, getattr(settings, "extra_seeds", ())
        if isinstance(seeds, (list, tuple)) and isinstance(extra, (list, tuple)):
            return jsonable(tuple(seeds) + tuple(extra))
        return jsonable(seeds)
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


def package_version(name: str) -> str | None:
    """The installed version of distribution ``name`` (e.g. ``"numpy"``), None if absent."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_total_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def machine(device: str = "cpu") -> dict:
    """The host as a JSON-ready dict: platform, CPU model, logical and usable CPUs, total
    memory, load average, and the GPU's name when ``device`` is ``"cuda"``. No host name."""
    info = {"platform": platform.platform(), "machine": platform.machine(),
            "cpu_model": _cpu_model(), "logical_cpus": os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else None,
            "memory_total_bytes": _memory_total_bytes(),
            "load_average_1_5_15": list(os.getloadavg())}
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
    return info
