"""Repository and launch buttons only for a book that names its repository.

The repository URL is set in one place: ``repository.url`` in ``_config.yml`` (jupyter-book
passes it on as ``html_theme_options["repository_url"]``).

- Empty (the default of this book): no repository, issue, source, edit or launch (Colab, Binder,
  JupyterHub, ...) buttons and no links to a repository anywhere; the download button stays.
- Set, e.g. ``https://github.com/<you>/ddcl-theory``: a repository button, and the launch
  buttons configured under ``launch_buttons`` in ``_config.yml`` (Colab) on every chapter.

jupyter-book itself refuses ``html.use_repository_button: true`` without a URL and, when the key
is missing, falls back to its own repository's URL; this hook runs at ``config-inited`` and
makes the buttons follow the one setting instead. sphinx-book-theme offers a chapter's executed
``.ipynb`` for download only while it makes launch buttons; without them
:func:`keep_notebook_download` puts that file back in the download menu.
"""
from __future__ import annotations

import shutil
from pathlib import Path

#: jupyter-book's default ``repository.url``: never this book's repository.
JUPYTER_BOOK_DEFAULT_URL = "https://github.com/executablebooks/jupyter-book"
#: launch_buttons keys that each add a launch button when non-empty.
LAUNCH_PROVIDERS = ("binderhub_url", "jupyterhub_url", "colab_url", "deepnote_url",
                    "jupyterlite_url")
#: theme options that each add a button pointing into the repository.
REPOSITORY_BUTTONS = ("use_repository_button", "use_issues_button", "use_source_button",
                      "use_edit_page_button")


def repository_url(theme_options: dict) -> str:
    """The book's repository URL from the theme options, or ``""`` when none is set."""
    url = str(theme_options.get("repository_url") or "").strip().rstrip("/")
    if url == JUPYTER_BOOK_DEFAULT_URL:
        return ""
    if url and not url.startswith(("https://", "http://")):
        raise ValueError(f"repository.url: expected an http(s) URL such as "
                         f"https://github.com/<owner>/<repo>, got {url!r}")
    return url


def buttons_for(theme_options: dict) -> dict:
    """A copy of ``theme_options`` with the repository-dependent buttons matching the URL.

    No URL: every repository button off, every launch provider emptied and thebe off.
    A URL: the repository button on; launch providers as configured.
    """
    opts = dict(theme_options)
    url = repository_url(opts)
    launch = dict(opts.get("launch_buttons") or {})
    opts["repository_url"] = url
    if url:
        opts["use_repository_button"] = True
    else:
        for key in REPOSITORY_BUTTONS:
            opts[key] = False
        for key in LAUNCH_PROVIDERS:
            launch[key] = ""
        launch["thebe"] = False
    opts["launch_buttons"] = launch
    return opts


def _on_config_inited(app, config) -> None:
    config.html_theme_options = buttons_for(config.html_theme_options)


def has_launch_buttons(theme_options: dict) -> bool:
    """Whether sphinx-book-theme will make launch buttons (and so copy the .ipynb itself)."""
    launch = theme_options.get("launch_buttons") or {}
    return bool(launch.get("thebe")) or any(launch.get(key) for key in LAUNCH_PROVIDERS)


def keep_notebook_download(app, pagename, templatename, context, doctree) -> None:
    """``html-page-context``: offer the executed notebook of a MyST-markdown chapter for download.

    Copies ``<build>/jupyter_execute/<page>.ipynb`` to ``_sources/`` and sets ``ipynb_source``,
    as the theme's launch-button code does, when no launch button is configured.
    """
    if has_launch_buttons(app.config.html_theme_options):
        return
    if "kernelspec" not in app.env.metadata.get(pagename, {}):
        return
    if not str(context.get("sourcename", "")).endswith((".md", ".md.txt")):
        return
    executed = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    if not executed.is_file():
        return
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(executed, target)
    context["ipynb_source"] = f"{pagename}.ipynb"


def setup(app):
    app.connect("config-inited", _on_config_inited)
    # before sphinx-book-theme builds the download menu (its handlers run at priority 501)
    app.connect("html-page-context", keep_notebook_download, priority=500)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
