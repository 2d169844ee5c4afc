"""Hub models of the paper profile, at pinned commits, into the user's Hugging Face cache.

:func:`fetch_model` fetches the files of :data:`ddcl_theory.data.paper_sources.HUB_MODELS`
``[key]`` with :func:`huggingface_hub.hf_hub_download` at the pinned commit, into the Hub cache
(``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``), where
``transformers`` finds them (``from_pretrained(repo_id, revision=...)`` or the snapshot folder).
Each file is then checked:

* against the digest the Hub names it by, which the commit fixes: huggingface_hub stores a file
  as ``blobs/<ETag>``, the ETag being the sha256 of an LFS file or the git blob sha1 (``sha1(b"blob
  <size>\\0" + bytes)``) of a small one (this needs the cache's symbolic links, as on POSIX);
* against the sha256 the catalogue pins, for the files whose published digest is confirmed.

A downloaded file that fails is deleted from the cache (its blob and its snapshot link) and a
:class:`ddcl_theory.data.fetch.ChecksumError` names it. :func:`cached_model` does the same checks
offline (what the loaders and ``status`` call) and leaves a failing file in place. The endpoint
is ``$HF_ENDPOINT`` (default ``https://huggingface.co``), its host replaced by
``$DDCL_DATA_MIRROR`` when that is set (then no Hub token is sent). An
interrupted transfer is resumed with Range requests within the call by huggingface_hub; a new call
starts that file again.
"""
from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

from ddcl_theory.data import paper_sources
from ddcl_theory.data.digest import file_sha256
from ddcl_theory.data.fetch import ChecksumError, DataFetchError, NetworkError, timeout_s
from ddcl_theory.data.sources import MIRROR_ENV, resolve_url

DEFAULT_ENDPOINT = "https://huggingface.co"
ENSURE_PAPER = "python -m ddcl_theory.data ensure --paper"


def model(key: str) -> paper_sources.HubModel:
    """The catalogue entry of Hub model ``key``."""
    if key not in paper_sources.HUB_MODELS:
        raise ValueError(f"key: unknown Hub model {key!r}; expected one of "
                         f"{sorted(paper_sources.HUB_MODELS)}")
    return paper_sources.HUB_MODELS[key]


def endpoint() -> str:
    """The Hub endpoint: ``$HF_ENDPOINT`` or the Hub, redirected by ``$DDCL_DATA_MIRROR``."""
    base = os.environ.get("HF_ENDPOINT", "").strip() or DEFAULT_ENDPOINT
    return resolve_url(base.rstrip("/")).rstrip("/")


def hub_cache_dir() -> Path:
    """The Hub cache folder, read at call time (huggingface_hub reads it once, at import)."""
    env = os.environ.get("HF_HUB_CACHE")
    if env:
        return Path(env).expanduser()
    home = os.environ.get("HF_HOME")
    if home:
        return Path(home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def file_url(key: str, filename: str) -> str:
    """The resolve URL of ``filename`` of model ``key`` at its pinned commit."""
    m = model(key)
    return f"{endpoint()}/{m.repo_id}/resolve/{m.revision}/{filename}"


def _git_blob_sha1(path: Path) -> str:
    h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())  # noqa: S324 -- git's object id
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_file(key: str, filename: str, path: Path, *, remove: bool = False) -> None:
    """Check a cached file (a snapshot link into ``blobs/``) against its ETag and pinned sha256.

    Raises :class:`ChecksumError` naming the file; with ``remove``, after deleting the blob and
    the link (a fresh download that fails), else leaving them for the user to inspect.
    """
    m, path = model(key), Path(path)
    blob = path.resolve()
    etag = blob.name
    problem = None
    if blob.parent.name != "blobs":
        problem = (f"it is not a link into the cache's blobs/ folder ({blob}), so the digest the "
                   "Hub names it by cannot be checked")
    elif len(etag) == 64:
        got = file_sha256(blob)
        problem = None if got == etag else f"its sha256 is {got}, the Hub names it {etag}"
    elif len(etag) == 40:
        got = _git_blob_sha1(blob)
        problem = None if got == etag else f"its git blob sha1 is {got}, the Hub names it {etag}"
    else:
        problem = f"the Hub named it {etag!r}, which is neither a sha256 nor a git blob sha1"
    pinned = m.sha256.get(filename)
    if problem is None and pinned is not None:
        got = file_sha256(blob)
        problem = None if got == pinned else f"its sha256 is {got}, the catalogue pins {pinned}"
    if problem is None:
        return
    if remove:
        for p in (path, blob):
            if p.is_symlink() or p.is_file():
                p.unlink()
    where = f"it was deleted from {hub_cache_dir()}" if remove else f"it is {path}"
    raise ChecksumError(f"{m.repo_id}@{m.revision[:7]}/{filename}", file_url(key, filename),
                        f"{problem}; {where}",
                        hint=(f"rerun `{ENSURE_PAPER} {key}`" if remove else
                              f"delete {path} and {blob}, then rerun `{ENSURE_PAPER} {key}`"))


def _require_hub(key: str) -> None:
    """Raise DataFetchError naming the extra to install when huggingface_hub is missing."""
    try:
        import huggingface_hub  # noqa: F401
    except ImportError as err:
        m = model(key)
        raise DataFetchError(f"{m.repo_id}@{m.revision[:7]}", file_url(key, m.files[0]),
                             "huggingface_hub is not installed",
                             hint="install the peers extra (pip install 'ddcl-theory[peers]', "
                                  "which brings transformers and huggingface_hub)") from err


def cached_model(key: str) -> Path | None:
    """The snapshot folder of model ``key`` when every file is cached and checks; else None.

    Offline. Raises :class:`ChecksumError` naming a cached file that fails (left in place), and
    :class:`DataFetchError` when huggingface_hub is not installed.
    """
    _require_hub(key)
    from huggingface_hub import try_to_load_from_cache

    m = model(key)
    folder = None
    for filename in m.files:
        hit = try_to_load_from_cache(m.repo_id, filename, cache_dir=hub_cache_dir(),
                                     revision=m.revision)
        if not isinstance(hit, str):
            return None
        check_file(key, filename, Path(hit))
        folder = Path(hit).parent
    return folder


def _probe(url: str, timeout: float) -> None:
    """Raise NetworkError(unreachable) at once when the endpoint's host takes no connection.

    huggingface_hub retries an unreachable host for about half a minute before giving up.
    """
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            pass
    except OSError as err:
        raise NetworkError(url.rsplit("/", 1)[-1], url, f"cannot reach the server ({err})",
                           hint=f"connect to the network and rerun `{ENSURE_PAPER}`",
                           unreachable=True) from err


def fetch_model(key: str, *, timeout: float | None = None) -> Path:
    """Fetch the files of Hub model ``key`` at its pinned commit; the checked snapshot folder.

    Files already cached (and checking) are not fetched again. Raises :class:`NetworkError`
    (unreachable, HTTP error, broken transfer) or :class:`ChecksumError`.
    """
    _require_hub(key)
    import httpx2
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    m = model(key)
    timeout = timeout_s() if timeout is None else timeout
    folder = cached_model(key)
    if folder is not None:
        return folder
    _probe(file_url(key, m.files[0]), timeout)
    token = False if os.environ.get(MIRROR_ENV, "").strip() else None  # no token to a mirror
    for filename in m.files:
        url = file_url(key, filename)
        label = f"{m.repo_id}@{m.revision[:7]}/{filename}"
        try:
            path = hf_hub_download(m.repo_id, filename, revision=m.revision,
                                   cache_dir=hub_cache_dir(), endpoint=endpoint(),
                                   etag_timeout=timeout, token=token)
        except LocalEntryNotFoundError as err:
            raise NetworkError(label, url, f"cannot reach the Hub ({err})",
                               unreachable=True) from err
        except HfHubHTTPError as err:
            status = getattr(getattr(err, "response", None), "status_code", "?")
            raise NetworkError(label, url, f"the Hub answered HTTP {status}") from err
        except (httpx2.HTTPError, OSError) as err:  # broken past huggingface_hub's retries
            raise NetworkError(label, url,
                               f"the transfer failed ({type(err).__name__}: {err})") from err
        check_file(key, filename, Path(path), remove=True)
        folder = Path(path).parent
    return folder


def missing_error(key: str) -> FileNotFoundError:
    """The error a loader raises when model ``key`` is not (wholly) in the Hub cache."""
    m = model(key)
    return FileNotFoundError(
        f"{key}: {m.repo_id} at {m.revision} is not in the Hugging Face cache {hub_cache_dir()} "
        f"(files {', '.join(m.files)}); run `{ENSURE_PAPER} {key}` (or `make data PROFILE=paper`)")
