"""Which experiments a chapter runs, read from the code cells of its MyST source."""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

__all__ = ["chapter_code", "chapter_calls", "chapter_entries"]

PREFIX = "ddcl_theory.experiments"


def chapter_code(source: Path) -> str:
    """The code cells of a MyST chapter, magics and directives blanked."""
    cells = re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```", Path(source).read_text(),
                       re.S | re.M)
    return "\n".join("\n".join("" if line.lstrip().startswith(("%", "!", ":")) else line
                               for line in cell.splitlines()) for cell in cells)


def chapter_calls(source: Path) -> set[tuple[str, str]]:
    """``(module, function)`` of every call a chapter makes into ``ddcl_theory.experiments``."""
    tree = ast.parse(chapter_code(source))
    modules, functions = {}, {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PREFIX):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                try:
                    importlib.import_module(full)
                    modules[alias.asname or alias.name] = full
                except ImportError:
                    functions[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.Import):
            modules.update({a.asname or a.name: a.name for a in node.names
                            if a.name.startswith(PREFIX)})
    calls = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) \
                and f.value.id in modules:
            calls.add((modules[f.value.id], f.attr))
        elif isinstance(f, ast.Name) and f.id in functions:
            calls.add(functions[f.id])
    return calls


def chapter_entries(source: Path, entries) -> list:
    """The registry ``entries`` whose run function the chapter at ``source`` calls."""
    calls = chapter_calls(source)
    return [e for e in entries if (e.module, e.run) in calls]
