"""The API reference pages (book/api): what they document exists, is in the table of contents,
and the examples in its docstrings run (doctest)."""
from __future__ import annotations

import doctest
import importlib
import inspect
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "book" / "api"
DIRECTIVE = re.compile(r"^\.\. auto(module|class|function|data):: (\S+)$", re.M)
MEMBERS = re.compile(r"^\.\. automodule:: (\S+)\n   :members: (.+)$", re.M)


def _documented() -> list[tuple[str, str]]:
    """``(kind, dotted name)`` of every autodoc directive on the API pages, members included."""
    found = []
    for page in sorted(API.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        found += DIRECTIVE.findall(text)
        for module, members in MEMBERS.findall(text):
            found += [("member", f"{module}.{m.strip()}") for m in members.split(",")]
    return found


def _resolve(dotted: str):
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


DOCUMENTED = _documented()
LAYER_MODULES = ("ddcl_theory.layers.ddcl", "ddcl_theory.layers.laplacian",
                 "ddcl_theory.layers.laplacianize")


def test_the_api_pages_are_in_the_table_of_contents():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    files = {c["file"] for part in toc["parts"] for c in part.get("chapters", [])}
    pages = {f"book/api/{p.stem}" for p in API.glob("*.md")}
    assert pages and pages <= files, pages - files


def test_the_pages_name_the_public_layers():
    names = {name for _, name in DOCUMENTED}
    assert {"ddcl_theory.layers.ddcl.DDCLAttention", "ddcl_theory.layers.laplacian.LaplacianAttention",
            "ddcl_theory.layers.laplacianize.laplacianize", "ddcl_theory.functional",
            "ddcl_theory.theory.collapse.critical_temperature"} <= names


@pytest.mark.parametrize("kind,name", DOCUMENTED, ids=[n for _, n in DOCUMENTED])
def test_every_documented_object_exists_and_has_a_docstring(kind, name):
    obj = _resolve(name)
    if kind != "data":
        assert inspect.getdoc(obj), f"{name} has no docstring"


@pytest.mark.parametrize("cls", ["ddcl_theory.layers.ddcl.DDCLAttention",
                                 "ddcl_theory.layers.laplacian.LaplacianAttention",
                                 "ddcl_theory.layers.laplacianize.laplacianize"])
def test_the_layers_document_every_argument_and_their_errors(cls):
    obj = _resolve(cls)
    doc = inspect.getdoc(obj)
    params = [p for p in inspect.signature(obj).parameters if p != "self"]
    missing = [p for p in params if not re.search(rf"^\s+{p}:", doc, re.M)]
    assert not missing, f"{cls}: arguments without a line in Args: {missing}"
    assert "Raises" in doc and "ValueError" in doc


@pytest.mark.parametrize("module", sorted({n for k, n in DOCUMENTED if k == "module"}
                                          | set(LAYER_MODULES)))
def test_the_docstring_examples_run(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    if module in LAYER_MODULES:
        assert result.attempted > 0, f"{module}: no example"
