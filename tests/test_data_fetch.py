"""The canonical-source fetcher, against a local HTTP server serving tiny archives.

Nothing here contacts a real host: ``DDCL_DATA_MIRROR`` points every source at a server on
127.0.0.1 (or at a closed port, for the offline cases), and the source registry and the recorded
digests are replaced by ones that match the tiny archives built below in the canonical formats.
"""
from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import pickle
import random
import tarfile
import threading
import zipfile
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest

from ddcl_theory import data
from ddcl_theory.data import cache, cli, derive, digest, fetch, files, sources
from ddcl_theory.runtime import paths

from _loopback import closed_port, serving

LABEL_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


# ---------------------------------------------------------------------------------------------
# tiny archives in the canonical formats, and what each data file must hold


def _tar_gz(members: dict[str, bytes], mode: str = "w:gz") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, payload in members.items():
            zf.writestr(name, payload)
    return buf.getvalue()


@dataclass
class Tiny:
    """The tiny archives (by source name) and the content each derived file must have."""

    archives: dict[str, bytes]
    cifar: dict[str, np.ndarray]
    cifar_rest: dict[str, np.ndarray]  # the train images outside cifar_train_index
    cifar_train_index: list[int]
    text: str
    sst2_train_rows: list[tuple[str, int]]  # sorted by (sentence, label)
    sst2_dev: bytes
    imdb_rows: list[list[str]]
    imdb_ids: frozenset[str]
    news: list[dict]


def _tiny_cifar(rng: np.random.Generator
                ) -> tuple[bytes, dict[str, np.ndarray], dict[str, np.ndarray], list[int]]:
    """The archive, the subset's arrays, the rest's arrays, the subset's train positions."""
    per_batch, n_test, train_index, rest_index = 2, 2, [1, 4, 5, 9], [0, 2, 3, 6, 7, 8]
    images = rng.integers(0, 256, size=(5 * per_batch + 3, 32, 32, 3), dtype=np.uint8)  # HWC
    labels = [int(v) for v in rng.integers(0, 10, size=len(images))]
    rows = images.transpose(0, 3, 1, 2).reshape(len(images), 3072)  # CHW rows, as in the batches
    members = {}
    for b in range(5):
        sl = slice(b * per_batch, (b + 1) * per_batch)
        batch = {b"batch_label": f"training batch {b + 1} of 5".encode(), b"labels": labels[sl],
                 b"data": rows[sl], b"filenames": [b"x.png"] * per_batch}
        members[f"cifar-10-batches-py/data_batch_{b + 1}"] = pickle.dumps(batch, protocol=2)
    test = {b"batch_label": b"testing batch 1 of 1", b"labels": labels[10:], b"data": rows[10:],
            b"filenames": [b"y.png"] * 3}
    members["cifar-10-batches-py/test_batch"] = pickle.dumps(test, protocol=2)
    members["cifar-10-batches-py/batches.meta"] = pickle.dumps(
        {b"label_names": [n.encode() for n in LABEL_NAMES], b"num_vis": 3072}, protocol=2)
    members["cifar-10-batches-py/readme.html"] = b"<html></html>"
    expected = {
        "x_train": images[train_index], "y_train": np.array(labels, dtype=np.int64)[train_index],
        "train_index": np.array(train_index, dtype=np.int64),
        "x_test": images[10:10 + n_test], "y_test": np.array(labels[10:10 + n_test], dtype=np.int64),
        "test_index": np.arange(n_test, dtype=np.int64), "label_names": np.array(LABEL_NAMES),
    }
    rest = {
        "x_train": images[rest_index], "y_train": np.array(labels, dtype=np.int64)[rest_index],
        "train_index": np.array(rest_index, dtype=np.int64), "label_names": np.array(LABEL_NAMES),
    }
    return _tar_gz(members), expected, rest, train_index


def _tiny_imdb() -> tuple[bytes, list[list[str]], frozenset[str]]:
    reviews = {  # (split, label, id, rating) -> text
        ("train", "neg", 0, 2): "Dull.<br /><br />Skip it.",
        ("train", "neg", 11, 1): 'He said "never again"\tand left.',
        ("train", "pos", 3, 9): "Lovely, warm, funny.",
        ("train", "pos", 20, 8): "Caf\u00e9 scenes are great.",
        ("test", "neg", 5, 4): "Not for me.",
        ("test", "neg", 7, 3): "Too long.",
        ("test", "pos", 2, 10): "A masterpiece.",
        ("test", "pos", 10, 7): "Good fun.",
    }
    members = {f"aclImdb/{s}/{lab}/{i}_{r}.txt": t.encode() for (s, lab, i, r), t in reviews.items()}
    members["aclImdb/train/unsup/0_0.txt"] = b"unlabelled"
    members["aclImdb/train/urls_pos.txt"] = b"http://example.invalid/\n"
    members["aclImdb/imdb.vocab"] = b"the\n"
    chosen = [("train", "neg", 11, 1), ("train", "pos", 3, 9), ("train", "pos", 20, 8),
              ("test", "neg", 7, 3), ("test", "pos", 2, 10)]  # already in group, then id order
    rows = [list(derive.IMDB_HEADER)] + [
        [f"{s}/{lab}/{i}_{r}", s, "1" if lab == "pos" else "0", str(r), reviews[(s, lab, i, r)]]
        for s, lab, i, r in chosen]
    ids = frozenset(f"{s}/{lab}/{i}" for s, lab, i, _ in chosen)
    items = list(members.items())
    random.Random(1).shuffle(items)  # archive order is not the row order
    return _tar_gz(dict(items)), rows, ids


def _tiny_news() -> tuple[bytes, list[dict]]:
    files = {
        ("train", "sci.space", "7"): b"From: a@b\nSubject: orbit\n\nLow orbit.\n",
        ("train", "alt.atheism", "53"): b"From: c@d\nSubject: q\n\nCaf\xe9 talk.\n",
        ("train", "alt.atheism", "100"): b"From: e@f\nSubject: r\n\nSecond.\n",
        ("test", "sci.space", "61000"): b"From: g@h\n\nMoon\r\n",
        ("test", "alt.atheism", "200"): b"From: i@j\n\n\xff\xfe bytes\n",
    }
    members = {f"20news-bydate-{s}/{g}/{n}": b for (s, g, n), b in files.items()}
    order = [("train", "alt.atheism", "100"), ("train", "alt.atheism", "53"), ("train", "sci.space", "7"),
             ("test", "alt.atheism", "200"), ("test", "sci.space", "61000")]
    label = {"alt.atheism": 0, "sci.space": 1}
    records = [{"id": f"{g}/{n}", "split": s, "label": label[g], "label_name": g,
                "text": files[(s, g, n)].decode("latin-1")} for s, g, n in order]
    return _tar_gz(members), records


@pytest.fixture(scope="module")
def tiny() -> Tiny:
    rng = np.random.default_rng(0)
    cifar_archive, cifar, cifar_rest, train_index = _tiny_cifar(rng)
    text = "FIRST VOICE:\nA small stand-in for the corpus.\n\nSECOND VOICE:\nIt will do.\n"
    train_lines = ["sentence\tlabel", "warm and witty \t1", "a dull , lifeless film \t0",
                   "caf\u00e9 charm \t1", "a dull , lifeless film \t1", "ambitious \t1"]
    dev = "sentence\tlabel\nit 's a charming journey . \t1\nbleak and desperate \t0\n".encode()
    sst2_archive = _zip({"SST-2/train.tsv": ("\n".join(train_lines) + "\n").encode(),
                         "SST-2/dev.tsv": dev, "SST-2/test.tsv": b"index\tsentence\n0\tx \n",
                         "SST-2/original/README.txt": b"readme"})
    sst2_rows = sorted((line.split("\t")[0].strip(), int(line.split("\t")[1])) for line in train_lines[1:])
    imdb_archive, imdb_rows, imdb_ids = _tiny_imdb()
    news_archive, news = _tiny_news()
    return Tiny({"cifar10": cifar_archive, "tinyshakespeare": text.encode(), "sst2": sst2_archive,
                 "imdb": imdb_archive, "20newsgroups": news_archive},
                cifar, cifar_rest, train_index, text, sst2_rows, dev, imdb_rows, imdb_ids, news)


# ---------------------------------------------------------------------------------------------
# a local HTTP server (Range-capable, with failure modes)


@pytest.fixture
def server(tiny):
    """A server on 127.0.0.1 serving the tiny archives at their canonical URL paths."""
    with serving({urlsplit(sources.SOURCES[name].url).path: blob
                  for name, blob in tiny.archives.items()}) as httpd:
        yield httpd


@pytest.fixture
def registry(monkeypatch, tmp_path, tiny):
    """Isolated data directories (only the cache, under tmp_path) and a registry for the tiny archives."""
    monkeypatch.setattr(paths, "repo_root", lambda: None)
    monkeypatch.delenv(data.DATA_ENV, raising=False)
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(fetch.TIMEOUT_ENV, "5")
    monkeypatch.setenv("DDCL_PROGRESS", "0")
    monkeypatch.setenv(sources.MIRROR_ENV, f"http://127.0.0.1:{closed_port()}/")
    builders = {
        "cifar10": {"cifar10": partial(derive.build_cifar10, train_index=tiny.cifar_train_index,
                                       n_test=2),
                    "cifar10_rest": partial(derive.build_cifar10_rest,
                                            subset_index=tiny.cifar_train_index)},
        "imdb": {"imdb": partial(derive.build_imdb, ids=tiny.imdb_ids)},
    }
    table = {}
    for name, src in sources.SOURCES.items():
        blob = tiny.archives[name]
        table[name] = replace(src, checksum=hashlib.new(src.algo, blob).hexdigest(), size=len(blob),
                              outputs=builders.get(name, src.outputs))
    monkeypatch.setattr(sources, "SOURCES", table)
    contents = {
        "cifar10": digest.arrays_digest(tiny.cifar),
        "cifar10_rest": digest.arrays_digest(tiny.cifar_rest),
        "tinyshakespeare": hashlib.sha256(tiny.archives["tinyshakespeare"]).hexdigest(),
        "sst2_train": digest.sorted_lines_digest(
            "sentence\tlabel", [line for line in zipfile.ZipFile(io.BytesIO(tiny.archives["sst2"]))
                                .read("SST-2/train.tsv").decode().splitlines()[1:]]),
        "sst2_dev": hashlib.sha256(tiny.sst2_dev).hexdigest(),
        "imdb": digest.rows_digest(tiny.imdb_rows),
        "20newsgroups": digest.records_digest(tiny.news),
    }
    sizes = {"tinyshakespeare": len(tiny.archives["tinyshakespeare"]),
             "sst2_dev": len(tiny.sst2_dev)}
    for key, spec in list(data.FILES.items()):
        byte_identical = spec.scheme == "bytes"
        monkeypatch.setitem(data.FILES, key, replace(
            spec, sha256=contents[key] if byte_identical else "0" * 64, content=contents[key],
            size=sizes.get(key)))
    return tmp_path / "cache"


def _serve(monkeypatch, httpd) -> None:
    monkeypatch.setenv(sources.MIRROR_ENV, f"http://127.0.0.1:{httpd.server_address[1]}/")


def _leftovers(cache: Path) -> list[str]:
    """Downloads, partial downloads and temporary files left in the cache (lock files aside)."""
    return sorted(p.name for p in cache.rglob("*") if p.is_file() and not p.name.endswith(".lock")
                  and (p.name.endswith((".part", ".tmp")) or p.parent.name == "downloads"
                       or p.parent.name.endswith(".tmp")))


# ---------------------------------------------------------------------------------------------
# tests


def test_mirror_replaces_scheme_and_host_and_keeps_the_path(monkeypatch):
    url = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz?x=1"
    monkeypatch.delenv(sources.MIRROR_ENV, raising=False)
    assert sources.resolve_url(url) == url
    monkeypatch.setenv(sources.MIRROR_ENV, "http://127.0.0.1:8123/mirror/")
    assert sources.resolve_url(url) == "http://127.0.0.1:8123/mirror/~kriz/cifar-10-python.tar.gz?x=1"
    monkeypatch.setenv(sources.MIRROR_ENV, "not a url")
    with pytest.raises(ValueError, match=sources.MIRROR_ENV):
        sources.resolve_url(url)


def test_cache_dir_follows_env_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "c"))
    assert cache.cache_dir() == tmp_path / "c"
    monkeypatch.delenv(cache.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "ddcl-theory"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "ddcl-theory"


def test_cache_is_searched_last(monkeypatch, tmp_path):
    monkeypatch.setenv(data.DATA_ENV, str(tmp_path / "env"))
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    labels = [label for label, _ in data.search_dirs()]
    assert labels[0] == f"${data.DATA_ENV}" and labels[-1] == "cache"
    if paths.repo_root() is not None:
        assert labels[1:3] == ["<repo>/data", "../shared/data"]


def test_derivations_reproduce_the_canonical_content(tiny, tmp_path):
    paths = {}
    for name, blob in tiny.archives.items():
        paths[name] = tmp_path / name
        paths[name].write_bytes(blob)
    arrays = derive.cifar10_arrays(paths["cifar10"], tiny.cifar_train_index, n_test=2)
    assert list(arrays) == list(tiny.cifar)
    for name, arr in tiny.cifar.items():
        assert arrays[name].dtype == arr.dtype and np.array_equal(arrays[name], arr), name
    rest = derive.cifar10_rest_arrays(paths["cifar10"], tiny.cifar_train_index)
    assert list(rest) == list(tiny.cifar_rest)
    for name, arr in tiny.cifar_rest.items():
        assert rest[name].dtype == arr.dtype and np.array_equal(rest[name], arr), name
    both = np.concatenate([arrays["train_index"], rest["train_index"]])
    assert sorted(both.tolist()) == list(range(10))  # disjoint, and together every train image
    assert derive.sst2_dev_bytes(paths["sst2"]) == tiny.sst2_dev
    header, lines = derive.sst2_train_lines(paths["sst2"])
    assert header == "sentence\tlabel" and lines == sorted(lines) and len(lines) == 5
    assert derive.imdb_rows(paths["imdb"], tiny.imdb_ids) == tiny.imdb_rows
    assert derive.newsgroups_records(paths["20newsgroups"]) == tiny.news
    # pure: a second call on the same archive gives the same values
    assert derive.newsgroups_records(paths["20newsgroups"]) == tiny.news
    with pytest.raises(ValueError, match="train_index"):
        derive.cifar10_arrays(paths["cifar10"], [0, 10], n_test=2)
    with pytest.raises(ValueError, match="subset_index"):
        derive.cifar10_rest_arrays(paths["cifar10"], [0, 10])


def test_cifar_batches_refuse_pickled_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    blob = pickle.dumps({b"data": Evil()}, protocol=2)
    archive = tmp_path / "evil.tar.gz"
    archive.write_bytes(_tar_gz({f"cifar-10-batches-py/data_batch_{i}": blob for i in range(1, 6)}
                                | {"cifar-10-batches-py/test_batch": blob,
                                   "cifar-10-batches-py/batches.meta": blob}))
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        derive.cifar10_arrays(archive, [0])


def test_ensure_fetches_every_set_and_the_loaders_read_it(monkeypatch, registry, server, tiny, capsys):
    _serve(monkeypatch, server)
    assert cli.main(["ensure"]) == 0
    assert f"all {len(data.FILES)} data set(s) present" in capsys.readouterr().out
    for key, spec in data.FILES.items():
        path = data.find(key)
        assert path == registry / spec.name
    assert _leftovers(registry) == []  # downloads removed, no .part, no temporary files
    requested = [p for _, p, _ in server.RequestHandlerClass.log]
    assert requested.count("/~kriz/cifar-10-python.tar.gz") == 1  # one download, two files

    images = data.load_cifar10()
    assert images.source == "cifar10" and images.label_names == tuple(LABEL_NAMES)
    assert np.array_equal(images.x_train, tiny.cifar["x_train"].astype(np.float32) / 255.0)
    assert np.array_equal(images.y_test, tiny.cifar["y_test"])
    rest = data.load_cifar10_rest()
    assert rest.label_names == tuple(LABEL_NAMES) and rest.x.dtype == np.uint8
    assert np.array_equal(rest.x, tiny.cifar_rest["x_train"])
    assert np.array_equal(rest.y, tiny.cifar_rest["y_train"])
    assert np.array_equal(rest.train_index, tiny.cifar_rest["train_index"])
    assert data.load_text() == (tiny.text, "tinyshakespeare")
    sentences, labels = data.load_sst2("train")
    assert list(zip(sentences, labels.tolist())) == tiny.sst2_train_rows
    sentences, labels = data.load_sst2("dev")
    assert sentences == ["it 's a charming journey .", "bleak and desperate"] and labels.tolist() == [1, 0]
    texts, labels = data.load_imdb("train")
    assert texts == [r[4] for r in tiny.imdb_rows[1:4]] and labels.tolist() == [0, 1, 1]
    texts, labels = data.load_20newsgroups("test")
    assert texts == [r["text"] for r in tiny.news[3:]] and labels.tolist() == [0, 1]

    # a second run finds everything and downloads nothing
    server.RequestHandlerClass.log.clear()
    assert cli.main(["ensure"]) == 0
    assert server.RequestHandlerClass.log == []


def test_ensure_for_one_key_fetches_only_its_source(monkeypatch, registry, server):
    _serve(monkeypatch, server)
    assert cli.main(["ensure", "sst2_dev"]) == 0
    assert [p for _, p, _ in server.RequestHandlerClass.log] == ["/glue/data/SST-2.zip"]
    assert data.find("sst2_dev") is not None and data.find("sst2_train") is None


def test_corrupt_archive_fails_its_checksum_and_leaves_nothing_usable(monkeypatch, registry, server, tiny):
    _serve(monkeypatch, server)
    path = urlsplit(sources.SOURCES["cifar10"].url).path
    blob = bytearray(tiny.archives["cifar10"])
    blob[len(blob) // 2] ^= 0xFF
    server.RequestHandlerClass.files[path] = bytes(blob)
    with pytest.raises(fetch.ChecksumError) as err:
        fetch.fetch_source(sources.SOURCES["cifar10"], ["cifar10"])
    message = str(err.value)
    assert "cifar-10-python.tar.gz" in message and path in message and "DDCL_DATA_DIR" in message
    assert data.find("cifar10") is None and _leftovers(registry) == []


def test_one_cifar_download_resumed_after_a_break_gives_the_subset_and_the_rest(
        monkeypatch, registry, server, tiny):
    _serve(monkeypatch, server)
    handler = server.RequestHandlerClass
    path = urlsplit(sources.SOURCES["cifar10"].url).path
    handler.modes[path] = "truncate"
    report = fetch.ensure(["cifar10", "cifar10_rest"])
    assert set(report.missing) == {"cifar10", "cifar10_rest"}
    assert "closed the connection" in report.missing["cifar10_rest"]
    size = len(tiny.archives["cifar10"])
    assert (registry / "downloads" / "cifar-10-python.tar.gz.part").stat().st_size == size // 2

    del handler.modes[path]
    handler.log.clear()
    report = fetch.ensure(["cifar10", "cifar10_rest"])
    assert report.ok and set(report.fetched) == {"cifar10", "cifar10_rest"}
    assert handler.log == [("GET", path, f"bytes={size // 2}-")]
    for key in ("cifar10", "cifar10_rest"):
        assert data.verify(key, data.find(key)) == "content digest"
    with np.load(data.find("cifar10")) as subset, np.load(data.find("cifar10_rest")) as rest:
        assert np.intersect1d(subset["train_index"], rest["train_index"]).size == 0
        assert np.array_equal(np.union1d(subset["train_index"], rest["train_index"]),
                              np.arange(10))
    assert _leftovers(registry) == []


def test_the_rest_alone_is_derived_beside_a_present_subset(monkeypatch, registry, server):
    _serve(monkeypatch, server)
    assert fetch.ensure(["cifar10"]).ok
    subset = data.find("cifar10")
    before = subset.stat().st_mtime_ns
    report = fetch.ensure(["cifar10_rest"])
    assert report.ok and list(report.fetched) == ["cifar10_rest"]
    assert subset.stat().st_mtime_ns == before  # the subset is not rewritten
    monkeypatch.setitem(data.FILES, "cifar10_rest", replace(data.FILES["cifar10_rest"],
                                                            content="f" * 64))
    (registry / data.FILES["cifar10_rest"].name).unlink()
    with pytest.raises(fetch.ChecksumError, match="cifar10_rest.npz"):
        fetch.fetch_source(sources.SOURCES["cifar10"], ["cifar10_rest"])
    assert not (registry / data.FILES["cifar10_rest"].name).exists()


def test_truncated_download_keeps_the_part_and_a_rerun_resumes_it(monkeypatch, registry, server, tiny):
    _serve(monkeypatch, server)
    handler = server.RequestHandlerClass
    path = urlsplit(sources.SOURCES["imdb"].url).path
    handler.modes[path] = "truncate"
    with pytest.raises(fetch.NetworkError, match="closed the connection") as err:
        fetch.fetch_source(sources.SOURCES["imdb"], ["imdb"])
    assert "aclImdb_v1.tar.gz" in str(err.value) and path in str(err.value)
    part = registry / "downloads" / "aclImdb_v1.tar.gz.part"
    size = len(tiny.archives["imdb"])
    assert 0 < part.stat().st_size < size
    assert data.find("imdb") is None and not (registry / "downloads" / "aclImdb_v1.tar.gz").exists()

    del handler.modes[path]
    handler.log.clear()
    report = fetch.ensure(["imdb"])
    assert report.ok and "imdb" in report.fetched
    assert handler.log == [("GET", path, f"bytes={size // 2}-")]
    assert data.verify("imdb", data.find("imdb")) == "content digest"
    assert _leftovers(registry) == []


def test_a_stalled_transfer_times_out_and_keeps_the_part(monkeypatch, registry, server):
    _serve(monkeypatch, server)
    monkeypatch.setenv(fetch.TIMEOUT_ENV, "0.3")
    server.RequestHandlerClass.modes[urlsplit(sources.SOURCES["sst2"].url).path] = "stall"
    with pytest.raises(fetch.NetworkError, match="broke off") as err:
        fetch.fetch_source(sources.SOURCES["sst2"], ["sst2_dev"])
    assert "SST-2.zip" in str(err.value)
    assert (registry / "downloads" / "SST-2.zip.part").stat().st_size == 10
    assert data.find("sst2_dev") is None


def test_derived_content_that_misses_the_record_is_not_written(monkeypatch, registry, server):
    _serve(monkeypatch, server)
    monkeypatch.setitem(data.FILES, "sst2_train", replace(data.FILES["sst2_train"], content="f" * 64))
    with pytest.raises(fetch.ChecksumError, match="content digest") as err:
        fetch.fetch_source(sources.SOURCES["sst2"], ["sst2_train"])
    assert "sst2_train.tsv.gz" in str(err.value) and "/glue/data/SST-2.zip" in str(err.value)
    assert sorted(p.name for p in registry.iterdir()) == ["downloads"]  # no data file, no temp folder
    assert (registry / "downloads" / "SST-2.zip").is_file()  # the verified download is kept


def test_resume_falls_back_to_a_fresh_download_when_ranges_are_ignored(monkeypatch, registry, server, tiny):
    _serve(monkeypatch, server)
    handler = server.RequestHandlerClass
    path = urlsplit(sources.SOURCES["20newsgroups"].url).path
    handler.modes[path] = "no-range"
    downloads = registry / "downloads"
    downloads.mkdir(parents=True)
    (downloads / "20news-bydate.tar.gz.part").write_bytes(tiny.archives["20newsgroups"][:100])
    assert fetch.ensure(["20newsgroups"]).ok
    assert handler.log == [("GET", path, "bytes=100-")]  # asked for the rest, got (and used) the whole file
    assert data.find("20newsgroups") is not None


def test_a_complete_part_is_accepted_on_416(monkeypatch, registry, server, tiny):
    _serve(monkeypatch, server)
    downloads = registry / "downloads"
    downloads.mkdir(parents=True)
    (downloads / "input.txt.part").write_bytes(tiny.archives["tinyshakespeare"])
    assert fetch.ensure(["tinyshakespeare"]).ok
    assert data.load_text() == (tiny.text, "tinyshakespeare")


def test_offline_ensure_lists_the_missing_sets_once_and_exits_2(registry, capsys):
    # the mirror points at a closed port on 127.0.0.1: every source is unreachable
    assert cli.main(["ensure"]) == 2
    out, err = capsys.readouterr()
    assert err.count("ERROR:") == 1 and out == ""
    for key, spec in data.FILES.items():
        assert f"{key} ({spec.name})" in err
    for src in sources.SOURCES.values():
        assert src.url in err  # the canonical URLs are named
    assert "DDCL_DATA_DIR" in err and "../shared/data" in err and "network" in err
    assert all(not (registry / spec.name).exists() for spec in data.FILES.values())
    # one host: after the first refusal the other sources are not tried (no wait per source);
    # the first source (CIFAR-10) gives two files, both missing for the one refusal
    first = len(sources.source_for(next(iter(data.FILES))).outputs)
    assert err.count("cannot reach the server") == first == 2
    assert err.count("not tried") == len(data.FILES) - first


def test_allow_missing_prints_the_message_as_a_notice_and_exits_0(registry, capsys):
    assert cli.main(["ensure", "--allow-missing", "cifar10", "cifar10_rest", "imdb"]) == 0
    out, err = capsys.readouterr()
    assert out.count("NOTICE:") == 1 and "cifar10 (cifar10_subset.npz)" in out and "imdb" in out
    assert "cifar10_rest (cifar10_rest.npz) from https://www.cs.toronto.edu/" in out
    assert "tinyshakespeare" not in out.split("Provide")[0]


def test_ensure_reports_a_tampered_file_instead_of_replacing_it(monkeypatch, registry, server, capsys):
    _serve(monkeypatch, server)
    registry.mkdir(parents=True)
    (registry / data.FILES["sst2_dev"].name).write_text("sentence\tlabel\ntampered \t1\n")
    assert cli.main(["ensure", "sst2_dev"]) == 1
    assert "sst2_dev.tsv" in capsys.readouterr().err
    assert server.RequestHandlerClass.log == []


def test_status_lists_every_data_set_and_where_it_is(monkeypatch, registry, server, capsys):
    _serve(monkeypatch, server)
    assert cli.main(["ensure", "tinyshakespeare"]) == 0
    capsys.readouterr()
    assert cli.main(["status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    by_key = {line.split()[0]: line for line in lines[:-1]}
    assert set(by_key) == set(data.FILES)
    assert "cache:" in by_key["tinyshakespeare"] and "verified by sha256" in by_key["tinyshakespeare"]
    assert "missing" in by_key["cifar10"] and "/~kriz/cifar-10-python.tar.gz" in by_key["cifar10"]


def test_find_accepts_a_rewritten_file_by_content_digest_once(monkeypatch, registry, tiny):
    registry.mkdir(parents=True)
    out = registry / data.FILES["20newsgroups"].name
    with gzip.open(out, "wt", encoding="utf-8", compresslevel=1) as f:  # other bytes, same records
        for rec in tiny.news:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
    calls = []
    real = digest.content_digest
    monkeypatch.setattr(digest, "content_digest", lambda *a: calls.append(a) or real(*a))
    assert data.find("20newsgroups") == out and data.find("20newsgroups") == out
    assert data.verify("20newsgroups", out) == "content digest" and len(calls) == 1  # cached

    with gzip.open(out, "wt", encoding="utf-8") as f:  # tampered: one label changed
        for rec in tiny.news:
            f.write(json.dumps(rec | {"label": 1}) + "\n")
    with pytest.raises(data.DataIntegrityError, match="20newsgroups_bydate.jsonl.gz"):
        data.find("20newsgroups")


def _staged(key: str) -> Path:
    try:
        path = data.find(key)
    except ValueError:
        path = None
    if path is None:
        pytest.skip(f"{key} not in a data directory")
    return path


@pytest.mark.slow
def test_staged_sst2_train_in_another_row_order_passes_by_content_digest(tmp_path, monkeypatch):
    staged = _staged("sst2_train")
    lines = digest.split_lines(digest.read_text(staged))
    body = lines[1:]
    random.Random(0).shuffle(body)  # another row order, as in GLUE's train.tsv
    out = tmp_path / data.FILES["sst2_train"].name
    out.write_bytes(gzip.compress(("\n".join(lines[:1] + body) + "\n").encode(), compresslevel=1))
    monkeypatch.setattr(files, "data_dirs", lambda: [tmp_path])
    assert digest.file_sha256(out) != data.FILES["sst2_train"].sha256
    assert data.find("sst2_train") == out and data.verify("sst2_train", out) == "content digest"
    sentences, labels = data.load_sst2("train")
    monkeypatch.setattr(files, "data_dirs", lambda: [staged.parent])
    staged_sentences, staged_labels = data.load_sst2("train")
    assert sentences == staged_sentences and np.array_equal(labels, staged_labels)

    body[0] = body[0][:-1] + ("1" if body[0].endswith("0") else "0")  # flip one label
    out.write_bytes(gzip.compress(("\n".join(lines[:1] + body) + "\n").encode(), compresslevel=1))
    monkeypatch.setattr(files, "data_dirs", lambda: [tmp_path])
    with pytest.raises(data.DataIntegrityError, match="sst2_train.tsv.gz"):
        data.find("sst2_train")


@pytest.mark.slow
def test_staged_imdb_requoted_passes_by_content_digest(tmp_path, monkeypatch):
    staged = _staged("imdb")
    rows = list(csv.reader(io.StringIO(digest.read_text(staged), newline=""), delimiter="\t"))
    out = tmp_path / data.FILES["imdb"].name

    def write(rows):
        with gzip.open(out, "wt", encoding="utf-8", newline="", compresslevel=1) as f:  # other bytes
            csv.writer(f, delimiter="\t", lineterminator="\r\n", quoting=csv.QUOTE_ALL).writerows(rows)

    write(rows)
    monkeypatch.setattr(files, "data_dirs", lambda: [tmp_path])
    assert digest.file_sha256(out) != data.FILES["imdb"].sha256
    assert data.find("imdb") == out and data.verify("imdb", out) == "content digest"
    texts, labels = data.load_imdb("test")
    assert len(texts) == 5000 and np.bincount(labels).tolist() == [2500, 2500]
    rows[1][4] += " "  # one review changed by a space
    write(rows)
    with pytest.raises(data.DataIntegrityError, match="imdb_subset.tsv.gz"):
        data.find("imdb")


@pytest.mark.slow
@pytest.mark.parametrize("key", ["cifar10", "cifar10_rest"])
def test_staged_cifar_rewritten_by_numpy_passes_by_content_digest(tmp_path, monkeypatch, key):
    staged = _staged(key)
    with np.load(staged) as z:
        arrays = {name: z[name] for name in z.files}
    out = tmp_path / data.FILES[key].name
    np.savez(out, **arrays)  # uncompressed: other bytes, same arrays
    monkeypatch.setattr(files, "data_dirs", lambda: [tmp_path])
    assert data.verify(key, out) == "content digest"
    with derive.atomic_path(out) as tmp:  # the fetcher's writer reproduces the staged bytes exactly
        derive.write_npz(tmp, arrays)
    assert data.verify(key, out) == "sha256"
    arrays["x_train"] = arrays["x_train"].copy()
    arrays["x_train"][0, 0, 0, 0] ^= 1
    np.savez(out, **arrays)
    with pytest.raises(data.DataIntegrityError, match=data.FILES[key].name):
        data.find(key)


@pytest.mark.slow
def test_the_stored_subset_rule_derives_the_staged_rest(tmp_path):
    """The rest the fetcher derives from a canonical archive, rebuilt here from the staged subset
    and rest (the whole train set) as pickled batches, is the staged rest, byte for byte."""
    with np.load(_staged("cifar10")) as z:
        subset = {name: z[name] for name in z.files}
    with np.load(_staged("cifar10_rest")) as z:
        rest = {name: z[name] for name in z.files}
    images = np.empty((50_000, 32, 32, 3), dtype=np.uint8)
    labels = np.empty(50_000, dtype=np.int64)
    for part in (subset, rest):
        images[part["train_index"]], labels[part["train_index"]] = part["x_train"], part["y_train"]
    rows = images.transpose(0, 3, 1, 2).reshape(50_000, 3072)
    members = {f"cifar-10-batches-py/data_batch_{b + 1}": pickle.dumps(
        {b"data": rows[b * 10_000:(b + 1) * 10_000],
         b"labels": labels[b * 10_000:(b + 1) * 10_000].tolist()}, protocol=2) for b in range(5)}
    members["cifar-10-batches-py/test_batch"] = pickle.dumps(
        {b"data": subset["x_test"].transpose(0, 3, 1, 2).reshape(-1, 3072),
         b"labels": subset["y_test"].tolist()}, protocol=2)
    members["cifar-10-batches-py/batches.meta"] = pickle.dumps(
        {b"label_names": [str(n).encode() for n in subset["label_names"]]}, protocol=2)
    archive = tmp_path / "cifar-10-python.tar"
    archive.write_bytes(_tar_gz(members, mode="w"))  # uncompressed: the readers take either
    for key, build in (("cifar10", derive.build_cifar10),
                       ("cifar10_rest", derive.build_cifar10_rest)):
        out = tmp_path / data.FILES[key].name
        build(archive, out)
        assert digest.file_sha256(out) == data.FILES[key].sha256, key


def test_concurrent_runs_download_a_source_once(monkeypatch, registry, server):
    _serve(monkeypatch, server)
    results, errors = [], []

    def run():
        try:
            results.append(fetch.ensure(["cifar10"]))
        except Exception as err:  # noqa: BLE001 -- reported by the assert below
            errors.append(err)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == [] and len(results) == 2 and all(r.ok for r in results)
    assert [p for _, p, _ in server.RequestHandlerClass.log] == ["/~kriz/cifar-10-python.tar.gz"]


def test_download_progress_goes_to_stderr_when_enabled(monkeypatch, registry, server, capsys):
    _serve(monkeypatch, server)
    monkeypatch.setenv("DDCL_PROGRESS", "1")
    assert fetch.ensure(["tinyshakespeare"]).ok
    captured = capsys.readouterr()
    assert "input.txt" in captured.err and "input.txt" not in captured.out


def test_module_entry_point_runs_status_and_rejects_unknown_keys(tmp_path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, DDCL_CACHE_DIR=str(tmp_path), DDCL_DATA_MIRROR=f"http://127.0.0.1:{closed_port()}/")
    run = partial(subprocess.run, capture_output=True, text=True, env=env, timeout=120)
    status = run([sys.executable, "-m", "ddcl_theory.data", "status"])
    assert status.returncode == 0, status.stderr
    assert {line.split()[0] for line in status.stdout.splitlines()[:-1]} == set(data.FILES)
    bad = run([sys.executable, "-m", "ddcl_theory.data", "ensure", "mnist"])
    assert bad.returncode == 2 and "mnist" in bad.stderr
