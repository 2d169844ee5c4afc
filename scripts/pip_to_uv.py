"""Print, one per line, the uv options equivalent to pip's effective configuration.

uv does not read pip's configuration files or PIP_* variables; scripts/setup.sh passes these
options to it so that both clients see the same indexes, local wheels and constraints.
Reads ``pip config list`` (files and environment) from stdin:

    .venv/bin/pip config list | python scripts/pip_to_uv.py
"""
from __future__ import annotations

import shlex
import sys

#: pip option -> uv option; pip separates several values by whitespace.
MANY = {"index-url": "--index-url", "extra-index-url": "--extra-index-url",
        "find-links": "--find-links", "constraint": "--constraint"}


def uv_options(lines: list[str]) -> list[str]:
    """``["--find-links", "/opt/wheels", ...]`` from ``pip config list`` lines
    (``global.find-links='/opt/wheels'``, ``:env:.find-links=...``). As in pip, an environment
    variable (``:env:``) overrides the files, and a later file line an earlier one."""
    files: dict[str, str] = {}
    env: dict[str, str] = {}
    for line in lines:
        key, sep, raw = line.strip().partition("=")
        if not sep:
            continue
        scope, _, option = key.rpartition(".")
        (env if scope == ":env:" else files)[option] = " ".join(shlex.split(raw))
    values = {**files, **env}
    out: list[str] = []
    for option, flag in MANY.items():
        for value in values.get(option, "").split():
            out += [flag, value]
    if values.get("no-index", "").lower() in {"1", "true", "yes", "on"}:
        out.append("--no-index")
    return out


if __name__ == "__main__":
    print("\n".join(uv_options(sys.stdin.read().splitlines())))
