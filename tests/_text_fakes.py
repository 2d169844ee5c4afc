"""A tiny stand-in for the frozen text encoder (same interface, no model): fast and exact."""
from __future__ import annotations

import zlib

import numpy as np

CLS, SEP = 1, 2


class FakeEncoder:
    """Word-level 'encoder': [CLS] + one id per whitespace word + [SEP], truncated to max_length.

    Each id has a fixed random embedding (width ``dim``) plus a position signal and a per-text
    offset, so equal texts give equal embeddings. ``calls`` counts calls of :meth:`encode`.
    """

    special_ids = frozenset({0, CLS, SEP})

    def __init__(self, name: str = "fake-encoder", dim: int = 8, vocab: int = 97) -> None:
        self.name, self.dim, self.vocab = name, dim, vocab
        self.calls = 0
        rng = np.random.default_rng(0)
        self.table = rng.standard_normal((vocab + 3, dim)).astype(np.float32)

    def ids(self, text: str, max_length: int) -> list[int]:
        words = text.split()[: max_length - 2]
        return [CLS] + [3 + zlib.crc32(w.encode()) % self.vocab for w in words] + [SEP]

    def encode(self, texts, max_length):
        self.calls += 1
        out = []
        for text in texts:
            ids = np.array(self.ids(text, max_length), dtype=np.int64)
            pos = np.arange(len(ids), dtype=np.float32)[:, None] / 10.0
            context = np.float32(zlib.crc32(text.encode()) % 1000 / 1000.0)   # per text
            out.append((ids, self.table[ids] + pos + context))
        return out

    def tokens(self, ids):
        return [f"w{int(i)}" for i in ids]
