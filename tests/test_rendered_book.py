"""The built book, opened in a real headless browser: formulas typeset offline, no errors, the
claims ledger fits the window, and no button points to a repository the book does not have.

Run after `make book` with `make check-render` (sets DDCL_REQUIRE_BUILT_BOOK=1 so that a missing
build or a missing browser fails instead of skipping). `DDCL_BOOK_HTML` points the tests at
another built book (default `_build/html`); with `DDCL_SCREENSHOT_DIR` set, the layout tests
also save screenshots of the ledger there, for a person to look at.
"""
from __future__ import annotations

import contextlib
import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
HTML = Path(os.environ.get("DDCL_BOOK_HTML") or ROOT / "_build" / "html")
SCREENSHOTS = os.environ.get("DDCL_SCREENSHOT_DIR")
REQUIRED = os.environ.get("DDCL_REQUIRE_BUILT_BOOK") == "1"
PAGES_WITH_MATH = ["book/notation.html", "notebooks/decomposition.html",
                   "notebooks/free_energy.html", "notebooks/laplacian_theory.html",
                   "notebooks/ledger.html"]
LEDGER = "notebooks/ledger.html"
#: window sizes (CSS px) at which the ledger must fit: a laptop and a phone
WINDOWS = {"desktop": (1400, 900), "phone": (390, 844)}
INVENTED_REPOSITORY = "github.com/ddcl-theory/ddcl-theory"
#: marks of sphinx-book-theme's repository and launch buttons in a page
REPOSITORY_BUTTON_MARKS = ("btn-source-repository-button", "dropdown-launch-buttons",
                           "btn-launch-buttons", "colab.research.google.com", "mybinder.org",
                           "btn-source-issues-button", "btn-source-edit-button")


def _need(condition: bool, why: str) -> None:
    if not condition:
        if REQUIRED:
            pytest.fail(why)
        pytest.skip(why)


def _browser() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    _need(exe is not None, "no headless Chromium on PATH (apt-get install chromium)")
    return exe


def _chromium(page: Path, *args: str, window: tuple[int, int] | None = None) -> str:
    with tempfile.TemporaryDirectory() as profile_dir:
        size = [f"--window-size={window[0]},{window[1]}"] if window else []
        out = subprocess.run(
            [_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", f"--user-data-dir={profile_dir}", "--virtual-time-budget=15000",
             *size, *args, page.as_uri()],
            capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def render(page: Path, window: tuple[int, int] | None = None) -> str:
    """The DOM of ``page`` after scripts ran, from headless Chromium with no network use."""
    return _chromium(page, "--dump-dom", window=window)


@contextlib.contextmanager
def _temporary_page(folder: Path, text: str):
    fd, name = tempfile.mkstemp(prefix="_probe-", suffix=".html", dir=folder)
    os.close(fd)
    page = Path(name)
    try:
        page.write_text(text, encoding="utf-8")
        yield page
    finally:
        page.unlink(missing_ok=True)


@contextlib.contextmanager
def with_script(page: Path, script: str):
    """A copy of ``page`` in its own folder (relative links still resolve) with ``script``
    appended to the body; removed afterwards."""
    text = page.read_text(encoding="utf-8")
    assert "</body>" in text, f"{page.name}: no </body>"
    with _temporary_page(page.parent, text.replace("</body>", f"<script>{script}</script></body>",
                                                   1)) as probe:
        yield probe


@contextlib.contextmanager
def in_frame(page: Path, width: int, height: int, fragment: str = ""):
    """A page holding ``page`` in an iframe of exactly ``width`` x ``height`` CSS px.

    Headless Chromium will not make its window narrower than 500 px, so a phone-sized viewport
    is an iframe; media queries inside it see its width. What the framed page posts with
    ``parent.postMessage`` is written into this page's DOM as ``<div id="ddcl-measure">``.
    """
    wrapper = f"""<!DOCTYPE html><html><head><meta charset="utf-8"><style>
body {{ margin: 0; }} iframe {{ border: 0; display: block; }}</style></head><body>
<iframe src="{page.name}{'#' + fragment if fragment else ''}" width="{width}" height="{height}"></iframe>
<script>window.addEventListener("message", function (e) {{
  var div = document.createElement("div"); div.id = "ddcl-measure";
  div.textContent = String(e.data); document.body.appendChild(div); }});</script>
</body></html>"""
    with _temporary_page(page.parent, wrapper) as framed:
        yield framed


# Runs once MathJax has typeset (formulas change widths), then measures the ledger table and a
# deliberately too wide table put where the ledger is (the control: the measure must see that
# one overflow), and writes the numbers into the DOM as JSON.
MEASURE_JS = r"""
(function () {
  function measure(table) {
    var box = table.parentElement;
    var article = document.querySelector("article.bd-article") || document.body;
    var t = table.getBoundingClientRect(), a = article.getBoundingClientRect();
    return {tableLeft: t.left, tableRight: t.right, articleLeft: a.left, articleRight: a.right,
            boxScrollWidth: box.scrollWidth, boxClientWidth: box.clientWidth};
  }
  function report(out) {
    parent.postMessage(JSON.stringify(out), "*");
  }
  function run() {
    var out = {innerWidth: window.innerWidth};
    try {
      var root = document.documentElement;
      out.pageScrollWidth = root.scrollWidth;
      out.pageClientWidth = root.clientWidth;
      var ledger = document.querySelector(SELECTOR);
      out.ledger = ledger ? measure(ledger) : null;
      if (ledger) {
        var wrapper = document.createElement(ledger.parentElement.tagName);
        wrapper.className = ledger.parentElement.className;
        var wide = document.createElement("table");
        wide.className = "table";
        wide.innerHTML = "<tbody><tr><td>D0</td><td>" + "unbreakable".repeat(300) + "</td></tr></tbody>";
        wrapper.appendChild(wide);
        ledger.parentElement.after(wrapper);
        out.tooWide = measure(wide);
        wrapper.remove();
      }
    } catch (e) { out.error = String(e); }
    report(out);
  }
  var waited = 0;
  (function wait() {
    var mj = window.MathJax && window.MathJax.startup && window.MathJax.startup.promise;
    if (mj) { mj.then(function () { setTimeout(run, 300); }); return; }
    waited += 100;
    if (waited > 8000) { run(); return; }
    setTimeout(wait, 100);
  })();
})();
"""


def measure_table(page: Path, window: tuple[int, int], selector: str = "table.ddcl-ledger") -> dict:
    """Widths (CSS px) of the table ``selector`` on ``page`` in a viewport of ``window`` px."""
    width, height = window
    chrome_window = (max(width, 500), height)
    with with_script(page, MEASURE_JS.replace("SELECTOR", json.dumps(selector))) as probe:
        with in_frame(probe, width, height) as framed:
            dom = render(framed, window=chrome_window)
        if SCREENSHOTS:
            shot = Path(SCREENSHOTS) / f"{page.stem}-{width}px.png"
            shot.parent.mkdir(parents=True, exist_ok=True)
            with in_frame(probe, width, 3 * height, fragment="ledger-table") as framed:
                _chromium(framed, f"--screenshot={shot}", window=(chrome_window[0], 3 * height))
    found = re.search(r'<div id="ddcl-measure"[^>]*>(.*?)</div>', dom, flags=re.S)
    assert found, "the measuring script did not report (page scripts failed?)"
    out = json.loads(html.unescape(found.group(1)))
    assert "error" not in out, out.get("error")
    return out


def overflow(box: dict) -> float:
    """How far (px) a measured table sticks out of its scroll box or of the article column."""
    return max(box["boxScrollWidth"] - box["boxClientWidth"],
               box["tableRight"] - box["articleRight"],
               box["articleLeft"] - box["tableLeft"])


@pytest.fixture(scope="module")
def html_dir() -> Path:
    _need((HTML / "index.html").is_file(), f"no built book at {HTML} (run make book)")
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
    from ddcl_theory.ledger import claims
    dom = render(html_dir / LEDGER)
    for claim in claims.CLAIMS:
        assert re.search(rf">\s*{claim.id}\s*<", dom), f"ledger page lacks claim {claim.id}"


@pytest.mark.parametrize("layout", sorted(WINDOWS))
def test_ledger_table_fits_the_window(html_dir, layout):
    """No sideways scrolling for the ledger: the table stays inside its box and the text column,
    and the page is no wider than the window. The control table, too wide on purpose, must be
    reported as overflowing by the same measure (so this test can fail)."""
    width, height = WINDOWS[layout]
    m = measure_table(html_dir / LEDGER, (width, height))
    assert m["innerWidth"] == width, f"the browser window is {m['innerWidth']} px, not {width}"
    assert m["ledger"] is not None, "no table.ddcl-ledger on the ledger page"
    assert overflow(m["tooWide"]) > 100, f"the measure missed a too wide table: {m['tooWide']}"
    assert overflow(m["ledger"]) <= 1, f"ledger table overflows at {width} px: {m['ledger']}"
    assert m["pageScrollWidth"] <= m["pageClientWidth"] + 1, (
        f"the page scrolls sideways at {width} px: {m['pageScrollWidth']} > {m['pageClientWidth']}")


def test_ledger_ids_link_to_evidence_entries_and_chapters(html_dir):
    """Each id in the table links to its own entry below; each entry of a settled claim links to
    a chapter page that exists in the build."""
    from ddcl_theory.ledger import claims
    page = (html_dir / LEDGER).read_text(encoding="utf-8")
    table = re.search(r'<table class="[^"]*ddcl-ledger[^"]*".*?</table>', page, flags=re.S)
    assert table, "no ledger table"
    for claim in claims.CLAIMS:
        anchor = claims.ledger_anchor(claim.id)
        assert re.search(rf'href="#{anchor}"[^>]*>.*?>{claim.id}<', table.group(0)), claim.id
        entry = re.search(rf'<div class="ddcl-ledger-entry[^"]*" id="{anchor}">(.*?)\n</div>',
                          page, flags=re.S)
        assert entry, f"no evidence entry with id {anchor}"
        words = html.unescape(re.sub(r"<[^>]+>", "", entry.group(1)))
        assert " ".join(claim.statement.split()[:6]) in " ".join(words.split()), claim.id
        for href in re.findall(r'href="([^"#]+\.html)', entry.group(1)):
            assert (html_dir / "notebooks" / href).resolve().is_file(), f"{claim.id}: {href}"


def _configured_repository_url() -> str:
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    return str((config.get("repository") or {}).get("url") or "")


def test_no_repository_or_launch_buttons_without_a_repository_url(html_dir):
    """With repository.url empty no page links to a repository or offers a launch button;
    the download button stays."""
    if _configured_repository_url():
        pytest.skip("repository.url is set in _config.yml")
    pages = sorted(html_dir.rglob("*.html"))
    assert pages
    for page in pages:
        text = page.read_text(encoding="utf-8", errors="replace")
        assert INVENTED_REPOSITORY not in text, f"{page.relative_to(html_dir)} links to it"
        marks = [m for m in REPOSITORY_BUTTON_MARKS if m in text]
        assert not marks, f"{page.relative_to(html_dir)}: {marks}"
    chapter = (html_dir / LEDGER).read_text(encoding="utf-8")
    assert "btn-download-notebook-button" in chapter
