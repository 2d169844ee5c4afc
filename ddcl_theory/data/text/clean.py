"""Light text clean-up before tokenisation (our own rules, stated here once).

* :func:`strip_newsgroup` removes what makes 20 Newsgroups easy for the wrong reasons: the
  header block (everything up to the first blank line: ``From:``, ``Subject:``,
  ``Organization:``, which name the group or its regulars), quoted lines (starting with ``>``,
  ``|`` or ``}``, possibly after a short tag such as ``JD>``, and the "... writes:" lines that
  introduce them) and the signature (everything after the last line that is ``--`` alone). This
  follows the spirit of scikit-learn's ``remove=('headers', 'footers', 'quotes')``, not its
  exact rules.
* :func:`clean_imdb` turns the HTML line breaks of IMDB reviews (``<br />``) into spaces.
"""
from __future__ import annotations

import re

_ATTRIBUTION = re.compile(r"(writes|wrote|says|said)\s*:?\s*$|^In article\b", re.IGNORECASE)
# a quoted line: ">", "|" or "}" first, possibly after spaces or a short tag ("JD>", "}>")
_QUOTED = re.compile(r"^\s*\w{0,3}[>|}]")
_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)


def strip_newsgroup(text: str) -> str:
    """The body of a 20 Newsgroups message without header, quoted lines and signature."""
    if not isinstance(text, str):
        raise ValueError(f"text: expected a str, got {type(text).__name__}")
    _, sep, body = text.partition("\n\n")
    if not sep:                      # no blank line: no header block to remove
        body = text
    lines = body.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip() == "--":
            lines = lines[:i]
            break
    kept = [line for line in lines
            if not _QUOTED.match(line) and not _ATTRIBUTION.search(line.strip())]
    return "\n".join(kept).strip()


def clean_imdb(text: str) -> str:
    """An IMDB review with ``<br />`` tags replaced by spaces."""
    if not isinstance(text, str):
        raise ValueError(f"text: expected a str, got {type(text).__name__}")
    return _BREAK.sub(" ", text)
