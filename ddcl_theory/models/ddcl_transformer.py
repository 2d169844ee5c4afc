"""A small Transformer classifier with a DDCL-Attention readout (claim D15).

    tokens (B, T, input_dim) or ids (B, T)
      -> linear patch projection or token embedding, + learned positions      (B, T, dim)
      -> ``depth`` x nn.TransformerEncoderLayer(batch_first=True, pre-norm)   (B, T, dim)
         (optionally with a DDCL block, residual + LayerNorm, after layer ``ddcl_block_after``)
      -> readout:  "ddcl": DDCLAttention(residual, LayerNorm) and its ``.pooled``  (B, dim)
                   "mean": masked mean of the encoder tokens, then LayerNorm       (B, dim)
      -> linear head                                                           (B, classes)

The "mean" readout is the baseline with the same encoder: it differs only in the pooling. The
optional DDCL block shows the layer used inside the stack, its ``.output`` feeding the next layer.
Under one seed (``torch.manual_seed``) every variant gets the same encoder and classifier
initialisation: the DDCL parts are built last.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ddcl_theory.layers.ddcl import DDCLAttention, DDCLOutput
from ddcl_theory.runtime.validate import check_choice, check_int_range, check_positive_int

READOUTS = ("ddcl", "mean")


@dataclass
class ClassifierOutput:
    """logits (B, num_classes); the DDCL readout's and the DDCL block's outputs (or None)."""

    logits: Tensor
    ddcl: DDCLOutput | None
    block: DDCLOutput | None = None


class DDCLTransformer(nn.Module):
    """Transformer encoder + DDCL-Attention (or mean-pool) readout + linear classifier.

    Args:
        num_classes: output classes.
        max_len: largest sequence length (learned positional embeddings).
        input_dim: feature size of continuous tokens (e.g. flattened patches); or
        vocab_size: size of a token vocabulary (then inputs are int ids); give exactly one.
        dim: model width. depth: encoder layers. attn_heads: heads of the encoder layers.
        num_prototypes, ddcl_heads, temperature: the DDCL readout's K, heads and tau.
        readout: "ddcl" or "mean". dropout: encoder dropout.
        ddcl_block_after: insert a DDCL block (residual + LayerNorm, same K, heads and tau) after
            encoder layer number ``ddcl_block_after`` (0-based); None for no block.
    """

    def __init__(self, num_classes: int, max_len: int, *, input_dim: int | None = None,
                 vocab_size: int | None = None, dim: int = 64, depth: int = 2, attn_heads: int = 4,
                 ff_mult: int = 2, num_prototypes: int = 16, ddcl_heads: int = 2,
                 temperature: float = 1.0, readout: str = "ddcl", dropout: float = 0.0,
                 ddcl_block_after: int | None = None) -> None:
        super().__init__()
        if (input_dim is None) == (vocab_size is None):
            raise ValueError("input_dim: give exactly one of input_dim (continuous tokens) and "
                             "vocab_size (token ids)")
        check_choice(readout, "readout", READOUTS)
        for name, value in (("num_classes", num_classes), ("max_len", max_len), ("dim", dim),
                            ("depth", depth), ("attn_heads", attn_heads)):
            check_positive_int(value, name)
        if ddcl_block_after is not None:
            check_int_range(ddcl_block_after, "ddcl_block_after (None for no block)", 0,
                            depth - 1)
        self.readout, self.max_len, self.ddcl_block_after = readout, max_len, ddcl_block_after
        self.embed = (nn.Linear(input_dim, dim) if input_dim is not None
                      else nn.Embedding(vocab_size, dim))
        self.pos = nn.Parameter(torch.randn(max_len, dim) * 0.02)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, attn_heads, dim_feedforward=ff_mult * dim,
                                       dropout=dropout, batch_first=True, norm_first=True)
            for _ in range(depth))
        self.encoder_norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        # The DDCL parts draw their random initialisation last, so that under one seed every
        # variant (readout, block, neither) starts from the same encoder and classifier.
        self.block = (DDCLAttention(dim, num_prototypes, heads=ddcl_heads, temperature=temperature,
                                    residual=True, norm=True)
                      if ddcl_block_after is not None else None)
        if readout == "ddcl":
            self.pool = DDCLAttention(dim, num_prototypes, heads=ddcl_heads,
                                      temperature=temperature, residual=True, norm=True)
        else:
            self.pool = nn.LayerNorm(dim)

    def encode_with_block(self, x: Tensor, mask: Tensor | None = None
                          ) -> tuple[Tensor, DDCLOutput | None]:
        """Encoder tokens (B, T, dim) and the DDCL block's output (None without a block)."""
        if x.dim() < 2 or x.shape[1] > self.max_len:
            raise ValueError(f"x: expected shape (B, T, ...) with T <= max_len={self.max_len}, "
                             f"got {tuple(x.shape)}")
        h = self.embed(x) + self.pos[: x.shape[1]]
        pad = None if mask is None else ~mask
        block_out = None
        for i, layer in enumerate(self.layers):
            h = layer(h, src_key_padding_mask=pad)
            if self.block is not None and i == self.ddcl_block_after:
                block_out = self.block(h, mask)
                h = block_out.output
        return self.encoder_norm(h), block_out

    @torch.no_grad()
    def init_prototypes_from(self, x: Tensor, mask: Tensor | None = None,
                             generator: torch.Generator | None = None) -> None:
        """k-means++ initialisation of each DDCL bank (block, readout) from the tokens reaching it.

        ``x`` (B, T, ...) as for :meth:`forward`; ``generator`` makes the choice reproducible.
        """
        h = self.embed(x) + self.pos[: x.shape[1]]
        pad = None if mask is None else ~mask
        for i, layer in enumerate(self.layers):
            h = layer(h, src_key_padding_mask=pad)
            if self.block is not None and i == self.ddcl_block_after:
                self.block.init_prototypes_from(h, mask, generator=generator)
                h = self.block(h, mask).output
        if self.readout == "ddcl":
            self.pool.init_prototypes_from(self.encoder_norm(h), mask, generator=generator)

    def encode(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """Encoder tokens (B, T, dim); ``mask`` (B, T) bool, True = valid."""
        return self.encode_with_block(x, mask)[0]

    def forward(self, x: Tensor, mask: Tensor | None = None) -> ClassifierOutput:
        """x (B, T, input_dim) floats or (B, T) ids -> :class:`ClassifierOutput`."""
        h, block_out = self.encode_with_block(x, mask)
        if self.readout == "ddcl":
            out = self.pool(h, mask)
            return ClassifierOutput(self.head(out.pooled), out, block_out)
        if mask is None:
            pooled = h.mean(1)
        else:
            w = mask.to(h.dtype).unsqueeze(-1)
            pooled = (h * w).sum(1) / w.sum(1).clamp_min(1.0)
        return ClassifierOutput(self.head(self.pool(pooled)), None, block_out)
