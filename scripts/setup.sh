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
# TORCH=cpu|cuda|auto (default auto: cuda where nvidia-smi lists a GPU): the torch build.
TORCH_VARIANT=$(.venv/bin/python scripts/torch_variant.py)
stamp=".venv/.installed-$( (cat requirements.txt constraints.txt pyproject.toml; echo "$TORCH_VARIANT") | sha256sum | cut -c1-16)"

# The same pins installed by uv (from PyPI, kept in .cache/uv) in seconds where pip takes
# minutes. uv reads neither pip's configuration nor PIP_* variables, so pip's effective
# indexes, local wheels and constraints are passed to it. Most of pip's time is compiling the
# bytecode of all ~16,000 modules; uv leaves that to the first import of each module (the
# Makefile lets Python write it, see PYTHONDONTWRITEBYTECODE there), which compiles only the
# few thousand that the book and the tests import.
install_with_uv() {
  local uv=.cache/uv/bin/uv
  if [ ! -x "$uv" ]; then
    .venv/bin/pip install -q --target .cache/uv "uv==$UV_VERSION" >/dev/null 2>&1 || return 1
  fi
  local config cert
  local -a opts
  config=$(.venv/bin/pip config list)
  mapfile -t opts < <(.venv/bin/python scripts/pip_to_uv.py <<<"$config")
  cert=$(sed -n "s/^.*\.cert='\(.*\)'$/\1/p" <<<"$config" | tail -n 1)
  export UV_CACHE_DIR=${UV_CACHE_DIR:-.cache/uv-cache} UV_HTTP_TIMEOUT=${UV_HTTP_TIMEOUT:-180}
  [ -z "$cert" ] || export SSL_CERT_FILE=$cert
  # unsafe-best-match: every index and the local wheels are candidates for every package, as in
  # pip (uv's default stops at the first index that has the name).
  "$uv" pip install -q --python .venv/bin/python --index-strategy unsafe-best-match \
    "${opts[@]}" -r requirements.txt -c constraints.txt &&
  "$uv" pip install -q --python .venv/bin/python --no-deps "${opts[@]}" -e .
}
UV_VERSION=0.13.9

if [ ! -f "$stamp" ]; then
  echo "setup: installing requirements (under a minute with uv, about 2 minutes with pip)"
  # The pinned environment first (its CPU torch), then the package without resolving its
  # dependencies again: pyproject.toml declares ranges for library users, not the book's pins.
  if [ "${DDCL_SETUP_PIP:-0}" != 1 ] && install_with_uv; then
    echo "setup: installed with uv $UV_VERSION"
    # The bytecode of what the tests and the chapters import, written once here rather than
    # compiled side by side by the first processes of a test run.
    env -u PYTHONDONTWRITEBYTECODE .venv/bin/python scripts/import_all.py ||
      echo "setup: an import failed (the tests will say which); bytecode is left to first imports"
  else
    echo "setup: installing with pip"
    .venv/bin/pip install -q -r requirements.txt -c constraints.txt
    .venv/bin/pip install -q --no-deps -e .
  fi
  if [ "$TORCH_VARIANT" = cuda ]; then
    echo "setup: installing the CUDA build of the pinned torch (TORCH=cuda or a GPU was found)"
    mapfile -t cuda_args < <(.venv/bin/python scripts/torch_variant.py --pip)
    .venv/bin/pip "${cuda_args[@]}"
    .venv/bin/python -c "import torch, sys; sys.exit(0 if torch.version.cuda else 'setup: \
the installed torch is not a CUDA build')"
  fi
  rm -f .venv/.installed-*
  touch "$stamp"
fi
bash scripts/fetch_mathjax.sh
