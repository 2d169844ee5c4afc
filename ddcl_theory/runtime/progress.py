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
    flag = os.environ.get("DDCL_PROGRESS")
    if flag is not None:
        return flag.strip() not in ("", "0", "false", "no")
    return profile.current().keeps_runs


def progress(iterable: Iterable[T], desc: str = "", total: int | None = None) -> Iterable[T]:
    """Wrap ``iterable`` in a tqdm bar when progress bars are enabled."""
    return tqdm(iterable, desc=desc, total=total, disable=not enabled(), leave=False)
