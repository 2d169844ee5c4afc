"""ddcl_theory.bench: settings, the reference computation, skipping, ratios, the report and the
JSON record (times are never asserted: the host is shared)."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from ddcl_theory import bench
from ddcl_theory.layers.ddcl import DDCLAttention
from ddcl_theory.runtime import profile


def _tiny(**kw) -> bench.BenchSettings:
    base = dict(seq_lens=(32, 64), dim=16, heads=2, num_prototypes=4, repeats=2,
                memory=False, laplacian_seq_len=32, laplacian_repeats=2)
    return bench.BenchSettings.quick(**{**base, **kw})


def test_modes_cover_the_documented_lengths():
    quick, full = bench.BenchSettings.quick(), bench.BenchSettings.full()
    assert max(quick.seq_lens) <= 1024 and not quick.compile
    assert full.seq_lens[0] == 256 and full.seq_lens[-1] == 65536 and full.compile
    assert set(full.methods) == {"ddcl", "bare", "sdpa", "mean", "vq"}
    assert full.memory_seq_lens is None and set(full.memory_methods) == set(full.methods)
    assert bench.BenchSettings.from_profile() == quick                # cpu profile in the tests
    assert quick == bench.BenchSettings() and quick.mode == "quick" and full.mode == "full"
    assert bench.BenchSettings.full(repeats=2).repeats == 2 and full.repeats == 5


def test_the_paper_profile_runs_the_full_sweep(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    assert bench.BenchSettings.from_profile() == bench.BenchSettings.full()
    assert bench.BenchSettings() == bench.BenchSettings.quick()     # defaults: the cpu values


@pytest.mark.parametrize("field,value", [("dim", 0), ("repeats", 1.5), ("heads", 3),
                                         ("seq_lens", (0,)), ("methods", ("flash",)),
                                         ("max_call_s", 0.0), ("mode", "slow"),
                                         ("memory_seq_lens", (0,)), ("seq_lens", ())])
def test_bad_settings_raise_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field if field != "heads" else "dim"):
        bench.BenchSettings.quick(**{field: value})


def test_bare_reference_does_exactly_the_layers_large_matrix_products():
    """bare = 2 projections + per head z P^T and s P: the layer's FLOPs less V's q^T q, the
    prototype Gram matrices, the pooled projection and the logits' bias (a column of ones in
    the layer's product)."""
    t, dim, k, heads = 32, 16, 4, 2
    hd = dim // heads
    layer = DDCLAttention(dim, k, heads=heads)
    x = torch.randn(1, t, dim)
    with torch.no_grad(), FlopCounterMode(display=False) as bare:
        bench.bare_products(layer, x)
    with torch.no_grad(), FlopCounterMode(display=False) as full:
        layer(x)
    products = 4 * t * dim * heads * hd + 4 * t * k * heads * hd
    assert bare.get_total_flops() == products
    extra = heads * (2 * t * k * k + 2 * k * k * hd + 2 * t * k) + 2 * dim * heads * hd
    assert full.get_total_flops() == products + extra


def test_prediction_is_quadratic_for_attention_and_linear_otherwise():
    last = bench.Timing("sdpa", 100, wall_s=[2.0])
    assert bench.predicted_seconds("sdpa", 200, last) == pytest.approx(8.0)
    assert bench.predicted_seconds("ddcl", 200, bench.Timing("ddcl", 100, wall_s=[2.0])) == 4.0
    assert bench.predicted_seconds("ddcl", 200, None) == 0.0


def test_a_method_predicted_too_slow_is_skipped_and_says_why():
    rows = bench.run_timing(_tiny(methods=("mean", "sdpa"), max_call_s=1e-9), "cpu")
    first = [r for r in rows if r.seq_len == 32]
    second = [r for r in rows if r.seq_len == 64]
    assert all(r.wall_s and r.skipped is None for r in first)
    assert all(not r.wall_s and "max_call_s" in r.skipped for r in second)


def test_paired_ratio_is_the_median_of_per_repeat_ratios():
    d = bench.Timing("ddcl", 8, wall_s=[1.0, 1.0, 1.0], cpu_s=[2.0, 3.0, 10.0])
    b = bench.Timing("bare", 8, wall_s=[1.0, 1.0, 1.0], cpu_s=[1.0, 2.0, 2.0])
    (row,) = bench.ratios([d, b])
    assert row["ddcl_over_bare_paired_cpu"] == pytest.approx(2.0)    # median of 2, 1.5, 5
    assert row["ddcl_over_bare_cpu"] == pytest.approx(3.0 / 2.0)
    assert "sdpa_over_ddcl_wall" not in row


@pytest.mark.slow
def test_run_records_every_cell_provenance_and_a_memory_measurement(tmp_path):
    s = _tiny(memory=True, memory_seq_lens=(8192,), memory_methods=("ddcl",))
    result = bench.run(s, "cpu")
    text = json.dumps(result)                                          # JSON-ready
    assert "NaN" not in text
    cells = {(r["method"], r["seq_len"]) for r in result["timing"] if r["wall_s"]}
    assert cells == {(m, t) for m in s.methods for t in s.seq_lens}
    assert all(r["ddcl_over_bare_paired_cpu"] > 0 for r in result["ratios"])
    (mem,) = result["memory"]
    assert mem["input_bytes"] == 8192 * 16 * 4 and mem["peak_delta_bytes"] > 0 and mem["how"]
    assert 1 < mem["ratio"] < 40                                  # a few input sizes
    prov = result["provenance"]
    assert prov["versions"]["torch"] == torch.__version__
    assert prov["torch"]["num_threads"] == s.threads and prov["machine"]["logical_cpus"] >= 1
    assert prov["versions"]["vector_quantize_pytorch"]
    assert 0 < result["laplacian"]["median_ratio"] < math.inf and result["laplacian"]["params_equal"]
    table = bench.report(result)
    assert "ddcl/bare" in table and "Laplacian heads" in table and "mem ddcl" in table


@pytest.mark.slow
def test_command_line_quick_run_writes_the_json(tmp_path):
    out = tmp_path / "b.json"
    assert bench.main(["--quick", "--seq-lens", "32", "--methods", "ddcl,bare,mean",
                       "--no-memory", "--repeats", "1", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["settings"]["mode"] == "quick" and data["settings"]["seq_lens"] == [32]
    assert {r["method"] for r in data["timing"]} == {"ddcl", "bare", "mean"}


def test_the_memory_child_reads_its_settings_back_from_json(capsys):
    s = _tiny(memory_seq_lens=None, max_call_s=5.0)          # None and floats through JSON
    spec = json.dumps({"method": "mean", "seq_len": 32, "device": "cpu",
                       "settings": dataclasses.asdict(s)})
    assert bench.main(["--memory-case", spec]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["method"] == "mean" and res["seq_len"] == 32 and res["input_bytes"] > 0


def _fake_result(exponent: float) -> dict:
    lens = [256, 1024, 4096, 16384]
    timing = [{"method": "m", "seq_len": t, "skipped": None, "median_wall_s": 1e-6 * t ** exponent}
              for t in lens]
    timing.append({"method": "m", "seq_len": 65536, "skipped": "too slow", "median_wall_s": None})
    return {"timing": timing, "memory": [{"method": "m", "seq_len": 256, "ratio": 3.0}]}


@pytest.mark.parametrize("exponent", [1.0, 2.0, 1.5])
def test_loglog_slope_recovers_the_power_of_t(exponent):
    from ddcl_theory import bench as b

    result = _fake_result(exponent)
    assert b.loglog_slope(result, "m") == pytest.approx(exponent, abs=1e-9)
    assert b.medians(result, "m")[0] == [256, 1024, 4096, 16384]       # skipped lengths left out
    with pytest.raises(ValueError, match="method"):
        b.medians(result, "nope")
    with pytest.raises(ValueError, match="min_len"):
        b.loglog_slope(result, "m", min_len=16384)


def test_the_committed_benchmark_run_loads_and_has_what_the_book_reads():
    from ddcl_theory import bench as b

    stored = b.load()
    assert {"ddcl", "sdpa", "bare"} <= set(stored["settings"]["methods"])
    assert 16384 in {r["seq_len"] for r in stored["ratios"]}
    assert "median_ratio" in stored["laplacian"]
