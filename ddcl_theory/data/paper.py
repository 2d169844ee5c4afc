"""Loaders of the paper profile's data; each verifies the file against its digest record.

No fallbacks and no network: a data set that is in no data directory raises
``FileNotFoundError`` naming it and the command that fetches it (``python -m ddcl_theory.data
ensure --paper KEY``, or ``make data PROFILE=paper``); a file that fails its record raises
:class:`ddcl_theory.data.paper_files.PaperDataError` naming the file. The catalogue is
:mod:`ddcl_theory.data.paper_sources`.
"""
from __future__ import annotations

import csv
import io
import re
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ddcl_theory.data import digest, hub, paper_files


@dataclass(frozen=True)
class LabelledImages:
    """A whole image classification set, uint8, in the official order.

    Attributes:
        x_train: uint8 (N, 32, 32, 3), HWC, RGB.
        y_train: int64 (N,), indices into ``label_names`` (the fine labels for CIFAR-100).
        x_test: uint8 (M, 32, 32, 3).
        y_test: int64 (M,).
        label_names: class names in label order.
        source: the data set key.
        y_train_coarse, y_test_coarse: int64 (N,), (M,) superclass labels (CIFAR-100), else None.
        coarse_label_names: superclass names (CIFAR-100), else ().
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    label_names: tuple[str, ...]
    source: str
    y_train_coarse: np.ndarray | None = None
    y_test_coarse: np.ndarray | None = None
    coarse_label_names: tuple[str, ...] = ()

    def float_images(self) -> tuple[np.ndarray, np.ndarray]:
        """(x_train, x_test) as float32 in [0, 1] (the scale of ``load_cifar10``)."""
        return self.x_train.astype(np.float32) / 255.0, self.x_test.astype(np.float32) / 255.0


def _path(key: str, what: str) -> Path:
    path = paper_files.find(key)
    if path is None:
        raise paper_files.missing_error(key, what)
    return path


def load_cifar10_full() -> LabelledImages:
    """CIFAR-10: 50,000 train images (``data_batch_1..5`` in order) and 10,000 test images."""
    with np.load(_path("cifar10_full", "CIFAR-10 (full)")) as z:
        return LabelledImages(z["x_train"], z["y_train"].astype(np.int64), z["x_test"],
                              z["y_test"].astype(np.int64),
                              tuple(str(s) for s in z["label_names"]), "cifar10_full")


def load_cifar100() -> LabelledImages:
    """CIFAR-100: 50,000 train and 10,000 test images, 100 fine labels and 20 coarse ones."""
    with np.load(_path("cifar100", "CIFAR-100")) as z:
        return LabelledImages(z["x_train"], z["y_train"].astype(np.int64), z["x_test"],
                              z["y_test"].astype(np.int64),
                              tuple(str(s) for s in z["label_names"]), "cifar100",
                              z["y_train_coarse"].astype(np.int64),
                              z["y_test_coarse"].astype(np.int64),
                              tuple(str(s) for s in z["coarse_label_names"]))


def load_imdb_full(split: str = "train") -> tuple[list[str], np.ndarray]:
    """Every labelled IMDB review of ``split`` ("train" or "test") and int64 labels (N,), 0 = neg.

    25,000 rows a split: 12,500 neg then 12,500 pos, each by review id; text unchanged (``<br />``
    included), as :func:`ddcl_theory.data.load_imdb` gives the subset.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split: expected 'train' or 'test', got {split!r}")
    rows = csv.reader(io.StringIO(digest.read_text(_path("imdb_full", "IMDB (full)")), newline=""),
                      delimiter="\t")
    col = {name: i for i, name in enumerate(next(rows))}
    texts, labels = [], []
    for r in rows:
        if r[col["split"]] == split:
            texts.append(r[col["text"]])
            labels.append(int(r[col["label"]]))
    return texts, np.array(labels, dtype=np.int64)


#: The ten Imagenette classes (ImageNet WordNet ids), in label order.
IMAGENETTE_WNIDS = ("n01440764", "n02102040", "n02979186", "n03000684", "n03028079", "n03394916",
                    "n03417042", "n03425413", "n03445777", "n03888605")
_IMAGENETTE_MEMBER = re.compile(r"(?:^|/)imagenette2-160/(train|val)/(n\d{8})/[^/]+\.jpe?g$",
                                re.IGNORECASE)


def iter_imagenette(split: str = "train", archive: Path | None = None
                    ) -> Iterator[tuple[str, bytes, int]]:
    """(member name, JPEG bytes, label) of every image of ``split`` ("train" or "val").

    One sequential pass over the verified ``imagenette2-160.tgz`` (or ``archive``, a file of its
    layout; shorter side 160 px), archive order; ``label`` indexes :data:`IMAGENETTE_WNIDS`.
    9,469 train and 3,925 val images.
    """
    if split not in ("train", "val"):
        raise ValueError(f"split: expected 'train' or 'val', got {split!r}")
    path = Path(archive) if archive is not None else _path("imagenette", "Imagenette (160 px)")
    with tarfile.open(path, "r:gz") as tar:
        for member in tar:
            m = _IMAGENETTE_MEMBER.search(member.name)
            if not member.isfile() or m is None or m.group(1) != split:
                continue
            if m.group(2) not in IMAGENETTE_WNIDS:
                raise ValueError(f"imagenette2-160.tgz: {member.name} is of no Imagenette class")
            f = tar.extractfile(member)
            yield member.name, (f.read() if f is not None else b""), \
                IMAGENETTE_WNIDS.index(m.group(2))


_ADE_IMAGE = re.compile(r"^(?:.*/)?ADEChallengeData2016/images/(training|validation)/([^/]+)\.jpg$")


def ade20k_pairs(split: str = "training", archive: Path | None = None
                 ) -> tuple[Path, list[tuple[str, str]]]:
    """The verified ``ADEChallengeData2016.zip`` (or ``archive``, a file of its layout) and its
    (image, annotation) member pairs.

    ``split`` is "training" (20,210 pairs) or "validation" (2,000); pairs sorted by image name.
    Images are ``images/<split>/<name>.jpg`` (RGB JPEG); annotations ``annotations/<split>/
    <name>.png`` (uint8 class ids, 0 = unlabelled, 1..150 the classes). Read a member with
    :class:`zipfile.ZipFile` (random access). Raises ``ValueError`` naming an unpaired image.
    """
    if split not in ("training", "validation"):
        raise ValueError(f"split: expected 'training' or 'validation', got {split!r}")
    path = Path(archive) if archive is not None else _path("ade20k", "ADE20K")
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
    pairs = []
    for name in sorted(names):
        m = _ADE_IMAGE.match(name)
        if m is None or m.group(1) != split:
            continue
        annotation = name.replace("/images/", "/annotations/", 1)[: -len(".jpg")] + ".png"
        if annotation not in names:
            raise ValueError(f"{path.name}: {name} has no annotation {annotation}")
        pairs.append((name, annotation))
    return path, pairs


def fineweb_parquet() -> Path:
    """The verified parquet of FineWeb's first sample-10BT shard (a ``text`` column, one web
    document a row); :func:`ddcl_theory.data.lm_corpus.corpus_tokens` tokenises it."""
    return _path("fineweb", "FineWeb (sample-10BT, first shard)")


def hellaswag_file() -> Path:
    """The verified ``hellaswag_val.jsonl`` (:mod:`ddcl_theory.data.hellaswag` reads it)."""
    return _path("hellaswag", "HellaSwag (validation)")


def hub_model_dir(key: str) -> Path:
    """The checked snapshot folder of Hub model ``key`` (``from_pretrained`` takes it), offline."""
    folder = hub.cached_model(key)
    if folder is None:
        raise hub.missing_error(key)
    return folder


def bert_base_uncased_dir() -> Path:
    """``google-bert/bert-base-uncased`` at its pinned commit: config, vocabulary, tokeniser,
    weights."""
    return hub_model_dir("bert-base-uncased")


def gpt2_bpe_files() -> tuple[Path, Path]:
    """(``vocab.json``, ``merges.txt``) of the GPT-2 byte-level BPE at its pinned commit."""
    folder = hub_model_dir("gpt2-bpe")
    return folder / "vocab.json", folder / "merges.txt"
