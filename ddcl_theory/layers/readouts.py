"""Readouts of frozen token embeddings: pooling baselines, packed tokens and a DDCL readout.

A *readout* turns a sequence of token embeddings (B, T, d) with a mask (B, T) into one vector
per sequence. Compared here, all on the same frozen tokens:

* ``cls``: the first token ([CLS]);
* ``mean``: the mean over the tokens under the attention mask;
* ``ddcl``: :class:`DDCLPooledReadout`, the ``pooled`` output of a :class:`DDCLAttention` layer (the
  mean projected soft centroid), trained together with a linear head on cross-entropy
  + ``beta`` * L_q.

How the readouts are trained and probed (logistic regression, the DDCL readout with a linear
head, k-means and DDCL clusterings) is :mod:`ddcl_theory.experiments.probes`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ddcl_theory.layers.ddcl import DDCLAttention, DDCLOutput
from ddcl_theory.runtime.validate import (check_int_range, check_positive_float, check_shape,
                                          check_tokens)

__all__ = ["Standardiser", "masked_mean", "first_token", "PackedTokens", "segment_mean",
           "lloyd", "DDCLPooledReadout"]


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """(B, d): the mean of x (B, T, d) over the tokens where mask (B, T) is True (0 if none)."""
    check_tokens(x, mask, require_mask=True)
    w = mask.to(x.dtype).unsqueeze(-1)
    return (x * w).sum(1) / w.sum(1).clamp_min(1)


def first_token(x: Tensor, mask: Tensor) -> Tensor:
    """(B, d): the first token of every sequence (the [CLS] token of a BERT encoder)."""
    check_tokens(x, mask, require_mask=True)
    return x[:, 0]


@dataclass(frozen=True)
class Standardiser:
    """Per-feature standardisation with statistics of the training tokens or vectors.

    Attributes:
        mean, std: (d,) float32 tensors.
    """

    mean: Tensor
    std: Tensor

    @classmethod
    def fit(cls, x: Tensor, mask: Tensor | None = None) -> "Standardiser":
        """From vectors (N, d), or from the valid tokens of x (B, T, d) under mask (B, T)."""
        rows = x[mask] if mask is not None else x
        if rows.dim() != 2 or rows.shape[0] < 2:
            raise ValueError(f"x: expected at least two vectors (N, d), got {tuple(rows.shape)}")
        std, mean = torch.std_mean(rows.float(), dim=0)
        return cls(mean, std.clamp_min(1e-6))

    def __call__(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """Standardised float32 copy of x (..., d); masked tokens (mask False) set to 0."""
        out = (x.float() - self.mean.to(x.device)) / self.std.to(x.device)
        if mask is not None:
            out = out * mask.unsqueeze(-1)
        return out


@dataclass(frozen=True)
class PackedTokens:
    """The valid tokens of N sequences stacked without padding.

    Attributes:
        values: (total, d) float32 tokens.
        offsets: (N + 1,) int64; sequence i owns rows ``offsets[i]:offsets[i + 1]``.
    """

    values: Tensor
    offsets: Tensor

    def __post_init__(self) -> None:
        check_shape(self.values, "values", ("total", "d"))
        off = self.offsets
        if off.dim() != 1 or off.numel() < 2 or int(off[0]) != 0 \
                or int(off[-1]) != self.values.shape[0] or bool((off.diff() < 1).any()):
            raise ValueError("offsets: expected (N + 1,) increasing from 0 to total, every "
                             "sequence with at least one token")

    @classmethod
    def from_padded(cls, x: Tensor, mask: Tensor) -> "PackedTokens":
        """From padded x (B, T, d) and mask (B, T); every row needs a valid token."""
        check_tokens(x, mask, require_mask=True)
        lengths = mask.sum(1)
        offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
        return cls(x[mask].float(), offsets)

    def __len__(self) -> int:
        return self.offsets.numel() - 1

    @property
    def lengths(self) -> Tensor:
        return self.offsets.diff()

    def batch(self, index: Tensor) -> tuple[Tensor, Tensor]:
        """The tokens of the sequences at ``index`` (n,): (tokens (m, d), segment ids (m,) in
        [0, n), saying which of the n sequences each token belongs to)."""
        index = index.to(self.offsets.device)
        lengths = self.lengths[index]
        seg = torch.repeat_interleave(torch.arange(len(index), device=index.device), lengths)
        starts = torch.repeat_interleave(self.offsets[index], lengths)
        first = torch.repeat_interleave(lengths.cumsum(0) - lengths, lengths)
        rows = starts + torch.arange(int(lengths.sum()), device=index.device) - first
        return self.values[rows], seg

    def standardised(self, std: "Standardiser") -> "PackedTokens":
        return PackedTokens(std(self.values), self.offsets)


def segment_mean(values: Tensor, segments: Tensor, n: int) -> Tensor:
    """(n, d): the mean of the rows of values (m, d) that carry each segment id (0 if none)."""
    out = values.new_zeros((n, values.shape[1])).index_add_(0, segments, values)
    counts = torch.bincount(segments, minlength=n).clamp_min(1).to(values.dtype)
    return out / counts[:, None]


@torch.no_grad()
def lloyd(z: Tensor, centres: Tensor, iterations: int = 10) -> Tensor:
    """``iterations`` k-means (Lloyd) steps on rows of z (N, d) from ``centres`` (K, d).

    k-means++ seeding (D^2 sampling) likes outliers: on frozen-encoder tokens it can spend a
    prototype on far-away tokens, which then owns almost no typical token; at a fixed temperature
    its assignments saturate at 0 and it never moves (a dead prototype from the start; we saw it
    decide whole runs of the K = 2 readout). Lloyd steps move every seed to the mean of the
    points it owns, which removed that dead start in our runs; they are a local method, so a
    seed that owns only outliers stays with them. A centre that owns no point stays put.
    Returns the new (K, d) centres (float64 arithmetic, z's dtype).
    """
    check_shape(z, "z", ("N", "d"))
    check_shape(centres, "centres", ("K", z.shape[1]))
    x = z.detach().to(torch.float64)
    c = centres.detach().to(torch.float64).clone()
    for _ in range(iterations):
        label = torch.cdist(x, c).argmin(1)
        sums = torch.zeros_like(c).index_add_(0, label, x)
        counts = torch.bincount(label, minlength=c.shape[0]).to(x.dtype)
        filled = counts > 0
        c[filled] = sums[filled] / counts[filled, None]
    return c.to(z.dtype)


class DDCLPooledReadout(nn.Module):
    """A DDCL-Attention layer read out through ``pooled``, then a linear head.

    ``pooled`` (B, dim) is the masked mean over a sequence's tokens of y_t = W_out mu_t + b: an
    affine image of the mean soft centroid, which lies in the convex hull of the K prototypes,
    so a bottleneck of dimension at most K - 1 per head. Residual and LayerNorm do not enter
    ``pooled`` and are off.

    The layer has no token-token interaction, so it runs on packed tokens (no padding): every
    token goes through the layer as a sequence of length one and the per-sequence mean is taken
    afterwards (:func:`segment_mean`); this equals the layer's own ``pooled`` on the padded batch
    (tested), and the loss terms are the same means over valid tokens.

    Args:
        dim: token width d; num_classes: C; num_prototypes: K per head;
        heads, head_dim, temperature: as in :class:`DDCLAttention`.
    """

    def __init__(self, dim: int, num_classes: int, num_prototypes: int, *, heads: int = 1,
                 head_dim: int | None = None, temperature: float = 1.0) -> None:
        super().__init__()
        check_int_range(num_classes, "num_classes", 2)
        self.ddcl = DDCLAttention(dim, num_prototypes, heads=heads, head_dim=head_dim,
                                  temperature=temperature, residual=False, norm=False)
        self.head = nn.Linear(dim, num_classes)

    def pooled(self, tokens: Tensor, segments: Tensor, n: int) -> tuple[Tensor, DDCLOutput]:
        """tokens (m, dim) of n sequences, segment ids (m,) -> (pooled (n, dim), layer output
        on the (m, 1, dim) token batch).

        ``pooled`` = W_out (mean of the soft centroids) + b, the layer's ``pooled`` by linearity;
        averaging the centroids (H*hd wide) before W_out spares the backward pass through W_out
        for every token.
        """
        out = self.ddcl(tokens.unsqueeze(1))
        mu = out.centroids[:, :, 0].reshape(tokens.shape[0], -1)                 # (m, H*hd)
        return self.ddcl.out_proj(segment_mean(mu, segments, n)), out

    def forward(self, tokens: Tensor, segments: Tensor, n: int) -> tuple[Tensor, DDCLOutput]:
        """-> (logits (n, C), layer output)."""
        pooled, out = self.pooled(tokens, segments, n)
        return self.head(pooled), out

    @torch.no_grad()
    def calibrate(self, tokens: Tensor, fraction: float,
                  generator: torch.Generator | None = None, lloyd_steps: int = 10) -> float:
        """Seed the prototypes by k-means++ and ``lloyd_steps`` k-means steps (:func:`lloyd`) on
        the projected ``tokens`` (m, dim) and set the
        temperature to ``fraction`` times their mean squared distance to their mean (so that
        the initial assignments are neither one-hot nor uniform whatever the scale); return tau.
        """
        check_positive_float(fraction, "fraction")
        self.ddcl.init_prototypes_from(tokens.unsqueeze(1), generator=generator)
        z = self.ddcl.in_proj(tokens)
        bank = self.ddcl.prototypes
        for h in range(self.ddcl.heads):
            cols = slice(h * self.ddcl.head_dim, (h + 1) * self.ddcl.head_dim)
            bank[h].copy_(lloyd(z[:, cols], bank[h], lloyd_steps))
        spread = float(((z - z.mean(0)) ** 2).sum(-1).mean()) / self.ddcl.heads
        tau = max(fraction * spread, 1e-6)
        self.ddcl.temperature.set(tau)
        return tau
