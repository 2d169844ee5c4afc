"""Printing numbers for the goldens: rounded, and never the digits of rounding noise."""
from __future__ import annotations

import math
import textwrap

#: the widest line a chapter prints or holds in a code cell: it fits the book's text column at
#: 1400 px (``_static/layout.css``; measured by ``tests/test_rendered_book.py``)
LINE_WIDTH = 88


def below(value: float, bound: float, spec: str = ".3g") -> str:
    """``value`` formatted with ``spec``, or ``"< bound"`` when it is under ``bound``.

    Use it for quantities that are zero up to rounding (residuals of identities, distances
    between merged points): their digits depend on the CPU's kernels, the bound does not.
    """
    if not (bound > 0 and math.isfinite(bound)):
        raise ValueError(f"bound: expected a finite number > 0, got {bound!r}")
    if math.isnan(value):
        raise ValueError("value: got NaN")
    return f"< {bound:.0e}" if abs(value) < bound else format(value, spec)


def _cell(value) -> str:
    text = value if isinstance(value, str) else format(value, ".3g") if isinstance(value, float) \
        else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A Markdown (pipe) table: the way a chapter shows a wide result, as a real table that wraps
    to the page column instead of fixed-width text that runs past it. Floats are printed with
    ``.3g``; format them yourself (e.g. with :func:`below`) for anything else."""
    if not header:
        raise ValueError("header: expected at least one column")
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise ValueError(f"rows[{i}]: expected {len(header)} cells, got {len(row)}")
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def show_table(header: list[str], rows: list[list]):
    """Display :func:`markdown_table` in a notebook (an IPython ``Markdown`` object, rendered as
    an HTML table in the book); returns the Markdown text outside IPython."""
    text = markdown_table(header, rows)
    try:
        from IPython.display import Markdown, display
    except ImportError:                     # the library without the book's extras
        return text
    display(Markdown(text))
    return None


def wrap(text: str, width: int = LINE_WIDTH) -> str:
    """``text`` with every line longer than ``width`` broken at spaces; a broken line's
    continuation keeps the line's own indentation plus two spaces. Explicit line breaks stay.
    Words are never split (a word longer than ``width`` stays whole)."""
    if width < 20:
        raise ValueError(f"width: expected an int >= 20, got {width!r}")
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip(" "))]
        out.append(textwrap.fill(line.strip(" "), width, initial_indent=indent,
                                 subsequent_indent=indent + "  ", break_long_words=False,
                                 break_on_hyphens=False))
    return "\n".join(out)


def say(*parts: object, width: int = LINE_WIDTH) -> None:
    """``print`` for a chapter: the parts joined by spaces, each line wrapped by :func:`wrap` so
    that no printed line runs past the book's text column."""
    print(wrap(" ".join(str(p) for p in parts), width))
