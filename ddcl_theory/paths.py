"""Where the project reads data and writes results."""
from __future__ import annotations

import os
from pathlib import Path

RESULTS_ENV = "DDCL_RESULTS_DIR"


def repo_root() -> Path | None:
    """The checkout holding ``_toc.yml`` above this package (editable install), else None."""
    here = Path(__file__).resolve().parent
    for parent in (here, *here.parents):
        if (parent / "_toc.yml").is_file() and (parent / "ddcl_theory").is_dir():
            return parent
    return None


def results_dir() -> Path:
    """``$DDCL_RESULTS_DIR``, else ``<repo>/results``, else ``./results``; created if missing.

    Under the paper profile the results go to a ``paper/`` folder inside it, so that a GPU rerun
    never overwrites the committed cpu-profile verdicts.
    """
    from .profile import current

    env = os.environ.get(RESULTS_ENV)
    if env:
        path = Path(env)
    else:
        root = repo_root()
        path = (root if root is not None else Path.cwd()) / "results"
    if current().is_paper:
        path = path / "paper"
    path.mkdir(parents=True, exist_ok=True)
    return path
