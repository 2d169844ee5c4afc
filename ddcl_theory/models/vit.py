"""A small Vision Transformer whose attention layers may have Laplacian heads.

Patch embedding (a linear map of flattened patches, see :func:`ddcl_theory.data.image_patches`),
learned position embeddings, pre-norm Transformer blocks (:class:`.transformer.TransformerStack`),
a final LayerNorm and a linear classifier (Dosovitskiy et al. 2021).

Pooling: ``pool="mean"`` (default) classifies the mean of the patch tokens, so the classifier
reads exactly the sequence means on which the Neural Collapse metrics are computed;
``pool="cls"`` prepends a learned CLS token and classifies it (the DeiT/ViT choice).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ddcl_theory.models.transformer import TransformerStack
from ddcl_theory.runtime.validate import check_choice, check_positive_int, check_shape

__all__ = ["ViT"]


class ViT(nn.Module):
    """Vision Transformer on pre-extracted patches.

    Args:
        num_patches: tokens per image ``T`` (e.g. 16 for 32x32 images and 8x8 patches).
        patch_dim: features per flattened patch (``p * p * channels``).
        num_classes: output classes.
        dim, depth, heads: width, number of blocks, heads per block.
        laplacian_heads: Laplacian heads per layer: an int (all layers) or ``depth`` ints.
        mlp_ratio: MLP hidden width over ``dim``.
        pool: ``"mean"`` or ``"cls"``.
        dropout: dropout in the blocks.

    Shapes: ``forward(patches (B, T, patch_dim)) -> logits (B, num_classes)``; with
    ``return_hidden=True`` also the residual-stream states ``[x_0, ..., x_depth]``, each
    (B, T', dim) with ``T' = T`` (mean pooling) or ``T + 1`` (CLS first).
    """

    def __init__(self, num_patches: int, patch_dim: int, num_classes: int, *, dim: int = 64,
                 depth: int = 2, heads: int = 4, laplacian_heads: int | Sequence[int] = 0,
                 mlp_ratio: int = 2, pool: str = "mean", dropout: float = 0.0) -> None:
        super().__init__()
        self.num_patches = check_positive_int(num_patches, "num_patches")
        self.patch_dim = check_positive_int(patch_dim, "patch_dim")
        check_positive_int(num_classes, "num_classes")
        self.pool = check_choice(pool, "pool", ("mean", "cls"))
        self.embed = nn.Linear(patch_dim, dim)
        n_pos = num_patches + (1 if pool == "cls" else 0)
        self.pos = nn.Parameter(torch.randn(1, n_pos, dim) * 0.02)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim)) if pool == "cls" else None
        self.stack = TransformerStack(dim, depth, heads, laplacian_heads=laplacian_heads,
                                      mlp_ratio=mlp_ratio, dropout=dropout)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    @property
    def laplacian_heads(self) -> tuple[int, ...]:
        return self.stack.laplacian_heads

    def forward(self, patches: Tensor, return_hidden: bool = False
                ) -> Tensor | tuple[Tensor, list[Tensor]]:
        check_shape(patches, "patches", ("B", self.num_patches, self.patch_dim))
        x = self.embed(patches)
        if self.cls is not None:
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
        states = self.stack(x + self.pos)
        z = self.norm(states[-1])
        pooled = z[:, 0] if self.cls is not None else z.mean(dim=1)
        logits = self.head(pooled)
        return (logits, states) if return_hidden else logits
