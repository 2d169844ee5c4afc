"""The paper profile's data: which files, from which canonical sources, verified how.

Separate from the staged data of the cpu and reference profiles
(:data:`ddcl_theory.data.files.FILES`, fetched by ``python -m ddcl_theory.data ensure``); these
are fetched by ``python -m ddcl_theory.data ensure --paper`` (``make data PROFILE=paper``).

:data:`PAPER_FILES`
    data set key -> :class:`PaperFile`: the file derived from a downloaded archive, the source
    (a key of :data:`PAPER_SOURCES`) and the content-digest scheme
    (:mod:`ddcl_theory.data.digest`) its ``<name>.digest.json`` record is written under.
:data:`PAPER_SOURCES`
    source name -> :class:`ddcl_theory.data.sources.Source`: URL, pinned archive checksum and the
    builder of each key. The CIFAR-10 and IMDB sources are those of the staged subsets (same
    archive, same checksum); CIFAR-100 is the Toronto archive under the md5 torchvision pins;
    Imagenette (160 px) is fast.ai's archive under the md5 torchvision pins; ADE20K is the MIT
    scene-parsing archive under the sha1 GluonCV's download script pins. The last two are kept
    as downloaded (scheme ``bytes``); :mod:`ddcl_theory.data.paper` reads them in place.
:data:`HUB_MODELS`
    key -> :class:`HubModel`: a Hugging Face Hub repository at a pinned commit and the files the
    paper profile needs from it, fetched with :mod:`huggingface_hub` into the user's Hub cache.

All of them are read at call time (tests replace them).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ddcl_theory.data import derive, digest
from ddcl_theory.data.sources import SOURCES, Source


@dataclass(frozen=True)
class PaperFile:
    """A data file of the paper profile, derived from a canonical archive.

    Attributes:
        name: file name in a data directory (the fetcher writes it into the user cache).
        description: one line.
        source: the key of :data:`PAPER_SOURCES` it derives from.
        scheme: content-digest scheme of its record (:data:`ddcl_theory.data.digest.SCHEMES`).
        content: the content digest under ``scheme`` when it has been pinned, else empty: the
            derivation then records what it derived and the loaders hold the file to that record.
    """

    name: str
    description: str
    source: str
    scheme: str
    content: str = ""

    def __post_init__(self) -> None:
        if self.scheme not in digest.SCHEMES:
            raise ValueError(f"scheme: expected one of {digest.SCHEMES}, got {self.scheme!r}")


@dataclass(frozen=True)
class HubModel:
    """Files of a Hugging Face Hub repository at a pinned commit.

    Attributes:
        repo_id: ``"owner/name"`` on the Hub.
        revision: the 40-hex commit the files are fetched at (never a branch).
        files: the file names to fetch.
        sha256: file name -> sha256 of its bytes, for the files whose published digest is
            confirmed; every file is also checked against the digest the Hub names it by (its
            ETag: the sha256 of an LFS file, the git blob sha1 of a small one), which the commit
            fixes.
        description: one line.
    """

    repo_id: str
    revision: str
    files: tuple[str, ...]
    sha256: Mapping[str, str] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        if len(self.revision) != 40 or any(c not in "0123456789abcdef" for c in self.revision):
            raise ValueError(f"revision: expected a 40-hex commit of {self.repo_id}, "
                             f"got {self.revision!r}")
        unknown = set(self.sha256) - set(self.files)
        if unknown:
            raise ValueError(f"sha256: names files not in files: {sorted(unknown)}")


CIFAR100_URL = "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"
CIFAR100_MD5 = "eb9058c3a382ffc7106e4002c42a8d85"  # as torchvision.datasets.CIFAR100 pins it
IMAGENETTE_URL = "https://s3.amazonaws.com/fast-ai-imageclas/imagenette2-160.tgz"
IMAGENETTE_MD5 = "e793b78cc4c9e9a4ccc0c1155377a412"  # torchvision.datasets.Imagenette, "160px"
ADE20K_URL = "http://data.csail.mit.edu/places/ADEchallenge/ADEChallengeData2016.zip"
ADE20K_SHA1 = "219e1696abb36c8ba3a3afe7fb2f4b4606a897c7"  # GluonCV scripts/datasets/ade20k.py

PAPER_SOURCES: dict[str, Source] = {
    "cifar10": replace(SOURCES["cifar10"], outputs={"cifar10_full": derive.build_cifar10_full}),
    "cifar100": Source("cifar100", CIFAR100_URL, "cifar-100-python.tar.gz", "md5", CIFAR100_MD5,
                       {"cifar100": derive.build_cifar100}),
    "imdb": replace(SOURCES["imdb"], outputs={"imdb_full": derive.build_imdb_full}),
    "imagenette": Source("imagenette", IMAGENETTE_URL, "imagenette2-160.tgz", "md5", IMAGENETTE_MD5,
                         {"imagenette": derive.build_file_copy}),
    "ade20k": Source("ade20k", ADE20K_URL, "ADEChallengeData2016.zip", "sha1", ADE20K_SHA1,
                     {"ade20k": derive.build_file_copy}),
}

PAPER_FILES: dict[str, PaperFile] = {
    "cifar10_full": PaperFile("cifar10_full.npz",
                              "CIFAR-10, all 50,000 train and 10,000 test images, official order",
                              "cifar10", "npz-arrays"),
    "cifar100": PaperFile("cifar100.npz",
                          "CIFAR-100, 50,000 train and 10,000 test images, fine and coarse labels",
                          "cifar100", "npz-arrays"),
    "imdb_full": PaperFile("imdb_full.tsv.gz",
                           "IMDB, all 25,000 train and 25,000 test labelled reviews",
                           "imdb", "csv-rows"),
    "imagenette": PaperFile("imagenette2-160.tgz",
                            "Imagenette 2 (160 px): 10 ImageNet classes, 9,469 train and 3,925 "
                            "val JPEGs, the archive as published", "imagenette", "bytes"),
    "ade20k": PaperFile("ADEChallengeData2016.zip",
                        "ADE20K scene parsing: 20,210 training and 2,000 validation images with "
                        "150-class annotations, the archive as published", "ade20k", "bytes"),
}

HUB_MODELS: dict[str, HubModel] = {
    "bert-base-uncased": HubModel(
        "google-bert/bert-base-uncased", "86b5e0934494bd15c9632b12f734a8a67f723594",
        ("config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json",
         "model.safetensors"),
        {"vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"},
        "BERT base uncased: configuration, WordPiece vocabulary, tokeniser, weights"),
    "gpt2-bpe": HubModel(
        "openai-community/gpt2", "607a30d783dfa663caf39e06633721c8d4cfcd7e",
        ("vocab.json", "merges.txt"), {},
        "GPT-2 byte-level BPE: vocabulary and merges (50,257 tokens)"),
}


def paper_keys() -> list[str]:
    """Every key of the paper profile: the derived files, then the Hub models."""
    return list(PAPER_FILES) + list(HUB_MODELS)


def source_of(key: str) -> Source:
    """The source a derived paper file comes from."""
    if key not in PAPER_FILES:
        raise ValueError(f"key: expected one of {sorted(PAPER_FILES)}, got {key!r}")
    return PAPER_SOURCES[PAPER_FILES[key].source]
