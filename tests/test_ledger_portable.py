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
