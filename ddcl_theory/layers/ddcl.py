"""DDCL-Attention: a prototype readout layer (Cirrincione & Kumar 2026, our formalisation).

For every valid token x_t in R^dim and every head h:

    z_t^h  = W_in^h x_t                        (per-head input projection, R^dim -> R^head_dim)
    q_tk^h = softmax_k( -||z_t^h - p_k^h||^2 / tau )   (soft assignment to the head's bank)
    mu_t^h = sum_k q_tk^h p_k^h                (soft centroid: a convex combination of prototypes)
    y_t    = W_out [mu_t^1; ...; mu_t^H] + b   (output projection)
    out_t  = LayerNorm(x_t + y_t)              (residual and LayerNorm, each switchable off)

There is no token-token interaction: the cost is O(T K d) per sequence and nothing is iterated at
inference. Masked tokens (mask False) are replaced by zeros before the projection and give zero
rows in ``output`` and ``assignments``; they touch neither the valid tokens, the pooled summary,
the losses nor any gradient.

``pooled`` (B, dim) is the masked mean over valid tokens of y_t (equivalently W_out applied to the
mean soft centroid, plus the bias): a per-sequence summary that lies in the image of the convex
hulls of the prototype banks. A row with no valid token (fully masked, or T = 0) gets zeros.

Temperature (documented choice): ``temperature`` is either a positive float (fixed; change it with
:meth:`DDCLAttention.set_temperature`), or a callable ``schedule(step: int) -> float`` evaluated at
the layer's step counter (advance it with :meth:`DDCLAttention.advance_schedule`; the counter is a
buffer and is saved in the state dict). ``learnable_temperature=True`` makes tau = exp(log_tau) a
parameter started at the given float.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .. import functional as F
from .. import prototypes as protos

Schedule = Callable[[int], float]


@dataclass
class DDCLLosses:
    """Loss terms of one forward pass, each a scalar: per token the sum over prototypes, averaged
    over valid tokens and heads. ``l_q = l_ols + v`` up to rounding (the decomposition)."""

    l_q: Tensor
    l_ols: Tensor
    v: Tensor


@dataclass
class DDCLOutput:
    """What :meth:`DDCLAttention.forward` returns.

    Attributes:
        output: (B, T, dim) the layer's tokens (zeros at masked positions).
        assignments: (B, heads, T, K) soft assignments q (rows sum to 1; zero rows where masked).
        pooled: (B, dim) masked mean of the projected soft centroids (zeros for empty rows).
        losses: the scalars l_q, l_ols, v.
        z: (B, heads, T, head_dim) the projected tokens the prototypes see.
        centroids: (B, heads, T, head_dim) the soft centroids mu.
    """

    output: Tensor
    assignments: Tensor
    pooled: Tensor
    losses: DDCLLosses
    z: Tensor
    centroids: Tensor


@dataclass(frozen=True)
class DDCLDiagnostics:
    """Per-head diagnostics of a layer on a batch (tuples have one entry per head)."""

    fraction_used: tuple[float, ...]
    perplexity: tuple[float, ...]
    separation_min: tuple[float, ...]
    separation_mean: tuple[float, ...]
    separation_trace: tuple[float, ...]
    temperature: float
    l_q: float
    l_ols: float
    v: float


class DDCLAttention(nn.Module):
    """Multi-head DDCL-Attention layer; see the module docstring for the equations.

    Args:
        dim: token feature size of the input and the output.
        num_prototypes: K >= 1 prototypes per head.
        heads: number of heads, each with its own input projection and prototype bank.
        head_dim: size of a head's projection; default ``dim // heads`` (then ``dim`` must be
            divisible by ``heads``).
        temperature: a float > 0 or a schedule ``step -> float`` (see the module docstring).
        learnable_temperature: learn tau = exp(log_tau), started at ``temperature`` (a float).
        residual: add the input to the projected centroids.
        norm: apply LayerNorm(dim) last.
        bias: biases in the input and output projections.
        projections: with False, no input or output projection: head h sees features
            [h*head_dim, (h+1)*head_dim) of x directly (needs heads * head_dim == dim), so the
            prototypes live in the input space (used to draw them, e.g. as image patches).
        prototype_std: standard deviation of the random normal prototype initialisation.
    """

    def __init__(self, dim: int, num_prototypes: int, *, heads: int = 1,
                 head_dim: int | None = None,
                 temperature: float | Schedule = 1.0, learnable_temperature: bool = False,
                 residual: bool = True, norm: bool = True, bias: bool = True,
                 projections: bool = True, prototype_std: float = 0.5) -> None:
        super().__init__()
        _check_positive_int(dim, "dim")
        _check_positive_int(num_prototypes, "num_prototypes")
        _check_positive_int(heads, "heads")
        if head_dim is None:
            if dim % heads:
                raise ValueError(f"dim: expected a multiple of heads={heads} (or pass head_dim), "
                                 f"got {dim}")
            head_dim = dim // heads
        _check_positive_int(head_dim, "head_dim")
        if not (isinstance(prototype_std, (int, float)) and prototype_std > 0):
            raise ValueError(f"prototype_std: expected a float > 0, got {prototype_std!r}")
        self.dim, self.num_prototypes = dim, num_prototypes
        self.heads, self.head_dim = heads, head_dim
        if not projections and heads * head_dim != dim:
            raise ValueError(f"head_dim: without projections heads * head_dim must equal "
                             f"dim={dim}, got {heads} * {head_dim}")
        self.residual, self.use_norm = bool(residual), bool(norm)
        self.projections = bool(projections)

        width = heads * head_dim
        self.in_proj = nn.Linear(dim, width, bias=bias) if projections else nn.Identity()
        self.out_proj = nn.Linear(width, dim, bias=bias) if projections else nn.Identity()
        self.prototypes = nn.Parameter(torch.randn(heads, num_prototypes, head_dim) * prototype_std)
        self.norm = nn.LayerNorm(dim) if norm else nn.Identity()

        self._schedule: Schedule | None = None
        self.register_buffer("temperature_step", torch.zeros((), dtype=torch.long))
        if callable(temperature):
            if learnable_temperature:
                raise ValueError("temperature: a schedule cannot also be learnable; pass a float")
            self._schedule = temperature
            F.check_temperature(float(temperature(0)), "temperature")
            self.register_buffer("_fixed_temperature", torch.tensor(float("nan")))
            self.log_temperature = None
        else:
            F.check_temperature(temperature, "temperature")
            if learnable_temperature:
                self.log_temperature = nn.Parameter(torch.tensor(math.log(float(temperature))))
                self.register_buffer("_fixed_temperature", torch.tensor(float("nan")))
            else:
                self.log_temperature = None
                self.register_buffer("_fixed_temperature", torch.tensor(float(temperature)))

    # ----------------------------------------------------------------------------- temperature
    def current_temperature(self) -> Tensor:
        """tau now, a 0-dim tensor (carries a gradient when learnable)."""
        if self.log_temperature is not None:
            return self.log_temperature.exp()
        if self._schedule is not None:
            value = float(self._schedule(int(self.temperature_step)))
            F.check_temperature(value, "temperature")
            return torch.tensor(value, device=self.prototypes.device)
        return self._fixed_temperature

    @property
    def temperature(self) -> float:
        """tau now, as a float."""
        return float(self.current_temperature().detach())

    def set_temperature(self, value: float) -> None:
        """Fix tau to ``value`` (> 0); replaces a schedule; sets a learnable tau's current value."""
        F.check_temperature(value, "value")
        if self.log_temperature is not None:
            with torch.no_grad():
                self.log_temperature.fill_(math.log(float(value)))
            return
        self._schedule = None
        self._fixed_temperature.fill_(float(value))

    def advance_schedule(self, steps: int = 1) -> int:
        """Advance the schedule's step counter by ``steps`` (>= 0); return the new step."""
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"steps: expected an int >= 0, got {steps!r}")
        self.temperature_step += steps
        return int(self.temperature_step)

    # ----------------------------------------------------------------------------- forward
    def _check_input(self, x: Tensor, mask: Tensor | None) -> Tensor:
        if not isinstance(x, Tensor) or x.dim() != 3:
            raise ValueError(f"x: expected shape (B, T, dim={self.dim}), got "
                             f"{tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__}")
        if x.shape[-1] != self.dim:
            raise ValueError(f"x: expected feature size dim={self.dim}, got {x.shape[-1]}")
        if not x.is_floating_point():
            raise ValueError(f"x: expected a floating-point tensor, got {x.dtype}")
        if mask is None:
            return torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
            raise ValueError(f"mask: expected a bool tensor (True = valid token), got "
                             f"{mask.dtype if isinstance(mask, Tensor) else type(mask).__name__}")
        if mask.shape != x.shape[:2]:
            raise ValueError(f"mask: expected shape (B, T)={tuple(x.shape[:2])}, "
                             f"got {tuple(mask.shape)}")
        return mask.to(x.device)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> DDCLOutput:
        """x (B, T, dim), mask (B, T) bool with True = valid token -> :class:`DDCLOutput`."""
        valid = self._check_input(x, mask)
        b, t, _ = x.shape
        h, k, hd = self.heads, self.num_prototypes, self.head_dim
        keep = valid.unsqueeze(-1)
        x_in = torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))
        z = self.in_proj(x_in).reshape(b, t, h, hd).transpose(1, 2)        # (B, H, T, hd)
        tau = self.current_temperature()
        flat_valid = valid.reshape(-1)

        qs, mus, terms = [], [], []
        for head in range(h):
            z_h = z[:, head].reshape(b * t, hd)
            p_h = self.prototypes[head]
            q_h = F.soft_assign(z_h, p_h, tau)                                # (B*T, K)
            qs.append(q_h.reshape(b, t, k))
            mus.append(F.soft_centroid(q_h, p_h).reshape(b, t, hd))
            terms.append(F.loss_terms(z_h[flat_valid], p_h, q_h[flat_valid]))
        q = torch.stack(qs, dim=1)                                            # (B, H, T, K)
        mu = torch.stack(mus, dim=1)                                          # (B, H, T, hd)
        keep4 = valid[:, None, :, None]
        q = torch.where(keep4, q, torch.zeros((), dtype=q.dtype, device=q.device))
        mu = torch.where(keep4, mu, torch.zeros((), dtype=mu.dtype, device=mu.device))

        y = self.out_proj(mu.transpose(1, 2).reshape(b, t, h * hd))          # (B, T, dim)
        zero_y = torch.zeros((), dtype=y.dtype, device=y.device)
        y = torch.where(keep, y, zero_y)
        counts = valid.sum(1, keepdim=True).clamp_min(1).to(y.dtype)          # (B, 1)
        pooled = y.sum(1) / counts

        out = x_in + y if self.residual else y
        out = self.norm(out)
        out = torch.where(keep, out, torch.zeros((), dtype=out.dtype, device=out.device))

        l_q, l_ols, v = (torch.stack([term[i] for term in terms]).mean() for i in range(3))
        if not bool(flat_valid.any()):   # keep the (zero) losses in the graph of the prototypes
            link = self.prototypes.sum() * 0
            l_q, l_ols, v = l_q + link, l_ols + link, v + link
        return DDCLOutput(out, q, pooled, DDCLLosses(l_q, l_ols, v), z, mu)

    # ----------------------------------------------------------------------------- prototypes
    @torch.no_grad()
    def init_prototypes_from(self, x: Tensor, mask: Tensor | None = None,
                             generator: torch.Generator | None = None) -> None:
        """Set each head's bank by k-means++ on the projected valid tokens of ``x`` (B, T, dim).

        Needs at least ``num_prototypes`` valid tokens; pass a seeded ``generator`` to make the
        choice reproducible.
        """
        valid = self._check_input(x, mask)
        z = self.in_proj(x[valid])                                            # (N, H*hd)
        if z.shape[0] < self.num_prototypes:
            raise ValueError(f"x: init_prototypes_from needs at least num_prototypes="
                             f"{self.num_prototypes} valid tokens, got {z.shape[0]}")
        z = z.reshape(-1, self.heads, self.head_dim)
        for head in range(self.heads):
            bank = protos.kmeans_pp_init(z[:, head], self.num_prototypes, generator=generator)
            self.prototypes[head].copy_(bank.to(self.prototypes.dtype))

    @torch.no_grad()
    def diagnostics(self, x: Tensor, mask: Tensor | None = None) -> DDCLDiagnostics:
        """Usage, perplexity and separation per head, and the losses, on a batch (no gradient)."""
        valid = self._check_input(x, mask)
        out = self(x, valid)
        used, ppl = [], []
        for head in range(self.heads):
            q_h = out.assignments[:, head][valid]                             # (N, K)
            if q_h.shape[0] == 0:
                used.append(0.0)
                ppl.append(float("nan"))
                continue
            used.append(protos.usage(q_h).fraction_used)
            ppl.append(float(protos.perplexity(q_h)))
        seps = {kind: tuple(float(s) for s in protos.separation(self.prototypes, kind))
                for kind in protos.SEPARATION_KINDS}
        return DDCLDiagnostics(tuple(used), tuple(ppl), seps["min"], seps["mean"], seps["trace"],
                               self.temperature, float(out.losses.l_q), float(out.losses.l_ols),
                               float(out.losses.v))

    def extra_repr(self) -> str:
        tau = "schedule" if self._schedule is not None else (
            "learnable" if self.log_temperature is not None else f"{self.temperature:g}")
        return (f"dim={self.dim}, num_prototypes={self.num_prototypes}, heads={self.heads}, "
                f"head_dim={self.head_dim}, temperature={tau}, residual={self.residual}, "
                f"norm={self.use_norm}, projections={self.projections}")


def _check_positive_int(value: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
