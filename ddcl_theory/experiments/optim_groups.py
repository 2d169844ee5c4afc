"""AdamW parameter groups with weight decay on the weight matrices only.

The GPT-2 and DeiT recipes decay the matrices (linear weights, embeddings) and leave biases and
normalisation gains alone; ``extra_plain`` names further parameters kept out of the decay (DeiT's
position embeddings and CLS token).

    >>> opt = torch.optim.AdamW(decay_groups(model, 0.1), lr=6e-4)
"""
from __future__ import annotations

from collections.abc import Sequence

from torch import nn

__all__ = ["decay_groups"]


def decay_groups(module: nn.Module, weight_decay: float, *, stacked: bool = False,
                 extra_plain: Sequence[str] = ()) -> list[dict]:
    """Two AdamW groups of ``module``'s trainable parameters: ``weight_decay`` on those of two
    or more dimensions, 0 on vectors and scalars and on names ending in ``extra_plain``
    (``stacked``: every parameter carries a leading seed axis, which is not counted)."""
    if isinstance(extra_plain, str):
        raise ValueError(f"extra_plain: expected a sequence of name endings, got the string "
                         f"{extra_plain!r} (write ({extra_plain!r},))")
    decay, plain = [], []
    extra = 1 if stacked else 0
    for name, p in module.named_parameters():
        if not p.requires_grad:
            continue
        keep = p.dim() - extra <= 1 or name.endswith(tuple(extra_plain))
        (plain if keep else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": plain, "weight_decay": 0.0}]
