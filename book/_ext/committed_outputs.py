"""A banner on every page of a book built from the committed outputs instead of executing.

``book/build_book.py`` (what ``make book`` runs) builds the chapters from the committed executed
notebooks (``notebooks/*.ipynb``, the cpu-profile goldens) when the real data sets are missing;
it then sets the Sphinx config value ``ddcl_committed_outputs`` to the missing data sets' names.
This extension turns that value into a banner at the top of every page (the theme's announcement
bar, so also on the index and search pages) that says the outputs were not produced by this
build and how to get the data. Empty (the default, an executing build): no banner.
"""
from __future__ import annotations

import html

#: CSS class of the banner's text (tests look for it in every page).
BANNER_CLASS = "ddcl-committed-outputs"
#: the config value of a committed-outputs build asked for with the data present (COMMITTED=1)
REQUESTED = "requested"


def banner_html(missing: str) -> str:
    """The banner's HTML for the comma-separated data set names ``missing`` (non-empty), or
    for :data:`REQUESTED` (built from the committed outputs on request)."""
    missing = ", ".join(part.strip() for part in str(missing).split(",") if part.strip())
    if not missing:
        raise ValueError("missing: expected the names of the missing data sets, got nothing")
    if missing == REQUESTED:
        why = "This build was asked to show them (<code>make book COMMITTED=1</code>)."
    else:
        why = f"Missing data: {html.escape(missing)}."
    return (
        f'<span class="{BANNER_CLASS}"><strong>Committed outputs.</strong> This build did not '
        "run the chapters: every output, figure, number and verdict shown is the one committed "
        f"with the book (the executed notebooks of the cpu profile). {why} To run the chapters "
        "yourself, get the data (<code>make data</code> fetches it, or set "
        "<code>DDCL_DATA_DIR</code> to a folder that holds it; see the README) and run "
        "<code>make book</code> again.</span>")


def _on_config_inited(app, config) -> None:
    missing = str(config.ddcl_committed_outputs or "").strip()
    if not missing:
        return
    options = dict(config.html_theme_options or {})
    options["announcement"] = banner_html(missing)
    config.html_theme_options = options


def setup(app):
    app.add_config_value("ddcl_committed_outputs", "", "html", types=[str])
    app.connect("config-inited", _on_config_inited)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
