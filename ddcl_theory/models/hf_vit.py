"""The field's ViT for the paper profile: transformers' ``ViTForImageClassification`` at the
papers' shapes, with Laplacian heads (:func:`ddcl_theory.laplacianize`) and stochastic depth.

:class:`HFViT` wraps the transformers model so that it reads like the package's
:class:`~ddcl_theory.models.vit.ViT`: ``forward(pixels)`` gives logits, ``forward(pixels,
return_hidden=True)`` also the residual stream before the first block and after each (CLS
first), and :attr:`HFViT.norm` is the final LayerNorm, so ``norm(states[-1])[:, 0]`` is the
vector the classifier reads. transformers' ViT has no stochastic depth; DeiT's (each block's
attention and MLP branch dropped per image, with a rate rising linearly over depth from 0 to
``drop_path``, the kept ones scaled by 1 / keep) is added with forward hooks and is active in
training mode only.

    >>> model = HFViT(100, image_size=32, patch=4, dim=384, depth=12, heads=6,
    ...               laplacian_heads=6, drop_path=0.1)        # ViT-S/4, all heads Laplacian
    >>> logits = model(torch.randn(2, 3, 32, 32))              # (2, 100)
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ddcl_theory.layers.laplacianize import laplacianize
from ddcl_theory.runtime.validate import check_choice, check_positive_int, check_shape

__all__ = ["HFViT", "drop_path_rates", "draw_drop_scale"]


def drop_path_rates(drop_path: float, depth: int) -> list[float]:
    """DeiT's per-block stochastic-depth rates: linear from 0 (first block) to ``drop_path``
    (last)."""
    if not 0.0 <= drop_path < 1.0:
        raise ValueError(f"drop_path: expected a rate in [0, 1), got {drop_path!r}")
    if depth == 1:
        return [0.0]
    return [drop_path * i / (depth - 1) for i in range(depth)]


def _drop_branch(rate: float):
    """A forward hook that drops a residual branch's output per image in training mode: by the
    multipliers (B,) :meth:`HFViT.forward` left in the module's ``drop_scale`` (drawn from a
    caller's generator), else by a draw from torch's global generator with probability
    ``rate`` (kept outputs scaled by 1 / (1 - rate)). A tuple output: its first element."""
    def hook(module: nn.Module, _args, output):
        if not module.training or rate == 0.0:
            return output
        out = output[0] if isinstance(output, tuple) else output
        scale = getattr(module, "drop_scale", None)
        if scale is None:
            keep = 1.0 - rate
            scale = (torch.rand(out.shape[0], device=out.device) < keep).to(out.dtype) / keep
        out = out * scale.to(out.dtype).reshape((-1,) + (1,) * (out.dim() - 1))
        return (out,) + tuple(output[1:]) if isinstance(output, tuple) else out
    return hook


def draw_drop_scale(rates: list[float], batch: int, gen: torch.Generator) -> Tensor:
    """Stochastic-depth multipliers (batch, depth, 2) for the attention and MLP branch of every
    block at per-block ``rates``, drawn from ``gen``: 0 (dropped) or 1 / (1 - rate) (kept).
    Passed to :meth:`HFViT.forward`, they make a training step a function of ``gen`` alone (a
    stacked seed then draws what its sequential twin draws)."""
    keep = 1.0 - torch.tensor(rates, dtype=torch.float32)[None, :, None]
    return (torch.rand(batch, len(rates), 2, generator=gen) < keep).float() / keep


class HFViT(nn.Module):
    """transformers' ViT classifier (CLS token, final LayerNorm, linear head).

    Args:
        num_classes: output classes.
        image_size, patch: image side and patch side in pixels (``image_size % patch == 0``).
        dim, depth, heads, mlp_ratio: width, blocks, heads per block, MLP width over ``dim``.
        laplacian_heads: the last ``laplacian_heads`` heads of every block compute ``V - P V``.
        drop_path: the last block's stochastic-depth rate (DeiT's linear rule below it).
        attention: transformers' attention function under the Laplacian one ("eager" or
            "sdpa"; eager stacks under ``vmap`` on the CPU).

    Shapes: ``forward(pixels (B, 3, image_size, image_size)) -> logits (B, num_classes)``; with
    ``return_hidden=True`` also ``[x_0, ..., x_depth]``, each (B, 1 + T, dim), T = (image_size
    / patch)^2, before the final LayerNorm. ``drop_scale`` (B, depth, 2), optional: the
    stochastic-depth multipliers of :meth:`draw_drop_scale` (training mode only).
    """

    def __init__(self, num_classes: int, *, image_size: int = 32, patch: int = 4,
                 dim: int = 384, depth: int = 12, heads: int = 6, mlp_ratio: int = 4,
                 laplacian_heads: int = 0, drop_path: float = 0.0,
                 attention: str = "eager") -> None:
        super().__init__()
        from transformers import ViTConfig, ViTForImageClassification
        check_positive_int(num_classes, "num_classes")
        check_positive_int(patch, "patch")
        if check_positive_int(image_size, "image_size") % patch:
            raise ValueError(f"image_size: expected a multiple of patch={patch}, got "
                             f"{image_size}")
        if check_positive_int(dim, "dim") % check_positive_int(heads, "heads"):
            raise ValueError(f"dim: expected a multiple of heads={heads}, got {dim}")
        check_choice(attention, "attention", ("eager", "sdpa"))
        self.image_size = image_size
        config = ViTConfig(hidden_size=dim, num_hidden_layers=check_positive_int(depth, "depth"),
                           num_attention_heads=heads, intermediate_size=mlp_ratio * dim,
                           image_size=image_size, patch_size=patch, num_channels=3,
                           num_labels=num_classes, hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0)
        config._attn_implementation = attention
        self.hf = ViTForImageClassification(config)
        laplacianize(self.hf, laplacian_heads)
        self.laplacian_heads = int(laplacian_heads)
        self.drop_path = drop_path_rates(drop_path, depth)
        for layer, rate in zip(self.hf.vit.layers, self.drop_path):
            layer.attention.register_forward_hook(_drop_branch(rate))
            layer.mlp.register_forward_hook(_drop_branch(rate))

    @property
    def norm(self) -> nn.LayerNorm:
        """The final LayerNorm (before the classifier)."""
        return self.hf.vit.layernorm

    def draw_drop_scale(self, batch: int, gen: torch.Generator) -> Tensor:
        """:func:`draw_drop_scale` at this model's rates."""
        return draw_drop_scale(self.drop_path, batch, gen)

    def forward(self, pixels: Tensor, drop_scale: Tensor | None = None,
                return_hidden: bool = False) -> Tensor | tuple[Tensor, list[Tensor]]:
        check_shape(pixels, "pixels", ("B", 3, self.image_size, self.image_size))
        if drop_scale is not None:
            check_shape(drop_scale, "drop_scale", (pixels.shape[0], len(self.drop_path), 2))
        for i, layer in enumerate(self.hf.vit.layers):
            layer.attention.drop_scale = None if drop_scale is None else drop_scale[:, i, 0]
            layer.mlp.drop_scale = None if drop_scale is None else drop_scale[:, i, 1]
        try:
            out = self.hf(pixel_values=pixels, output_hidden_states=return_hidden)
        finally:
            for layer in self.hf.vit.layers:
                layer.attention.drop_scale = layer.mlp.drop_scale = None
        return (out.logits, list(out.hidden_states)) if return_hidden else out.logits
