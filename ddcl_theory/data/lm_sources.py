"""The paper profile's web-text corpus for L9 in the paper data catalogue.

FineWeb's first sample-10BT shard, the Hub dataset's parquet at a pinned commit under its sha256,
kept as downloaded (scheme ``bytes``; :mod:`ddcl_theory.data.lm_corpus` tokenises it once). Its
entries are added to :data:`ddcl_theory.data.paper_sources.PAPER_SOURCES` and ``PAPER_FILES``
when this module is imported, as the paper fetcher, loaders and records do; the entry lives
apart from that catalogue so that the chapters which read the catalogue (for their Hub models)
do not depend on the corpus's entry.
"""
from __future__ import annotations

from ddcl_theory.data import derive, paper_sources
from ddcl_theory.data.sources import Source

__all__ = ["FINEWEB_REVISION", "FINEWEB_URL", "FINEWEB_SHA256", "FINEWEB_SIZE"]

#: FineWeb's sample-10BT, first shard, at a pinned commit of the Hub dataset.
FINEWEB_REVISION = "9bb295ddab0e05d785b879661af7260fed5140fc"
FINEWEB_URL = ("https://huggingface.co/datasets/HuggingFaceFW/fineweb/resolve/"
               f"{FINEWEB_REVISION}/sample/10BT/000_00000.parquet")
FINEWEB_SHA256 = "6b552ea48424648dc86d00df276f93fdfc55e9ad342ce3e4affc23a3a370792b"
FINEWEB_SIZE = 2_147_292_183

paper_sources.PAPER_SOURCES.setdefault(
    "fineweb", Source("fineweb", FINEWEB_URL, "fineweb-sample-10BT-000_00000.parquet", "sha256",
                      FINEWEB_SHA256, {"fineweb": derive.build_file_copy}, size=FINEWEB_SIZE))
paper_sources.PAPER_FILES.setdefault(
    "fineweb", paper_sources.PaperFile(
        "fineweb-sample-10BT-000_00000.parquet",
        "FineWeb sample-10BT, its first shard: English web text (L9's corpus, tokenised by "
        "GPT-2's BPE), the parquet as published", "fineweb", "bytes"))
