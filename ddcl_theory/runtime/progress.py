"""Progress bars for long runs: on for the paper profile or DDCL_PROGRESS=1, off otherwise.

Off by default in the cpu profile so that executed notebooks (the goldens) stay byte-stable.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TypeVar

from tqdm import tqdm  # the text bar: tqdm.auto warns (with a path) when ipywidgets is absent

from ddcl_theory.runtime import profile

T = TypeVar("T")


def enabled() -> bool:
    """On when ``DDCL_PROGRESS`` says so, else in the profiles that keep runs; never on ranks
    other than 0 of a data-parallel run (one bar, not one a rank)."""
    from ddcl_theory.runtime.data_parallel import is_main
    if not is_main():
        return False
    flag = os.environ.get("DDCL_PROGRESS")
    if flag is not None:
        return flag.strip() not in ("", "0", "false", "no")
    return profile.current().keeps_runs


def progress(iterable: Iterable[T], desc: str = "", total: int | None = None) -> Iterable[T]:
    """Wrap ``iterable`` in a tqdm bar when progress bars are enabled."""
    return tqdm(iterable, desc=desc, total=total, disable=not enabled(), leave=False)
