"""Command line: ``python -m ddcl_theory.data ensure [--paper] [--allow-missing] [KEY ...]`` and
``python -m ddcl_theory.data status [--paper]``.

``ensure`` finds every data set named (all of ``FILES`` when none is), fetching the missing ones
from their canonical sources into the user cache. Exit status: 0 when all are present; 2 when some
could not be had (one message lists them and the ways to provide them), or 0 with ``--allow-missing``
(the message is printed as a NOTICE; ``make book`` then builds the pages from the committed
executed notebooks instead of running them); 1 when a file is
present but fails verification (it would make the loaders raise).

``status`` lists each data set, the directory it was found in and how it verified.

``--paper`` selects the paper profile's data instead (:mod:`ddcl_theory.data.paper_sources`: the
full CIFAR-10 and IMDB, CIFAR-100, and Hub models at pinned commits; ``make data PROFILE=paper``):
``ensure --paper`` fetches them (all when no KEY is named; :mod:`ddcl_theory.data.paper_fetch`),
with the same exit statuses; ``status --paper`` lists them. Without it both commands handle the
staged data of the cpu and reference profiles only.
"""
from __future__ import annotations

import argparse
import sys

from ddcl_theory.data import fetch, files, hub, paper_fetch, paper_files, paper_sources, sources

EXIT_OK, EXIT_BROKEN, EXIT_MISSING = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ddcl_theory.data",
                                description="Find, verify and fetch the real data sets.")
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("ensure", help="find every data set, downloading the missing ones")
    e.add_argument("keys", nargs="*", metavar="KEY",
                   help=f"data sets (default: all of {', '.join(files.FILES)}; with --paper, all "
                        f"of {', '.join(paper_sources.paper_keys())})")
    e.add_argument("--allow-missing", action="store_true",
                   help="exit 0 when some cannot be had (print a NOTICE)")
    e.add_argument("--paper", action="store_true",
                   help="the paper profile's data sets and Hub models instead of the staged data")
    s = sub.add_parser("status", help="where each data set was found and whether it verified")
    s.add_argument("--paper", action="store_true",
                   help="list the paper profile's data sets and Hub models instead")
    return p


def _ensure(keys: list[str], allow_missing: bool, paper: bool = False) -> int:
    known = paper_sources.paper_keys() if paper else list(files.FILES)
    unknown = [k for k in keys if k not in known]
    if unknown:
        print(f"error: unknown {'paper ' if paper else ''}data set(s) {unknown}; expected some of "
              f"{known}", file=sys.stderr)
        return EXIT_MISSING
    report = paper_fetch.ensure_paper(keys or None) if paper else fetch.ensure(keys or None)
    for key, path in report.fetched.items():
        print(f"fetched {key}: {path}")
    if report.ok:
        print(f"all {len(report.present) + len(report.fetched)} data set(s) present and verified")
        return EXIT_OK
    message = paper_fetch.paper_missing_message(report) if paper else fetch.missing_message(report)
    if report.broken:
        print(f"ERROR: {message}", file=sys.stderr)
        return EXIT_BROKEN
    if allow_missing:
        print(f"NOTICE: {message}\nContinuing without them (--allow-missing): the loaders use "
              "fallback data (their numbers differ from the book's); make book shows the "
              "committed outputs instead of running the chapters.")
        return EXIT_OK
    print(f"ERROR: {message}", file=sys.stderr)
    return EXIT_MISSING


def _status() -> int:
    dirs = [(label, d) for label, d in files.search_dirs() if d.is_dir()]
    width = max(len(k) for k in files.FILES)
    for key, spec in files.FILES.items():
        hit = next(((label, d / spec.name) for label, d in dirs if (d / spec.name).is_file()), None)
        if hit is None:
            url = sources.resolve_url(sources.source_for(key).url)
            state = f"missing (ensure fetches it from {url})"
        else:
            label, path = hit
            try:
                state = f"{label}: {path} (verified by {files.verify(key, path)})"
            except files.DataIntegrityError as err:
                state = f"{label}: {path} FAILS verification: {err.detail}"
        print(f"{key:<{width}}  {state}")
    print("search order: " + ", ".join(f"{label} = {d}" for label, d in files.search_dirs()))
    return EXIT_OK


def _paper_status() -> int:
    keys = paper_sources.paper_keys()
    width = max(len(k) for k in keys)
    for key in keys:
        try:
            if key in paper_sources.PAPER_FILES:
                path = paper_files.locate(key)
                state = (f"missing (ensure --paper derives it from "
                         f"{sources.resolve_url(paper_sources.source_of(key).url)})" if path is None
                         else f"{path} (verified by {paper_files.verify(key, path)})")
            else:
                folder = hub.cached_model(key)
                m = hub.model(key)
                state = (f"missing (ensure --paper fetches {m.repo_id}@{m.revision[:7]} from "
                         f"{hub.endpoint()})" if folder is None
                         else f"{folder} (verified against the Hub's digests)")
        except (files.DataIntegrityError, fetch.ChecksumError) as err:
            state = f"FAILS verification: {err}".splitlines()[0]
        print(f"{key:<{width}}  {state}")
    print(f"search order: {', '.join(f'{label} = {d}' for label, d in files.search_dirs())}; "
          f"Hub cache = {hub.hub_cache_dir()}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "ensure":
        return _ensure(args.keys, args.allow_missing, args.paper)
    return _paper_status() if args.paper else _status()
