"""A small ViT (with or without Laplacian heads) whose readout is a DDCL-Attention layer (X2).

    patches (B, T, patch_dim)
      -> :class:`ddcl_theory.models.vit.ViT` encoder (its own classifier unused): the residual
         stream after the last block (B, T, dim) and its final LayerNorm, the tokens (B, T, dim)
      -> DDCLAttention(dim, K, heads, residual + LayerNorm) and its ``.pooled``  (B, dim)
      -> linear classifier                                                      (B, classes)

The encoder is the ViT of the Laplacian-head study (chapter ``laplacian_experiments``)
unchanged, so "with Laplacian heads" and "without" differ only in ``laplacian_heads``; the
readout is the DDCL readout of the chapter ``ddcl_layer``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ddcl_theory.layers.ddcl import DDCLAttention, DDCLOutput
from ddcl_theory.models.vit import ViT

__all__ = ["ViTDDCL", "ViTDDCLOutput"]


@dataclass
class ViTDDCLOutput:
    """logits (B, classes); the encoder's residual stream after its last block, ``stream``
    (B, T, dim), and its final-LayerNorm ``tokens`` (B, T, dim), which the readout reads; and
    the readout's output."""

    logits: Tensor
    tokens: Tensor
    readout: DDCLOutput
    stream: Tensor


class ViTDDCL(nn.Module):
    """ViT encoder + DDCL readout + linear classifier.

    Args:
        num_patches, patch_dim, num_classes: as for :class:`~ddcl_theory.models.vit.ViT`.
        dim, depth, heads, laplacian_heads, mlp_ratio: the encoder's.
        num_prototypes, ddcl_heads, temperature: the readout's K, heads and tau.
    """

    def __init__(self, num_patches: int, patch_dim: int, num_classes: int, *, dim: int = 32,
                 depth: int = 2, heads: int = 4, laplacian_heads: int = 0, mlp_ratio: int = 2,
                 num_prototypes: int = 16, ddcl_heads: int = 2,
                 temperature: float = 1.0) -> None:
        super().__init__()
        self.encoder = ViT(num_patches, patch_dim, num_classes, dim=dim, depth=depth,
                           heads=heads, laplacian_heads=laplacian_heads, mlp_ratio=mlp_ratio,
                           pool="mean")
        self.encoder.head.requires_grad_(False)          # the encoder's own classifier is unused
        self.readout = DDCLAttention(dim, num_prototypes, heads=ddcl_heads,
                                     temperature=temperature, residual=True, norm=True)
        self.head = nn.Linear(dim, num_classes)

    def encode(self, patches: Tensor) -> tuple[Tensor, Tensor]:
        """The residual stream after the encoder's last block and its final LayerNorm, the
        tokens: two (B, T, dim)."""
        _, states = self.encoder(patches, return_hidden=True)
        return states[-1], self.encoder.norm(states[-1])

    def tokens(self, patches: Tensor) -> Tensor:
        """The encoder's final-LayerNorm tokens (B, T, dim): what the readout reads."""
        return self.encode(patches)[1]

    @torch.no_grad()
    def init_prototypes_from(self, patches: Tensor,
                             generator: torch.Generator | None = None) -> None:
        """k-means++ seeding of the readout's banks on the tokens that reach it."""
        self.readout.init_prototypes_from(self.tokens(patches), generator=generator)

    def forward(self, patches: Tensor) -> ViTDDCLOutput:
        stream, z = self.encode(patches)
        out = self.readout(z)
        return ViTDDCLOutput(self.head(out.pooled), z, out, stream)
