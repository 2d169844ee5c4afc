"""``python -m ddcl_theory.bench``: see :mod:`ddcl_theory.bench.cli`."""
import os

from ddcl_theory.bench.cli import main

if __name__ == "__main__":
    os.environ.setdefault("DDCL_PROGRESS", "1")       # a command-line run shows its progress
    raise SystemExit(main())
