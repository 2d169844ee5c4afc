"""Command line: ``python -m ddcl_theory.data ensure [--allow-missing] [KEY ...]`` and ``... status``.

``ensure`` finds every data set named (all of ``FILES`` when none is), fetching the missing ones
from their canonical sources into the user cache. Exit status: 0 when all are present; 2 when some
could not be had (one message lists them and the ways to provide them), or 0 with ``--allow-missing``
(the message is printed as a NOTICE; ``make book`` then builds the pages from the committed
executed notebooks instead of running them); 1 when a file is
present but fails verification (it would make the loaders raise).

``status`` lists each data set, the directory it was found in and how it verified.
"""
from __future__ import annotations

import argparse
import sys

from ddcl_theory.data import fetch, files, sources

EXIT_OK, EXIT_BROKEN, EXIT_MISSING = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ddcl_theory.data",
                                description="Find, verify and fetch the real data sets.")
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("ensure", help="find every data set, downloading the missing ones")
    e.add_argument("keys", nargs="*", metavar="KEY",
                   help=f"data sets (default: all of {', '.join(files.FILES)})")
    e.add_argument("--allow-missing", action="store_true",
                   help="exit 0 when some cannot be had (print a NOTICE)")
    sub.add_parser("status", help="where each data set was found and whether it verified")
    return p


def _ensure(keys: list[str], allow_missing: bool) -> int:
    unknown = [k for k in keys if k not in files.FILES]
    if unknown:
        print(f"error: unknown data set(s) {unknown}; expected some of {list(files.FILES)}",
              file=sys.stderr)
        return EXIT_MISSING
    report = fetch.ensure(keys or None)
    for key, path in report.fetched.items():
        print(f"fetched {key}: {path}")
    if report.ok:
        print(f"all {len(report.present) + len(report.fetched)} data set(s) present and verified")
        return EXIT_OK
    message = fetch.missing_message(report)
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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "ensure":
        return _ensure(args.keys, args.allow_missing)
    return _status()
