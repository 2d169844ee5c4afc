"""The user cache folder: where fetched data files and their downloads live.

``$DDCL_CACHE_DIR``, else ``$XDG_CACHE_HOME/ddcl-theory``, else ``~/.cache/ddcl-theory``. It is the
last folder of the data search path (:mod:`ddcl_theory.data.files`), the fetcher's destination
(:mod:`ddcl_theory.data.fetch`) and the parent of the text embedding cache.
"""
from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "DDCL_CACHE_DIR"


def cache_dir() -> Path:
    """The user cache directory for fetched data (not created here)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "ddcl-theory"
    try:
        return Path.home() / ".cache" / "ddcl-theory"
    except RuntimeError:  # no home directory
        return Path.cwd() / ".cache" / "ddcl-theory"
