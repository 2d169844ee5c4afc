"""The ``{verdict}`` role: a verdict word of the claims ledger shown as a coloured badge.

``{verdict}`not reproduced``` becomes
``<span class="ddcl-verdict ddcl-verdict-not-reproduced">not reproduced</span>``; the colours,
one per verdict word, are in ``_static/ledger.css``. A word that is not one of
``ddcl_theory.ledger.claims.VERDICTS`` is reported as an error at that line of the page (the strict
build fails on it).
"""
from __future__ import annotations

from docutils import nodes

from ddcl_theory.ledger.claims import VERDICTS


def verdict_class(word: str) -> str:
    """The CSS class of one verdict word, e.g. ``"ddcl-verdict-not-reproduced"``."""
    if word not in VERDICTS:
        raise ValueError(f"word: expected one of {VERDICTS}, got {word!r}")
    return "ddcl-verdict-" + word.replace(" ", "-")


def verdict_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """Docutils role function: an inline node with the badge classes, or an error."""
    word = " ".join(text.split())
    if word not in VERDICTS:
        msg = inliner.reporter.error(
            f"{{verdict}}: expected one of {', '.join(VERDICTS)}; got {text!r}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    return [nodes.inline(rawtext, word, classes=["ddcl-verdict", verdict_class(word)])], []


def setup(app):
    app.add_role("verdict", verdict_role)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
