"""Download the canonical archives into the user cache and derive the data files from them.

Guarantees:

* every network call has a timeout (``$DDCL_FETCH_TIMEOUT`` seconds, default 60);
* a download goes to ``<name>.part`` and is renamed only after its pinned md5/sha256 matched; a
  ``.part`` left by an interrupted run is resumed with an HTTP ``Range`` request (a server that
  ignores the range gets a fresh download); a download that fails its checksum is deleted;
* a derived file is written under a temporary name, checked against the content digest the
  package records (:mod:`ddcl_theory.data.digest`) and only then renamed into place;
* every failure is a :class:`DataFetchError` that names the file, the source URL and what to do.

The cache is :func:`ddcl_theory.data.cache.cache_dir` (``$DDCL_CACHE_DIR``, else
``$XDG_CACHE_HOME/ddcl-theory``, else ``~/.cache/ddcl-theory``); downloads sit in its
``downloads/`` folder until the files derived from them are in place. One download can give
several files (the CIFAR-10 archive gives the subset and the rest of the train set).
"""
from __future__ import annotations

import http.client
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ddcl_theory.data import derive, files, sources
from ddcl_theory.data.cache import CACHE_ENV, cache_dir
from ddcl_theory.data.sources import Source, resolve_url
from ddcl_theory.runtime import paths

TIMEOUT_ENV = "DDCL_FETCH_TIMEOUT"
DEFAULT_TIMEOUT = 60.0
CHUNK = 1 << 16
USER_AGENT = "ddcl-theory-data-fetcher/0.1 (+python-urllib)"


def timeout_s() -> float:
    """Seconds each network call may wait (connect, and each read)."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise ValueError(f"{TIMEOUT_ENV}={raw!r}: expected a positive number of seconds")
    return value


def how_to_provide(filename: str) -> str:
    """The ways to provide a data file by hand, as one sentence."""
    return (f"set DDCL_DATA_DIR to a directory that holds {filename}, or place it in <repo>/data/ "
            "(or ../shared/data beside the checkout); or rerun `python -m ddcl_theory.data ensure` "
            "with a network connection")


class DataFetchError(RuntimeError):
    """A data file could not be fetched or derived; the message says which, from where, what to do."""

    def __init__(self, filename: str, url: str, problem: str, hint: str | None = None) -> None:
        self.filename, self.url, self.problem = filename, url, problem
        self.hint = hint or how_to_provide(filename)
        super().__init__(f"{filename}: {problem}\n  source: {url}\n  what to do: {self.hint}")


class NetworkError(DataFetchError):
    """The source could not be reached (``unreachable``), answered an error, or the transfer broke off."""

    def __init__(self, filename: str, url: str, problem: str, hint: str | None = None, *,
                 unreachable: bool = False) -> None:
        super().__init__(filename, url, problem, hint)
        self.unreachable = unreachable


class ChecksumError(DataFetchError):
    """A download or a derived file did not match its recorded checksum."""


# ---------------------------------------------------------------------------------------------
# download

def _bars_enabled() -> bool:
    flag = os.environ.get("DDCL_PROGRESS")
    if flag is not None:
        return flag.strip().lower() not in ("", "0", "false", "no")
    return sys.stderr.isatty()


def _byte_bar(total: int | None, initial: int, desc: str):
    # A byte-count bar (unit "B"), which ddcl_theory.runtime.progress.progress (an iterable wrapper) does not
    # offer; on when stderr is a terminal or DDCL_PROGRESS=1, off with DDCL_PROGRESS=0.
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1024,
                desc=desc, file=sys.stderr, disable=not _bars_enabled(), leave=False,
                mininterval=0.5)


def _range_start(content_range: str | None) -> int | None:
    # "bytes 100-199/200" -> 100
    if not content_range or not content_range.startswith("bytes "):
        return None
    try:
        return int(content_range[6:].split("-", 1)[0])
    except ValueError:
        return None


def download(source: Source, directory: Path, *, timeout: float | None = None) -> Path:
    """Download ``source`` into ``directory/source.filename``, verified against its checksum.

    An existing complete file that passes the checksum is reused; an existing ``.part`` is resumed
    with a Range request. Raises :class:`NetworkError` (unreachable, HTTP error, broken transfer:
    the ``.part`` is kept for the next run) or :class:`ChecksumError` (the download is deleted).
    """
    timeout = timeout_s() if timeout is None else timeout
    url = resolve_url(source.url)
    directory.mkdir(parents=True, exist_ok=True)
    dest = directory / source.filename
    part = dest.with_name(dest.name + ".part")
    if dest.is_file():
        if source.hexdigest(dest) == source.checksum:
            return dest
        dest.unlink()
    for _ in range(2):  # a second pass only after a 416 on a bad .part
        offset = part.stat().st_size if part.is_file() else 0
        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        try:
            resp = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
        except urllib.error.HTTPError as err:
            if err.code == 416 and offset:  # the .part already holds the whole file, or is bogus
                if source.hexdigest(part) == source.checksum:
                    os.replace(part, dest)
                    return dest
                part.unlink()
                continue
            raise NetworkError(source.filename, url, f"the server answered HTTP {err.code} "
                               f"({err.reason})") from err
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as err:
            reason = getattr(err, "reason", err)
            raise NetworkError(source.filename, url, f"cannot reach the server ({reason})",
                               unreachable=True) from err
        with resp:
            resumed = offset > 0 and resp.status == 206 and \
                _range_start(resp.headers.get("Content-Range")) == offset
            start = offset if resumed else 0
            length = resp.headers.get("Content-Length")
            expected = start + int(length) if length is not None and length.isdigit() else None
            received = start
            with open(part, "ab" if resumed else "wb") as f, \
                    _byte_bar(expected or source.size, start, source.filename) as bar:
                read = getattr(resp, "read1", resp.read)  # read1: what has arrived, kept on a timeout
                try:
                    while chunk := read(CHUNK):
                        f.write(chunk)
                        received += len(chunk)
                        bar.update(len(chunk))
                except (OSError, ValueError, http.client.HTTPException) as err:  # timeouts, resets
                    raise NetworkError(
                        source.filename, url,
                        f"the transfer broke off after {received:,} bytes ({type(err).__name__}: {err}); "
                        f"{part.name} is kept and the next run resumes it") from err
            if expected is not None and received < expected:
                raise NetworkError(source.filename, url,
                                   f"the server closed the connection after {received:,} of "
                                   f"{expected:,} bytes; {part.name} is kept and the next run resumes it")
        break
    got = source.hexdigest(part)
    if got != source.checksum:
        part.unlink()
        raise ChecksumError(source.filename, url,
                            f"the download's {source.algo} is {got}, expected {source.checksum}; "
                            "it is corrupt or another version, and was deleted")
    os.replace(part, dest)
    return dest


# ---------------------------------------------------------------------------------------------
# derive

@contextmanager
def source_lock(directory: Path, name: str) -> Iterator[None]:
    """An exclusive lock (POSIX ``flock``) so that two processes never fetch one source at once."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def derive_source(source: Source, keys: Iterable[str], *, name_of: Callable[[str], str],
                  verify: Callable[[str, Path], object],
                  accept: Callable[[str, Path, Path, Path, str], None],
                  timeout: float | None = None) -> dict[str, Path]:
    """Download ``source`` and derive the data files ``keys`` into the cache; their paths.

    ``name_of(key)``: the file's name in the cache; ``verify(key, path)``: raises on a file that
    another process put into the cache meanwhile and that fails its check (a good one is kept);
    ``accept(key, tmp, out, archive, url)``: checks the derived file ``tmp`` before it is renamed
    to ``out``, raising :class:`ChecksumError` to refuse it (nothing is written then). Under the
    source's lock; the download is deleted once every requested file is in place.
    """
    keys = list(keys)
    cache = cache_dir()
    url = resolve_url(source.url)
    made: dict[str, Path] = {}
    with source_lock(cache / "downloads", source.name):
        todo = []
        for key in keys:
            out = cache / name_of(key)
            if out.is_file():  # fetched by a concurrent run while this one waited for the lock
                verify(key, out)
                made[key] = out
            else:
                todo.append(key)
        if not todo:
            return made
        archive = download(source, cache / "downloads", timeout=timeout)
        for key in todo:
            out = cache / name_of(key)
            with derive.atomic_path(out) as tmp:
                try:
                    source.outputs[key](archive, tmp)
                except Exception as err:  # noqa: BLE001 -- any failure of a builder is reported alike
                    raise DataFetchError(out.name, url, f"cannot derive it from {archive.name} "
                                         f"({type(err).__name__}: {err}); {archive} is kept") from err
                accept(key, tmp, out, archive, url)
            made[key] = out
        archive.unlink()
    return made


def _accept_staged(key: str, tmp: Path, out: Path, archive: Path, url: str) -> None:
    try:
        files.verify(key, tmp)
    except files.DataIntegrityError as err:
        raise ChecksumError(out.name, url,
                            "the file derived from the verified download does not match "
                            f"the recorded content digest ({err.detail}); nothing was "
                            f"written, {archive} is kept") from err


def fetch_source(source: Source, keys: Iterable[str], *, timeout: float | None = None) -> dict[str, Path]:
    """Download ``source`` and derive the data files ``keys`` into the cache; their paths.

    Each derived file is verified (sha256 or content digest of
    :data:`ddcl_theory.data.files.FILES` ``[key]``) before it is renamed into place. The download is
    deleted once every requested file is in place. A file that another process put into the cache
    meanwhile is verified and kept.
    """
    keys = list(keys)
    for key in keys:
        if key not in source.outputs:
            raise ValueError(f"keys: source {source.name!r} provides {sorted(source.outputs)}, not {key!r}")
    return derive_source(source, keys, name_of=lambda k: files.FILES[k].name, verify=files.verify,
                         accept=_accept_staged, timeout=timeout)


@dataclass
class EnsureReport:
    """What :func:`ensure` found: present keys (path), fetched keys (path), failures (reason)."""

    present: dict[str, Path] = field(default_factory=dict)
    fetched: dict[str, Path] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.broken


def ensure(keys: Iterable[str] | None = None, *, timeout: float | None = None) -> EnsureReport:
    """Find each data set, fetching the missing ones from their sources into the cache.

    ``broken`` lists files that exist in a data directory but fail verification (never replaced
    silently); ``missing`` lists data sets that could not be fetched, with the reason. After the
    first network failure on a host, later sources on the same host are not tried.
    """
    keys = list(files.FILES) if keys is None else list(keys)
    for key in keys:
        if key not in files.FILES:
            raise ValueError(f"keys: unknown data set {key!r}; expected some of "
                             f"{sorted(files.FILES)}")
    report = EnsureReport()
    wanted: dict[str, list[str]] = {}
    for key in keys:
        try:
            path = files.find(key)
        except files.DataIntegrityError as err:
            report.broken[key] = str(err)
            continue
        if path is not None:
            report.present[key] = path
        else:
            wanted.setdefault(sources.source_for(key).name, []).append(key)
    fetch_groups(report, wanted,
                 lambda name: urlsplit(resolve_url(sources.SOURCES[name].url)).netloc,
                 lambda name, group: fetch_source(sources.SOURCES[name], group, timeout=timeout))
    return report


def fetch_groups(report: EnsureReport, wanted: dict[str, list[str]], host_of: Callable[[str], str],
                 fetch_group: Callable[[str, list[str]], dict[str, Path]]) -> None:
    """Fetch each source's group of keys (``wanted``: source name -> keys) into ``report``:
    ``fetched`` on success, ``missing`` with the problem otherwise. A host found unreachable is
    not tried again for later sources (their keys are missing, "not tried")."""
    dead_hosts: dict[str, str] = {}
    for name, group in wanted.items():
        host = host_of(name)
        if host in dead_hosts:
            for key in group:
                report.missing[key] = f"not tried: {dead_hosts[host]}"
            continue
        try:
            report.fetched.update(fetch_group(name, group))
        except NetworkError as err:
            if err.unreachable:
                dead_hosts[host] = f"{host} could not be reached"
            for key in group:
                report.missing[key] = err.problem
        except DataFetchError as err:
            for key in group:
                report.missing[key] = err.problem
        except OSError as err:  # the cache cannot be written
            for key in group:
                report.missing[key] = (f"cannot write the cache {cache_dir()} ({err}); set "
                                       f"{CACHE_ENV} to a writable directory")


def missing_message(report: EnsureReport) -> str:
    """One message listing what is missing or broken and every way to provide it."""
    lines = []
    if report.missing:
        lines.append(f"{len(report.missing)} data set(s) missing and not fetched:")
        for key, why in report.missing.items():
            lines.append(f"  - {key} ({files.FILES[key].name}) from "
                         f"{sources.source_for(key).url}: {why}")
    if report.broken:
        lines.append(f"{len(report.broken)} data file(s) present but failing verification "
                     "(delete or replace them):")
        for key, why in report.broken.items():
            lines.append(f"  - {key}: {why.splitlines()[0]}")
    root = paths.repo_root()
    places = (f"{root / 'data'} or {root.parent / 'shared' / 'data'}" if root is not None
              else "<repo>/data or ../shared/data")
    lines += [
        "Provide them in one of these ways:",
        "  - set DDCL_DATA_DIR to a directory that holds the files;",
        f"  - place the files in {places};",
        f"  - connect to the network and rerun `python -m ddcl_theory.data ensure` (downloads "
        f"into {cache_dir()}; the sources are listed above, a mirror can be set with DDCL_DATA_MIRROR).",
        "Searched: " + (", ".join(str(d) for d in files.data_dirs())
                        or "(no data directory exists)") + ".",
    ]
    return "\n".join(lines)
