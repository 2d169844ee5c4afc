"""Collapse metrics for any set of readout vectors: slots, latents or prototypes (claim D17).

A readout keeps S vectors (per sequence, or one learned bank); it has *collapsed* when they
coincide (or span a low-dimensional set) or when a few of them take every token. Measured here,
all in float64:

* :func:`pairwise_distances` - min and mean Euclidean distance over the S(S-1)/2 pairs (the
  ``"min"`` and ``"mean"`` separations of :func:`ddcl_theory.metrics.prototypes.separation`).
* :func:`effective_rank` - exp of the Shannon entropy of the normalised singular values
  p_i = sigma_i / sum_j sigma_j of the (S, d) matrix (Roy & Vetterli 2007): 1 when all vectors
  are parallel (in particular when they coincide), min(S, d) when the singular values are equal,
  0 for the zero matrix by convention. Not centred: S equal non-zero vectors have rank 1.
* :func:`map_usage` - usage of the S vectors by tokens from assignment or attention maps
  (B, S, T): each valid token's column is normalised over S and handed to
  :func:`ddcl_theory.metrics.prototypes.usage` and :func:`ddcl_theory.metrics.prototypes.perplexity`, with the
  per-token perplexity (how shared a single token is).
* :func:`collapse_metrics` - all of the above for (S, d) or (B, S, d) vectors (batch-averaged),
  with the scale (root mean square norm) so that distances can be read relative to it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ddcl_theory.metrics import prototypes as protos

__all__ = ["CollapseMetrics", "MapUsage", "pairwise_distances", "effective_rank", "map_usage",
           "collapse_metrics"]


def _as_sets(vectors: Tensor, name: str = "vectors") -> Tensor:
    """(S, d) or (B, S, d) tensor -> float64 (B, S, d) tensor (detached)."""
    if not isinstance(vectors, Tensor):
        raise ValueError(f"{name}: expected a tensor of shape (S, d) or (B, S, d), "
                         f"got {type(vectors).__name__}")
    if vectors.dim() not in (2, 3):
        raise ValueError(f"{name}: expected shape (S, d) or (B, S, d), got {tuple(vectors.shape)}")
    if not vectors.is_floating_point():
        raise ValueError(f"{name}: expected a floating-point tensor, got {vectors.dtype}")
    v = vectors.detach().to(torch.float64)
    v = v.unsqueeze(0) if v.dim() == 2 else v
    if v.shape[0] < 1 or v.shape[1] < 1 or v.shape[2] < 1:
        raise ValueError(f"{name}: expected B, S, d >= 1, got shape {tuple(vectors.shape)}")
    if not bool(torch.isfinite(v).all()):
        raise ValueError(f"{name}: contains non-finite values")
    return v


def pairwise_distances(vectors: Tensor) -> tuple[Tensor, Tensor]:
    """(min, mean) pairwise Euclidean distance of vectors (S, d) -> two 0-dim float64 tensors, or
    (B, S, d) -> two (B,) tensors. With S = 1 there are no pairs and both are 0."""
    v = _as_sets(vectors)
    lo, mean = protos.separation(v, "min"), protos.separation(v, "mean")
    return (lo[0], mean[0]) if vectors.dim() == 2 else (lo, mean)


def effective_rank(vectors: Tensor) -> Tensor:
    """exp(H(sigma / sum sigma)) of vectors (S, d) -> 0-dim float64, or (B, S, d) -> (B,).

    In [1, min(S, d)] for a non-zero matrix; 0 for the zero matrix (see the module docstring).
    """
    v = _as_sets(vectors)
    sigma = torch.linalg.svdvals(v)                                   # (B, min(S, d))
    total = sigma.sum(-1, keepdim=True)
    p = sigma / total.clamp_min(torch.finfo(torch.float64).tiny)
    rank = torch.exp(-torch.special.xlogy(p, p).sum(-1))
    rank = torch.where(total.squeeze(-1) > 0, rank, torch.zeros_like(rank))
    return rank[0] if vectors.dim() == 2 else rank


@dataclass(frozen=True)
class MapUsage:
    """How the tokens of a batch use S slots/latents/prototypes.

    Attributes:
        fraction_used: fraction of the S that are the argmax of at least one valid token.
        dead: how many of the S are the argmax of no valid token.
        perplexity: exp(H(mean normalised column)), in [1, S]: balance of the usage.
        token_perplexity: exp(mean over tokens of H(normalised column)), in [1, S]: how spread
            one token's assignment is (S when every token is shared equally by all S, i.e. no
            competition; 1 for hard assignments).
        histogram: (S,) fraction of valid tokens whose argmax is s.
        tokens: number of valid tokens counted (tokens with an all-zero column are skipped).
    """

    fraction_used: float
    dead: int
    perplexity: float
    token_perplexity: float
    histogram: Tensor
    tokens: int


def map_usage(attention: Tensor, mask: Tensor | None = None) -> MapUsage:
    """Usage from maps ``attention`` (B, S, T) >= 0 and ``mask`` (B, T) bool (True = valid).

    Each valid token's column a_{:, t} is divided by its sum (a softmax over S is left as it is;
    a softmax over tokens becomes "which slot reads this token most"). Raises when no valid
    token has a non-zero column.
    """
    if not isinstance(attention, Tensor) or attention.dim() != 3:
        got = tuple(attention.shape) if isinstance(attention, Tensor) else attention
        raise ValueError(f"attention: expected shape (B, S, T), got {got!r}")
    a = attention.detach().to(torch.float64)
    if not bool(torch.isfinite(a).all()) or bool((a < 0).any()):
        raise ValueError("attention: expected finite, non-negative values")
    b, s, t = a.shape
    if mask is None:
        mask = torch.ones(b, t, dtype=torch.bool, device=a.device)
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.shape != (b, t):
        raise ValueError(f"mask: expected a bool tensor of shape (B, T)={(b, t)}, got "
                         f"{getattr(mask, 'dtype', type(mask).__name__)} "
                         f"{tuple(getattr(mask, 'shape', ()))}")
    cols = a.transpose(1, 2)[mask.to(a.device)]                      # (N, S)
    total = cols.sum(-1, keepdim=True)
    cols = cols[total.squeeze(-1) > 0] / total[total.squeeze(-1) > 0]
    if cols.shape[0] == 0:
        raise ValueError("attention: no valid token with a non-zero column")
    use = protos.usage(cols)
    token_entropy = -torch.special.xlogy(cols, cols).sum(-1).mean()
    return MapUsage(use.fraction_used, use.dead, float(protos.perplexity(cols)),
                    float(torch.exp(token_entropy)), use.histogram, int(cols.shape[0]))


@dataclass(frozen=True)
class CollapseMetrics:
    """Collapse of S vectors in R^d (averaged over the batch for (B, S, d) input).

    Attributes:
        min_distance, mean_distance: pairwise Euclidean distances (0 when S = 1).
        effective_rank: see :func:`effective_rank`.
        scale: root mean square norm sqrt(mean_s ||v_s||^2).
        relative_min_distance: min_distance / scale per set, then averaged (0 for zero sets).
        count: S.
    """

    min_distance: float
    mean_distance: float
    effective_rank: float
    scale: float
    relative_min_distance: float
    count: int

    def collapsed(self, relative_distance: float = 0.05, rank: float = 1.5) -> bool:
        """A stated rule: the relative min distance is below ``relative_distance`` *and* the
        effective rank below ``rank`` (two vectors close together alone is not a collapse)."""
        return self.relative_min_distance < relative_distance and self.effective_rank < rank


def collapse_metrics(vectors: Tensor) -> CollapseMetrics:
    """:class:`CollapseMetrics` of vectors (S, d) or (B, S, d) (per set, then batch means)."""
    v = _as_sets(vectors)
    lo, mean = protos.separation(v, "min"), protos.separation(v, "mean")
    rank = effective_rank(v)
    scale = v.pow(2).sum(-1).mean(-1).sqrt()                          # (B,)
    rel = torch.where(scale > 0, lo / scale.clamp_min(torch.finfo(torch.float64).tiny),
                      torch.zeros_like(lo))
    return CollapseMetrics(float(lo.mean()), float(mean.mean()), float(rank.mean()),
                           float(scale.mean()), float(rel.mean()), int(v.shape[1]))
