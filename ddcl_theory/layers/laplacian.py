"""Multi-head attention with Laplacian heads (Zhang & Papyan 2026).

An ordinary head h computes ``P_h V_h`` with the row-stochastic attention matrix
``P_h = softmax(Q_h K_h^T / sqrt(d_h))``. A Laplacian head computes ``(I - P_h) V_h = V_h - P_h V_h``
instead: the random-walk Laplacian of the token graph applied to the values. As in the authors'
code, the *trailing* ``laplacian_heads`` heads are Laplacian; all heads share one input
projection (Q, K, V) and one output projection, so the parameter count does not depend on how
many heads are Laplacian.

Two computation paths give the same result (tested):

* fused: ``torch.nn.functional.scaled_dot_product_attention`` computes ``P V`` for all heads at
  once, and the Laplacian heads subtract it from ``V`` (one subtraction of a (B, L, T, d_h) tensor:
  no extra matrix product, no extra parameter);
* explicit: forms ``P`` (B, heads, T, T) and multiplies; used when ``return_attention=True`` or
  when the module's ``explicit`` attribute is set. ``scaled_dot_product_attention`` has no
  ``vmap`` batching rule on the CPU, so a stack of seeds
  (:class:`~ddcl_theory.runtime.stacked.StackedModels`) sets ``explicit`` in its own copy
  (``vmap_safe_switch``).

Masks. ``mask`` (B, T) is a key-padding mask with True marking valid tokens: no query attends to
a padding key. With ``causal=True`` query t attends keys s <= t only. A query row can only be
left with no key at all when it is itself padding (e.g. a left-padded first position under a
causal mask, or an all-padding sequence); such a row gets ``P = 0`` and a zero head output on
*every* head (attention and Laplacian alike), so ``y`` there equals the output-projection bias
and no NaN appears. Valid query rows always keep at least themselves as a key under either mask
kind, so this convention never touches a valid token.

Dropout. ``dropout`` is attention dropout on ``P`` (as in ``nn.MultiheadAttention``), active in
training mode only. A dropped-out ``P`` is no longer row-stochastic, so in training the identity
``(I - P) 1 = 0`` and the heat-diffusion reading of a Laplacian head hold only in expectation;
in ``eval()`` mode they hold exactly. When ``return_attention=True`` in training mode the
returned ``P`` is the dropped-out matrix actually used to form ``y``.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ddcl_theory.runtime.validate import (check_divisible, check_int_range, check_positive_int,
                                          check_probability, check_tokens)

__all__ = ["LaplacianAttention"]


class LaplacianAttention(nn.Module):
    """The multi-head attention sublayer (no residual, no norm) with trailing Laplacian heads.

    Args:
        dim: model width d (input and output feature size).
        heads: number of heads H; ``dim`` must be divisible by ``heads`` (head width d_h = d / H).
        laplacian_heads: how many of the last heads output ``V - P V`` instead of ``P V``;
            an int in ``[0, heads]``. With 0 the layer is exactly standard multi-head attention.
        causal: if True, query t attends keys s <= t only (lower-triangular ``P``).
        dropout: attention dropout probability on ``P``, in ``[0, 1)``; training mode only.
        bias: whether the input and output projections have biases (default True, as in
            ``nn.MultiheadAttention``).
        explicit: compute through the explicit ``P`` even when attention is not returned
            (slower; for checks). Can be changed later through the attribute of the same name.

    Parameters follow ``nn.MultiheadAttention``'s layout so that weights copy one-to-one:
    ``in_proj`` (weight (3d, d) = [W_Q; W_K; W_V], bias (3d,)) and ``out_proj`` (d -> d).

    Shapes: ``forward(x (B, T, d), mask (B, T) bool | None) -> y (B, T, d)``, or
    ``(y, P)`` with ``P`` (B, H, T, T) when ``return_attention=True``.

    Raises:
        ValueError: naming the argument and the expected range: ``dim`` or ``heads`` not an
            int >= 1, ``dim`` not divisible by ``heads``, ``laplacian_heads`` outside
            ``[0, heads]``, ``dropout`` outside ``[0, 1)``; and in ``forward``, an ``x`` that
            is not (B, T, dim) or a ``mask`` that is not (B, T).

    Example:
        >>> import torch
        >>> attn = LaplacianAttention(32, heads=4, laplacian_heads=2).eval()
        >>> x = torch.randn(2, 6, 32)
        >>> y, p = attn(x, return_attention=True)
        >>> y.shape, p.shape
        (torch.Size([2, 6, 32]), torch.Size([2, 4, 6, 6]))
        >>> bool(torch.allclose(p.sum(-1), torch.ones(2, 4, 6)))  # P is row-stochastic
        True
    """

    #: The attribute that selects the vmap-safe path (see :mod:`ddcl_theory.runtime.stacked`).
    vmap_safe_switch = "explicit"

    def __init__(self, dim: int, heads: int, *, laplacian_heads: int = 0, causal: bool = False,
                 dropout: float = 0.0, bias: bool = True, explicit: bool = False) -> None:
        super().__init__()
        dim = check_positive_int(dim, "dim")
        heads = check_positive_int(heads, "heads")
        check_divisible(dim, "dim", heads, "heads")
        self.dim = dim
        self.heads = heads
        self.head_dim = dim // heads
        self.laplacian_heads = check_int_range(laplacian_heads, "laplacian_heads", 0, heads)
        self.causal = bool(causal)
        self.dropout = check_probability(dropout, "dropout")
        self.explicit = bool(explicit)
        self.in_proj = nn.Linear(dim, 3 * dim, bias=bias)
        self.out_proj = nn.Linear(dim, dim, bias=bias)
        self.reset_parameters()

    @property
    def attention_heads(self) -> int:
        """Number of ordinary (leading) heads, ``heads - laplacian_heads``."""
        return self.heads - self.laplacian_heads

    def reset_parameters(self) -> None:
        """Initialise like ``nn.MultiheadAttention``: Xavier-uniform in-proj, zero biases."""
        nn.init.xavier_uniform_(self.in_proj.weight)
        if self.in_proj.bias is not None:
            nn.init.zeros_(self.in_proj.bias)
            nn.init.zeros_(self.out_proj.bias)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, heads={self.heads}, laplacian_heads={self.laplacian_heads}, "
                f"causal={self.causal}, dropout={self.dropout}")

    # ----------------------------------------------------------------------------- pieces
    def _split_heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v of shape (B, H, T, d_h) from x (B, T, d)."""
        b, t, _ = x.shape
        qkv = self.in_proj(x).view(b, t, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        return q, k, v

    def _allowed(self, mask: Tensor | None, t: int, device: torch.device) -> Tensor | None:
        """Boolean mask of allowed (query, key) pairs, broadcastable to (B, H, T, T), or None.

        Shapes: (1, 1, T, T) causal only; (B, 1, 1, T) padding only; (B, 1, T, T) both.
        """
        allowed = None
        if self.causal:
            allowed = torch.ones(t, t, dtype=torch.bool, device=device).tril().view(1, 1, t, t)
        if mask is not None:
            keys = mask.view(mask.shape[0], 1, 1, t)
            allowed = keys if allowed is None else allowed & keys
        return allowed

    def _combine(self, pv: Tensor, v: Tensor) -> Tensor:
        """Per-head outputs (B, H, T, d_h): P V on attention heads, V - P V on Laplacian heads."""
        a = self.attention_heads
        if self.laplacian_heads == 0:
            return pv
        if a == 0:
            return v - pv
        return torch.cat([pv[:, :a], v[:, a:] - pv[:, a:]], dim=1)

    def _attend_fused(self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None,
                      p_drop: float, padded: bool) -> Tensor:
        if allowed is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p_drop)
        if self.causal and not padded:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p_drop, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p_drop)

    def _attention_matrix(self, q: Tensor, k: Tensor, allowed: Tensor | None,
                          p_drop: float) -> Tensor:
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        p = torch.softmax(scores, dim=-1)
        if p_drop > 0.0:
            p = F.dropout(p, p=p_drop, training=True)
        return p

    # ----------------------------------------------------------------------------- forward
    def forward(self, x: Tensor, mask: Tensor | None = None,
                return_attention: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """y (B, T, d); with ``return_attention=True`` the tuple ``(y, P)``, P (B, H, T, T).

        ``mask`` (B, T) bool, True = valid token (key-padding mask). See the module docstring
        for fully masked query rows and for dropout.
        """
        mask = check_tokens(x, mask, self.dim)
        b, t, _ = x.shape
        q, k, v = self._split_heads(x)
        allowed = self._allowed(mask, t, x.device)
        empty_rows = None
        if allowed is not None and mask is not None:
            has_key = allowed.any(dim=-1, keepdim=True)            # (B, 1, T or 1, 1)
            if not bool(has_key.all()):
                empty_rows = ~has_key
                allowed = allowed | empty_rows                     # finite softmax; zeroed below
        p_drop = self.dropout if self.training else 0.0

        p = None
        if return_attention or self.explicit:
            p = self._attention_matrix(q, k, allowed, p_drop)
            if empty_rows is not None:
                p = p.masked_fill(empty_rows, 0.0)
            pv = p @ v
        else:
            pv = self._attend_fused(q, k, v, allowed, p_drop, padded=mask is not None)
        heads_out = self._combine(pv, v)
        if empty_rows is not None:
            heads_out = heads_out.masked_fill(empty_rows, 0.0)
        y = self.out_proj(heads_out.transpose(1, 2).reshape(b, t, self.dim))
        if return_attention:
            return y, p
        return y
