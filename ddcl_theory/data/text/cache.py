"""Token embeddings of a corpus from a frozen encoder, computed once and kept on disk.

:func:`embed` returns the last-layer token embeddings of every text (with the token ids and, through
the sequence lengths, the attention masks) as a :class:`TokenEmbeddings`. The first call encodes
and writes ``<cache>/embeddings/<key>.npz``; later calls with the same key read that file and never
call the encoder. The key (:func:`cache_key`) is a sha256 of

* the model identifier (``encoder.name``),
* the checksum of the data file the texts come from (when the caller gives one),
* a hash of the texts themselves (:func:`texts_digest`; it changes with any clean-up rule),
* the maximum length in tokens,
* the subset indices (which rows of the data file were taken), and a format version.

The cache directory is ``$DDCL_CACHE_DIR``, else ``$XDG_CACHE_HOME/ddcl-theory``, else
``~/.cache/ddcl-theory`` (the data fetcher's cache), with the subfolder ``embeddings/``. Files are
written atomically: to a temporary file in the same folder, flushed, then renamed over the final
name, so a reader never sees a partial file and an interrupted write leaves nothing behind. A file
that cannot be read (truncated, another format) is treated as a miss and rewritten.

Storage is ragged, float16: all tokens of all texts stacked (total, d), their ids (total,) and the
offsets (N + 1,) of each text; :meth:`TokenEmbeddings.padded` rebuilds padded (n, T, d) tensors
and the (n, T) boolean attention mask (True = real token).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from ddcl_theory.data.cache import cache_dir
from ddcl_theory.runtime.progress import progress

FORMAT_VERSION = 1
SUBFOLDER = "embeddings"


def embeddings_dir() -> Path:
    """``<user cache>/embeddings`` (not created here); see the module docstring."""
    return cache_dir() / SUBFOLDER


def texts_digest(texts: Sequence[str]) -> str:
    """sha256 (hex) of the texts in order, each length-prefixed (so ["ab"] != ["a", "b"])."""
    if isinstance(texts, str):
        raise ValueError("texts: expected a sequence of str, got a single str")
    h = hashlib.sha256()
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ValueError(f"texts: item {i} is a {type(t).__name__}, expected str")
        raw = t.encode("utf-8")
        h.update(len(raw).to_bytes(8, "little"))
        h.update(raw)
    return h.hexdigest()


def _indices_digest(indices: Sequence[int] | np.ndarray | None) -> str | None:
    if indices is None:
        return None
    arr = np.asarray(indices)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"indices: expected a 1-d sequence of ints, got shape {arr.shape} "
                         f"dtype {arr.dtype}")
    return hashlib.sha256(arr.astype("<i8").tobytes()).hexdigest()


def cache_key(model: str, texts_hash: str, max_length: int, *, checksum: str | None = None,
              indices: Sequence[int] | np.ndarray | None = None) -> str:
    """The cache key (32 hex digits) of a corpus encoding; see the module docstring."""
    if not isinstance(model, str) or not model:
        raise ValueError(f"model: expected a non-empty str, got {model!r}")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise ValueError(f"max_length: expected an int >= 1, got {max_length!r}")
    payload = {"format": FORMAT_VERSION, "model": model, "checksum": checksum,
               "texts": texts_hash, "max_length": max_length,
               "indices": _indices_digest(indices)}
    blob = json.dumps(payload, sort_keys=True).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:32]


@dataclass(frozen=True)
class TokenEmbeddings:
    """Ragged token embeddings of N texts.

    Attributes:
        values: (total, d) float16 token embeddings of all texts, stacked.
        ids: (total,) int32 token ids.
        offsets: (N + 1,) int64; text i owns rows ``offsets[i]:offsets[i + 1]`` (its first row is
            the [CLS] token).
        model: the encoder's name; max_length: the truncation length.
        key: the cache key; hit: whether this came from the cache (no encoder call).
    """

    values: np.ndarray
    ids: np.ndarray
    offsets: np.ndarray
    model: str
    max_length: int
    key: str = ""
    hit: bool = False

    def __post_init__(self) -> None:
        if self.values.ndim != 2:
            raise ValueError(f"values: expected shape (total, d), got {self.values.shape}")
        if self.ids.shape != (self.values.shape[0],):
            raise ValueError(f"ids: expected shape ({self.values.shape[0]},), got {self.ids.shape}")
        off = self.offsets
        if off.ndim != 1 or off.size < 1 or off[0] != 0 or off[-1] != self.values.shape[0] \
                or np.any(np.diff(off) < 1):
            raise ValueError("offsets: expected (N + 1,) increasing from 0 to total, every text "
                             "with at least one token")

    def __len__(self) -> int:
        return self.offsets.size - 1

    @property
    def dim(self) -> int:
        return int(self.values.shape[1])

    @property
    def lengths(self) -> np.ndarray:
        """(N,) number of tokens of each text."""
        return np.diff(self.offsets)

    def subset(self, index: Sequence[int] | np.ndarray) -> "TokenEmbeddings":
        """The texts at ``index`` (in that order), as a new :class:`TokenEmbeddings`."""
        index = np.asarray(index, dtype=np.int64)
        if index.ndim != 1 or (index.size and (index.min() < 0 or index.max() >= len(self))):
            raise ValueError(f"index: expected 1-d indices in [0, {len(self)}), got shape "
                             f"{index.shape}")
        rows = np.concatenate([np.arange(self.offsets[i], self.offsets[i + 1]) for i in index]) \
            if index.size else np.zeros(0, dtype=np.int64)
        lengths = self.lengths[index]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return replace(self, values=self.values[rows], ids=self.ids[rows], offsets=offsets)

    def padded(self, index: Sequence[int] | np.ndarray | None = None, *,
               dtype: torch.dtype = torch.float16,
               device: str | torch.device = "cpu"
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Padded tensors of the texts at ``index`` (all when None).

        Returns:
            x (n, T, d) in ``dtype`` (zeros at padding), mask (n, T) bool (True = real token),
            ids (n, T) int64 (0 at padding); T is the longest selected text.
        """
        index = np.arange(len(self)) if index is None else np.asarray(index, dtype=np.int64)
        lengths = self.lengths[index]
        n, t = len(index), int(lengths.max()) if len(index) else 0
        x = torch.zeros((n, t, self.dim), dtype=dtype)
        ids = torch.zeros((n, t), dtype=torch.long)
        mask = torch.arange(t)[None, :] < torch.as_tensor(lengths)[:, None]
        for r, i in enumerate(index):
            a, b = self.offsets[i], self.offsets[i + 1]
            x[r, : b - a] = torch.from_numpy(self.values[a:b]).to(dtype)
            ids[r, : b - a] = torch.from_numpy(self.ids[a:b].astype(np.int64))
        return x.to(device), mask.to(device), ids.to(device)

    def cls(self) -> np.ndarray:
        """(N, d) float32: the first token ([CLS]) of each text."""
        return self.values[self.offsets[:-1]].astype(np.float32)

    def mean(self) -> np.ndarray:
        """(N, d) float32: the mean over each text's tokens (all tokens under the attention mask,
        [CLS] and [SEP] included, as sentence-transformers pools)."""
        out = np.zeros((len(self), self.dim), dtype=np.float64)
        step = 1 << 16
        for i in range(len(self)):                 # in pieces: no float32 copy of all tokens
            a, b = self.offsets[i], self.offsets[i + 1]
            if b - a <= step:
                out[i] = self.values[a:b].astype(np.float64).sum(0)
            else:
                for c in range(a, b, step):
                    out[i] += self.values[c:min(b, c + step)].astype(np.float64).sum(0)
        return (out / self.lengths[:, None]).astype(np.float32)


def _write_atomically(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write an .npz to ``path`` via a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)          # mkstemp makes 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _read(path: Path, model: str, max_length: int, n: int, key: str) -> TokenEmbeddings | None:
    """The cached embeddings at ``path``, or None when missing, unreadable or not matching."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if (meta.get("format") != FORMAT_VERSION or meta.get("model") != model
                    or meta.get("max_length") != max_length or meta.get("n") != n):
                return None
            return TokenEmbeddings(z["values"], z["ids"], z["offsets"], model, max_length, key,
                                   hit=True)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None


def embed(encoder, texts: Sequence[str], max_length: int, *, checksum: str | None = None,
          indices: Sequence[int] | np.ndarray | None = None, directory: Path | None = None,
          chunk: int = 1024, desc: str = "encode") -> TokenEmbeddings:
    """Token embeddings of ``texts`` by the frozen ``encoder``, from the cache when possible.

    Args:
        encoder: a :class:`~ddcl_theory.data.text.encoders.TextEncoder`.
        texts: the N texts (already cleaned), N >= 1.
        max_length: truncation length in tokens (specials included).
        checksum: checksum of the data file the texts come from (part of the key).
        indices: rows of that file the texts are (part of the key).
        directory: cache folder; default :func:`embeddings_dir`.
        chunk: texts per encoder call (bounds the float32 memory of one call).
    """
    texts = list(texts)
    if not texts:
        raise ValueError("texts: expected at least one text")
    if indices is not None and len(np.asarray(indices)) != len(texts):
        raise ValueError(f"indices: expected {len(texts)} indices (one per text), got "
                         f"{len(np.asarray(indices))}")
    key = cache_key(encoder.name, texts_digest(texts), max_length, checksum=checksum,
                    indices=indices)
    path = (Path(directory) if directory is not None else embeddings_dir()) / f"{key}.npz"
    found = _read(path, encoder.name, max_length, len(texts), key)
    if found is not None:
        return found
    values, ids, lengths = [], [], []
    for start in progress(range(0, len(texts), chunk), desc=desc,
                          total=(len(texts) + chunk - 1) // chunk):
        for tok_ids, emb in encoder.encode(texts[start:start + chunk], max_length):
            if emb.ndim != 2 or emb.shape[0] != len(tok_ids) or len(tok_ids) < 1:
                raise ValueError(f"encoder: expected (T, d) embeddings for T >= 1 ids, got "
                                 f"{emb.shape} for {len(tok_ids)} ids")
            values.append(np.asarray(emb, dtype=np.float16))
            ids.append(np.asarray(tok_ids, dtype=np.int32))
            lengths.append(len(tok_ids))
    result = TokenEmbeddings(np.concatenate(values), np.concatenate(ids),
                             np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                             encoder.name, max_length, key, hit=False)
    meta = json.dumps({"format": FORMAT_VERSION, "model": encoder.name, "max_length": max_length,
                       "n": len(texts), "checksum": checksum})
    _write_atomically(path, {"values": result.values, "ids": result.ids,
                             "offsets": result.offsets, "meta": np.array(meta)})
    return result
