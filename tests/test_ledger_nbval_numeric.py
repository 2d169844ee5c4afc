"""The nbval plugin: numbers within the cell's tolerance pass, words and counts stay exact."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def _cell(source: str, golden_text: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source, execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=golden_text)]
    return cell


def _nbval(tmp_path: Path, cells: list) -> subprocess.CompletedProcess:
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "probe.ipynb"
    nbformat.write(nb, path)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "ddcl_theory.ledger.nbval_numeric", "--nbval",
         "-p", "no:cacheprovider", "-q", "-rA", str(path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    """One kernel for all the probes: which cells of a probe notebook pass."""
    tmp = tmp_path_factory.mktemp("nbval")
    cells = [
        _cell("print('acc', 0.236)", "acc 0.234\n"),                           # 0: too far, tight
        _cell("# nbval-tolerance: abs=0.01 -- probe of a training outcome\n"
              "print('acc', 0.236)", "acc 0.234\n"),                           # 1: declared, passes
        _cell("print('ratio', 0.386)", "ratio 0.385\n"),                       # 2: rounding flip
        _cell("print('seeds', 11)", "seeds 10\n"),                             # 3: off-by-one count
        _cell("# nbval-tolerance: abs=0.01 -- probe\nprint('refuted')", "confirmed\n"),  # 4: words
        _cell("print('D13', 0.5)", "D13 0.5\n"),                               # 5: identical
        _cell("# nbval-tolerance: abs=0.05 -- probe of accuracies only\n"
              "print('plateau', 0, 'of', 9)", "plateau 1 of 9\n"),            # 6: no count_abs
        _cell("# nbval-tolerance: abs=0.05 count_abs=2 -- counts of 9 runs\n"
              "print('plateau', 0, 'of', 9)", "plateau 1 of 9\n"),            # 7: within count_abs
        _cell("# nbval-tolerance: abs=0.05 count_abs=2 -- counts of 9 runs\n"
              "print('plateau', 4, 'of', 9)", "plateau 1 of 9\n"),            # 8: beyond it
        _cell("# nbval-tolerance: count_abs=2 -- counts of 9 runs\n"
              "print('acc', 0.236)", "acc 0.234\n"),                          # 9: decimals tight
    ]
    proc = _nbval(tmp, cells)
    passed = {i for i in range(len(cells)) if f"PASSED probe.ipynb::Cell {i}" in proc.stdout}
    failed = {i for i in range(len(cells)) if f"FAILED probe.ipynb::Cell {i}" in proc.stdout}
    assert passed | failed == set(range(len(cells))), proc.stdout[-3000:]
    return passed, proc.stdout


def test_a_training_number_outside_the_tight_default_fails(outcome):
    assert 0 not in outcome[0]


def test_the_same_number_passes_within_the_declared_tolerance(outcome):
    assert 1 in outcome[0]


def test_a_last_digit_rounding_flip_passes(outcome):
    assert 2 in outcome[0]


def test_an_off_by_one_count_fails(outcome):
    assert 3 not in outcome[0]
    assert "golden 10, got 11" in outcome[1]


def test_a_changed_verdict_word_fails_whatever_the_tolerance(outcome):
    assert 4 not in outcome[0]


def test_identical_output_passes(outcome):
    assert 5 in outcome[0]


def test_a_count_of_runs_moves_only_within_its_declared_count_allowance(outcome):
    assert 6 not in outcome[0]                 # abs=0.05 is no allowance for a count
    assert 7 in outcome[0]
    assert 8 not in outcome[0]
    assert "count_abs=2" in outcome[1]


def test_a_count_allowance_leaves_the_decimals_at_their_own_tolerance(outcome):
    assert 9 not in outcome[0]


def _items(names: list[str]) -> list[SimpleNamespace]:
    """Stand-ins for collected items: a golden's cell ("x.ipynb") or a unit test ("test_x.py")."""
    return [SimpleNamespace(fspath=Path(name), name=name) for name in names]


def test_goldens_run_in_reading_order_after_the_unit_tests_in_one_process():
    from ddcl_theory.ledger import nbval_numeric
    from ddcl_theory.runtime.paths import chapter_order

    first, second = chapter_order()[:2]
    items = _items(["ledger.ipynb", f"{second}.ipynb", "test_a.py", f"{first}.ipynb"])
    nbval_numeric.pytest_collection_modifyitems(None, SimpleNamespace(), items)
    assert [i.name for i in items] == ["test_a.py", f"{first}.ipynb", f"{second}.ipynb",
                                       "ledger.ipynb"]


def test_xdist_workers_take_the_chapters_first_and_the_ledger_last():
    from ddcl_theory.ledger import nbval_numeric
    from ddcl_theory.runtime.paths import chapter_order

    first, second = chapter_order()[:2]
    items = _items(["ledger.ipynb", "test_a.py", f"{second}.ipynb", f"{first}.ipynb"])
    worker = SimpleNamespace(workerinput={"testrunuid": "t"})
    nbval_numeric.pytest_collection_modifyitems(None, worker, items)
    assert [i.name for i in items] == [f"{first}.ipynb", f"{second}.ipynb", "test_a.py",
                                       "ledger.ipynb"]


def test_xdist_workers_start_the_slowest_files_first_in_their_stated_order():
    from ddcl_theory.ledger import nbval_numeric
    from ddcl_theory.runtime.paths import chapter_order

    heavy = nbval_numeric.HEAVY_FIRST
    tests = {"test_experiments_smoke", "test_experiments_smoke_lm"}
    assert set(heavy) - tests <= set(chapter_order())                    # names that exist
    file = {h: f"{h}.py" if h in tests else f"{h}.ipynb" for h in heavy}
    first = next(c for c in chapter_order() if c not in heavy)
    names = ["ledger.ipynb", "test_a.py", f"{first}.ipynb", *(file[h] for h in reversed(heavy))]
    items = _items(names)
    worker = SimpleNamespace(workerinput={"testrunuid": "t"})
    nbval_numeric.pytest_collection_modifyitems(None, worker, items)
    assert [i.name for i in items] == [*(file[h] for h in heavy), f"{first}.ipynb", "test_a.py",
                                       "ledger.ipynb"]
    assert heavy.index("test_experiments_smoke_lm") < heavy.index("test_experiments_smoke") < 3
    items = _items(names)                       # in one process: unit tests, chapters, ledger
    nbval_numeric.pytest_collection_modifyitems(None, SimpleNamespace(), items)
    assert [i.name for i in items][0] == "test_a.py" and items[-1].name == "ledger.ipynb"


def test_the_ledger_waits_for_the_chapters_other_workers_run(tmp_path, monkeypatch):
    import tempfile

    from ddcl_theory.ledger import nbval_numeric
    from ddcl_theory.runtime.paths import chapter_order

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(nbval_numeric, "LEDGER_WAIT_S", 0.2)
    first = chapter_order()[0]
    config = SimpleNamespace(workerinput={"testrunuid": "run1"})
    items = _items([f"{first}.ipynb", "test_a.py", "ledger.ipynb"])
    ledger = SimpleNamespace(fspath=Path("ledger.ipynb"), config=config,
                             session=SimpleNamespace(items=items))
    with pytest.raises(RuntimeError, match=first):
        nbval_numeric._await_chapters(ledger)
    (tmp_path / "ddcl-nbval-run1" / f"{first}.done").touch()
    nbval_numeric._await_chapters(ledger)  # returns at once


def test_glued_text_such_as_a_chapter_s_opening_box_is_compared_number_aware():
    from ddcl_theory.ledger.nbval_numeric import is_text
    assert is_text("application/papermill.record/text/markdown") and is_text("text/plain")
    assert not is_text("application/papermill.record/image/png")
    assert not is_text("image/png")
