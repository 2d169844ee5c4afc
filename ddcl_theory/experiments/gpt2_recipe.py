"""The papers' language model for L9 at paper scale: GPT-2 small on web text in BPE tokens.

Zhang & Papyan test Laplacian heads in a GPT-2-style model with a BPE vocabulary on web text.
:class:`GPT2Shapes` holds its shapes (paper: GPT-2 small, width 768, 12 blocks, 12 heads, context
1,024, 5 Laplacian heads a block) and the corpus size; :meth:`GPT2Shapes.model` builds
:class:`~ddcl_theory.models.hf_gpt.HFGPT`, which the language-model study's measures
(:func:`ddcl_theory.experiments.laplacian_lm.measure`, ``heldout_window_losses``) read as they
read the character GPT. :func:`fineweb_parts` gives the corpus as the study's three parts
(:class:`~ddcl_theory.experiments.laplacian_gpt.TextParts`): the first ``corpus_tokens`` GPT-2
tokens of FineWeb's first sample-10BT shard (:func:`ddcl_theory.data.lm_corpus.corpus_tokens`),
the last ``heldout_fraction`` held out, a validation split carved from the end of the rest.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ddcl_theory.experiments.laplacian_gpt import TextParts
from ddcl_theory.models.hf_gpt import HFGPT
from ddcl_theory.runtime.settings import Settings, setting

__all__ = ["GPT2Shapes", "corpus_parts", "fineweb_parts"]


@dataclass(frozen=True)
class GPT2Shapes(Settings):
    """The model and corpus of L9 at paper scale. cpu: a small model for tests; paper: GPT-2
    small (about 124M parameters) with 5 of 12 heads Laplacian, on 400M tokens (a 1% validation
    split and 1% held out); the smoke run keeps the shapes on a 200,000-token corpus."""

    block_size: int = setting(32, paper=1024, ge=2)
    dim: int = setting(32, paper=768, ge=1)
    depth: int = setting(2, paper=12, ge=1)
    heads: int = setting(8, paper=12, ge=1)
    laplacian_heads: int = setting(5, ge=0)
    mlp_ratio: int = setting(4, ge=1)
    corpus_tokens: int = setting(100_000, paper=400_000_000, smoke=200_000, ge=1)
    val_fraction: float = setting(0.01, gt=0, lt=0.5)
    heldout_fraction: float = setting(0.01, gt=0, lt=0.5)
    #: transformers' attention under the Laplacian one: SDPA (fused kernels, no T x T tensor
    #: kept for backward on CUDA) for one model; eager where seeds are stacked under vmap.
    attention: str = setting("eager", paper="sdpa", choices=("eager", "sdpa"))

    def check(self) -> None:
        name = type(self).__name__
        if self.dim % self.heads:
            raise ValueError(f"{name}.dim: expected a multiple of heads={self.heads}, got "
                             f"{self.dim}")
        if self.laplacian_heads > self.heads:
            raise ValueError(f"{name}.laplacian_heads: expected at most heads={self.heads}, "
                             f"got {self.laplacian_heads}")

    def model(self, vocab_size: int, laplacian_heads: int) -> HFGPT:
        """A fresh :class:`HFGPT` of these shapes."""
        return HFGPT(vocab_size, self.block_size, dim=self.dim, depth=self.depth,
                     heads=self.heads, laplacian_heads=laplacian_heads,
                     mlp_ratio=self.mlp_ratio, attention=self.attention)


def corpus_parts(tokens: np.ndarray, vocab: list[str], val_fraction: float,
                 heldout_fraction: float, device: str | torch.device = "cpu",
                 source: str = "corpus") -> TextParts:
    """Token ids (n,) as the study's parts, int64 on ``device``: the last ``heldout_fraction``
    held out, the last ``val_fraction`` of the rest the validation split, the rest training."""
    n = len(tokens)
    for name, f in (("val_fraction", val_fraction), ("heldout_fraction", heldout_fraction)):
        if not 0 < f < 0.5:
            raise ValueError(f"{name}: expected a fraction in (0, 0.5), got {f!r}")
    cut = n - int(heldout_fraction * n)
    val = cut - int(val_fraction * cut)
    if not 0 < val < cut < n:
        raise ValueError(f"tokens: {n} tokens leave an empty part at these fractions")
    ids = torch.from_numpy(np.asarray(tokens, dtype=np.int64))
    return TextParts(ids[:val].to(device), ids[val:cut].to(device), ids[cut:].to(device),
                     list(vocab), source)


def fineweb_parts(shapes: GPT2Shapes, device: str | torch.device = "cpu") -> TextParts:
    """The first ``shapes.corpus_tokens`` GPT-2 tokens of FineWeb's first sample-10BT shard
    (made once, :func:`ddcl_theory.data.lm_corpus.corpus_tokens`) as the study's parts, with
    GPT-2's vocabulary (50,257 tokens, by id)."""
    from ddcl_theory.data import lm_corpus, paper
    vocab_file, merges = paper.gpt2_bpe_files()
    tokenizer = lm_corpus.bpe_tokenizer(vocab_file, merges)
    by_id = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    vocab = [token for token, _ in by_id]
    tokens = lm_corpus.corpus_tokens(shapes.corpus_tokens, vocab=vocab_file, merges=merges)
    return corpus_parts(tokens, vocab, shapes.val_fraction, shapes.heldout_fraction, device,
                        "FineWeb sample-10BT, first shard (GPT-2 BPE)")
