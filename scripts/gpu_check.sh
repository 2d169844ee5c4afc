#!/usr/bin/env bash
# The prepared GPU check: what a maintainer lent a GPU for ten minutes learns the most from.
#
#   scripts/gpu_check.sh [NAME ...]        (or: make gpu-check)
#
# 1. the device: torch's CUDA build, the GPU's name and memory;
# 2. the papers' recipes at their shapes: GPT-2 small as the language-model chapter trains it
#    under the paper profile (its batch, a stack of one seed called directly) and as a plain
#    model, with the attention operators and kernels that ran; the DeiT-style ViT-S and DINO
#    ViT-S/16, which no chapter runs yet: seconds per step, examples per second, peak memory,
#    written to
#    $OUT/recipes.json (first: the quickest and most telling; copied to
#    results/runbook/gpu_recipes.json, it is the runbook page's "Measured on a GPU");
# 3. the paper profile's smoke run on the GPU (bf16 autocast), every experiment the chapters
#    call (or those whose names start with NAME): seconds, optimiser steps, seconds per step and
#    peak device memory of each, printed and written to $OUT/smoke.json;
# 4. one short chapter (decomposition) under the paper profile, executed end to end (CHAPTER=0
#    leaves it out, on a host without the book's Jupyter packages).
# Outputs go to $OUT (default _build/gpu-check); nothing committed is touched. A failing step
# does not stop the ones after it; the script's status is the first failure's. Limits: 150 s for
# the recipes, $LIMIT seconds (default 420) for the smoke run, 120 s for the chapter.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-_build/gpu-check}
LIMIT=${LIMIT:-420}
mkdir -p "$OUT"

"$PY" - <<'PYEOF'
import sys

import torch

if not torch.cuda.is_available():
    sys.exit("gpu_check: torch sees no CUDA device (a CPU build of torch, or no GPU). On a GPU "
             "host, `make setup TORCH=cuda` installs the CUDA build of the pinned torch.")
props = torch.cuda.get_device_properties(0)
print(f"gpu_check: torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"{torch.cuda.device_count()} device(s); device 0: {props.name}, "
      f"{props.total_memory / 2**30:.0f} GiB")
PYEOF

status=0
first_failure() { local code=$?; if [ "$status" -eq 0 ]; then status=$code; fi; }
echo "gpu_check: the papers' recipes at their shapes (at most 150 s)"
timeout 150 "$PY" -m ddcl_theory.experiments.recipe_check --device cuda \
  --report "$OUT/recipes.json" 2>&1 | tee "$OUT/recipes.log" || first_failure

echo "gpu_check: smoke run on cuda (at most ${LIMIT} s)"
timeout "$LIMIT" "$PY" -m ddcl_theory.experiments.smoke --device cuda \
  --report "$OUT/smoke.json" "$@" 2>&1 | tee "$OUT/smoke.log" || first_failure

if [ "${CHAPTER:-1}" != 0 ]; then
  echo "gpu_check: the decomposition chapter under the paper profile (at most 120 s)"
  timeout 120 env DDCL_PROFILE=paper DDCL_RESULTS_DIR="$OUT/results" \
    "$PY" -m ddcl_theory.ledger.goldens write --force --out "$OUT/notebooks" decomposition \
    2>&1 | tee "$OUT/chapter.log" || first_failure
fi
echo "gpu_check: done (status $status); figures in $OUT/recipes.json and $OUT/smoke.json, logs in $OUT"
exit "$status"
