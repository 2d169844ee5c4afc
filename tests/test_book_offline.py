"""``make book`` in a fresh clone without the data and without a network.

The book must build (exit 0) from the committed executed notebooks, without executing anything,
with a banner on every page that says the outputs are the committed ones and how to get the
data, and leave ``results/`` exactly as it was (no verdict from substitute data). The clone is
the working tree's files that git would commit; "no data" is the data search pointed at empty
folders and the fetcher at a local port where nothing listens (so it fails at once, network or
not). The build executes nothing, so it takes seconds.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book"))
sys.path.insert(0, str(ROOT / "book" / "_ext"))

import build_book  # noqa: E402
import committed_outputs  # noqa: E402


def _clone(target: Path) -> Path:
    """Copy what a clone of the working tree would hold (tracked and unignored files)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tree_digest(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _offline_env(clone: Path, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDCL_")}
    for name in ("data", "cache"):
        (tmp / f"empty-{name}").mkdir()
    env.update(PYTHONPATH=str(clone), DDCL_DATA_DIR=str(tmp / "empty-data"),
               DDCL_CACHE_DIR=str(tmp / "empty-cache"), DDCL_FETCH_TIMEOUT="5",
               DDCL_DATA_MIRROR=f"http://127.0.0.1:{_closed_port()}/")
    return env


@pytest.fixture(scope="module")
def offline_build(tmp_path_factory):
    """(completed process, clone, results digest before) of ``make book``'s build step."""
    tmp = tmp_path_factory.mktemp("offline-book")
    clone = _clone(tmp / "clone")
    assert not (clone / "data").exists() and not (tmp / "shared").exists()
    before = _tree_digest(clone / "results")
    out = subprocess.run([sys.executable, "book/build_book.py"], cwd=clone,
                         env=_offline_env(clone, tmp), capture_output=True, text=True, timeout=600)
    return out, clone, before


def test_make_book_runs_the_build_script():
    recipe = re.search(r"^book:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), flags=re.M)
    assert recipe and "book/build_book.py" in recipe.group(1)


@pytest.mark.slow
def test_builds_without_data_and_says_so(offline_build):
    out, clone, _ = offline_build
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "NOTICE:" in out.stdout and "committed outputs" in out.stdout
    assert not (clone / "_build" / ".jupyter_cache").exists(), "a notebook was executed"


@pytest.mark.slow
def test_every_page_carries_the_committed_outputs_banner(offline_build):
    out, clone, _ = offline_build
    html = clone / "_build" / "html"
    pages = [p for p in html.rglob("*.html") if "_static" not in p.parts
             and p.name != "index.html"]  # index.html: jupyter-book's redirect to the intro
    assert len(pages) >= 15
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert f'class="{committed_outputs.BANNER_CLASS}"' in text, page.relative_to(html)
        assert "make data" in text and "DDCL_DATA_DIR" in text
    chapter = (html / "notebooks" / "decomposition.html").read_text(encoding="utf-8")
    assert "cell_output" in chapter, "the chapter shows no committed output"


@pytest.mark.slow
def test_results_stay_untouched(offline_build):
    _, clone, before = offline_build
    assert _tree_digest(clone / "results") == before


@pytest.mark.slow
def test_chapter_numbers_run_on_across_parts(offline_build):
    """``numbered: true`` per part in _toc.yml: 1, 2, 3, ... through the parts, no restart."""
    _, clone, _ = offline_build
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    numbered = [c["file"] for part in toc["parts"] if part.get("numbered")
                for c in part["chapters"]]
    nav = (clone / "_build" / "html" / "book" / "intro.html").read_text(encoding="utf-8")
    for number, name in enumerate(numbered, start=1):
        link = re.escape(f'href="../{name}.html">') + rf"{number}\. "
        assert re.search(link, nav), f"{name} is not chapter {number} in the navigation"


def test_committed_config_reads_the_goldens_without_executing():
    book = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    config = build_book.committed_outputs_config(book, ROOT, ["cifar10", "imdb"])
    assert build_book.GOLDENS_PATTERN in book["exclude_patterns"]
    assert build_book.GOLDENS_PATTERN not in config["exclude_patterns"]
    assert "notebooks/decomposition.md" in config["exclude_patterns"]
    assert "book/intro.md" not in config["exclude_patterns"]
    assert config["execute"]["execute_notebooks"] == "off"
    assert config["sphinx"]["config"]["ddcl_committed_outputs"] == "cifar10, imdb"
    for path in config["sphinx"]["local_extensions"].values():
        assert Path(path).is_absolute() and Path(path).is_dir()
    assert book["execute"]["execute_notebooks"] != "off", "the book's own config changed"
    with pytest.raises(ValueError, match="missing"):
        build_book.committed_outputs_config(book, ROOT, [])


def test_banner_names_the_missing_data_and_the_way_to_get_it():
    text = committed_outputs.banner_html("cifar10,  imdb")
    assert "cifar10, imdb" in text and "make data" in text and "make book" in text
    assert committed_outputs.BANNER_CLASS in text
    with pytest.raises(ValueError, match="missing"):
        committed_outputs.banner_html(" , ")
    asked = committed_outputs.banner_html(committed_outputs.REQUESTED)
    assert "COMMITTED=1" in asked and "Missing data" not in asked


def test_banner_only_when_the_build_asks_for_it():
    """The executing build (the book's own config: value empty) gets no banner."""
    from types import SimpleNamespace

    book = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert "committed_outputs" in book["sphinx"]["local_extensions"]
    assert "ddcl_committed_outputs" not in book["sphinx"].get("config", {})
    config = SimpleNamespace(ddcl_committed_outputs="", html_theme_options={"a": 1})
    committed_outputs._on_config_inited(None, config)
    assert config.html_theme_options == {"a": 1}
    config.ddcl_committed_outputs = "imdb"
    committed_outputs._on_config_inited(None, config)
    assert committed_outputs.BANNER_CLASS in config.html_theme_options["announcement"]
    assert config.html_theme_options["a"] == 1
