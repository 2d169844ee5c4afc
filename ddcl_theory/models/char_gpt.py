"""A compact character-level GPT (nanoGPT-like) whose causal attention may have Laplacian heads.

Token and learned position embeddings, pre-norm causal Transformer blocks
(:class:`.transformer.TransformerStack` with ``causal=True``), a final LayerNorm and a linear
language-model head, optionally tied to the token embedding.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ddcl_theory.models.transformer import TransformerStack
from ddcl_theory.runtime.validate import check_int_range, check_positive_int, check_shape

__all__ = ["CharGPT"]


class CharGPT(nn.Module):
    """Causal character-level language model.

    Args:
        vocab_size: number of characters V.
        block_size: longest context ``T_max``.
        dim, depth, heads: width, number of blocks, heads per block.
        laplacian_heads: Laplacian heads per layer: an int (all layers) or ``depth`` ints.
        mlp_ratio: MLP hidden width over ``dim``.
        dropout: dropout in the blocks.
        tie_weights: share the token embedding with the output head.

    Shapes: ``forward(idx (B, T) int64, T <= block_size) -> logits (B, T, V)``; with
    ``return_hidden=True`` also the residual-stream states ``[x_0, ..., x_depth]``, each
    (B, T, dim). Logits at position t depend on ``idx[:, :t+1]`` only.
    """

    def __init__(self, vocab_size: int, block_size: int, *, dim: int = 64, depth: int = 2,
                 heads: int = 4, laplacian_heads: int | Sequence[int] = 0, mlp_ratio: int = 4,
                 dropout: float = 0.0, tie_weights: bool = True) -> None:
        super().__init__()
        self.vocab_size = check_positive_int(vocab_size, "vocab_size")
        self.block_size = check_positive_int(block_size, "block_size")
        self.tok = nn.Embedding(vocab_size, dim)
        self.pos = nn.Embedding(block_size, dim)
        self.stack = TransformerStack(dim, depth, heads, laplacian_heads=laplacian_heads,
                                      causal=True, mlp_ratio=mlp_ratio, dropout=dropout)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)
        if tie_weights:
            self.head.weight = self.tok.weight

    @property
    def laplacian_heads(self) -> tuple[int, ...]:
        return self.stack.laplacian_heads

    def forward(self, idx: Tensor, return_hidden: bool = False
                ) -> Tensor | tuple[Tensor, list[Tensor]]:
        check_shape(idx, "idx", ("B", "T"), dtype=torch.long)
        t = check_int_range(idx.shape[1], "idx: length T (at most block_size)", 1, self.block_size)
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        states = self.stack(x)
        logits = self.head(self.norm(states[-1]))
        return (logits, states) if return_hidden else logits

    def loss(self, idx: Tensor, targets: Tensor) -> Tensor:
        """Mean next-character cross-entropy (nats) of ``targets`` (B, T) given ``idx`` (B, T)."""
        logits = self(idx)
        return F.cross_entropy(logits.reshape(-1, self.vocab_size), targets.reshape(-1))
