"""The built book, opened in a real headless browser: formulas typeset offline, no errors, the
claims ledger fits the window, every code and output block fits the text column at 1400 px and
no page scrolls sideways on a phone (390 px), and no button points to a repository the book does
not have. Each layout measure has a control that must fail (a too wide table, code block, page).

Run after `make book` with `make check-render` (sets DDCL_REQUIRE_BUILT_BOOK=1 so that a missing
build or a missing browser fails instead of skipping). `DDCL_BOOK_HTML` points the tests at
another built book (default `_build/html`); with `DDCL_SCREENSHOT_DIR` set, the layout tests
also save screenshots of the ledger there, for a person to look at.
"""
from __future__ import annotations

import contextlib
import functools
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
PAGES_WITH_MATH = ["book/findings.html", "book/notation.html", "notebooks/decomposition.html",
                   "notebooks/free_energy.html", "notebooks/laplacian_theory.html",
                   "notebooks/ledger.html"]
LEDGER = "notebooks/ledger.html"
FINDINGS = "book/findings.html"
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
def in_frames(page: Path, sizes: list[tuple[int, int]], fragment: str = ""):
    """A page holding ``page`` in one iframe per ``(width, height)`` of ``sizes`` (CSS px),
    stacked, so that one browser launch measures several viewports.

    Headless Chromium will not make its window narrower than 500 px, so a phone-sized viewport
    is an iframe; media queries inside it see its width. What frame ``i`` posts with
    ``parent.postMessage`` is written into this page's DOM as ``<div id="ddcl-measure-i">``.
    """
    src = f"{page.name}{'#' + fragment if fragment else ''}"
    frames = "\n".join(f'<iframe src="{src}" width="{w}" height="{h}"></iframe>'
                        for w, h in sizes)
    wrapper = f"""<!DOCTYPE html><html><head><meta charset="utf-8"><style>
body {{ margin: 0; }} iframe {{ border: 0; display: block; }}</style></head><body>
{frames}
<script>window.addEventListener("message", function (e) {{
  var frames = document.querySelectorAll("iframe");
  for (var i = 0; i < frames.length; i++) {{
    if (frames[i].contentWindow !== e.source) continue;
    var div = document.createElement("div"); div.id = "ddcl-measure-" + i;
    div.textContent = String(e.data); document.body.appendChild(div);
  }} }});</script>
</body></html>"""
    with _temporary_page(page.parent, wrapper) as framed:
        yield framed


@contextlib.contextmanager
def in_frame(page: Path, width: int, height: int, fragment: str = ""):
    """:func:`in_frames` with one iframe of exactly ``width`` x ``height`` CSS px."""
    with in_frames(page, [(width, height)], fragment) as framed:
        yield framed


def in_page(run: str) -> str:
    """A script for a page: once MathJax has typeset (formulas change widths), call the
    JavaScript function expression ``run`` and post what it returns, as JSON, to the parent
    frame ({"error": ...} when it throws)."""
    return r"""
(function () {
  var run = RUN;
  function go() {
    var out;
    try { out = run(); } catch (e) { out = {error: String(e)}; }
    parent.postMessage(JSON.stringify(out), "*");
  }
  var waited = 0;
  (function wait() {
    var mj = window.MathJax && window.MathJax.startup && window.MathJax.startup.promise;
    if (mj) { mj.then(function () { setTimeout(go, 300); }); return; }
    waited += 100;
    if (waited > 8000) { go(); return; }
    setTimeout(wait, 100);
  })();
})();
""".replace("RUN", run)


# Measures the ledger table and a deliberately too wide table put where the ledger is (the
# control: the measure must see that one overflow).
MEASURE_JS = r"""
function () {
  function measure(table) {
    var box = table.parentElement;
    var article = document.querySelector("article.bd-article") || document.body;
    var t = table.getBoundingClientRect(), a = article.getBoundingClientRect();
    return {tableLeft: t.left, tableRight: t.right, articleLeft: a.left, articleRight: a.right,
            boxScrollWidth: box.scrollWidth, boxClientWidth: box.clientWidth};
  }
  var out = {innerWidth: window.innerWidth};
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
    // a cell that cannot wrap (the book lets table cells wrap, so a long word alone would fit)
    wide.innerHTML = "<tbody><tr><td>D0</td><td style=\"white-space: nowrap; " +
      "overflow-wrap: normal\">" + "unbreakable ".repeat(300) + "</td></tr></tbody>";
    wrapper.appendChild(wide);
    ledger.parentElement.after(wrapper);
    out.tooWide = measure(wide);
    wrapper.remove();
  }
  return out;
}
"""


def _measure_many(page: Path, windows: list[tuple[int, int]], run: str) -> list[dict]:
    """What the JavaScript function ``run`` returns on ``page`` in each viewport of
    ``windows`` (iframes of exactly those sizes, stacked), from one browser launch."""
    chrome_window = (max(max(w for w, _ in windows), 500), sum(h for _, h in windows))
    with with_script(page, in_page(run)) as probe:
        with in_frames(probe, windows) as framed:
            dom = render(framed, window=chrome_window)
    results = []
    for i in range(len(windows)):
        found = re.search(rf'<div id="ddcl-measure-{i}"[^>]*>(.*?)</div>', dom, flags=re.S)
        assert found, (f"{page.name}: the measuring script did not report in frame {i} "
                       "(page scripts failed?)")
        out = json.loads(html.unescape(found.group(1)))
        assert "error" not in out, out.get("error")
        results.append(out)
    return results


def _measure(page: Path, window: tuple[int, int], run: str, shot: str = "",
             fragment: str = "") -> dict:
    """What the JavaScript function ``run`` returns on ``page`` in a viewport of ``window`` px
    (an iframe of exactly that size); with ``DDCL_SCREENSHOT_DIR`` set and ``shot`` given, also
    a screenshot (three windows tall) named ``shot``."""
    out = _measure_many(page, [window], run)[0]
    if SCREENSHOTS and shot:
        width, height = window
        path = Path(SCREENSHOTS) / shot
        path.parent.mkdir(parents=True, exist_ok=True)
        with with_script(page, in_page(run)) as probe:
            with in_frame(probe, width, 3 * height, fragment=fragment) as framed:
                _chromium(framed, f"--screenshot={path}", window=(max(width, 500), 3 * height))
    return out


def measure_table(page: Path, window: tuple[int, int], selector: str = "table.ddcl-ledger") -> dict:
    """Widths (CSS px) of the table ``selector`` on ``page`` in a viewport of ``window`` px."""
    return _measure(page, window, MEASURE_JS.replace("SELECTOR", json.dumps(selector)),
                    shot=f"{page.stem}-{window[0]}px.png", fragment="ledger-table")


# Every code-input and output block of a chapter (folded ones opened first): how far (px) its
# content is wider than the block or any box inside it, or the block sticks out of the article
# column; and whether the page as a whole scrolls sideways. The controls: a code block with one
# very long line put into the article, and a too wide figure, must both be seen overflowing.
BLOCKS_JS = r"""
function () {
  var article = document.querySelector("article.bd-article") || document.body;
  function overflowOf(block) {
    var worst = 0;
    [block].concat(Array.prototype.slice.call(block.querySelectorAll("pre, div, table")))
      .forEach(function (el) {
        if (el.clientWidth > 0) { worst = Math.max(worst, el.scrollWidth - el.clientWidth); }
      });
    var a = article.getBoundingClientRect(), b = block.getBoundingClientRect();
    return Math.max(worst, Math.round(b.right - a.right), Math.round(a.left - b.left));
  }
  function pageOverflow() {
    var root = document.documentElement;
    return root.scrollWidth - root.clientWidth;
  }
  Array.prototype.forEach.call(document.querySelectorAll("details"), function (d) {
    d.open = true;
  });
  var cells = Array.prototype.slice.call(document.querySelectorAll("div.cell"));
  var out = {innerWidth: window.innerWidth, pageOverflow: pageOverflow(), blocks: []};
  Array.prototype.forEach.call(document.querySelectorAll("div.cell_input, div.cell_output"),
    function (block) {
      var first = (block.innerText || "").trim().split("\n")[0].slice(0, 70);
      out.blocks.push({cell: cells.indexOf(block.closest("div.cell")) + 1,
                       kind: block.classList.contains("cell_input") ? "input" : "output",
                       overflow: overflowOf(block), text: first});
    });
  var cell = document.createElement("div");
  cell.className = "cell docutils container";
  cell.innerHTML = '<div class="cell_input docutils container"><div class="highlight-ipython3 ' +
    'notranslate"><div class="highlight"><pre>x = ' + "1 + ".repeat(150) + '1</pre></div></div></div>';
  article.appendChild(cell);
  out.controlBlock = overflowOf(cell.firstChild);
  cell.remove();
  var wide = document.createElement("div");
  wide.style.width = (window.innerWidth + 600) + "px";
  wide.style.height = "10px";
  article.appendChild(wide);
  out.controlPage = pageOverflow();
  wide.remove();
  out.dom = document.documentElement.outerHTML;   // for the formula and ledger checks
  return out;
}
"""


def measure_blocks(page: Path, window: tuple[int, int]) -> dict:
    """Overflow (px) of every code-input and output block of ``page`` and of the page itself,
    in a viewport of ``window`` px, with the two controls (see BLOCKS_JS)."""
    return _measure(page, window, BLOCKS_JS, shot=f"blocks-{page.stem}-{window[0]}px.png")


@functools.lru_cache(maxsize=None)
def blocks_in_every_window(page: Path) -> dict[str, dict]:
    """:func:`measure_blocks` of ``page`` in each window of :data:`WINDOWS` (by name), from one
    browser launch: the desktop and phone tests of a page share it."""
    if SCREENSHOTS:
        return {name: measure_blocks(page, size) for name, size in WINDOWS.items()}
    return dict(zip(WINDOWS, _measure_many(page, list(WINDOWS.values()), BLOCKS_JS)))


def _toc_pages() -> list[str]:
    """Every page of the book (``book/intro.html``, ``notebooks/ledger.html``, ...) by the TOC."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    files = [toc["root"]] + [c["file"] for part in toc.get("parts", [])
                             for c in part.get("chapters", [])]
    return [f"{name}.html" for name in files]


BOOK_PAGES = _toc_pages()


def _too_wide(blocks: list[dict]) -> list[str]:
    """The blocks that overflow, widest first, as ``cell N input: P px ('first line')``."""
    wide = sorted((b for b in blocks if b["overflow"] > 0), key=lambda b: -b["overflow"])
    return [f"cell {b['cell']} {b['kind']}: {b['overflow']} px ({b['text']!r})" for b in wide]


@pytest.mark.parametrize("page", BOOK_PAGES)
def test_code_and_output_blocks_fit_the_column_at_desktop_width(html_dir, page):
    """At 1400 px no code-input or output block is wider than the text column or scrolls
    sideways inside itself (folded cells opened), and the page does not scroll sideways. The
    control code block with a 600-character line must be measured as overflowing."""
    path = html_dir / page
    _need(path.is_file(), f"{page} was not built")
    width, height = WINDOWS["desktop"]
    m = blocks_in_every_window(path)["desktop"]
    assert m["innerWidth"] == width, f"the browser window is {m['innerWidth']} px, not {width}"
    assert m["controlBlock"] > 100, f"the measure missed a too wide code block: {m['controlBlock']}"
    too_wide = _too_wide(m["blocks"])
    assert not too_wide, f"{page}: {len(too_wide)} blocks overflow at {width} px:\n" + "\n".join(
        too_wide)
    assert m["pageOverflow"] <= 0, f"{page} scrolls sideways at {width} px by {m['pageOverflow']}"


@pytest.mark.parametrize("page", BOOK_PAGES)
def test_no_page_scrolls_sideways_on_a_phone(html_dir, page):
    """At 390 px the page as a whole never scrolls sideways (a code block may scroll inside
    itself). The control, an element wider than the window put into the article, must be
    measured as making the page scroll."""
    path = html_dir / page
    _need(path.is_file(), f"{page} was not built")
    width, height = WINDOWS["phone"]
    m = blocks_in_every_window(path)["phone"]
    assert m["innerWidth"] == width, f"the browser window is {m['innerWidth']} px, not {width}"
    assert m["controlPage"] > 100, f"the measure missed a too wide page: {m['controlPage']}"
    assert m["pageOverflow"] <= 0, (
        f"{page} scrolls sideways at {width} px by {m['pageOverflow']} px; widest blocks: "
        + "; ".join(_too_wide(m["blocks"])[:5]))


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
    dom = blocks_in_every_window(path)["desktop"]["dom"]     # the launch the layout tests use
    typeset = dom.count("<mjx-container")
    assert typeset > 0, f"{page}: no typeset formula (MathJax did not run)"
    assert "<mjx-merror" not in dom, f"{page}: MathJax reported a TeX error"
    raw = re.findall(r"\\\((?:(?!\\\)).){1,80}\\\)", re.sub(r"<(script|pre|code)[^>]*>.*?</\1>", "",
                                                          dom, flags=re.S))
    assert not raw, f"{page}: {len(raw)} formulas left as raw TeX, e.g. {raw[0]!r}"


def test_ledger_page_shows_every_claim(html_dir):
    from ddcl_theory.ledger import claims
    _need((html_dir / LEDGER).is_file(), f"{LEDGER} was not built")
    dom = blocks_in_every_window(html_dir / LEDGER)["desktop"]["dom"]
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


def test_findings_page_shows_every_claim_with_its_committed_word(html_dir):
    """The built findings page (book/findings.md, computed at build time) gives each claim of
    results/claims.json once, with the same verdict badge, and a forest plot per paper with
    empirical tests."""
    page = html_dir / FINDINGS
    _need(page.is_file(), f"{FINDINGS} was not built")
    text = page.read_text(encoding="utf-8")
    ledger = json.loads((ROOT / "results" / "claims.json").read_text(encoding="utf-8"))
    for row in ledger:
        badge = r'\s*<span class="ddcl-verdict[^"]*">([^<]+)</span>'
        shown = re.findall(rf">{row['id']}</span></a>" + badge, text)
        assert shown == [row["verdict"]], f"{row['id']}: page shows {shown}"
    with_tests = {row["source"] for row in ledger if row.get("tests")}
    assert text.count('class="ddcl-findings-forest') == len(with_tests)


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
    # executing build: a notebook button; committed-outputs build: the source is the .ipynb
    assert re.search(r'href="[^"]*_sources/notebooks/ledger\.ipynb"', chapter), "no .ipynb download"
