"""The ``{findings}`` directive: one paper's findings, computed from ``results/claims.json``.

``{findings} ddcl`` (or ``laplacian``, ``ours``) renders
:func:`ddcl_theory.ledger.findings.findings_markdown` of the committed ledger for that paper,
followed by a forest plot of the 95% intervals of its empirical tests (confirmatory and
exploratory) against each test's margin and smallest effect of interest, as inline SVG. The page
is rebuilt whenever ``results/claims.json`` changes; a missing or unreadable file is an error at
the directive's line (the strict build fails on it).
"""
from __future__ import annotations

import io
import json
from pathlib import Path

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

from ddcl_theory.ledger.claims import DDCL, LAPLACIAN, OURS
from ddcl_theory.ledger.figures import forest_rows, plot_forest
from ddcl_theory.ledger.findings import findings_markdown

PAPER_KEYS = {"ddcl": DDCL, "laplacian": LAPLACIAN, "ours": OURS}
CLAIMS_JSON = Path("results") / "claims.json"


def forest_svg(rows: list[dict]) -> str:
    """The forest plot of ``rows`` (:func:`forest_rows`) as an SVG string (no fixed size: it
    scales with the text column)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 0.9 + 0.26 * len(rows)))
    plot_forest(ax, rows)
    ax.tick_params(labelsize=8)
    ax.xaxis.label.set_size(8)
    fig.tight_layout()
    out = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "ddcl-findings", "svg.fonttype": "none"}):
        fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)
    svg = out.getvalue()
    svg = svg[svg.index("<svg"):]
    return svg.replace('width="', 'data-width="', 1).replace('height="', 'data-height="', 1)


class FindingsDirective(SphinxDirective):
    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        key = self.arguments[0]
        if key not in PAPER_KEYS:
            raise self.error(f"findings: expected one of {sorted(PAPER_KEYS)}, got {key!r}")
        path = Path(self.env.srcdir) / CLAIMS_JSON
        self.env.note_dependency(str(path))
        try:
            ledger = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise self.error(f"findings: cannot read {CLAIMS_JSON}: {exc}") from exc
        source = PAPER_KEYS[key]
        out = self.parse_text_to_nodes(findings_markdown(ledger, source))
        rows = forest_rows([row for row in ledger if row["source"] == source])
        if rows:
            figure = nodes.container(classes=["ddcl-findings-forest"])
            figure += nodes.raw("", forest_svg(rows), format="html")
            out.append(figure)
        return out


def setup(app):
    app.add_directive("findings", FindingsDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
