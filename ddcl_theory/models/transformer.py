"""Pre-norm Transformer blocks built on :class:`~ddcl_theory.layers.laplacian.LaplacianAttention`.

Shared by the small ViT (:mod:`.vit`) and the character-level GPT (:mod:`.char_gpt`)::

    x <- x + attn(LN(x))        attn: multi-head attention whose trailing heads are Laplacian
    x <- x + mlp(LN(x))         mlp: Linear(d, r d) -> GELU -> Linear(r d, d)
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ddcl_theory.layers.laplacian import LaplacianAttention
from ddcl_theory.runtime.validate import check_int_range, check_positive_int

__all__ = ["TransformerBlock", "TransformerStack", "laplacian_heads_per_layer",
           "value_output_maps"]


def laplacian_heads_per_layer(spec: int | Sequence[int], depth: int, heads: int) -> tuple[int, ...]:
    """Per-layer numbers of Laplacian heads: an int is broadcast to all ``depth`` layers.

    Raises ``ValueError`` naming ``laplacian_heads`` when the length is not ``depth`` or a value
    is outside ``[0, heads]``.
    """
    if isinstance(spec, int):                        # bools too: check_int_range refuses them
        return (check_int_range(spec, "laplacian_heads", 0, heads),) * depth
    counts = tuple(spec)
    if len(counts) != depth:
        raise ValueError(f"laplacian_heads: expected {depth} values (one per layer), "
                         f"got {len(counts)}")
    for layer, c in enumerate(counts):
        check_int_range(c, f"laplacian_heads[{layer}]", 0, heads)
    return counts


def value_output_maps(attn: LaplacianAttention) -> Tensor:
    """Per-head value-output maps ``M_h = W_{V,h} W_{O,h}``, shape (H, d, d).

    In the row-vector convention of the layer (``y = x W^T + b`` for ``nn.Linear``), head ``h``
    adds ``P_h X M_h`` (attention head) or ``(I - P_h) X M_h`` (Laplacian head) to its output,
    up to the value bias and the output bias; ``M_h`` has rank at most ``d / H``.
    """
    d, dh = attn.dim, attn.head_dim
    w_v = attn.in_proj.weight[2 * d:3 * d].detach()          # (d, d): v = x w_v^T
    w_o = attn.out_proj.weight.detach()                      # (d, d): y = o w_o^T
    return torch.stack([w_v[h * dh:(h + 1) * dh].T @ w_o[:, h * dh:(h + 1) * dh].T
                        for h in range(attn.heads)])


class TransformerBlock(nn.Module):
    """One pre-norm block: ``x + attn(LN(x))`` then ``x + mlp(LN(x))``.

    Args:
        dim: width d.
        heads: number of heads.
        laplacian_heads: how many trailing heads are Laplacian (``V - P V``).
        causal: causal attention (language models).
        mlp_ratio: hidden width of the MLP as a multiple of ``dim``.
        dropout: dropout on attention probabilities and on the two residual branches.

    Shapes: ``forward(x (B, T, d), mask (B, T) bool | None) -> (B, T, d)``.
    """

    def __init__(self, dim: int, heads: int, *, laplacian_heads: int = 0, causal: bool = False,
                 mlp_ratio: int = 4, dropout: float = 0.0) -> None:
        super().__init__()
        check_positive_int(mlp_ratio, "mlp_ratio")
        self.norm1 = nn.LayerNorm(dim)
        self.attn = LaplacianAttention(dim, heads, laplacian_heads=laplacian_heads,
                                       causal=causal, dropout=dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(),
                                 nn.Linear(mlp_ratio * dim, dim))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        x = x + self.drop(self.attn(self.norm1(x), mask=mask))
        return x + self.drop(self.mlp(self.norm2(x)))


class TransformerStack(nn.Module):
    """``depth`` blocks with a per-layer number of Laplacian heads.

    ``forward(x, mask=None)`` returns the list of residual-stream states
    ``[x_0, x_1, ..., x_depth]`` (each (B, T, d)), ``x_0`` being the input.
    """

    def __init__(self, dim: int, depth: int, heads: int, *,
                 laplacian_heads: int | Sequence[int] = 0, causal: bool = False,
                 mlp_ratio: int = 4, dropout: float = 0.0) -> None:
        super().__init__()
        check_positive_int(depth, "depth")
        self.laplacian_heads = laplacian_heads_per_layer(laplacian_heads, depth, heads)
        self.blocks = nn.ModuleList(
            TransformerBlock(dim, heads, laplacian_heads=c, causal=causal, mlp_ratio=mlp_ratio,
                             dropout=dropout)
            for c in self.laplacian_heads)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> list[Tensor]:
        states = [x]
        for block in self.blocks:
            x = block(x, mask=mask)
            states.append(x)
        return states
