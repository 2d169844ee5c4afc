"""The character data and loss of the language-model study (claim L9 of Zhang & Papyan 2026).

Tiny Shakespeare (:func:`ddcl_theory.data.load_text`) as character ids over its sorted
vocabulary (:func:`encode`), split into the first 90% for training and the last 10% held out
(:func:`text_splits`); the three parts a study reads (:func:`text_parts`: the training text, a
validation split carved from the end of the training 90%, the held-out 10%); windows of
``block`` characters with the characters that follow them (:func:`next_char_windows`, at
:func:`tiling_starts` to cover a text once) and the mean next-character cross-entropy of a model
on them (:func:`next_char_loss`). The study that trains the character GPT
(:class:`ddcl_theory.models.char_gpt.CharGPT`) is :func:`ddcl_theory.experiments.laplacian_lm.run`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ddcl_theory import data

__all__ = ["encode", "text_splits", "TextParts", "text_parts", "tiling_starts",
           "spread_starts", "next_char_windows", "next_char_loss"]


def encode(text: str) -> tuple[np.ndarray, list[str]]:
    """Characters to int64 ids over the sorted vocabulary: (ids (len(text),), vocabulary)."""
    if not text:
        raise ValueError("text: empty")
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    points, ids = np.unique(codes, return_inverse=True)
    return ids.astype(np.int64), [chr(int(c)) for c in points]


def text_splits(device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor,
                                                              list[str], str]:
    """Tiny Shakespeare (:func:`ddcl_theory.data.load_text`) as character ids on ``device``:
    ``(train ids (first 90%), validation ids (last 10%), vocabulary, source)``."""
    text, source = data.load_text()
    ids, vocab = encode(text)
    cut = int(0.9 * len(ids))
    return (torch.from_numpy(ids[:cut]).to(device), torch.from_numpy(ids[cut:]).to(device),
            vocab, source)


@dataclass(frozen=True)
class TextParts:
    """The three parts of the text a study reads, as int64 ids (1-D tensors): ``train`` (the
    training 90% less its end), ``val`` (the end of the training 90%: the validation split that
    picks a run's optimum), ``heldout`` (the last 10%, never trained on nor used to choose)."""

    train: torch.Tensor
    val: torch.Tensor
    heldout: torch.Tensor
    vocab: list[str]
    source: str


def text_parts(val_fraction: float, device: str | torch.device = "cpu") -> TextParts:
    """:func:`text_splits` with the last ``val_fraction`` (in (0, 1)) of the training 90% carved
    off as the validation split."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction: expected a fraction in (0, 1), got {val_fraction!r}")
    train, heldout, vocab, source = text_splits(device)
    cut = len(train) - int(val_fraction * len(train))
    return TextParts(train[:cut], train[cut:], heldout, vocab, source)


def tiling_starts(length: int, block: int) -> torch.Tensor:
    """Starts (n,) of the ``n = (length - 1) // block`` windows that tile a text of ``length``
    ids without overlap, each with its next characters inside the text."""
    if block < 1 or length < block + 1:
        raise ValueError(f"length, block: expected length >= block + 1 >= 2, got {length} and "
                         f"{block}")
    return torch.arange((length - 1) // block) * block


def spread_starts(length: int, block: int, n: int) -> torch.Tensor:
    """Starts (n,) of ``n`` windows spread evenly over a text of ``length`` ids (the first at 0,
    the last ending one id before the text's end)."""
    if n < 1 or block < 1 or length < block + 1:
        raise ValueError(f"length, block, n: expected length >= block + 1 >= 2 and n >= 1, got "
                         f"{length}, {block} and {n}")
    return torch.linspace(0, length - block - 1, n).long()


def next_char_windows(ids: torch.Tensor, starts: torch.Tensor, block: int
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Windows of ``ids`` (L,) at ``starts`` (B,): ``x[b] = ids[s_b : s_b + block]`` and the
    next characters ``y[b] = ids[s_b + 1 : s_b + block + 1]``, both (B, block)."""
    if ids.dim() != 1 or starts.dim() != 1:
        raise ValueError(f"ids, starts: expected shapes (L,) and (B,), got {tuple(ids.shape)} "
                         f"and {tuple(starts.shape)}")
    offsets = torch.arange(block, device=ids.device)
    x = ids[starts[:, None] + offsets]
    y = ids[starts[:, None] + offsets + 1]
    return x, y


def next_char_loss(forward: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                   y: torch.Tensor) -> torch.Tensor:
    """``CharGPT.loss`` through ``forward`` (the model or its compiled wrapper): mean
    next-character cross-entropy of ``y`` (B, T) given ``x`` (B, T)."""
    logits = forward(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
