"""The text and the downstream items the language-model study (L9) reads, per model.

``char`` (the cpu and reference profiles): Tiny Shakespeare by character
(:func:`~ddcl_theory.experiments.laplacian_gpt.text_parts`), no downstream task. ``gpt2`` (the
paper profile): FineWeb's first sample-10BT shard in GPT-2 BPE tokens
(:func:`~ddcl_theory.experiments.gpt2_recipe.fineweb_parts`) and HellaSwag's validation items,
each ending scored after its context (:mod:`ddcl_theory.experiments.downstream`).

The paper profile's smoke run checks the code at the paper's shapes where FineWeb, GPT-2's BPE
files and HellaSwag are not fetched. There, and only there, stand-ins take their place, with a
notice: Tiny Shakespeare's characters as ids in a vocabulary of GPT-2's size, split as FineWeb
is, and HellaSwag-format items cut from its held-out part (:func:`standin_items`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ddcl_theory.data.hellaswag import HellaSwagItem
from ddcl_theory.experiments.laplacian_gpt import TextParts, text_parts
from ddcl_theory.runtime import profile

__all__ = ["GPT2_VOCAB", "LMData", "BPEEncoder", "CharEncoder", "standin_items", "standin_vocab", "lm_data"]

#: GPT-2's BPE vocabulary size (50,000 merges, 256 bytes, the end-of-text token).
GPT2_VOCAB = 50257


@dataclass(frozen=True)
class LMData:
    """The study's three parts of the text; ``encode`` (str -> token ids) and ``items`` for the
    downstream task (empty: none at this profile); ``downstream`` names it."""

    text: TextParts
    encode: Callable[[str], list[int]] | None = None
    items: tuple[HellaSwagItem, ...] = ()
    downstream: str = ""


class CharEncoder:
    """str -> the ids of its characters in ``vocab``, characters outside it dropped."""

    def __init__(self, vocab: list[str]) -> None:
        self.index = {c: i for i, c in enumerate(vocab)}

    def __call__(self, text: str) -> list[int]:
        return [self.index[c] for c in text if c in self.index]


class BPEEncoder:
    """str -> its ids under a ``tokenizers`` tokenizer (picklable, for worker processes)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def __call__(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids


def standin_vocab(chars: list[str], size: int = GPT2_VOCAB) -> list[str]:
    """``chars`` padded with unused entries to ``size`` (the smoke run's stand-in for GPT-2's
    vocabulary: the embedding and output layers keep the paper's shape)."""
    if size < len(chars):
        raise ValueError(f"size: expected at least len(chars)={len(chars)}, got {size}")
    return list(chars) + [f"<unused {i}>" for i in range(size - len(chars))]


def standin_items(text: str, n: int) -> tuple[HellaSwagItem, ...]:
    """``n`` HellaSwag-format items from the non-empty lines of ``text``: a line as the context,
    the next line as the true ending among three later lines, the true ending's place cycling
    through the four."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if n < 1 or len(lines) < n + 4:
        raise ValueError(f"n: expected 1 <= n <= {len(lines) - 4} items from "
                         f"{len(lines)} lines, got {n}")
    items = []
    for i in range(n):
        label = i % 4
        others = [lines[i + 2], lines[i + 3], lines[i + 4]]
        endings = others[:label] + [lines[i + 1]] + others[label:]
        items.append(HellaSwagItem(lines[i], tuple(endings), label, i, "stand-in"))
    return tuple(items)


def _gpt2(settings, device: str | torch.device) -> LMData:
    from ddcl_theory.data import hellaswag, lm_corpus, paper
    from ddcl_theory.experiments.gpt2_recipe import corpus_parts, fineweb_parts, GPT2Shapes
    shapes = GPT2Shapes(block_size=settings.block_size, dim=settings.dim, depth=settings.depth,
                        heads=settings.heads, laplacian_heads=settings.laplacian_heads,
                        mlp_ratio=settings.mlp_ratio, corpus_tokens=settings.corpus_tokens,
                        val_fraction=settings.val_fraction,
                        heldout_fraction=settings.heldout_fraction,
                        attention=settings.attention)
    try:
        text = fineweb_parts(shapes, device)
        tokenizer = lm_corpus.bpe_tokenizer(*paper.gpt2_bpe_files())
        items = tuple(hellaswag.read_items(paper.hellaswag_file(), settings.downstream_items))
        return LMData(text, BPEEncoder(tokenizer), items, "HellaSwag (validation)")
    except FileNotFoundError as err:
        if not profile.current().smoke:
            raise
        print(f"NOTICE: {err}\nNOTICE: the smoke run reads stand-ins of the paper shapes: Tiny "
              f"Shakespeare's characters in a vocabulary of {GPT2_VOCAB:,} ids, and "
              f"HellaSwag-format items cut from its held-out text")
    chars = text_parts(settings.val_fraction, "cpu")
    ids = torch.cat([chars.train, chars.val, chars.heldout]).numpy()
    vocab = standin_vocab(chars.vocab)
    text = corpus_parts(ids, vocab, settings.val_fraction, settings.heldout_fraction, device,
                        f"{chars.source} (smoke stand-in for FineWeb)")
    heldout = "".join(chars.vocab[i] for i in text.heldout.tolist())    # never trained on
    n = settings.downstream_items or 2
    return LMData(text, CharEncoder(chars.vocab), standin_items(heldout, n),
                  "HellaSwag-format stand-in")


def lm_data(settings, device: str | torch.device = "cpu") -> LMData:
    """The data of ``settings.model`` (an :class:`~ddcl_theory.experiments.laplacian_lm.
    LMSettings`) on ``device``."""
    if settings.model == "char":
        return LMData(text_parts(settings.val_fraction, device))
    if settings.model == "gpt2":
        return _gpt2(settings, device)
    raise ValueError(f"settings.model: expected 'char' or 'gpt2', got {settings.model!r}")
