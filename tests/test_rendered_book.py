"""The built book, opened in a real headless browser: formulas typeset offline, no errors.

Run after `make book` with `make check-render` (sets DDCL_REQUIRE_BUILT_BOOK=1 so that a missing
build or a missing browser fails instead of skipping).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
REQUIRED = os.environ.get("DDCL_REQUIRE_BUILT_BOOK") == "1"
PAGES_WITH_MATH = ["book/notation.html", "notebooks/02_decomposition.html",
                   "notebooks/03_free_energy.html", "notebooks/05_laplacian_theory.html"]


def _need(condition: bool, why: str) -> None:
    if not condition:
        if REQUIRED:
            pytest.fail(why)
        pytest.skip(why)


def _browser() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    _need(exe is not None, "no headless Chromium on PATH (apt-get install chromium)")
    return exe


def render(page: Path) -> str:
    """The DOM of ``page`` after scripts ran, from headless Chromium with no network use."""
    with tempfile.TemporaryDirectory() as profile_dir:
        out = subprocess.run(
            [_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile_dir}", "--virtual-time-budget=15000", "--dump-dom",
             page.as_uri()],
            capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.fixture(scope="module")
def html_dir() -> Path:
    _need((HTML / "index.html").is_file(), f"no built book at {HTML.name}/ (run make book)")
    return HTML


def test_mathjax_is_served_locally(html_dir):
    assert (html_dir / "mathjax" / "tex-mml-chtml.js").is_file()
    page = (html_dir / "book" / "notation.html").read_text(encoding="utf-8")
    assert "mathjax/tex-mml-chtml.js" in page
    assert "cdn.jsdelivr.net" not in page


@pytest.mark.parametrize("page", PAGES_WITH_MATH)
def test_formulas_typeset_without_errors(html_dir, page):
    path = html_dir / page
    _need(path.is_file(), f"{page} was not built")
    dom = render(path)
    typeset = dom.count("<mjx-container")
    assert typeset > 0, f"{page}: no typeset formula (MathJax did not run)"
    assert "<mjx-merror" not in dom, f"{page}: MathJax reported a TeX error"
    raw = re.findall(r"\\\((?:(?!\\\)).){1,80}\\\)", re.sub(r"<(script|pre|code)[^>]*>.*?</\1>", "",
                                                          dom, flags=re.S))
    assert not raw, f"{page}: {len(raw)} formulas left as raw TeX, e.g. {raw[0]!r}"


def test_ledger_page_shows_every_claim(html_dir):
    from ddcl_theory import claims

    dom = render(html_dir / "notebooks" / "99_ledger.html")
    for claim in claims.CLAIMS:
        assert re.search(rf">\s*{claim.id}\s*<", dom), f"ledger page lacks claim {claim.id}"
