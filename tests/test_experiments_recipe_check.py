"""The recipe check of the prepared GPU check: the paper-scale recipes take timed steps
and report their speed and memory (here at the cpu profile's shapes)."""
from __future__ import annotations

import json

import pytest
import torch

from ddcl_theory.experiments import recipe_check


def test_the_timing_runs_under_the_paper_profile(monkeypatch, tmp_path):
    from ddcl_theory.runtime import profile
    monkeypatch.setattr(recipe_check, "amp_enabled", lambda _d: profile.current().is_paper)
    report = tmp_path / "r.json"
    assert recipe_check.main(["--device", "cpu", "--steps", "1", "--small",
                              "--report", str(report)]) == 0
    assert [r["bf16"] for r in json.loads(report.read_text())["recipes"]] == [True] * 4


def test_both_recipes_are_timed_and_reported(tmp_path, capsys):
    report = tmp_path / "recipes.json"
    assert recipe_check.main(["--device", "cpu", "--steps", "1", "--small",
                              "--report", str(report)]) == 0
    record = json.loads(report.read_text())
    assert record["device_name"] == "cpu" and record["torch"] == torch.__version__
    assert record["steps"] == 1 and len(record["date"]) == 10
    rows = record["recipes"]
    assert [r["recipe"] for r in rows] == ["gpt2 stacked", "gpt2", "deit", "dino"]
    for r in rows:
        assert r["seconds_per_step"] > 0 and r["examples_per_second"] > 0 and r["peak_mib"] > 0
    assert rows[0]["batch"] == rows[1]["batch"] == 2
    # the study's optimiser for its stack (the paper profile's GPT-2 recipe), plain AdamW beside
    assert rows[0]["param_groups"] == 2 and rows[1]["param_groups"] == 1
    assert rows[0]["optimiser"] == ("AdamW lr 0.0006, weight decay 0.1 on the matrices and "
                                    "embeddings, each seed clipped at 1")
    assert rows[2]["seeds"] == 2 and rows[2]["hours_per_stack"] > 0
    assert rows[3]["hours_per_arm"] > 0 and rows[3]["batch"] == 8
    assert [r["bf16"] for r in rows] == [False] * 4               # bf16 on CUDA only
    out = capsys.readouterr().out
    assert out.count("recipe_check:") == 4 and "h an arm for the schedule" in out
    with pytest.raises(SystemExit):
        recipe_check.main(["--steps", "0", "--small"])


def test_a_failing_recipe_is_reported_and_the_others_run(monkeypatch, tmp_path, capsys):
    def no_memory(*_a, **_k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB")
    monkeypatch.setattr(recipe_check, "time_deit", no_memory)
    monkeypatch.setattr(recipe_check, "time_dino", lambda *_a, **_k: 1 / 0)
    report = tmp_path / "recipes.json"
    assert recipe_check.main(["--device", "cpu", "--steps", "1", "--small",
                              "--report", str(report)]) == 1
    rows = json.loads(report.read_text())["recipes"]
    assert [r["recipe"] for r in rows] == ["gpt2 stacked", "gpt2", "deit", "dino"]
    assert [r.get("outcome") for r in rows] == [None, None, "out of memory", "failed"]
    assert rows[2]["error"] == "OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB"
    assert rows[3]["error"] == "ZeroDivisionError: division by zero"
    out = capsys.readouterr().out
    assert "deit out of memory: OutOfMemoryError: CUDA out of memory" in out
    assert "dino failed: ZeroDivisionError" in out
