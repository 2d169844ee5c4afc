"""scripts/gpu_check.sh, the prepared GPU check: stops with a clear message without CUDA, and
hands the smoke run and the paper chapter arguments their command lines accept."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def test_without_cuda_it_stops_and_says_how_to_get_a_cuda_build(tmp_path):
    done = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, CUDA_VISIBLE_DEVICES="", PY=sys.executable,
                                   OUT=str(tmp_path / "out")), timeout=120)
    assert done.returncode != 0
    assert "no CUDA device" in done.stderr and "TORCH=cuda" in done.stderr
    assert not (tmp_path / "out" / "smoke.json").exists()


def test_the_commands_it_runs_accept_its_arguments(tmp_path):
    log = tmp_path / "calls"
    stub = tmp_path / "python"          # records each call instead of running it
    stub.write_text(f'#!/bin/bash\necho "$@" >> {log}\ncat > /dev/null\n')
    stub.chmod(0o755)
    done = subprocess.run(["bash", str(SCRIPT), "orbital"], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, PY=str(stub),
                                              OUT=str(tmp_path / "out")), timeout=60)
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    smoke = next(c.split() for c in calls if "experiments.smoke" in c)
    assert smoke[smoke.index("--device") + 1] == "cuda" and smoke[-1] == "orbital"
    chapter = next(c.split() for c in calls if "goldens" in c)
    # the real tools accept these command lines (--list / --help return before any work)
    listed = subprocess.run([sys.executable, *smoke[:-1], "--list"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "orbital_debris.run" in listed.stdout, listed.stderr
    helped = subprocess.run([sys.executable, *chapter[:chapter.index("write") + 1], "--help"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and "--out" in helped.stdout and "--force" in helped.stdout
    assert chapter[-1] == "decomposition"
    recipes = next(c.split() for c in calls if "recipe_check" in c)
    assert recipes[recipes.index("--device") + 1] == "cuda"
    helped = subprocess.run([sys.executable, *recipes, "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and "--small" in helped.stdout, helped.stderr


def test_a_failing_step_does_not_stop_the_others_and_sets_the_status(tmp_path):
    stub = tmp_path / "python"          # the smoke run fails; every call goes to $CALLS
    stub.write_text('#!/bin/bash\necho "$@" >> "$CALLS"\ncat > /dev/null\n'
                    'case "$*" in *experiments.smoke*) exit 3;; esac\n')
    stub.chmod(0o755)

    def check(calls, **env):
        done = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, capture_output=True, text=True,
                              env=dict(os.environ, PY=str(stub), CALLS=str(calls),
                                       OUT=str(tmp_path / f"out_{calls.stem}"), **env), timeout=60)
        assert done.returncode == 3 and "done (status 3)" in done.stdout
        return calls.read_text()

    calls = check(tmp_path / "all")
    assert "recipe_check" in calls and "experiments.smoke" in calls and "goldens" in calls
    assert "goldens" not in check(tmp_path / "no_chapter", CHAPTER="0")
