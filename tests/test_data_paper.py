"""The paper profile's fetchers, against a local HTTP server serving tiny stand-ins.

Nothing here contacts a real host: ``DDCL_DATA_MIRROR`` points every source and the Hub endpoint at
a server on 127.0.0.1 (or at a closed port, for the offline cases). The archives are built here in
the canonical formats (pickled CIFAR batches, the aclImdb tree); the server also answers the Hub's
``/{repo}/resolve/{commit}/{file}`` as huggingface_hub expects (``X-Repo-Commit``, ``ETag`` or
``X-Linked-Etag``, ``Content-Length``, Range). The catalogues are replaced by ones that match.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import pickle
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest

from ddcl_theory import data
from ddcl_theory.data import (
    cache,
    cli,
    derive,
    digest,
    fetch,
    hellaswag,
    hub,
    lm_corpus,
    lm_sources,
    paper,
    paper_fetch,
    paper_files,
    paper_sources,
    sources,
)
from ddcl_theory.runtime import paths

from _loopback import closed_port, serving

ROOT = Path(__file__).resolve().parents[1]
CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                 "truck"]


# ---------------------------------------------------------------------------------------------
# tiny archives in the canonical formats


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def _rows(images: np.ndarray) -> np.ndarray:
    """HWC images (N, 32, 32, 3) -> the archives' CHW rows (N, 3072)."""
    return images.transpose(0, 3, 1, 2).reshape(len(images), 3072)


def _tiny_cifar10(rng) -> tuple[bytes, dict[str, np.ndarray]]:
    images = rng.integers(0, 256, size=(13, 32, 32, 3), dtype=np.uint8)  # 5 batches of 2, 3 test
    labels = rng.integers(0, 10, size=13).tolist()
    members = {}
    for b in range(5):
        sl = slice(2 * b, 2 * b + 2)
        members[f"cifar-10-batches-py/data_batch_{b + 1}"] = pickle.dumps(
            {b"batch_label": b"training", b"labels": labels[sl], b"data": _rows(images[sl]),
             b"filenames": [b"x.png"] * 2}, protocol=2)
    members["cifar-10-batches-py/test_batch"] = pickle.dumps(
        {b"labels": labels[10:], b"data": _rows(images[10:])}, protocol=2)
    members["cifar-10-batches-py/batches.meta"] = pickle.dumps(
        {b"label_names": [n.encode() for n in CIFAR10_NAMES]}, protocol=2)
    return _tar_gz(members), {
        "x_train": images[:10], "y_train": np.array(labels[:10], dtype=np.int64),
        "x_test": images[10:], "y_test": np.array(labels[10:], dtype=np.int64),
        "label_names": np.array(CIFAR10_NAMES)}


def _cifar100_members(rng, train_payload: bytes | None = None) -> tuple[dict[str, bytes], dict]:
    images = rng.integers(0, 256, size=(7, 32, 32, 3), dtype=np.uint8)  # 4 train, 3 test
    fine, coarse = rng.integers(0, 100, size=7).tolist(), rng.integers(0, 20, size=7).tolist()
    fine_names = [f"fine{i}" for i in range(100)]
    coarse_names = [f"coarse{i}" for i in range(20)]
    members = {
        "cifar-100-python/train": train_payload or pickle.dumps(
            {b"filenames": [b"a.png"] * 4, b"batch_label": b"training batch 1 of 1",
             b"fine_labels": fine[:4], b"coarse_labels": coarse[:4], b"data": _rows(images[:4])},
            protocol=2),
        "cifar-100-python/test": pickle.dumps(
            {b"fine_labels": fine[4:], b"coarse_labels": coarse[4:], b"data": _rows(images[4:])},
            protocol=2),
        "cifar-100-python/meta": pickle.dumps(
            {b"fine_label_names": [n.encode() for n in fine_names],
             b"coarse_label_names": [n.encode() for n in coarse_names]}, protocol=2),
        "cifar-100-python/file.txt~": b"",
    }
    expected = {
        "x_train": images[:4], "y_train": np.array(fine[:4], dtype=np.int64),
        "y_train_coarse": np.array(coarse[:4], dtype=np.int64),
        "x_test": images[4:], "y_test": np.array(fine[4:], dtype=np.int64),
        "y_test_coarse": np.array(coarse[4:], dtype=np.int64),
        "label_names": np.array(fine_names), "coarse_label_names": np.array(coarse_names)}
    return members, expected


def _tiny_imdb() -> tuple[bytes, list[list[str]]]:
    reviews = {  # (split, label, id, rating) -> text; two a group
        ("train", "neg", 11, 1): 'He said "never again"\tand left.',
        ("train", "neg", 2, 3): "Dull.<br /><br />Skip it.",
        ("train", "pos", 3, 9): "Lovely, warm, funny.",
        ("train", "pos", 20, 8): "Caf\u00e9 scenes are great.",
        ("test", "neg", 5, 4): "Not for me.",
        ("test", "neg", 7, 3): "Too long.",
        ("test", "pos", 10, 7): "Good fun.",
        ("test", "pos", 2, 10): "A masterpiece.",
    }
    members = {f"aclImdb/{s}/{lab}/{i}_{r}.txt": t.encode() for (s, lab, i, r), t in
               reversed(reviews.items())}  # archive order is not the row order
    members["aclImdb/train/unsup/0_0.txt"] = b"unlabelled"
    members["aclImdb/imdb.vocab"] = b"the\n"
    order = sorted(reviews, key=lambda k: (derive.IMDB_GROUPS.index(k[:2]), k[2]))
    rows = [list(derive.IMDB_HEADER)] + [
        [f"{s}/{lab}/{i}_{r}", s, "1" if lab == "pos" else "0", str(r), reviews[(s, lab, i, r)]]
        for s, lab, i, r in order]
    return _tar_gz(members), rows


def _tiny_imagenette() -> bytes:
    return _tar_gz({
        "imagenette2-160/noisy_imagenette.csv": b"path,noisy_labels_0\n",
        "imagenette2-160/train/n03888605/n03888605_1.JPEG": b"\xff\xd8parachute",
        "imagenette2-160/train/n01440764/n01440764_7.JPEG": b"\xff\xd8tench",
        "imagenette2-160/val/n02102040/n02102040_3.JPEG": b"\xff\xd8springer",
    })


def _tiny_ade20k() -> bytes:
    buf = io.BytesIO()
    root = "ADEChallengeData2016"
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{root}/objectInfo150.txt", "Idx\tRatio\tTrain\tVal\tName\n")
        for split, names in (("training", ["ADE_train_00000002", "ADE_train_00000001"]),
                             ("validation", ["ADE_val_00000001"])):
            for name in names:
                zf.writestr(f"{root}/images/{split}/{name}.jpg", b"\xff\xd8" + name.encode())
                zf.writestr(f"{root}/annotations/{split}/{name}.png", b"\x89PNG" + name.encode())
    return buf.getvalue()


def _tiny_fineweb() -> bytes:
    """A parquet of FineWeb's layout (a text column among others), three documents."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pa.table({"text": FINEWEB_DOCS, "id": ["a", "b", "c"],
                      "url": ["http://x/1", "http://x/2", "http://x/3"]})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=2)
    return buf.getvalue()


FINEWEB_DOCS = ["The cat sat on the mat.", "A second document,\nwith two lines.", "Third."]
HELLASWAG_ROWS = [
    {"ind": 0, "activity_label": "Rope climbing", "ctx_a": "A man holds a rope.", "ctx_b": "he",
     "label": 2,
     "endings": ["sings.", "swims.", "climbs the rope.", "sleeps."], "source_id": "a"},
    {"ind": 1, "activity_label": "Baking", "ctx_a": "[header] How to bake [title] Heat the oven.",
     "ctx_b": "mix the flour", "label": 0, "endings": ["and water.", "b.", "c.", "d."], "source_id": "b"}]


@dataclass
class Tiny:
    archives: dict[str, bytes]  # paper source name -> archive
    cifar10: dict[str, np.ndarray]
    cifar100: dict[str, np.ndarray]
    imdb_rows: list[list[str]]
    hub_files: dict[str, dict[str, bytes]]  # Hub model key -> file name -> bytes


@pytest.fixture(scope="module")
def tiny() -> Tiny:
    rng = np.random.default_rng(0)
    cifar10_archive, cifar10 = _tiny_cifar10(rng)
    members, cifar100 = _cifar100_members(rng)
    imdb_archive, imdb_rows = _tiny_imdb()
    hub_files = {
        "bert-base-uncased": {
            "config.json": b'{"model_type": "bert", "hidden_size": 8}\n',
            "vocab.txt": b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n",
            "tokenizer.json": b'{"version": "1.0"}\n',
            "tokenizer_config.json": b'{"do_lower_case": true}\n',
            "model.safetensors": bytes(rng.integers(0, 256, size=4096, dtype=np.uint8)),
        },
        "gpt2-bpe": {"vocab.json": b'{"!": 0, "the": 1}\n', "merges.txt": b"#version: 0.2\nt h\n"},
    }
    return Tiny({"cifar10": cifar10_archive, "cifar100": _tar_gz(members), "imdb": imdb_archive,
                 "imagenette": _tiny_imagenette(), "ade20k": _tiny_ade20k(),
                 "fineweb": _tiny_fineweb(),
                 "hellaswag": "".join(json.dumps(r) + "\n" for r in HELLASWAG_ROWS).encode()},
                cifar10, cifar100, imdb_rows, hub_files)


# ---------------------------------------------------------------------------------------------
# a local server: Range-capable archives, and the Hub's resolve endpoint


def _git_blob_sha1(body: bytes) -> str:
    return hashlib.sha1(f"blob {len(body)}\0".encode() + body).hexdigest()  # noqa: S324


def _hub_entries(key: str, files: dict[str, bytes]) -> tuple[dict, dict]:
    """Paths and headers of a Hub model's files: LFS-style for .safetensors, git-style otherwise."""
    m = paper_sources.HUB_MODELS[key]
    bodies, heads = {}, {}
    for name, body in files.items():
        path = f"/{m.repo_id}/resolve/{m.revision}/{name}"
        bodies[path] = body
        if name.endswith(".safetensors"):
            heads[path] = {"X-Repo-Commit": m.revision, "ETag": '"not-the-content"',
                           "X-Linked-Etag": f'"{hashlib.sha256(body).hexdigest()}"',
                           "X-Linked-Size": str(len(body))}
        else:
            heads[path] = {"X-Repo-Commit": m.revision, "ETag": f'"{_git_blob_sha1(body)}"'}
    return bodies, heads


@pytest.fixture
def server(tiny, registry):
    bodies = {urlsplit(paper_sources.PAPER_SOURCES[name].url).path: blob
              for name, blob in tiny.archives.items()}
    heads = {}
    for key, files in tiny.hub_files.items():
        b, h = _hub_entries(key, files)
        bodies |= b
        heads |= h
    with serving(bodies, heads) as httpd:
        yield httpd


def _archive_digest(src: sources.Source, body: bytes) -> str:
    """The checksum ``src`` pins for ``body`` (a git blob hash where the source is pinned so)."""
    if isinstance(src, hellaswag.GitBlobSource):
        return src.bytes_digest(body)
    return hashlib.new(src.algo, body).hexdigest()


@pytest.fixture
def registry(monkeypatch, tmp_path, tiny):
    """Only the cache (under tmp_path) as data directory, a Hub cache there, tiny catalogues."""
    monkeypatch.setattr(paths, "repo_root", lambda: None)
    for env in (data.DATA_ENV, "HF_ENDPOINT", "HF_HOME"):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv(fetch.TIMEOUT_ENV, "5")
    monkeypatch.setenv("DDCL_PROGRESS", "0")
    monkeypatch.setenv(sources.MIRROR_ENV, f"http://127.0.0.1:{closed_port()}/")
    builders = {"cifar10": {"cifar10_full": partial(derive.build_cifar10_full, n_train=10,
                                                    n_test=3)},
                "cifar100": {"cifar100": partial(derive.build_cifar100, n_train=4, n_test=3)},
                "imdb": {"imdb_full": partial(derive.build_imdb_full, group_size=2)}}
    table = {name: replace(src, checksum=_archive_digest(src, tiny.archives[name]),
                           size=len(tiny.archives[name]),
                           outputs=builders.get(name, src.outputs))
             for name, src in paper_sources.PAPER_SOURCES.items()}
    monkeypatch.setattr(paper_sources, "PAPER_SOURCES", table)
    models = {key: replace(m, sha256={name: hashlib.sha256(tiny.hub_files[key][name]).hexdigest()
                                      for name in m.sha256})
              for key, m in paper_sources.HUB_MODELS.items()}
    monkeypatch.setattr(paper_sources, "HUB_MODELS", models)
    return tmp_path / "cache"


def _serve(monkeypatch, httpd) -> None:
    monkeypatch.setenv(sources.MIRROR_ENV, f"http://127.0.0.1:{httpd.server_address[1]}/")


def _leftovers(cache_root: Path) -> list[str]:
    return sorted(p.name for p in cache_root.rglob("*") if p.is_file()
                  and not p.name.endswith(".lock")
                  and (p.name.endswith((".part", ".tmp")) or p.parent.name == "downloads"
                       or p.parent.name.endswith(".tmp")))


def _arrays_equal(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        assert np.array_equal(got[name], want[name]), name


# ---------------------------------------------------------------------------------------------
# readers and builders


def test_full_cifar10_is_every_image_in_the_official_order(tmp_path, tiny):
    archive = tmp_path / "cifar-10-python.tar.gz"
    archive.write_bytes(tiny.archives["cifar10"])
    _arrays_equal(derive.cifar10_full_arrays(archive), tiny.cifar10)
    with pytest.raises(ValueError, match="expected 50,000 train and 10,000 test images, "
                                         "found 10 and 3"):
        derive.build_cifar10_full(archive, tmp_path / "out.npz")


def test_cifar100_keeps_fine_and_coarse_labels(tmp_path, tiny):
    archive = tmp_path / "cifar-100-python.tar.gz"
    archive.write_bytes(tiny.archives["cifar100"])
    arrays = derive.cifar100_arrays(archive)
    _arrays_equal(arrays, tiny.cifar100)
    assert arrays["x_train"].shape == (4, 32, 32, 3) and arrays["label_names"].shape == (100,)
    out = tmp_path / "cifar100.npz"
    derive.build_cifar100(archive, out, n_train=4, n_test=3)
    assert digest.content_digest("npz-arrays", out) == digest.arrays_digest(tiny.cifar100)


class _Boom:
    def __reduce__(self):
        return (os.system, ("echo unpickled > /dev/null",))


def test_cifar100_refuses_pickled_code(tmp_path):
    payload = pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"fine_labels": [0],
                            b"coarse_labels": [_Boom()]}, protocol=2)
    members, _ = _cifar100_members(np.random.default_rng(1), train_payload=payload)
    archive = tmp_path / "cifar-100-python.tar.gz"
    archive.write_bytes(_tar_gz(members))
    with pytest.raises(pickle.UnpicklingError, match="refusing to load (posix|os|nt).system"):
        derive.cifar100_arrays(archive)


def test_full_imdb_is_every_labelled_review_in_group_then_id_order(tmp_path, tiny):
    archive = tmp_path / "aclImdb_v1.tar.gz"
    archive.write_bytes(tiny.archives["imdb"])
    assert derive.imdb_all_rows(archive) == tiny.imdb_rows  # unsup left out, ids numeric
    with pytest.raises(ValueError, match="expected 12,500 reviews in each"):
        derive.build_imdb_full(archive, tmp_path / "imdb_full.tsv.gz")


# ---------------------------------------------------------------------------------------------
# fetching and loading the derived files


def test_ensure_paper_derives_each_file_with_its_digest_record(monkeypatch, registry, server, tiny):
    _serve(monkeypatch, server)
    keys = ["cifar10_full", "cifar100", "imdb_full"]
    report = paper_fetch.ensure_paper(keys)
    assert report.ok and sorted(report.fetched) == sorted(keys)
    expected = {"cifar10_full": digest.arrays_digest(tiny.cifar10),
                "cifar100": digest.arrays_digest(tiny.cifar100),
                "imdb_full": digest.rows_digest(tiny.imdb_rows)}
    for key in keys:
        out = registry / paper_sources.PAPER_FILES[key].name
        record = json.loads(paper_files.record_path(out).read_text())
        assert record["content"] == expected[key] and record["sha256"] == digest.file_sha256(out)
        assert record["source"]["url"] == paper_sources.PAPER_SOURCES[
            paper_sources.PAPER_FILES[key].source].url
        assert paper_files.verify(key, out) == "sha256"
    assert _leftovers(registry) == []  # the downloads are deleted once derived

    full = paper.load_cifar10_full()
    _arrays_equal({"x_train": full.x_train, "y_train": full.y_train, "x_test": full.x_test,
                   "y_test": full.y_test, "label_names": np.array(full.label_names)}, tiny.cifar10)
    c100 = paper.load_cifar100()
    assert np.array_equal(c100.y_train_coarse, tiny.cifar100["y_train_coarse"])
    assert c100.coarse_label_names == tuple(tiny.cifar100["coarse_label_names"])
    assert np.array_equal(c100.x_test, tiny.cifar100["x_test"])
    x_train, _ = c100.float_images()
    assert x_train.dtype == np.float32 and 0.0 <= x_train.min() and x_train.max() <= 1.0
    texts, labels = paper.load_imdb_full("test")
    assert texts == [r[4] for r in tiny.imdb_rows[5:]] and labels.tolist() == [0, 0, 1, 1]

    server.RequestHandlerClass.log.clear()
    again = paper_fetch.ensure_paper(keys)
    assert again.ok and sorted(again.present) == sorted(keys) and not again.fetched
    assert server.RequestHandlerClass.log == []


def test_a_rewritten_file_passes_by_content_a_tampered_one_fails_naming_it(monkeypatch, registry,
                                                                            server, tiny, capsys):
    _serve(monkeypatch, server)
    assert paper_fetch.ensure_paper(["cifar100"]).ok
    out = registry / "cifar100.npz"
    np.savez(out, **tiny.cifar100)  # uncompressed: other bytes, same arrays
    assert paper_files.verify("cifar100", out) == "content digest"
    assert paper.load_cifar100().y_test.tolist() == tiny.cifar100["y_test"].tolist()

    changed = dict(tiny.cifar100, x_train=tiny.cifar100["x_train"].copy())
    changed["x_train"][0, 0, 0, 0] ^= 1
    np.savez(out, **changed)
    with pytest.raises(paper_files.PaperDataError, match="cifar100.npz") as err:
        paper.load_cifar100()
    assert "ensure --paper" in str(err.value)
    assert cli.main(["ensure", "--paper", "cifar100"]) == 1  # reported, never replaced silently
    assert "cifar100.npz" in capsys.readouterr().err

    np.savez(out, **tiny.cifar100)
    paper_files.record_path(out).unlink()
    with pytest.raises(paper_files.PaperDataError,
                       match="no digest record cifar100.npz.digest.json"):
        paper.load_cifar100()


def test_a_pinned_content_digest_that_is_missed_writes_nothing(monkeypatch, registry, server):
    _serve(monkeypatch, server)
    monkeypatch.setitem(paper_sources.PAPER_FILES, "imdb_full",
                        replace(paper_sources.PAPER_FILES["imdb_full"], content="f" * 64))
    with pytest.raises(fetch.ChecksumError, match="the catalogue pins ffffffffffff") as err:
        paper_fetch.fetch_paper_source(paper_sources.PAPER_SOURCES["imdb"], ["imdb_full"])
    assert "imdb_full.tsv.gz" in str(err.value)
    assert sorted(p.name for p in registry.iterdir()) == ["downloads"]  # no file, no record
    assert (registry / "downloads" / "aclImdb_v1.tar.gz").is_file()  # the verified archive is kept


def test_a_tampered_archive_fails_its_checksum_and_leaves_nothing(monkeypatch, registry, server):
    _serve(monkeypatch, server)
    path = urlsplit(paper_sources.PAPER_SOURCES["cifar100"].url).path
    blob = bytearray(server.RequestHandlerClass.files[path])
    blob[len(blob) // 2] ^= 0xFF
    server.RequestHandlerClass.files = dict(server.RequestHandlerClass.files, **{path: bytes(blob)})
    with pytest.raises(fetch.ChecksumError, match="md5") as err:
        paper_fetch.fetch_paper_source(paper_sources.PAPER_SOURCES["cifar100"], ["cifar100"])
    assert "cifar-100-python.tar.gz" in str(err.value) and "deleted" in str(err.value)
    assert _leftovers(registry) == [] and paper_files.find("cifar100") is None
    assert not list(registry.glob("cifar100.npz*"))


def test_a_truncated_download_is_resumed_and_equals_a_fresh_one(monkeypatch, registry, server,
                                                                tiny, tmp_path):
    _serve(monkeypatch, server)
    handler = server.RequestHandlerClass
    path = urlsplit(paper_sources.PAPER_SOURCES["cifar100"].url).path
    handler.modes[path] = "truncate"
    with pytest.raises(fetch.NetworkError, match="closed the connection"):
        paper_fetch.fetch_paper_source(paper_sources.PAPER_SOURCES["cifar100"], ["cifar100"])
    size = len(tiny.archives["cifar100"])
    assert (registry / "downloads" / "cifar-100-python.tar.gz.part").stat().st_size == size // 2
    assert paper_files.find("cifar100") is None

    del handler.modes[path]
    handler.log.clear()
    assert paper_fetch.ensure_paper(["cifar100"]).ok
    assert handler.log == [("GET", path, f"bytes={size // 2}-")]
    resumed = registry / "cifar100.npz"
    fresh = tmp_path / "fresh.npz"
    archive = tmp_path / "cifar-100-python.tar.gz"
    archive.write_bytes(tiny.archives["cifar100"])
    derive.build_cifar100(archive, fresh, n_train=4, n_test=3)
    assert resumed.read_bytes() == fresh.read_bytes()
    assert _leftovers(registry) == []


def test_imagenette_and_ade20k_are_kept_as_published_and_read_in_place(monkeypatch, registry,
                                                                      server, tiny):
    _serve(monkeypatch, server)
    report = paper_fetch.ensure_paper(["imagenette", "ade20k"])
    assert report.ok and sorted(report.fetched) == ["ade20k", "imagenette"]
    for key in ("imagenette", "ade20k"):
        out = report.fetched[key]
        assert out.read_bytes() == tiny.archives[key]
        assert json.loads(paper_files.record_path(out).read_text())["source"].get(
            paper_sources.PAPER_SOURCES[key].algo) == paper_sources.PAPER_SOURCES[key].checksum
    assert _leftovers(registry) == []
    train = list(paper.iter_imagenette("train"))
    assert [(b, label) for _, b, label in train] == [(b"\xff\xd8parachute", 9),
                                                     (b"\xff\xd8tench", 0)]
    assert [label for _, _, label in paper.iter_imagenette("val")] == [1]
    path, pairs = paper.ade20k_pairs("training")
    assert path == report.fetched["ade20k"]
    assert [p[0].rsplit("/", 1)[1] for p in pairs] == ["ADE_train_00000001.jpg",
                                                        "ADE_train_00000002.jpg"]
    with zipfile.ZipFile(path) as zf:
        assert zf.read(pairs[0][1]) == b"\x89PNGADE_train_00000001"
    assert len(paper.ade20k_pairs("validation")[1]) == 1

    changed = bytearray(tiny.archives["ade20k"])
    changed[-30] ^= 1  # one byte of the copy changed: its sha256 and content no longer match
    report.fetched["ade20k"].write_bytes(bytes(changed))
    with pytest.raises(paper_files.PaperDataError, match="ADEChallengeData2016.zip"):
        paper.ade20k_pairs()


def _tiny_bpe(folder: Path, docs=None) -> tuple[Path, Path]:
    """A byte-level BPE trained on the stand-in documents, saved as vocab.json and merges.txt
    (GPT-2's file format), with GPT-2's end-of-text token."""
    from tokenizers import ByteLevelBPETokenizer
    folder.mkdir(parents=True, exist_ok=True)
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator((docs or FINEWEB_DOCS) * 5, vocab_size=300, min_frequency=1,
                            special_tokens=[lm_corpus.EOT], show_progress=False)
    tok.save_model(str(folder))
    return folder / "vocab.json", folder / "merges.txt"


def test_the_fineweb_shard_is_kept_as_published_and_tokenised_once(monkeypatch, registry,
                                                                    server, tiny, tmp_path):
    _serve(monkeypatch, server)
    report = paper_fetch.ensure_paper(["fineweb"])
    assert report.ok and paper.fineweb_parquet().read_bytes() == tiny.archives["fineweb"]
    assert list(lm_corpus.parquet_texts(paper.fineweb_parquet())) == FINEWEB_DOCS
    vocab, merges = _tiny_bpe(tmp_path / "bpe")
    tokens = lm_corpus.corpus_tokens(10_000, vocab=vocab, merges=merges)
    tok = lm_corpus.bpe_tokenizer(vocab, merges)
    eot = tok.token_to_id(lm_corpus.EOT)
    assert tokens.dtype == np.dtype("<u2") and int((tokens == eot).sum()) == len(FINEWEB_DOCS)
    text = tok.decode([int(t) for t in tokens], skip_special_tokens=False)
    assert text == "".join(d + lm_corpus.EOT for d in FINEWEB_DOCS)
    made = next((registry / "lm").glob("*.u16"))
    stamp = made.stat().st_mtime_ns
    assert np.array_equal(lm_corpus.corpus_tokens(10_000, vocab=vocab, merges=merges), tokens)
    assert made.stat().st_mtime_ns == stamp                         # checked and mapped, not remade
    short = lm_corpus.corpus_tokens(7, vocab=vocab, merges=merges)
    assert np.array_equal(short, tokens[:7])
    # the language-model study's parts of it, with the BPE's vocabulary by id
    from ddcl_theory.experiments import gpt2_recipe
    monkeypatch.setattr(paper, "gpt2_bpe_files", lambda: (vocab, merges))
    shapes = replace(gpt2_recipe.GPT2Shapes(), corpus_tokens=10_000, val_fraction=0.2,
                     heldout_fraction=0.2)
    parts = gpt2_recipe.fineweb_parts(shapes)
    joined = np.concatenate([parts.train.numpy(), parts.val.numpy(), parts.heldout.numpy()])
    assert np.array_equal(joined, tokens) and len(parts.heldout) == int(0.2 * len(tokens))
    assert len(parts.vocab) == tok.get_vocab_size() and parts.vocab[eot] == lm_corpus.EOT

    other = _tiny_bpe(tmp_path / "other", ["Another corpus altogether."])
    with pytest.raises(lm_corpus.CorpusError, match="made from other inputs"):
        lm_corpus.corpus_tokens(10_000, vocab=other[0], merges=other[1])
    with open(made, "r+b") as f:
        f.write(b"\xff\xff")
    with pytest.raises(lm_corpus.CorpusError, match="fails its record"):
        lm_corpus.corpus_tokens(10_000, vocab=vocab, merges=merges)
    record = made.with_name(made.name + ".json")
    record.write_text("{}")
    with pytest.raises(lm_corpus.CorpusError, match="not a token file record"):
        lm_corpus.corpus_tokens(10_000, vocab=vocab, merges=merges)
    with pytest.raises(ValueError, match="max_tokens: expected an int >= 1"):
        lm_corpus.write_token_file(FINEWEB_DOCS, tok, tmp_path / "x.u16", 0)


def test_hellaswag_is_the_committed_file_checked_by_its_git_blob_hash(monkeypatch, registry,
                                                                      server, tiny):
    _serve(monkeypatch, server)
    report = paper_fetch.ensure_paper(["hellaswag"])
    assert report.ok and paper.hellaswag_file().read_bytes() == tiny.archives["hellaswag"]
    items = hellaswag.read_items(paper.hellaswag_file())
    assert [it.label for it in items] == [2, 0] and items[0].endings[2] == "climbs the rope."
    assert items[1].context == "Baking: How to bake. Heat the oven. Mix the flour"
    # a file other than the committed one fails the blob hash and is deleted
    (registry / "hellaswag_val.jsonl").unlink()
    for stale in registry.rglob("hellaswag_val.jsonl*"):
        stale.unlink()
    path = urlsplit(paper_sources.PAPER_SOURCES["hellaswag"].url).path
    server.RequestHandlerClass.files = dict(server.RequestHandlerClass.files,
                                            **{path: tiny.archives["hellaswag"] + b"\n"})
    with pytest.raises(fetch.ChecksumError, match="hellaswag_val.jsonl") as err:
        paper_fetch.fetch_paper_source(paper_sources.PAPER_SOURCES["hellaswag"], ["hellaswag"])
    assert "deleted" in str(err.value) and paper_files.find("hellaswag") is None


def test_missing_paper_data_names_the_command_that_fetches_it(registry):
    for load, key in ((paper.load_cifar10_full, "cifar10_full"), (paper.load_cifar100, "cifar100"),
                      (partial(paper.load_imdb_full, "train"), "imdb_full"),
                      (lambda: next(paper.iter_imagenette()), "imagenette"),
                      (paper.ade20k_pairs, "ade20k"), (paper.fineweb_parquet, "fineweb"),
                      (paper.hellaswag_file, "hellaswag"),
                      (paper.bert_base_uncased_dir, "bert-base-uncased"),
                      (paper.gpt2_bpe_files, "gpt2-bpe")):
        with pytest.raises(FileNotFoundError, match=f"ensure --paper {key}`"):
            load()
    with pytest.raises(ValueError, match="split: expected 'train' or 'test'"):
        paper.load_imdb_full("dev")


# ---------------------------------------------------------------------------------------------
# the Hub models


def test_hub_models_are_fetched_at_the_pinned_commit_into_the_hub_cache(monkeypatch, registry,
                                                                         server, tiny, tmp_path):
    _serve(monkeypatch, server)
    report = paper_fetch.ensure_paper(["bert-base-uncased", "gpt2-bpe"])
    assert report.ok, report.missing
    m = paper_sources.HUB_MODELS["bert-base-uncased"]
    folder = paper.bert_base_uncased_dir()
    assert folder == report.fetched["bert-base-uncased"]
    assert folder == (tmp_path / "hf" / "models--google-bert--bert-base-uncased" / "snapshots"
                      / m.revision)
    for name, body in tiny.hub_files["bert-base-uncased"].items():
        assert (folder / name).read_bytes() == body
    vocab, merges = paper.gpt2_bpe_files()
    assert vocab.read_bytes() == tiny.hub_files["gpt2-bpe"]["vocab.json"]
    assert merges.read_bytes() == tiny.hub_files["gpt2-bpe"]["merges.txt"]
    requested = {p for _, p, _ in server.RequestHandlerClass.log}
    assert f"/{m.repo_id}/resolve/{m.revision}/model.safetensors" in requested

    server.RequestHandlerClass.log.clear()
    again = paper_fetch.ensure_paper(["bert-base-uncased", "gpt2-bpe"])
    assert again.ok and not again.fetched and server.RequestHandlerClass.log == []


def test_a_hub_file_that_misses_its_etag_is_deleted_and_named(monkeypatch, registry, server,
                                                              tmp_path):
    _serve(monkeypatch, server)
    m = paper_sources.HUB_MODELS["gpt2-bpe"]
    path = f"/{m.repo_id}/resolve/{m.revision}/merges.txt"
    handler = server.RequestHandlerClass
    handler.headers_for = dict(handler.headers_for, **{path: {
        "X-Repo-Commit": m.revision, "ETag": f'"{_git_blob_sha1(b"other merges")}"'}})
    with pytest.raises(fetch.ChecksumError, match="git blob sha1") as err:
        hub.fetch_model("gpt2-bpe")
    assert "merges.txt" in str(err.value)
    assert not any((tmp_path / "hf").rglob("merges.txt"))
    blobs = tmp_path / "hf" / "models--openai-community--gpt2" / "blobs"
    assert sorted(p.name for p in blobs.iterdir()) == [_git_blob_sha1(
        handler.files[f"/{m.repo_id}/resolve/{m.revision}/vocab.json"])]
    with pytest.raises(FileNotFoundError, match="ensure --paper gpt2-bpe"):
        paper.gpt2_bpe_files()


def test_a_hub_file_that_misses_its_pinned_sha256_fails(monkeypatch, registry, server):
    _serve(monkeypatch, server)
    model = paper_sources.HUB_MODELS["bert-base-uncased"]
    monkeypatch.setitem(paper_sources.HUB_MODELS, "bert-base-uncased",
                        replace(model, sha256={"vocab.txt": "0" * 64}))
    report = paper_fetch.ensure_paper(["bert-base-uncased"])
    assert "bert-base-uncased" in report.missing
    assert "the catalogue pins 0000" in report.missing["bert-base-uncased"]
    with pytest.raises(FileNotFoundError):
        paper.bert_base_uncased_dir()


def test_without_huggingface_hub_the_models_are_missing_naming_the_extra(monkeypatch, registry):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # its import fails
    report = paper_fetch.ensure_paper(["gpt2-bpe"])
    assert "huggingface_hub is not installed" in report.missing["gpt2-bpe"]
    assert "ddcl-theory[peers]" in report.missing["gpt2-bpe"]
    with pytest.raises(fetch.DataFetchError, match="huggingface_hub is not installed"):
        paper.gpt2_bpe_files()


def test_the_catalogue_pins_commits_and_confirmed_checksums_only():
    for m in paper_sources.HUB_MODELS.values():
        assert len(m.revision) == 40 and set(m.sha256) <= set(m.files)
    with pytest.raises(ValueError, match="revision: expected a 40-hex commit"):
        paper_sources.HubModel("a/b", "main", ("x",))
    src = paper_sources.PAPER_SOURCES
    assert (src["cifar100"].algo, src["cifar100"].checksum) == ("md5",
                                                                 "eb9058c3a382ffc7106e4002c42a8d85")
    assert (src["imagenette"].algo, src["imagenette"].checksum) == (
        "md5", "e793b78cc4c9e9a4ccc0c1155377a412")
    assert (src["ade20k"].algo, src["ade20k"].checksum) == (
        "sha1", "219e1696abb36c8ba3a3afe7fb2f4b4606a897c7")
    assert (src["fineweb"].algo, src["fineweb"].checksum, src["fineweb"].size) == (
        "sha256", "6b552ea48424648dc86d00df276f93fdfc55e9ad342ce3e4affc23a3a370792b",
        2_147_292_183)
    assert f"/resolve/{lm_sources.FINEWEB_REVISION}/" in src["fineweb"].url
    assert len(lm_sources.FINEWEB_REVISION) == 40
    for name in ("cifar10", "imdb"):  # the staged subsets' archives, same pinned checksum
        assert (src[name].url, src[name].checksum) == (sources.SOURCES[name].url,
                                                       sources.SOURCES[name].checksum)
    assert set(paper_sources.PAPER_FILES).isdisjoint(data.FILES)


# ---------------------------------------------------------------------------------------------
# the command line and make


def test_offline_ensure_paper_names_every_source_once_and_exits_2(registry, capsys):
    assert cli.main(["ensure", "--paper"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("ERROR:") == 1
    for key in paper_sources.paper_keys():
        assert f"  - {key} (" in err
    assert "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz" in err
    assert "ensure --paper" in err and "DDCL_DATA_DIR" in err
    assert err.count("cannot reach the server") == 1  # one host (the mirror): tried once
    assert err.count("not tried") == len(paper_sources.paper_keys()) - 1
    assert not list(registry.glob("*.npz")) if registry.exists() else True


def test_status_paper_lists_the_paper_sets_and_plain_status_does_not(monkeypatch, registry, server,
                                                                     capsys):
    _serve(monkeypatch, server)
    assert cli.main(["ensure", "--paper", "imdb_full", "gpt2-bpe"]) == 0
    capsys.readouterr()
    assert cli.main(["status", "--paper"]) == 0
    lines = capsys.readouterr().out.splitlines()
    by_key = {line.split()[0]: line for line in lines[:-1]}
    assert set(by_key) == set(paper_sources.paper_keys())
    assert "verified by sha256" in by_key["imdb_full"]
    assert "verified against the Hub" in by_key["gpt2-bpe"]
    assert "missing" in by_key["cifar100"] and "cifar-100-python.tar.gz" in by_key["cifar100"]
    assert "missing" in by_key["bert-base-uncased"]
    assert cli.main(["status"]) == 0
    plain = capsys.readouterr().out.splitlines()
    assert {line.split()[0] for line in plain[:-1]} == set(data.FILES)
    assert cli.main(["ensure", "--paper", "mnist"]) == 2
    assert "unknown paper data set" in capsys.readouterr().err


def test_make_data_passes_paper_only_for_the_paper_profile():
    def recipe(*args: str) -> str:
        run = subprocess.run(["make", "-n", "-C", str(ROOT), "data", *args], capture_output=True,
                             text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        return run.stdout

    plain, with_paper = recipe(), recipe("PROFILE=paper")
    assert "ddcl_theory.data ensure" in plain and "--paper" not in plain
    assert "ddcl_theory.data ensure\n" in with_paper
    assert "ddcl_theory.data ensure --paper" in with_paper


def test_ensure_paper_gz_record_round_trip(monkeypatch, registry, server, tiny):
    _serve(monkeypatch, server)
    assert paper_fetch.ensure_paper(["imdb_full"]).ok
    out = registry / "imdb_full.tsv.gz"
    with gzip.open(out, "rb") as f:
        raw = f.read()
    out.write_bytes(gzip.compress(raw, compresslevel=1))  # other bytes, same rows
    assert paper_files.verify("imdb_full", out) == "content digest"
    assert paper.load_imdb_full("train")[0] == [r[4] for r in tiny.imdb_rows[1:5]]


def test_the_text_encoder_reads_the_bert_snapshot_that_ensure_paper_fetched(monkeypatch, registry,
                                                                            server):
    from ddcl_theory.data.text import encoders
    monkeypatch.delenv(encoders.BERT_PATH_ENV, raising=False)
    assert encoders._pinned_bert_base() is None
    _serve(monkeypatch, server)
    assert paper_fetch.ensure_paper(["bert-base-uncased"]).ok
    assert encoders._bert_base_source() == str(paper.bert_base_uncased_dir())
