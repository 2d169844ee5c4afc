"""The replay of the goldens under every kernel set a CPU can emulate."""
from __future__ import annotations

import math

import nbformat
import pytest

from ddcl_theory.ledger import portable


def test_an_avx512_cpu_replays_its_own_avx2_and_the_scalar_kernels():
    assert portable.kernel_sets("AVX512") == ["native", "avx2", "default"]
    assert portable.kernel_sets("AVX2") == ["native", "default"]
    assert set(portable.EXPECTED_ATEN) == set(portable.KERNEL_SETS)


def test_an_unknown_kernel_set_is_refused_by_name():
    with pytest.raises(SystemExit, match="--sets: unknown \\['avx1024'\\]"):
        portable.main(["--sets", "avx1024"])


def _notebook(path, source: str, text: str, tags=()):
    cell = nbformat.v4.new_code_cell(source, execution_count=1)
    cell.metadata["tags"] = list(tags)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), path)
    return path


def test_chapter_moves_reports_the_largest_move_under_the_cells_tolerance(tmp_path):
    src = "# nbval-tolerance: abs=0.05 count_abs=2 -- accuracies; counts of 9 runs\nprint()"
    golden = _notebook(tmp_path / "g.ipynb", src, "acc 0.300, plateau 1 of 9\n")
    moved = _notebook(tmp_path / "m.ipynb", src, "acc 0.310, plateau 0 of 9\n")
    used, where = portable.chapter_moves(moved, golden)
    assert math.isclose(used, 1 / 2.05) and "plateau" in where and "count_abs=2" in where
    same = portable.chapter_moves(golden, golden)
    assert same == (0.0, "")
    timing = _notebook(tmp_path / "t.ipynb", "print()", "12 s\n", tags=["nbval-ignore-output"])
    assert portable.chapter_moves(_notebook(tmp_path / "t2.ipynb", "print()", "31 s\n"),
                                  timing) == (0.0, "")


def test_each_kernel_set_runs_with_its_own_empty_cache_and_scratch_results(tmp_path, monkeypatch):
    seen = {}

    def fake_execute(source, out, env):
        seen[source.stem] = env
        return source.stem, 1, 0.0, "not run"

    monkeypatch.setattr(portable, "_execute", fake_execute)
    monkeypatch.setattr(portable, "probe", lambda extra=None: {"aten": "DEFAULT"})
    report = portable.replay("default", ["decomposition", "ledger"], tmp_path, jobs=1)
    env = seen["decomposition"]
    assert env["ATEN_CPU_CAPABILITY"] == "default" and env["MKL_CBWR"] == "COMPATIBLE"
    assert env["DDCL_CACHE_DIR"] == str(tmp_path / "cache")
    assert env["DDCL_RESULTS_DIR"] == str(tmp_path / "results")
    assert env["DDCL_PROFILE"] == "cpu" and "ledger" in seen
    assert len(report["problems"]) == 2                         # both failed to execute
    monkeypatch.setattr(portable, "probe", lambda extra=None: {"aten": "AVX512"})
    with pytest.raises(RuntimeError, match="not DEFAULT"):
        portable.replay("default", ["decomposition"], tmp_path, jobs=1)


@pytest.mark.slow
def test_a_chapter_replayed_under_the_scalar_kernels_agrees_with_its_golden_but_a_break(
        tmp_path, monkeypatch, capsys):
    # one replay (a kernel start costs seconds of CI): decomposition under the scalar kernels,
    # against its golden with one number changed; that cell alone is reported
    from ddcl_theory.ledger import goldens

    source = goldens.sources(["decomposition"])[0]
    nb = nbformat.read(goldens.golden_path(source), 4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.outputs
                and "0" in "".join(o.get("text", "") for o in c.outputs))
    out = next(o for o in cell.outputs if o.get("text"))
    out["text"] = out["text"].replace("0", "7", 1)
    (tmp_path / "golden").mkdir()
    broken = tmp_path / "golden" / "decomposition.ipynb"
    nbformat.write(nb, broken)
    monkeypatch.setattr(goldens, "golden_path", lambda s: broken if s == source
                        else s.with_suffix(".ipynb"))
    assert portable.main(["--sets", "default", "--out", str(tmp_path / "run"),
                          "decomposition"]) == 1
    printed = capsys.readouterr().out
    assert "default: decomposition: largest move" in printed
    assert "portable: default (DEFAULT): 1 difference(s)" in printed
    assert "portable: FAILED" in printed
    assert (tmp_path / "run" / "default" / "decomposition.ipynb").is_file()
