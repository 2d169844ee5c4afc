"""Fetch the paper profile's data: derived files from canonical archives, models from the Hub.

``python -m ddcl_theory.data ensure --paper [KEY ...]`` calls :func:`ensure_paper`. The archives go
through the fetcher of the staged data (:func:`ddcl_theory.data.fetch.download`: ``.part``
downloads resumed with Range requests, the pinned md5/sha256 checked before anything is derived,
a download that fails it deleted, ``$DDCL_DATA_MIRROR``, ``$DDCL_FETCH_TIMEOUT``) under the same
per-source lock. Each derived file is written under a temporary name; its digest record
(:mod:`ddcl_theory.data.paper_files`: content digest and sha256) is written beside it first, then
the file is renamed into place, so a file under its final name always has its record. When the
catalogue pins a content digest, a derivation that misses it writes nothing. The download is
deleted once every requested file is in place. Hub models go through :mod:`ddcl_theory.data.hub`.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from ddcl_theory.data import files, hub, paper_files, paper_sources
from ddcl_theory.data.cache import cache_dir
from ddcl_theory.data.fetch import (
    ChecksumError,
    DataFetchError,
    EnsureReport,
    derive_source,
    fetch_groups,
)
from ddcl_theory.data.sources import Source, resolve_url


def _accept_paper(key: str, tmp: Path, out: Path, archive: Path, url: str) -> None:
    """Record the derived file's digests beside ``out`` (before ``tmp`` becomes ``out``: a file
    under its final name always has its record); refuse it when the catalogue pins another
    content digest."""
    record = paper_files.make_record(key, tmp)
    pinned = paper_sources.PAPER_FILES[key].content
    if pinned and record["content"] != pinned:
        raise ChecksumError(out.name, url,
                            f"the file derived from the verified download has content "
                            f"digest {record['content'][:12]}..., the catalogue pins "
                            f"{pinned[:12]}...; nothing was written, {archive} is kept")
    paper_files.write_record(out, record)


def fetch_paper_source(source: Source, keys: Iterable[str], *, timeout: float | None = None
                       ) -> dict[str, Path]:
    """Download ``source`` and derive the paper data files ``keys`` into the cache; their paths."""
    keys = list(keys)
    for key in keys:
        if key not in source.outputs or key not in paper_sources.PAPER_FILES:
            raise ValueError(f"keys: source {source.name!r} provides the paper data sets "
                             f"{sorted(source.outputs)}, not {key!r}")
    return derive_source(source, keys, name_of=lambda k: paper_sources.PAPER_FILES[k].name,
                         verify=paper_files.verify, accept=_accept_paper, timeout=timeout)


def ensure_paper(keys: Iterable[str] | None = None, *, timeout: float | None = None
                 ) -> EnsureReport:
    """Find each paper data set and Hub model (all when ``keys`` is None), fetching what is missing.

    As :func:`ddcl_theory.data.fetch.ensure`: ``broken`` lists present files that fail their
    check (never replaced silently), ``missing`` what could not be fetched and why; after a host
    could not be reached, later sources on it are not tried.
    """
    keys = paper_sources.paper_keys() if keys is None else list(keys)
    unknown = [k for k in keys if k not in paper_sources.paper_keys()]
    if unknown:
        raise ValueError(f"keys: unknown paper data set(s) {unknown}; expected some of "
                         f"{paper_sources.paper_keys()}")
    report = EnsureReport()
    wanted: dict[str, list[str]] = {}  # source or model -> keys
    for key in keys:
        try:
            path = (paper_files.find(key) if key in paper_sources.PAPER_FILES
                    else hub.cached_model(key))
        except (files.DataIntegrityError, ChecksumError) as err:
            report.broken[key] = str(err)
            continue
        except DataFetchError as err:  # huggingface_hub missing
            report.missing[key] = f"{err.problem}; {err.hint}"
            continue
        if path is not None:
            report.present[key] = path
        elif key in paper_sources.PAPER_FILES:
            wanted.setdefault(paper_sources.PAPER_FILES[key].source, []).append(key)
        else:
            wanted.setdefault(f"hub:{key}", []).append(key)
    def host_of(name: str) -> str:
        return urlsplit(hub.endpoint() if name.startswith("hub:") else
                        resolve_url(paper_sources.PAPER_SOURCES[name].url)).netloc

    def fetch_group(name: str, group: list[str]) -> dict[str, Path]:
        if name.startswith("hub:"):
            return {group[0]: hub.fetch_model(group[0], timeout=timeout)}
        return fetch_paper_source(paper_sources.PAPER_SOURCES[name], group, timeout=timeout)

    fetch_groups(report, wanted, host_of, fetch_group)
    return report


def origin(key: str) -> tuple[str, str]:
    """(what is fetched, from where) for paper key ``key``, for messages."""
    if key in paper_sources.PAPER_FILES:
        return paper_sources.PAPER_FILES[key].name, paper_sources.source_of(key).url
    m = hub.model(key)
    return f"{m.repo_id}@{m.revision}", f"{hub.endpoint()}/{m.repo_id}"


def paper_missing_message(report: EnsureReport) -> str:
    """One message listing the paper data missing or broken and how to provide it."""
    lines = []
    if report.missing:
        lines.append(f"{len(report.missing)} paper data set(s) missing and not fetched:")
        for key, why in report.missing.items():
            what, where = origin(key)
            lines.append(f"  - {key} ({what}) from {where}: {why}")
    if report.broken:
        lines.append(f"{len(report.broken)} paper data file(s) present but failing verification "
                     "(delete them and rerun):")
        for key, why in report.broken.items():
            lines.append(f"  - {key}: {why.splitlines()[0]}")
    lines += [
        "Provide them in one of these ways:",
        f"  - connect to the network and rerun `{paper_files.ENSURE_PAPER}` (derived files into "
        f"{cache_dir()}, models into the Hugging Face cache {hub.hub_cache_dir()}; a mirror can be "
        "set with DDCL_DATA_MIRROR, a Hub endpoint with HF_ENDPOINT);",
        f"  - set DDCL_DATA_DIR to a directory that holds the derived files with their "
        f"{paper_files.RECORD_SUFFIX} records, and HF_HUB_CACHE to a Hub cache holding the models.",
    ]
    return "\n".join(lines)
