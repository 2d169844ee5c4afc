"""Prototype banks: k-means++ initialisation and the diagnostics the book reports.

* :func:`kmeans_pp_init` picks ``k`` data points by D^2 sampling (Arthur & Vassilvitskii 2007).
* :func:`usage` says how much of the bank the assignments use (hard and soft histograms).
* :func:`perplexity` is exp(H(mean q)): K when the mean assignment is uniform, 1 when one
  prototype takes all the mass.
* :func:`separation` is the prototype separation S(P); three definitions, chosen by ``kind``:

  - ``"min"``: min_{i<j} ||p_i - p_j||, the smallest pairwise Euclidean distance (not squared);
  - ``"mean"``: the mean of ||p_i - p_j|| over the K(K-1)/2 unordered pairs i < j;
  - ``"trace"``: tr Cov(P) = (1/K) sum_k ||p_k - pbar||^2 (population covariance, divisor K),
    which equals half the mean *squared* pairwise distance over ordered pairs (i, j), i != j,
    times (K-1)/K.

  With a single prototype there are no pairs: all three kinds return 0.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ddcl_theory.runtime.validate import check_positive_int

SEPARATION_KINDS = ("min", "mean", "trace")


def _as_rows(q: Tensor, name: str = "q") -> Tensor:
    """Flatten (..., K) to (N, K); raise on a scalar."""
    if not isinstance(q, Tensor) or q.dim() < 1:
        raise ValueError(f"{name}: expected a tensor of shape (..., K), "
                         f"got {getattr(q, 'shape', q)!r}")
    if q.shape[-1] < 1:
        raise ValueError(f"{name}: expected K >= 1 prototypes in the last dimension, "
                         f"got {tuple(q.shape)}")
    return q.reshape(-1, q.shape[-1])


def kmeans_pp_init(z: Tensor, k: int, generator: torch.Generator | None = None) -> Tensor:
    """k-means++ seeding: ``k`` rows of ``z`` (N, d) chosen by D^2 sampling, returned as (k, d).

    The first row is drawn uniformly; each next one with probability proportional to its squared
    distance to the nearest row already chosen. When every remaining point coincides with a chosen
    one (fewer than ``k`` distinct rows), the next row is drawn uniformly among those not yet
    chosen. The result is a copy of rows of ``z`` (same dtype, no gradient link). Pass a seeded
    ``generator`` for a reproducible choice.
    """
    if not isinstance(z, Tensor) or z.dim() != 2:
        raise ValueError(f"z: expected shape (N, d), got {getattr(z, 'shape', z)!r}")
    check_positive_int(k, "k")
    n = z.shape[0]
    if n < k:
        raise ValueError(f"z: k-means++ needs at least k={k} rows, got {n}")
    data = z.detach().to(torch.float64).cpu()
    gen_kw = {"generator": generator} if generator is not None else {}
    chosen = [int(torch.randint(n, (1,), **gen_kw))]
    nearest = ((data - data[chosen[0]]) ** 2).sum(-1)
    taken = torch.zeros(n, dtype=torch.bool)
    taken[chosen[0]] = True
    for _ in range(1, k):
        weights = torch.where(taken, torch.zeros_like(nearest), nearest.clamp_min(0.0))
        if float(weights.sum()) <= 0.0:
            weights = (~taken).to(torch.float64)
        idx = int(torch.multinomial(weights, 1, **gen_kw))
        chosen.append(idx)
        taken[idx] = True
        nearest = torch.minimum(nearest, ((data - data[idx]) ** 2).sum(-1))
    index = torch.tensor(chosen, device=z.device)
    return z.detach()[index].clone()


@dataclass(frozen=True)
class Usage:
    """How a set of assignments uses a bank of K prototypes.

    Attributes:
        histogram: (K,) fraction of tokens whose dominant (argmax) prototype is k; sums to 1.
        mass: (K,) mean soft assignment mean_n q_nk; sums to 1.
        fraction_used: fraction of prototypes that are the argmax of at least one token.
        dead: number of prototypes that are the argmax of no token.
    """

    histogram: Tensor
    mass: Tensor
    fraction_used: float
    dead: int


def usage(q: Tensor) -> Usage:
    """Usage of the bank by assignments ``q`` of shape (..., K) (all leading dims are tokens).

    A soft layer gives every prototype positive mass, so "used" is judged by the argmax: a
    prototype is used when it is the dominant one for at least one token.
    """
    rows = _as_rows(q).detach()
    n, k = rows.shape
    if n == 0:
        raise ValueError("q: expected at least one token (row), got none")
    counts = torch.bincount(rows.argmax(-1).cpu(), minlength=k).to(torch.float64)
    mass = rows.to(torch.float64).mean(0).cpu()
    used = int((counts > 0).sum())
    return Usage(histogram=counts / n, mass=mass, fraction_used=used / k, dead=k - used)


def perplexity(q: Tensor) -> Tensor:
    """exp(H(qbar)) with qbar = mean over tokens of q (..., K); a float64 scalar in [1, K]."""
    rows = _as_rows(q)
    if rows.shape[0] == 0:
        raise ValueError("q: expected at least one token (row), got none")
    qbar = rows.to(torch.float64).mean(0)
    entropy = -(torch.special.xlogy(qbar, qbar)).sum()
    return torch.exp(entropy)


def separation(prototypes: Tensor, kind: str = "min") -> Tensor:
    """Prototype separation S(P) of ``prototypes`` (..., K, d) -> (...); see the module docstring.

    ``kind`` is ``"min"`` (smallest pairwise distance), ``"mean"`` (mean pairwise distance) or
    ``"trace"`` (trace of the prototype covariance, divisor K). Computed in float64 (float32
    inputs are promoted) from explicit differences, so it stays exact for nearly coincident
    prototypes; differentiable except where two prototypes coincide (min/mean kinds).
    """
    if kind not in SEPARATION_KINDS:
        raise ValueError(f"kind: expected one of {SEPARATION_KINDS}, got {kind!r}")
    if not isinstance(prototypes, Tensor) or prototypes.dim() < 2:
        raise ValueError(f"prototypes: expected shape (..., K, d), got "
                         f"{getattr(prototypes, 'shape', prototypes)!r}")
    k = prototypes.shape[-2]
    if k < 1:
        raise ValueError(f"prototypes: expected K >= 1, got shape {tuple(prototypes.shape)}")
    p = prototypes.to(torch.float64)
    if kind == "trace":
        centred = p - p.mean(dim=-2, keepdim=True)
        return (centred ** 2).sum((-2, -1)) / k
    if k == 1:
        return p.new_zeros(p.shape[:-2])
    iu = torch.triu_indices(k, k, offset=1, device=p.device)
    diff = p[..., iu[0], :] - p[..., iu[1], :]          # (..., K(K-1)/2, d)
    dist = diff.pow(2).sum(-1).sqrt()
    return dist.amin(-1) if kind == "min" else dist.mean(-1)
