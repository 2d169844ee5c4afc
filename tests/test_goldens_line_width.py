"""Every line a chapter shows in a code block fits the book's text column: code-cell lines and
printed (text) output lines of the committed goldens are at most ``report.LINE_WIDTH``
characters. The browser check (tests/test_rendered_book.py) measures the same thing in pixels
after a book build; this one runs in seconds with the unit tests and names the line."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from ddcl_theory.ledger.report import LINE_WIDTH

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
GOLDENS = sorted(NOTEBOOKS.glob("*.ipynb"))


def too_long_lines(nb, width: int = LINE_WIDTH) -> list[str]:
    """``cell N input|output: L chars: 'start of the line'`` for each line over ``width``."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        texts = [("input", cell.source)]
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                texts.append(("output", out.get("text", "")))
            elif "data" in out and "text/plain" in out["data"] and not (
                    {"text/html", "text/markdown", "image/png"} & set(out["data"])):
                texts.append(("output", out["data"]["text/plain"]))
        for kind, text in texts:
            found += [f"cell {i} {kind}: {len(line)} chars: {line[:60]!r}"
                      for line in "".join(text).splitlines() if len(line) > width]
    return found


def test_there_are_goldens_to_check():
    assert len(GOLDENS) >= 10


@pytest.mark.parametrize("path", GOLDENS, ids=lambda p: p.stem)
def test_code_and_printed_lines_fit_the_column(path):
    lines = too_long_lines(nbformat.read(path, as_version=4))
    assert not lines, f"{path.name}: {len(lines)} lines over {LINE_WIDTH} characters:\n" + \
        "\n".join(lines)


def test_the_measure_sees_a_long_printed_line():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "print('x')", outputs=[nbformat.v4.new_output("stream", name="stdout",
                                                       text="y" * (LINE_WIDTH + 1))])])
    assert too_long_lines(nb) == [f"cell 0 output: {LINE_WIDTH + 1} chars: {'y' * 60!r}"]
    nb.cells[0].outputs[0].text = "y" * LINE_WIDTH
    assert too_long_lines(nb) == []
