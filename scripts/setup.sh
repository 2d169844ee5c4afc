#!/usr/bin/env bash
# Create .venv (Python 3.11), install the pinned environment and the package, fetch MathJax.
# Idempotent: a stamp of the requirement files skips the install when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
stamp=".venv/.installed-$(cat requirements.txt constraints.txt pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "setup: installing requirements (about 2 minutes on a fresh machine)"
  # The pinned environment first (its CPU torch), then the package without resolving its
  # dependencies again: pyproject.toml declares ranges for library users, not the book's pins.
  .venv/bin/pip install -q -r requirements.txt -c constraints.txt
  .venv/bin/pip install -q --no-deps -e .
  rm -f .venv/.installed-*
  touch "$stamp"
fi
bash scripts/fetch_mathjax.sh
