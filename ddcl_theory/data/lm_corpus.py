"""The paper profile's web-text corpus for L9, as GPT-2 BPE tokens in a uint16 file, made once.

:func:`corpus_tokens` gives the first ``max_tokens`` tokens of a parquet of documents (by default
FineWeb's first sample-10BT shard, :func:`ddcl_theory.data.paper.fineweb_parquet`) under GPT-2's
byte-level BPE (by default the pinned Hub files, :func:`ddcl_theory.data.paper.gpt2_bpe_files`):
documents in file order, each followed by ``<|endoftext|>``, as a read-only ``numpy.memmap`` of
uint16. The first call tokenises and writes ``<cache>/lm/<name>.u16`` with a record beside it
(the sha256 of the parquet and of the two BPE files, the token count, the sha256 of the token
file); later calls check the record and the file against it and map the file. A record that names
other inputs, or a file that fails its digest, is refused with an error naming the file (delete
it to rebuild).

    >>> tokens = corpus_tokens(10_000_000)          # make data PROFILE=paper first
    >>> tokens.dtype, tokens.shape                  # (dtype('uint16'), (10000000,))
"""
from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from ddcl_theory.data.cache import cache_dir
from ddcl_theory.data.digest import file_sha256

__all__ = ["EOT", "bpe_tokenizer", "parquet_texts", "write_token_file", "corpus_tokens",
           "CorpusError"]

#: GPT-2's end-of-text token, written after every document.
EOT = "<|endoftext|>"


class CorpusError(ValueError):
    """A token file is present but does not match its record or the inputs asked for."""


def bpe_tokenizer(vocab: Path, merges: Path):
    """GPT-2's byte-level BPE from its ``vocab.json`` and ``merges.txt`` (the ``tokenizers``
    library: no prefix space, as GPT-2 encodes)."""
    from tokenizers import ByteLevelBPETokenizer
    return ByteLevelBPETokenizer(str(vocab), str(merges), add_prefix_space=False)


def parquet_texts(path: Path, column: str = "text", batch_size: int = 1024) -> Iterator[str]:
    """The ``column`` of every row of the parquet at ``path``, in file order (pyarrow)."""
    try:
        import pyarrow.parquet as pq
    except ImportError as err:                  # pragma: no cover - pinned in requirements.txt
        raise ImportError("parquet_texts needs pyarrow (pip install pyarrow)") from err
    f = pq.ParquetFile(path)
    if column not in f.schema_arrow.names:
        raise ValueError(f"column: {path} has columns {f.schema_arrow.names}, not {column!r}")
    for batch in f.iter_batches(columns=[column], batch_size=batch_size):
        yield from batch.column(0).to_pylist()


def write_token_file(texts: Iterable[str], tokenizer, out: Path, max_tokens: int,
                     chunk: int = 256) -> int:
    """Tokenise ``texts`` (each followed by ``<|endoftext|>``) into ``out`` as little-endian
    uint16 until ``max_tokens`` tokens; the number written (fewer when the texts end first)."""
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens: expected an int >= 1, got {max_tokens!r}")
    if tokenizer.get_vocab_size() > 1 << 16:
        raise ValueError(f"tokenizer: {tokenizer.get_vocab_size()} tokens do not fit uint16")
    eot = tokenizer.token_to_id(EOT)
    if eot is None:
        raise ValueError(f"tokenizer: has no {EOT} token")
    written = 0
    batch: list[str] = []
    with open(out, "wb") as f:
        def flush() -> None:
            nonlocal written
            for enc in tokenizer.encode_batch(batch):
                ids = np.asarray(enc.ids + [eot], dtype="<u2")[:max_tokens - written]
                f.write(ids.tobytes())
                written += len(ids)
                if written >= max_tokens:
                    return
            batch.clear()

        for text in texts:
            batch.append(text)
            if len(batch) == chunk:
                flush()
                if written >= max_tokens:
                    break
        if batch and written < max_tokens:
            flush()
    return written


def _inputs(parquet: Path, vocab: Path, merges: Path) -> dict[str, str]:
    return {"parquet": file_sha256(parquet), "vocab": file_sha256(vocab),
            "merges": file_sha256(merges)}


def corpus_tokens(max_tokens: int, *, parquet: Path | None = None, vocab: Path | None = None,
                  merges: Path | None = None, folder: Path | None = None,
                  name: str = "fineweb-gpt2") -> np.memmap:
    """The first ``max_tokens`` BPE tokens of the corpus, uint16 (n,), n <= ``max_tokens``
    (less only when the corpus is shorter); made once into ``folder`` (default
    ``<cache>/lm``), then checked and mapped."""
    if parquet is None:
        from ddcl_theory.data import paper
        parquet = paper.fineweb_parquet()
    if vocab is None or merges is None:
        from ddcl_theory.data import paper
        vocab, merges = paper.gpt2_bpe_files()
    folder = Path(folder) if folder is not None else cache_dir() / "lm"
    out = folder / f"{name}-{max_tokens}.u16"
    record_path = out.with_name(out.name + ".json")
    inputs = _inputs(Path(parquet), Path(vocab), Path(merges))
    if out.exists():
        if not record_path.exists():
            raise CorpusError(f"{out}: no record {record_path.name} beside it; delete it to "
                              f"rebuild")
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
            record["n_tokens"], record["sha256"]
        except (ValueError, KeyError, TypeError) as err:
            raise CorpusError(f"{record_path}: not a token file record ({err}); delete it and "
                              f"{out.name} to rebuild") from err
        if record.get("inputs") != inputs or record.get("max_tokens") != max_tokens:
            raise CorpusError(f"{out}: made from other inputs ({record.get('inputs')}) than "
                              f"these ({inputs}); delete it to rebuild")
        if out.stat().st_size != 2 * record["n_tokens"] or file_sha256(out) != record["sha256"]:
            raise CorpusError(f"{out}: fails its record's size or sha256; delete it to rebuild")
    else:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".part")
        os.close(fd)
        try:
            n = write_token_file(parquet_texts(Path(parquet)), bpe_tokenizer(vocab, merges),
                                 Path(tmp), max_tokens)
            if n == 0:
                raise CorpusError(f"parquet: {parquet} holds no document")
            record = {"max_tokens": max_tokens, "n_tokens": n, "inputs": inputs,
                      "sha256": file_sha256(Path(tmp)), "dtype": "uint16 little-endian",
                      "eot": EOT}
            record_path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
            os.replace(tmp, out)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return np.memmap(out, dtype="<u2", mode="r")
