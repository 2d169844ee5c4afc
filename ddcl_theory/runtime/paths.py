"""Where the project reads data and writes results."""
from __future__ import annotations

import os
import re
from pathlib import Path

RESULTS_ENV = "DDCL_RESULTS_DIR"


def repo_root() -> Path | None:
    """The checkout holding ``_toc.yml`` above this package (editable install), else None."""
    here = Path(__file__).resolve().parent
    for parent in (here, *here.parents):
        if (parent / "_toc.yml").is_file() and (parent / "ddcl_theory").is_dir():
            return parent
    return None


def chapter_order(root: Path | None = None) -> list[str]:
    """The chapters' names (``notebooks/<name>``) in the reading order of ``_toc.yml``.

    The table of contents is the one place that orders (and numbers) the chapters; file names
    carry no number. Empty outside a checkout.
    """
    root = root or repo_root()
    if root is None or not (root / "_toc.yml").is_file():
        return []
    return re.findall(r"^\s*-\s*file:\s*notebooks/(\w+)\s*$", (root / "_toc.yml").read_text(), re.M)


def results_dir() -> Path:
    """``$DDCL_RESULTS_DIR``, else ``<repo>/results``, else ``./results``; created if missing.

    Under the paper (reference) profile the results go to a ``paper/`` (``reference/``) folder
    inside it, so that such a rerun never overwrites the committed cpu-profile verdicts.
    """
    from ddcl_theory.runtime.profile import current

    env = os.environ.get(RESULTS_ENV)
    if env:
        path = Path(env)
    else:
        root = repo_root()
        path = (root if root is not None else Path.cwd()) / "results"
    if current().results_subdir:
        path = path / current().results_subdir
    path.mkdir(parents=True, exist_ok=True)
    return path
