"""Import every module of the package and the libraries the tests and the chapters load.

scripts/setup.sh runs it once after a uv install (which compiles no bytecode), with bytecode
writing on, so that the first processes of a test run do not each compile the same modules.
Prints how many modules were imported.
"""
from __future__ import annotations

import importlib
import pkgutil
import sys

LIBRARIES = ("torch", "numpy", "scipy.stats", "scipy.optimize", "sklearn.linear_model",
             "sklearn.cluster", "sklearn.model_selection", "matplotlib.pyplot", "sympy",
             "hypothesis", "ipykernel.kernelapp", "nbformat", "nbclient", "pytest", "xdist",
             "nbval", "jupytext", "tqdm")


def main() -> int:
    for name in LIBRARIES:
        importlib.import_module(name)
    import ddcl_theory

    for info in pkgutil.walk_packages(ddcl_theory.__path__, "ddcl_theory."):
        if not info.name.endswith("__main__"):          # a command line, not a module
            importlib.import_module(info.name)
    print(f"import_all: {len(sys.modules)} modules imported")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
