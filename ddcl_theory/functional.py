"""Pure tensor functions of DDCL-Attention: distances, soft assignments, loss terms.

Notation (the book's): tokens z (N, d), prototypes p (K, d) as rows, temperature tau > 0,
d_nk = ||z_n - p_k||^2, q_nk = softmax_k(-d_nk / tau), mu_n = sum_k q_nk p_k.
"""
from __future__ import annotations

import torch
from torch import Tensor

Temperature = float | Tensor


def work_dtype(*dtypes: torch.dtype) -> torch.dtype:
    """The float32 island: float64 if any of ``dtypes`` is float64, else float32 (float32,
    float16 and bfloat16 inputs all compute in float32)."""
    return torch.float64 if torch.float64 in dtypes else torch.float32


def check_temperature(temperature: Temperature, name: str = "temperature") -> None:
    """Raise ``ValueError`` unless the temperature is a finite positive scalar."""
    t = (temperature.detach() if isinstance(temperature, Tensor)
         else torch.tensor(float(temperature)))
    if t.numel() != 1:
        raise ValueError(f"{name}: expected a scalar, got shape {tuple(t.shape)}")
    if not bool(torch.isfinite(t)) or float(t) <= 0:
        raise ValueError(f"{name}: expected a finite value > 0, got {float(t)!r}")


def _check_pair(z: Tensor, prototypes: Tensor) -> None:
    if z.dim() != 2:
        raise ValueError(f"z: expected shape (N, d), got {tuple(z.shape)}")
    if prototypes.dim() != 2 or prototypes.shape[0] < 1:
        raise ValueError(f"prototypes: expected shape (K, d) with K >= 1, got "
                         f"{tuple(prototypes.shape)}")
    if z.shape[1] != prototypes.shape[1]:
        raise ValueError(f"prototypes: feature size {prototypes.shape[1]} does not match "
                         f"z's {z.shape[1]}")


def squared_distances(z: Tensor, prototypes: Tensor) -> Tensor:
    """d_nk = ||z_n - p_k||^2, shape (N, K), through one matrix product, clamped at 0.

    Computed in float32 (float64 for float64 inputs). Both arguments are shifted by the
    (detached) prototype mean first: distances are translation invariant and the shift keeps
    the expansion ||z||^2 - 2 z.p + ||p||^2 accurate for data far from the origin.
    """
    _check_pair(z, prototypes)
    work = work_dtype(torch.promote_types(z.dtype, prototypes.dtype))
    z, p = z.to(work), prototypes.to(work)
    # the matrix product stays in `work` precision under autocast too (cancellation-prone)
    with torch.autocast(device_type=z.device.type, enabled=False):
        centre = p.mean(dim=0, keepdim=True).detach()
        z, p = z - centre, p - centre
        d = (z * z).sum(-1, keepdim=True) - 2.0 * (z @ p.T) + (p * p).sum(-1).unsqueeze(0)
    return d.clamp_min(0.0)


def soft_assign(z: Tensor, prototypes: Tensor, temperature: Temperature) -> Tensor:
    """q (N, K): softmax over prototypes of -||z_n - p_k||^2 / temperature.

    The softmax runs in float32/float64 even under autocast; the result has z's dtype.
    """
    check_temperature(temperature)
    d = squared_distances(z, prototypes)
    tau = temperature.to(d.dtype) if isinstance(temperature, Tensor) else temperature
    with torch.autocast(device_type=d.device.type, enabled=False):
        q = torch.softmax(-d / tau, dim=-1)
    return q.to(z.dtype)


def soft_centroid(q: Tensor, prototypes: Tensor) -> Tensor:
    """mu (N, d) = q @ prototypes: the per-token convex combination of prototypes."""
    if q.dim() != 2 or q.shape[1] != prototypes.shape[0]:
        raise ValueError(f"q: expected shape (N, {prototypes.shape[0]}), got {tuple(q.shape)}")
    return q.to(prototypes.dtype) @ prototypes


def loss_terms(z: Tensor, prototypes: Tensor, q: Tensor,
               mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """(l_q, l_ols, v), each a mean over the N tokens, for any q on the simplex.

    l_q = sum_k q_nk ||z_n - p_k||^2, l_ols = ||z_n - mu_n||^2, v = sum_k q_nk ||p_k - mu_n||^2.
    ``mask`` (N,) bool keeps only the tokens marked True: the means are over those (the others
    count for nothing, whatever their values). With no token (N = 0, or none kept) all three
    are 0.
    """
    _check_pair(z, prototypes)
    if q.shape != (z.shape[0], prototypes.shape[0]):
        raise ValueError(f"q: expected shape ({z.shape[0]}, {prototypes.shape[0]}), "
                         f"got {tuple(q.shape)}")
    if mask is not None and (mask.dtype != torch.bool or mask.shape != (z.shape[0],)):
        raise ValueError(f"mask: expected a bool tensor of shape ({z.shape[0]},), "
                         f"got {mask.dtype} {tuple(mask.shape)}")
    work = work_dtype(torch.promote_types(z.dtype, prototypes.dtype))
    z, p, q = z.to(work), prototypes.to(work), q.to(work)
    count = max(z.shape[0], 1) if mask is None else mask.sum().clamp_min(1).to(work)

    def mean(per_token: Tensor) -> Tensor:
        """Sum of (N, ...) per-token terms over the kept tokens, divided by their count."""
        if mask is not None:
            per_token = torch.where(mask.unsqueeze(-1), per_token, per_token.new_zeros(()))
        return per_token.sum() / count

    with torch.autocast(device_type=z.device.type, enabled=False):
        centre = p.mean(dim=0, keepdim=True).detach()
        pc = p - centre
        mu_c = q @ pc                      # soft centroid, shifted
        l_q = mean(q * squared_distances(z, p))
        l_ols = mean((z - centre - mu_c) ** 2)
        # Pairwise form sum_k q_k ||p_k - mu||^2 = 1/2 sum_kl q_k q_l ||p_k - p_l||^2: a sum of
        # non-negative terms, so V >= 0 holds in floating point too (the centred difference
        # sum_k q_k ||p_k||^2 - ||mu||^2 rounds below zero for near one-hot q and large norms).
        # Costs one (N, K) @ (K, K) product.
        d_pp = squared_distances(p, p)
        v = 0.5 * mean((q @ d_pp) * q)
    return l_q, l_ols, v
