"""ddcl_theory.bench.stacked: the settings, every case timed, the report (times are never
asserted: the host is shared)."""
from __future__ import annotations

import math

import pytest

from ddcl_theory.bench import stacked as bench


def test_the_default_settings_are_the_chapter_profiles():
    s = bench.StackedBenchSettings()
    assert (s.vit_dim, s.vit_depth, s.vit_heads, s.vit_patch, s.vit_image, s.vit_batch) \
        == (32, 2, 4, 8, 32, 128)
    assert (s.gpt_dim, s.gpt_depth, s.gpt_heads, s.gpt_block, s.gpt_batch) == (32, 2, 8, 32, 32)
    assert s.stack_sizes == (1, 5, 10) and s.threads == (1, 2)
    assert "16 patches of 8x8x3, batch 128" in s.describe("vit")


def test_settings_refuse_inconsistent_models():
    with pytest.raises(ValueError, match="vit_dim: expected a multiple of vit_heads"):
        bench.StackedBenchSettings(vit_dim=30)
    with pytest.raises(ValueError, match="gpt_laplacian_heads: expected at most"):
        bench.StackedBenchSettings(gpt_laplacian_heads=9)
    with pytest.raises(ValueError, match="vit_image: expected a multiple of vit_patch"):
        bench.StackedBenchSettings(vit_patch=5)
    with pytest.raises(ValueError, match="paths"):
        bench.StackedBenchSettings(paths=("loop",))


def test_the_benchmark_times_every_case_and_reports_ratios():
    s = bench.StackedBenchSettings.tiny(repeats=2)
    result = bench.run(s)
    per_group = 2 + len(s.stack_sizes) * len(s.paths)        # one, floor, each (S, path)
    assert len(result.timings) == len(s.models) * len(s.threads) * per_group
    assert all(len(t.wall_s) == 2 and all(w > 0 for w in t.wall_s) for t in result.timings)
    text = bench.report(result)
    assert "ViT: dim 8" in text and "char GPT: dim 8" in text
    rows = [line.split() for line in text.splitlines()
            if line.split()[:3] in (["1", "2", "explicit"], ["1", "2", "fused"])]
    assert len(rows) == 4                                    # two models, two paths, S = 2
    for row in rows:
        assert all(math.isfinite(float(v)) for v in row[3:])
        assert all(float(v) > 0 for v in row[3:6])              # ms/step, seeds/s, ratio
        ratio, speedup = float(row[5]), float(row[7])
        # both printed to two decimals: half a unit of the last place, plus what the
        # ratio's own rounding carries into 2 / ratio
        assert abs(speedup - 2 / ratio) <= 0.005 + 2 * 0.005 / ratio ** 2 + 1e-9


def test_the_command_line_runs_end_to_end(capsys):
    assert bench.main(["--tiny", "--models", "gpt", "--stack-sizes", "2", "--paths",
                       "explicit"]) == 0
    out = capsys.readouterr().out
    assert "char GPT" in out and "ViT" not in out and "explicit" in out and "fused" not in out
