"""The character data and loss of the GPT study (claims L8, L9 of Zhang & Papyan 2026).

Tiny Shakespeare (:func:`ddcl_theory.data.load_text`) as character ids over its sorted
vocabulary (:func:`encode`), split into the first 90% for training and the last 10% for
validation (:func:`text_splits`); windows of ``block`` characters with the characters that follow
them (:func:`next_char_windows`) and the mean next-character cross-entropy of a model on them
(:func:`next_char_loss`). The study that trains the character GPT
(:class:`ddcl_theory.models.char_gpt.CharGPT`) is
:func:`ddcl_theory.experiments.laplacian_study.run_gpt`.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from ddcl_theory import data

__all__ = ["encode", "text_splits", "next_char_windows", "next_char_loss"]


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
