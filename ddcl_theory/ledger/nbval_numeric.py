"""A pytest plugin that makes nbval compare numbers with a tolerance instead of digit by digit.

Enabled by ``-p ddcl_theory.ledger.nbval_numeric`` (``make test`` does). nbval still executes
every golden and compares every output field it compares by default; only the comparison of two
text values changes: words, labels and verdicts must match exactly, numbers must agree under the
cell's :class:`~ddcl_theory.ledger.tolerance.Tolerance` (tight unless the cell declares one with a
``# nbval-tolerance: ... -- reason`` comment line; see :mod:`ddcl_theory.ledger.tolerance`).
Non-text outputs (images, widgets) are compared as nbval does.
"""
from __future__ import annotations

from collections import defaultdict

from ddcl_theory.ledger.tolerance import Tolerance, compare_text, parse_declaration

TEXT_KEYS = ("stdout", "stderr", "text", "text/plain", "text/markdown", "text/html")


def _flatten(outputs, skip, sanitize) -> dict[str, list]:
    """nbval's view of a cell's outputs: one list of values per output field or MIME type."""
    flat: dict[str, list] = defaultdict(list)
    for out in outputs:
        for key, value in out.items():
            if key in skip:
                continue
            if key == "data":
                for mime, payload in value.items():
                    if mime not in skip:
                        flat[mime].append(sanitize(payload))
            else:
                flat[key].append(sanitize(value))
    return flat


def compare_outputs(self, test, ref, skip_compare=None):
    """Replacement for ``nbval.plugin.IPyNbCell.compare_outputs`` (same contract: bool, and
    ``self.comparison_traceback`` explains a mismatch)."""
    from nbval.plugin import transform_streams_for_comparison

    skip = skip_compare or self.parent.skip_compare
    tol: Tolerance = parse_declaration(self.cell.source)
    got = _flatten(transform_streams_for_comparison(test), skip, self.sanitize)
    want = _flatten(transform_streams_for_comparison(ref), skip, self.sanitize)
    self.comparison_traceback = []
    if set(got) != set(want):
        self.comparison_traceback.append(
            f"output fields differ: golden {sorted(want)}, got {sorted(got)}")
        return False
    for key, want_values in want.items():
        got_values = got[key]
        if len(got_values) != len(want_values):
            self.comparison_traceback.append(
                f"{key}: golden has {len(want_values)} outputs, got {len(got_values)}")
            return False
        for w, g in zip(want_values, got_values):
            if isinstance(w, str) and isinstance(g, str) and key in TEXT_KEYS:
                problems = compare_text(w, g, tol)
            else:
                problems = [] if w == g else [f"{key} differs"]
            if problems:
                self.comparison_traceback.append(
                    f"{key} mismatch under tolerance abs={tol.abs:g} rel={tol.rel:g}"
                    + (f" ({tol.reason})" if tol.reason else "") + ":")
                self.comparison_traceback.extend("  " + p for p in problems[:10])
                self.format_output_compare(key, w, g)
                return False
    return True


def pytest_collection_modifyitems(session, config, items):
    """Run the goldens in reading order (``_toc.yml``): the ledger reads the verdicts that the
    chapters before it write. Other items keep their place, before the notebooks."""
    from pathlib import Path

    from ddcl_theory.runtime.paths import chapter_order

    order = {name: i for i, name in enumerate(chapter_order())}

    def key(item):
        path = Path(str(item.fspath))
        if path.suffix != ".ipynb":
            return (0, 0)
        return (1, order.get(path.stem, len(order)))

    items[:] = sorted(items, key=key)  # stable: cells of one notebook keep their order


def pytest_configure(config):
    try:
        from nbval import plugin
    except ImportError:  # nbval absent: nothing to extend
        return
    plugin.IPyNbCell.compare_outputs = compare_outputs
