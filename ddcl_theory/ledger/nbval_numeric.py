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

import pytest

from ddcl_theory.ledger.tolerance import Tolerance, compare_text, parse_declaration

TEXT_KEYS = ("stdout", "stderr", "text", "text/plain", "text/markdown", "text/html")
#: the MIME prefix of a value glued by myst-nb (``glue(key, value, display=False)``, e.g. a
#: chapter's opening box): its text is compared like any other text output
GLUE_PREFIX = "application/papermill.record/"


def is_text(key: str) -> bool:
    """Whether output field or MIME type ``key`` holds text (compared number-aware)."""
    return key in TEXT_KEYS or (key.startswith(GLUE_PREFIX)
                                and key.removeprefix(GLUE_PREFIX) in TEXT_KEYS)


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
            if isinstance(w, str) and isinstance(g, str) and is_text(key):
                problems = compare_text(w, g, tol)
            else:
                problems = [] if w == g else [f"{key} differs"]
            if problems:
                self.comparison_traceback.append(
                    f"{key} mismatch under tolerance {tol.describe()}"
                    + (f" ({tol.reason})" if tol.reason else "") + ":")
                self.comparison_traceback.extend("  " + p for p in problems[:10])
                self.format_output_compare(key, w, g)
                return False
    return True


#: the golden that reads what the others wrote (their verdicts): it runs after all of them
LEDGER = "ledger"
#: how long (seconds) the ledger's worker waits for the chapters run by other workers
LEDGER_WAIT_S = 3600.0
#: under xdist, the test files (stems) that take minutes each on a 2-core machine, started
#: first so that no worker is left with one of them at the end while the other idles. The two
#: halves of the paper smoke test (``make test-slow``) start together, one on each worker; in
#: ``make test`` they sit between the two text chapters, so that peer_readouts finds 20
#: Newsgroups' embeddings already cached by text_readout (the same draw) instead of encoding
#: them twice
HEAVY_FIRST = ("text_readout", "test_experiments_smoke_lm", "test_experiments_smoke",
               "dense_features", "peer_readouts")


def _notebook(item) -> str | None:
    """The stem of the golden an nbval item belongs to; None for any other test."""
    from pathlib import Path

    path = Path(str(item.fspath))
    return path.stem if path.suffix == ".ipynb" else None


def _is_worker(config) -> bool:
    """True inside a pytest-xdist worker (``make test`` runs ``-n logical --dist loadfile``)."""
    return hasattr(config, "workerinput")


def pytest_collection_modifyitems(session, config, items):
    """Run the goldens in reading order (``_toc.yml``): the ledger reads the verdicts that the
    chapters before it write. In one process the other tests come first, then the goldens.

    Under pytest-xdist with ``--dist loadfile --no-loadscope-reorder`` (``make test``) each
    golden goes whole to one worker (its cells in order, in one kernel) and the order becomes:
    the slowest files (:data:`HEAVY_FIRST`), the other chapters, the other tests, the ledger, so
    that the workers execute several chapters at once, the unit tests fill the gaps and the
    ledger comes last; its worker still waits for every chapter before it (``_await_chapters``).
    """
    from pathlib import Path

    from ddcl_theory.runtime.paths import chapter_order

    order = {name: i for i, name in enumerate(chapter_order())}
    distributed = _is_worker(config)

    def key(item):
        name = _notebook(item)
        if distributed and Path(str(item.fspath)).stem in HEAVY_FIRST:
            return (0, HEAVY_FIRST.index(Path(str(item.fspath)).stem))
        if name is None:
            return (2 if distributed else 0, 0)
        if name == LEDGER:
            return (3, order.get(name, len(order)))
        return (1, order.get(name, len(order)))

    items[:] = sorted(items, key=key)  # stable: cells of one notebook keep their order


def _markers(config):
    """The folder where workers mark the goldens they have finished (one per test run)."""
    import tempfile
    from pathlib import Path

    uid = config.workerinput.get("testrunuid", "run")
    folder = Path(tempfile.gettempdir()) / f"ddcl-nbval-{uid}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """Under xdist: once a golden's last cell has run, mark it done for the ledger's worker."""
    name = _notebook(item)
    if name is None or not _is_worker(item.config):
        return
    if nextitem is None or nextitem.parent is not item.parent:
        (_markers(item.config) / f"{name}.done").touch()


def pytest_runtest_setup(item):
    """Under xdist: before the ledger's first cell, wait for every chapter before it."""
    if _notebook(item) != LEDGER or not _is_worker(item.config):
        return
    if getattr(item.parent, "_chapters_awaited", False):
        return
    item.parent._chapters_awaited = True
    _await_chapters(item)


def _await_chapters(item) -> None:
    """Block until the chapters collected in this run that precede the ledger are done."""
    import time

    from ddcl_theory.runtime.paths import chapter_order

    order = chapter_order()
    before = set(order[:order.index(LEDGER)]) if LEDGER in order else set()
    wanted = {n for n in map(_notebook, item.session.items) if n in before}
    folder = _markers(item.config)
    deadline = time.monotonic() + LEDGER_WAIT_S
    while True:
        missing = sorted(n for n in wanted if not (folder / f"{n}.done").exists())
        if not missing:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"ledger: the chapters {missing} did not finish within "
                               f"{LEDGER_WAIT_S:.0f} s on the other workers")
        time.sleep(1.0)


def pytest_configure(config):
    try:
        from nbval import plugin
    except ImportError:  # nbval absent: nothing to extend
        return
    plugin.IPyNbCell.compare_outputs = compare_outputs
