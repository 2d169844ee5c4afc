"""The book's own Sphinx extensions (book/_ext): verdict badges and repository-dependent buttons.

The repository URL lives in one setting, ``repository.url`` in ``_config.yml``; these tests run
jupyter-book's own config translation on that file and the hook on its result, so no book
build is needed.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from ddcl_theory.ledger import claims

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

import repository_buttons  # noqa: E402
import verdict_badges  # noqa: E402

INVENTED_URL = "https://github.com/ddcl-theory/ddcl-theory"
FORK_URL = "https://github.com/someone/ddcl-theory"


def _theme_options(user_yaml: dict) -> dict:
    """html_theme_options as the book build sees them after the config-inited hook."""
    from jupyter_book.config import get_final_config

    config, _ = get_final_config(user_yaml=user_yaml, cli_config={"latex_individualpages": False},
                                 sourcedir=ROOT)
    return repository_buttons.buttons_for(config["html_theme_options"])


def _book_yaml() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))


def test_config_sets_no_repository_url_and_names_it_once():
    text = (ROOT / "_config.yml").read_text(encoding="utf-8")
    assert INVENTED_URL not in text
    assert _book_yaml()["repository"]["url"] == ""
    assert len(re.findall(r"^\s*url\s*:", text, flags=re.M)) == 1
    assert "use_repository_button" not in _book_yaml().get("html", {})


def test_without_a_url_no_repository_or_launch_button_is_configured():
    opts = _theme_options(_book_yaml())
    assert opts["repository_url"] == ""
    for key in repository_buttons.REPOSITORY_BUTTONS:
        assert opts[key] is False, key
    launch = opts["launch_buttons"]
    assert not any(launch.get(key) for key in repository_buttons.LAUNCH_PROVIDERS)
    assert launch["thebe"] is False
    assert opts.get("use_download_button", True) is not False


def test_setting_the_url_turns_on_the_repository_and_colab_buttons():
    book = _book_yaml()
    book["repository"]["url"] = FORK_URL + "/"
    opts = _theme_options(book)
    assert opts["repository_url"] == FORK_URL
    assert opts["use_repository_button"] is True
    assert opts["launch_buttons"]["colab_url"] == "https://colab.research.google.com"


def test_jupyter_book_default_url_counts_as_no_url():
    """Deleting repository.url makes jupyter-book fall back to its own repository: not ours."""
    book = _book_yaml()
    del book["repository"]["url"]
    opts = _theme_options(book)
    assert opts["repository_url"] == "" and opts["use_repository_button"] is False
    assert opts["launch_buttons"]["colab_url"] == ""


def test_a_url_that_is_not_http_is_rejected():
    with pytest.raises(ValueError, match="repository.url"):
        repository_buttons.buttons_for({"repository_url": "git@github.com:someone/ddcl-theory"})


def test_hook_is_registered_by_the_book_config():
    exts = _book_yaml()["sphinx"]["local_extensions"]
    assert {"repository_buttons", "verdict_badges"} <= set(exts)
    for name, folder in exts.items():
        assert (ROOT / folder / f"{name}.py").is_file()


def _css_rules() -> dict[str, str]:
    css = (ROOT / "_static" / "ledger.css").read_text(encoding="utf-8")
    return {m.group(1): m.group(2) for m in re.finditer(r"^\.(ddcl-verdict-[a-z-]+)\s*\{([^}]*)\}",
                                                         css, flags=re.M)}


def test_every_verdict_word_has_its_own_badge_colour():
    rules = _css_rules()
    colours = []
    for word in claims.VERDICTS:
        cls = verdict_badges.verdict_class(word)
        assert cls in rules, f"no CSS rule for verdict {word!r} ({cls})"
        m = re.search(r"background:\s*([^;]+);", rules[cls])
        assert m, f"{cls} sets no background"
        colours.append((m.group(1).strip(), re.sub(r"\s+", "", rules[cls])))
    assert len({c for c in colours}) == len(claims.VERDICTS)
    assert len({bg for bg, _ in colours if bg != "transparent"}) == len(claims.VERDICTS) - 1


def test_verdict_class_rejects_unknown_words():
    assert verdict_badges.verdict_class("not reproduced") == "ddcl-verdict-not-reproduced"
    with pytest.raises(ValueError, match="word"):
        verdict_badges.verdict_class("maybe")


PAGE_MD = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A chapter

```{code-cell} ipython3
1 + 1
```
"""


def _build_one_page_book(folder: Path, url: str) -> str:
    """Build a one-chapter book with this book's launch/repository settings and extension,
    ``repository.url`` set to ``url``; the chapter's HTML."""
    import subprocess

    book = _book_yaml()
    config = {
        "title": "one page",
        "execute": {"execute_notebooks": "off"},
        "launch_buttons": book["launch_buttons"],
        "repository": {**book["repository"], "url": url},
        "sphinx": {"local_extensions": {"repository_buttons": str(ROOT / "book" / "_ext")}},
    }
    (folder / "_config.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    (folder / "_toc.yml").write_text("format: jb-book\nroot: chapter\n", encoding="utf-8")
    (folder / "chapter.md").write_text(PAGE_MD, encoding="utf-8")
    out = subprocess.run([str(Path(sys.executable).with_name("jupyter-book")), "build", str(folder)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return (folder / "_build" / "html" / "chapter.html").read_text(encoding="utf-8")


@pytest.mark.slow
def test_built_page_has_no_repository_or_launch_button_without_a_url(tmp_path):
    page = _build_one_page_book(tmp_path, "")
    for mark in ("btn-source-repository-button", "launch-buttons", "colab.research.google.com",
                 "github.com"):
        assert mark not in page, mark
    assert 'href="_sources/chapter.ipynb"' in page, "the .ipynb download is gone"
    assert (tmp_path / "_build" / "html" / "_sources" / "chapter.ipynb").is_file()


@pytest.mark.slow
def test_built_page_gets_repository_and_colab_buttons_once_a_url_is_set(tmp_path):
    page = _build_one_page_book(tmp_path, FORK_URL)
    assert "btn-source-repository-button" in page
    assert f'href="{FORK_URL}"' in page
    assert "https://colab.research.google.com/github/someone/ddcl-theory/blob/main/chapter" in page
    assert 'href="_sources/chapter.ipynb"' in page
