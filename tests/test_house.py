"""The house's one-way traffic (docs/architecture): the science (``layers``, ``metrics``,
``theory``, ``models``, ``data``, ``functional``) never imports ``experiments`` or ``ledger``, and
``runtime`` imports nothing of ``ddcl_theory`` but ``runtime``; ``experiments`` and ``ledger``
stand side by side (experiments produce results, the ledger decides on them): neither imports
the other. Imports are read from the source
(``ast``), lazy ones inside functions included, so a rule breaks here before it breaks a reader."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ddcl_theory"
SCIENCE = ("layers", "metrics", "theory", "models", "data", "functional")
ABOVE_SCIENCE = ("ddcl_theory.experiments", "ddcl_theory.ledger")


def module_name(path: Path, root: Path) -> str:
    """``root/<pkg>/a/b.py`` -> ``<pkg>.a.b`` (``__init__`` names its package)."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, root: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved; for
    ``from pkg import name`` both ``pkg`` and ``pkg.name``, as ``name`` may be a module)."""
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(root: Path = PACKAGE) -> list[str]:
    """``"<module> imports <name>"`` for every import that breaks the house's direction."""
    pkg = root.name
    out = []
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        name = module_name(path, root)
        sub = name.split(".")[1] if "." in name else ""
        for imported in sorted(imported_modules(path, root)):
            if not _within(imported, pkg) or imported == pkg:
                continue
            if sub in SCIENCE and any(_within(imported, a.replace("ddcl_theory", pkg, 1))
                                      for a in ABOVE_SCIENCE):
                out.append(f"{name} imports {imported}")
            if sub == "runtime" and not _within(imported, f"{pkg}.runtime"):
                out.append(f"{name} imports {imported}")
            for a, b in (("experiments", "ledger"), ("ledger", "experiments")):
                if sub == a and _within(imported, f"{pkg}.{b}"):
                    out.append(f"{name} imports {imported}")
    return out


def test_the_package_keeps_the_import_direction():
    assert violations() == []


def test_the_check_sees_a_science_module_that_imports_experiments(tmp_path):
    root = tmp_path / "ddcl_theory"
    for folder in ("layers", "runtime", "experiments", "ledger"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "layers" / "bad.py").write_text(
        "def f():\n    from ddcl_theory.experiments import smoke\n    return smoke\n")
    (root / "layers" / "good.py").write_text("from ddcl_theory.runtime import paths\n")
    (root / "runtime" / "leaky.py").write_text("from ..layers import good\n")
    (root / "runtime" / "fine.py").write_text("from . import leaky\nimport numpy\n")
    (root / "functional.py").write_text("import ddcl_theory.ledger.verdict\n")
    (root / "experiments" / "study.py").write_text("from ddcl_theory.ledger import verdict\n")
    (root / "ledger" / "rules.py").write_text("from ..experiments import study\n")
    assert violations(root) == [
        "ddcl_theory.experiments.study imports ddcl_theory.ledger",
        "ddcl_theory.experiments.study imports ddcl_theory.ledger.verdict",
        "ddcl_theory.functional imports ddcl_theory.ledger.verdict",
        "ddcl_theory.layers.bad imports ddcl_theory.experiments",
        "ddcl_theory.layers.bad imports ddcl_theory.experiments.smoke",
        "ddcl_theory.ledger.rules imports ddcl_theory.experiments",
        "ddcl_theory.ledger.rules imports ddcl_theory.experiments.study",
        "ddcl_theory.runtime.leaky imports ddcl_theory.layers",
        "ddcl_theory.runtime.leaky imports ddcl_theory.layers.good",
    ]


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package modules it imports (``from pkg import sub`` is an edge to the
    module ``pkg.sub`` when it is one, else to ``pkg``), lazy and type-checking imports included."""
    mods = {module_name(p, root): p for p in sorted(root.rglob("*.py"))
            if "__pycache__" not in p.parts}
    graph = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in mods)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                subs = {f"{module}.{a.name}" for a in node.names} & set(mods)
                edges |= subs
                if len(subs) < len(node.names) and module in mods:
                    edges.add(module)
        graph[name] = edges - {name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_module_imports_itself_through_others():
    assert import_cycles(import_graph()) == []


def test_the_cycle_check_sees_a_loop_through_a_lazy_import(tmp_path):
    root = tmp_path / "ddcl_theory"
    (root / "data").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "data" / "__init__.py").write_text("from ddcl_theory.data.fetch import get\n")
    (root / "data" / "fetch.py").write_text(
        "def get():\n    from ddcl_theory.data import FILES\n    return FILES\n")
    (root / "data" / "clean.py").write_text("from ddcl_theory.data import fetch\n")
    assert import_cycles(import_graph(root)) == [["ddcl_theory.data", "ddcl_theory.data.fetch"]]
