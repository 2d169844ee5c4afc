"""The paper profile's smoke run as the slow tests run it: a share of the registered experiments
in a subprocess on one thread, checked entry by entry.

The run is split into two tests, each one process: the language model (GPT-2 small at its
1,024-token context, about 60% of the seconds) and every other experiment. Under
``make test-slow`` the two go to the two workers first (``HEAVY_FIRST``), so each runs on a
core of its own instead of three processes sharing two.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddcl_theory.experiments import smoke
from ddcl_theory.runtime import profile

ROOT = Path(__file__).resolve().parents[1]
#: The experiments (module stems) of the language model's smoke test.
LM_SHARE = ("laplacian_lm",)


def stems() -> list[str]:
    """The module stems of the registered experiments, in the registry's order."""
    return list(dict.fromkeys(e.name.split(".")[0] for e in smoke.entries()))


def other_stems() -> list[str]:
    return [s for s in stems() if s not in LM_SHARE]


def run_smoke(tmp_path: Path, share: list[str] | tuple[str, ...]) -> dict:
    """Run the smoke run of ``share``'s experiments with ``--flops`` and check its report:
    every entry of the share ran, in the registry's order, and passed; its checkpoints went to
    a scratch folder; its FLOPs per example are the committed ones (the GPU runbook's)."""
    from ddcl_theory import data

    missing = [key for key in data.FILES if data.find(key) is None]
    if missing:   # make test fetches them first (make data); make unit runs without data
        pytest.skip(f"data sets {missing} missing: run make data")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1",
               DDCL_RESULTS_DIR=str(tmp_path / "results"),
               **{profile.PROFILE_ENV: "paper", profile.SMOKE_ENV: "1"})
    report = tmp_path / "smoke.json"
    proc = subprocess.run([sys.executable, "-m", "ddcl_theory.experiments.smoke", "--threads",
                           "1", "--flops", "--report", str(report), *(f"{s}." for s in share)],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-8000:]
    record = json.loads(report.read_text(encoding="utf-8"))
    names = [e.name for e in smoke.entries() if e.name.split(".")[0] in share]
    assert [o["name"] for o in record["experiments"]] == names and names
    assert all(o["ok"] for o in record["experiments"])
    assert all(o["peak_mib"] > 0 and o["steps"] >= 0 for o in record["experiments"])
    prov = record["provenance"]
    assert prov["profile"] == "paper" and prov["smoke"] is True and prov["device"] == "cpu"
    assert not (tmp_path / "results").exists()          # checkpoints went to a scratch folder
    # the GPU runbook's FLOPs per example of each model, as committed (they follow from the
    # code and the paper's shapes alone: a change of either must recount them)
    from ddcl_theory.runbook import flops

    def per_example(counts):
        return {(name, model): c["flops"] / c["examples"]
                for name, entry in counts["experiments"].items() if name in names
                for model, c in entry["models"].items() if c["examples"]}

    assert per_example(flops.from_report(record)) == per_example(flops.read()), \
        "the FLOPs per example moved: python -m ddcl_theory.runbook.flops, then .page"
    return record
