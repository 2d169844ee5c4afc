"""DDCL-Attention: a prototype readout layer (Cirrincione & Kumar 2026, our formalisation).

For every valid token x_t in R^dim and every head h:

    z_t^h  = W_in^h x_t                        (per-head input projection, R^dim -> R^head_dim)
    q_tk^h = softmax_k( -||z_t^h - p_k^h||^2 / tau )   (soft assignment to the head's bank)
    mu_t^h = sum_k q_tk^h p_k^h                (soft centroid: a convex combination of prototypes)
    y_t    = W_out [mu_t^1; ...; mu_t^H] + b   (output projection)
    out_t  = LayerNorm(x_t + y_t)              (residual and LayerNorm, each switchable off)

and the loss terms, means over valid tokens and heads, with L_q = L_OLS + V:

    L_q = sum_k q_tk^h ||z_t^h - p_k^h||^2,  L_OLS = ||z_t^h - mu_t^h||^2,
    V   = sum_k q_tk^h ||p_k^h - mu_t^h||^2.

There is no token-token interaction: the cost is O(T K d) per sequence and nothing is iterated at
inference. Masked tokens (mask False) are replaced by zeros before the projection and give zero
rows in ``output`` and ``assignments``; they touch neither the valid tokens, the pooled summary,
the losses nor any gradient.

``pooled`` (B, dim) is the masked mean over valid tokens of y_t (equivalently W_out applied to the
mean soft centroid, plus the bias): a per-sequence summary that lies in the image of the convex
hulls of the prototype banks. A row with no valid token (fully masked, or T = 0) gets zeros.

tau is the submodule ``layer.temperature``, a :class:`~ddcl_theory.layers.temperature.Temperature`
(fixed, scheduled or learnable).

Two computation paths give the same results (tested on values and float64 gradients):

* explicit (``explicit=True``, or the attribute of the same name): the equations above, head by
  head, on :mod:`ddcl_theory.functional`; the method to read is ``_forward_explicit``;
* fused (the default): :func:`~ddcl_theory.layers.ddcl_fused.prototype_readout` computes q, mu
  and the loss terms of all heads in chunks of tokens with a hand-derived backward pass (peak
  memory linear in T; see :mod:`ddcl_theory.bench`). It never converts a tensor to a Python
  number, never indexes by a boolean mask and never sizes a tensor by its data, so it has no
  host-device synchronisation and compiles with ``torch.compile(layer, fullgraph=True)``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ddcl_theory import functional as F
from ddcl_theory.layers.ddcl_fused import prototype_readout
from ddcl_theory.layers.temperature import Schedule, Temperature
from ddcl_theory.metrics import prototypes as protos
from ddcl_theory.runtime.validate import check_positive_int, check_tokens, valid_tokens

__all__ = ["DDCLAttention", "DDCLOutput", "DDCLLosses", "DDCLDiagnostics", "Schedule"]


@dataclass
class DDCLLosses:
    """The loss terms of one forward pass (see the module docstring), each a 0-dim tensor."""

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
        temperature: a float > 0 or a schedule ``step -> float``; becomes ``self.temperature``.
        learnable_temperature: learn tau = exp(log_tau), started at ``temperature`` (a float).
        residual: add the input to the projected centroids.
        norm: apply LayerNorm(dim) last.
        bias: biases in the input and output projections.
        projections: with False, no input or output projection: head h sees features
            [h*head_dim, (h+1)*head_dim) of x directly (needs heads * head_dim == dim), so the
            prototypes live in the input space (used to draw them, e.g. as image patches).
        prototype_std: standard deviation of the random normal prototype initialisation.
        explicit: compute through the explicit equations instead of the fused path (slower; for
            reading and checks). Can be changed later through the attribute of the same name.

    Raises:
        ValueError: naming the argument and the expected range: a size that is not an int
            >= 1, ``dim`` not divisible by ``heads`` (without ``head_dim``), a temperature
            that is not finite and > 0, a ``prototype_std`` <= 0; and in :meth:`forward`, an
            ``x`` that is not (B, T, dim) or a ``mask`` that is not (B, T).

    Example:
        >>> import torch
        >>> layer = DDCLAttention(16, num_prototypes=8, heads=2, temperature=0.5)
        >>> x = torch.randn(4, 10, 16)
        >>> mask = torch.arange(10) < 7                  # the last 3 tokens are padding
        >>> out = layer(x, mask.expand(4, 10))
        >>> out.output.shape, out.assignments.shape, out.pooled.shape
        (torch.Size([4, 10, 16]), torch.Size([4, 2, 10, 8]), torch.Size([4, 16]))
        >>> bool(out.assignments[:, :, 7:].eq(0).all())  # no assignment for padding
        True
        >>> gap = out.losses.l_q - out.losses.l_ols - out.losses.v   # L_q = L_OLS + V
        >>> bool(gap.abs() < 1e-4)
        True
    """

    def __init__(self, dim: int, num_prototypes: int, *, heads: int = 1,
                 head_dim: int | None = None,
                 temperature: float | Schedule = 1.0, learnable_temperature: bool = False,
                 residual: bool = True, norm: bool = True, bias: bool = True,
                 projections: bool = True, prototype_std: float = 0.5,
                 explicit: bool = False) -> None:
        super().__init__()
        head_dim = _checked_head_dim(dim, num_prototypes, heads, head_dim, projections,
                                     prototype_std)
        self.dim, self.num_prototypes = dim, num_prototypes
        self.heads, self.head_dim = heads, head_dim
        self.residual, self.use_norm = bool(residual), bool(norm)
        self.projections = bool(projections)
        self.explicit = bool(explicit)

        width = heads * head_dim
        self.in_proj = nn.Linear(dim, width, bias=bias) if projections else nn.Identity()
        self.out_proj = nn.Linear(width, dim, bias=bias) if projections else nn.Identity()
        self.prototypes = nn.Parameter(torch.randn(heads, num_prototypes, head_dim) * prototype_std)
        self.norm = nn.LayerNorm(dim) if norm else nn.Identity()
        self.temperature = Temperature(temperature, learnable=learnable_temperature)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> DDCLOutput:
        """x (B, T, dim), mask (B, T) bool with True = valid token -> :class:`DDCLOutput`."""
        valid = check_tokens(x, mask, self.dim)                       # (B, T) bool or None
        if self.explicit:
            return self._forward_explicit(x, valid)
        return self._forward_fused(x, valid)

    def _forward_explicit(self, x: Tensor, valid: Tensor | None) -> DDCLOutput:
        """The module docstring's equations, head by head, on (B*T, features) matrices."""
        b, t, _ = x.shape
        n, h, k, hd = b * t, self.heads, self.num_prototypes, self.head_dim
        keep = x.new_ones((n,), dtype=torch.bool) if valid is None else valid.reshape(n)
        rows = keep.unsqueeze(-1)                                       # (N, 1)
        zero = x.new_zeros(())
        x_in = torch.where(rows, x.reshape(n, self.dim), zero)          # masked tokens -> 0
        z = self.in_proj(x_in).view(n, h, hd)
        tau = self.temperature()
        q, mu, losses = [], [], []
        for head, bank in enumerate(self.prototypes):                   # bank (K, hd)
            z_h = z[:, head]                                            # (N, hd)
            q_h = F.soft_assign(z_h, bank, tau) * rows      # (N, K) softmax_k(-||z - p_k||^2 / tau)
            q.append(q_h)
            mu.append(F.soft_centroid(q_h, bank))           # (N, hd) sum_k q_k p_k
            losses.append(torch.stack(F.loss_terms(z_h, bank, q_h, keep)))  # L_q, L_OLS, V
        mu = torch.cat(mu, dim=-1)                                      # (N, H*hd)
        y = torch.where(rows, self.out_proj(mu), zero)                  # (N, dim)
        out = self.norm(x_in + y if self.residual else y)
        out = torch.where(rows, out, zero)
        counts = keep.view(b, t).sum(1, keepdim=True).clamp_min(1)      # (B, 1)
        pooled = y.view(b, t, self.dim).sum(1) / counts.to(y.dtype)     # (B, dim)
        l_q, l_ols, v = torch.stack(losses).mean(0)                     # mean over heads
        return DDCLOutput(out.view(b, t, self.dim),
                          torch.stack(q).view(h, b, t, k).transpose(0, 1),   # (B, H, T, K)
                          pooled, DDCLLosses(l_q, l_ols, v),
                          z.view(b, t, h, hd).transpose(1, 2),
                          mu.view(b, t, h, hd).transpose(1, 2))

    def _forward_fused(self, x: Tensor, valid: Tensor | None) -> DDCLOutput:
        """The same outputs through :func:`prototype_readout`: masked tokens are computed like
        the others and weighted by 0."""
        tau = self.temperature()
        b, t, _ = x.shape
        n, h, k, hd = b * t, self.heads, self.num_prototypes, self.head_dim
        # Everything runs on (B*T, features) matrices: in-place steps below then act on fresh
        # tensors, never on views (autograd would copy whole tensors to rebase a view).
        keep = None if valid is None else valid.reshape(n, 1)
        x2 = x.reshape(n, self.dim)
        x_in = x2 if keep is None else torch.where(keep, x2, x2.new_zeros(()))  # (B*T, dim)
        z = self.in_proj(x_in)                                          # (B*T, H*hd)
        q, mu, sums = prototype_readout(z, self.prototypes, tau,
                                        None if valid is None else valid.reshape(n))
        mu3 = mu.view(b, t, h * hd)
        pooled = self._pool(mu3, valid)                                 # (B, dim)
        out = self._tokens(x_in, mu, keep)                              # (B*T, dim)
        l_q, l_ols, v = (sums / _token_count(valid, n, h, sums.dtype)).unbind(0)
        return DDCLOutput(out.view(b, t, self.dim),
                          q.view(h, b, t, k).permute(1, 0, 2, 3),             # (B, H, T, K)
                          pooled, DDCLLosses(l_q, l_ols, v),
                          z.view(b, t, h, hd).transpose(1, 2),
                          mu3.view(b, t, h, hd).transpose(1, 2))

    def _pool(self, mu3: Tensor, valid: Tensor | None) -> Tensor:
        """W_out (mean over valid tokens of mu (B, T, H*hd)) + b: (B, dim); zeros for rows
        without a token."""
        b, t, _ = mu3.shape
        if valid is None:
            return self.out_proj(mu3.mean(1)) if t > 0 else mu3.new_zeros((b, self.dim))
        counts = valid.sum(1, keepdim=True)                                   # (B, 1)
        pooled = self.out_proj(mu3.sum(1) / counts.clamp_min(1).to(mu3.dtype))
        return torch.where(counts > 0, pooled,
                           torch.zeros((), dtype=pooled.dtype, device=pooled.device))

    def _tokens(self, x_in: Tensor, mu: Tensor, keep: Tensor | None) -> Tensor:
        """LayerNorm(x + W_out mu + b): (B*T, dim), zero rows where ``keep`` (B*T, 1) is False.

        In-place steps only act on tensors created here whose autograd nodes do not keep them
        (linear, add, layer_norm).
        """
        out = self.out_proj(mu)
        fresh = self.projections
        if self.residual:
            out = out.add_(x_in) if fresh and x_in.dtype == out.dtype else out + x_in
            fresh = True
        if self.use_norm:
            out = self.norm(out)
            fresh = True
        if keep is not None:
            zero = out.new_zeros(())
            out = out.masked_fill_(~keep, zero) if fresh else out.masked_fill(~keep, zero)
        return out

    @torch.no_grad()
    def init_prototypes_from(self, x: Tensor, mask: Tensor | None = None,
                             generator: torch.Generator | None = None) -> None:
        """Set each head's bank by k-means++ on the projected valid tokens of ``x`` (B, T, dim).

        Needs at least ``num_prototypes`` valid tokens; pass a seeded ``generator`` to make the
        choice reproducible.
        """
        valid = valid_tokens(x, mask, self.dim)
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
        valid = valid_tokens(x, mask, self.dim)
        out = self(x, valid)
        used, ppl = [], []
        for head in range(self.heads):
            q_h = out.assignments[:, head][valid]                             # (N, K)
            used.append(protos.usage(q_h).fraction_used if q_h.shape[0] else 0.0)
            ppl.append(float(protos.perplexity(q_h)) if q_h.shape[0] else float("nan"))
        seps = {kind: tuple(float(s) for s in protos.separation(self.prototypes, kind))
                for kind in protos.SEPARATION_KINDS}
        return DDCLDiagnostics(tuple(used), tuple(ppl), seps["min"], seps["mean"], seps["trace"],
                               self.temperature.value, float(out.losses.l_q),
                               float(out.losses.l_ols),
                               float(out.losses.v))

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, num_prototypes={self.num_prototypes}, heads={self.heads}, "
                f"head_dim={self.head_dim}, residual={self.residual}, norm={self.use_norm}, "
                f"projections={self.projections}")


def _token_count(valid: Tensor | None, n: int, heads: int, dtype: torch.dtype) -> Tensor | float:
    """heads * (number of valid tokens, at least 1): the loss sums' denominator."""
    if valid is None:
        return float(heads * max(n, 1))
    return (valid.sum().clamp_min(1) * heads).to(dtype)


def _checked_head_dim(dim: int, num_prototypes: int, heads: int, head_dim: int | None,
                      projections: bool, prototype_std: float) -> int:
    """Check :class:`DDCLAttention`'s sizes (``ValueError`` naming the argument); the head size."""
    check_positive_int(dim, "dim")
    check_positive_int(num_prototypes, "num_prototypes")
    check_positive_int(heads, "heads")
    if head_dim is None:
        if dim % heads:
            raise ValueError(f"dim: expected a multiple of heads={heads} (or pass head_dim), "
                             f"got {dim}")
        head_dim = dim // heads
    check_positive_int(head_dim, "head_dim")
    if not (isinstance(prototype_std, (int, float)) and prototype_std > 0):
        raise ValueError(f"prototype_std: expected a float > 0, got {prototype_std!r}")
    if not projections and heads * head_dim != dim:
        raise ValueError(f"head_dim: without projections heads * head_dim must equal "
                         f"dim={dim}, got {heads} * {head_dim}")
    return head_dim
