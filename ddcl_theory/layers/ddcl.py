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
parameter started at the given float. Fixed and scheduled values are checked in Python when they
are set (a bad scheduled value makes the next forward pass raise ``ValueError``) and kept in the
buffer ``_fixed_temperature``, which the forward pass reads as a tensor: the forward pass never
converts a tensor to a Python number, never indexes by a boolean mask and never sizes a tensor by
its data, so it has no host-device synchronisation and compiles with
``torch.compile(layer, fullgraph=True)``.

Computation (how, not what): the distances come from one matrix product per head and the norms,
masks act by multiplication (every token is computed; masked ones get weight 0), and a custom
autograd function keeps only the layer's outputs (z, q, mu) for the backward pass, which
recomputes the rest head by head in chunks of tokens. Peak memory is therefore a small multiple of
the input's size, linear in T; see :mod:`ddcl_theory.bench` for measurements.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ddcl_theory import functional as F
from ddcl_theory.metrics import prototypes as protos
from ddcl_theory.runtime.validate import check_positive_int, check_tokens, valid_tokens

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


# ----------------------------------------------------------------------------- fused core
# Rows (tokens) per chunk: one (rows, max(K, head_dim)) scratch buffer holds about this many
# elements (256 KiB in float32 on CPU), so that a chunk's scratch stays in cache. The scratch
# buffers are allocated once per call and reused through ``out=``: on CPU, mapping fresh pages for
# every temporary costs more than the arithmetic on them. On accelerators the chunks are large
# (each kernel launch costs more than its memory there).
_CHUNK_ELEMENTS = 1 << 16
_CHUNK_ELEMENTS_ACCELERATOR = 1 << 24


def _row_chunks(n: int, width: int, eager: bool,
                device_type: str = "cpu") -> tuple[list[tuple[int, int]], int]:
    """([(start, stop), ...] covering range(n), the most rows in one chunk).

    A single chunk under ``torch.compile`` (no scratch buffers there; the compiler fuses).
    """
    if not eager:
        return [(0, n)], n
    budget = _CHUNK_ELEMENTS if device_type == "cpu" else _CHUNK_ELEMENTS_ACCELERATOR
    step = max(1, budget // max(width, 1))
    return [(i, min(i + step, n)) for i in range(0, n, step)], min(step, n)


def _scratch(rows: int, cols: int, like: Tensor, dtype: torch.dtype, eager: bool) -> Tensor | None:
    """A reusable (rows, cols) buffer in eager mode; None (fresh results) under torch.compile."""
    return like.new_empty((rows, cols), dtype=dtype) if eager else None


def _rows(buf: Tensor | None, m: int) -> Tensor | None:
    return None if buf is None else buf[:m]


class _PrototypeReadout(torch.autograd.Function):
    """Soft assignments, soft centroids and the summed loss terms of all heads, fused.

    Inputs: ``z`` (N, H*hd) projected tokens (head h in columns [h*hd, (h+1)*hd)), ``prototypes``
    (H, K, hd), ``tau`` a 0-dim tensor > 0, ``weight`` (N,) bool (True = valid token) or None.

    Outputs: ``q`` (H, N, K) in z's dtype, ``mu`` (N, H*hd) in promote(z, prototypes) dtype (both
    zero on masked rows), and ``sums`` (3,) in the work dtype (float32, or float64 for float64
    inputs): the sums over heads and valid tokens of sum_k q_k ||z - p_k||^2 (L_q),
    ||z - mu||^2 (L_OLS) and sum_k q_k ||p_k - mu||^2 (V).

    Per head, with the detached prototype mean c subtracted (every quantity is translation
    invariant; the shift keeps the norm expansions accurate far from the origin), zc = z - c,
    pc = p - c: logits = (2 zc pc^T - ||pc||^2) / tau (one matrix product; the row constant
    ||zc||^2 drops out of the softmax; the bias rides in the product as a column of ones),
    q = softmax(logits), mu - c = q pc, r = zc - (mu - c); per token
    L_q = ||r||^2 - ||mu - c||^2 + sum_k q_k ||pc_k||^2 (the norm expansion of
    sum_k q_k ||zc - pc_k||^2, regrouped), L_OLS = ||r||^2, and V = 1/2 <D, q^T q> summed over
    tokens with D_kl = ||p_k - p_l||^2: a sum of non-negative terms, so V >= 0 holds in floating
    point too. Assignments below sqrt(tiny) (about 1e-19 in float32) are set to 0 (see forward).

    Backward (derived by hand; float64 gradcheck and an explicit autograd reference in the tests):
    only z, q and mu are saved (the layer returns them anyway); the rest is recomputed chunk by
    chunk. With alpha and beta the upstream gradients of L_q and L_OLS (V = L_q - L_OLS enters
    both), r = z - mu, m = G_mu - 2 beta r, e = G_q + (m - 2 alpha zc) pc^T + alpha ||pc||^2
    (row constants dropped: the softmax removes them), g = q (alpha - (e - <q, e>) / tau) the
    gradient on the squared distances:
    dz = 2 beta r + 2 zc sum_k g_k - 2 g pc,   dp = q^T m - 2 g^T zc + 2 (sum_n g) pc,
    dtau = sum q (e - <q, e>) (||pc||^2 - 2 zc pc^T) / tau^2.
    Masked rows have q = 0 and r = 0, so they contribute nothing (upstream gradients there are
    multiplied by zeros: they must be finite, as autograd's own are).
    """

    @staticmethod
    def forward(z: Tensor, prototypes: Tensor, tau: Tensor, weight: Tensor | None):
        eager = not torch.compiler.is_compiling()
        n = z.shape[0]
        heads, k, hd = prototypes.shape
        mu_dtype = torch.promote_types(z.dtype, prototypes.dtype)
        work = F._work_dtype(mu_dtype)
        q_out = z.new_empty((heads, n, k))
        mu_out = z.new_empty((n, heads * hd), dtype=mu_dtype)
        direct_q = eager and q_out.dtype == work          # softmax straight into the output
        chunks, rows = _row_chunks(n, max(k, hd), eager, z.device.type)
        with torch.autocast(device_type=z.device.type, enabled=False):
            p = prototypes.to(work)
            t = tau.to(work)
            w = None if weight is None else weight.to(work).unsqueeze(-1)          # (N, 1)
            centre = p.mean(dim=1, keepdim=True)                                    # (H, 1, hd)
            pc = p - centre
            pp = pc.square().sum(-1)                                                # (H, K)
            # zc in a (rows, hd + 1) buffer whose last column is ones: the logits' bias rides in
            # the product (no broadcast copy of it per chunk)
            zc_buf = _scratch(rows, hd + 1, z, work, eager)
            if zc_buf is not None:
                zc_buf[:, hd] = 1.0
            r_buf, mu_buf = (_scratch(rows, hd, z, work, eager) for _ in range(2))
            l_buf = _scratch(rows, k, z, work, eager)
            lq, lols, v = (z.new_zeros((), dtype=work) for _ in range(3))
            flush = torch.finfo(work).tiny ** 0.5
            for h in range(heads):
                c, pch, pph = centre[h, 0], pc[h], pp[h]
                cols = slice(h * hd, (h + 1) * hd)
                w_logit = torch.cat([pch.T * (2.0 / t), (pph / -t).unsqueeze(0)])  # (hd+1, K)
                gram = z.new_zeros((k, k), dtype=work)
                mumu = z.new_zeros((), dtype=work)
                for n0, n1 in chunks:
                    m_rows = n1 - n0
                    zr = z[n0:n1, cols].to(work)
                    if zc_buf is not None:
                        zc = torch.sub(zr, c, out=zc_buf[:m_rows, :hd])
                        logits = torch.mm(zc_buf[:m_rows], w_logit, out=l_buf[:m_rows])
                    else:
                        zc = zr - c
                        logits = torch.addmm(w_logit[hd], zc, w_logit[:hd])
                    if direct_q:
                        q = torch.ops.aten._softmax.out(logits, -1, False, out=q_out[h, n0:n1])
                    else:
                        q = torch.softmax(logits, dim=-1)
                    # assignments below sqrt(tiny) (1e-19 in float32) become exact zeros: their
                    # products (q_k q_l, q e) would be subnormal numbers, which x86 CPUs multiply
                    # about 100x slower; the change is far below the rounding of q's row sums
                    q = torch.nn.functional.threshold_(q, flush, 0.0)
                    if w is not None:
                        wc = w[n0:n1]
                        q = q.mul_(wc)
                        zc = zc.mul_(wc)                    # masked rows: zc = 0, mu = 0, r = 0
                    mu = torch.mm(q, pch, out=_rows(mu_buf, m_rows))                # mu - c
                    r = torch.sub(zc, mu, out=_rows(r_buf, m_rows))
                    r_flat, mu_flat = r.reshape(-1), mu.reshape(-1)
                    lols = lols + torch.dot(r_flat, r_flat)
                    mumu = mumu + torch.dot(mu_flat, mu_flat)
                    gram = torch.addmm(gram, q.T, q)    # out of place: FLOP counters see it
                    if eager:                                                       # + c
                        if w is None:
                            torch.add(mu, c, out=mu_out[n0:n1, cols])
                        else:
                            torch.addcmul(mu, wc, c, out=mu_out[n0:n1, cols])
                    else:
                        mu_out[n0:n1, cols] = mu + c if w is None else torch.addcmul(mu, wc, c)
                    if not direct_q:
                        q_out[h, n0:n1] = q
                # L_q: sum_k q_k ||zc - pc_k||^2 = ||zc - (mu - c)||^2 - ||mu - c||^2
                #      + sum_k q_k ||pc_k||^2, with sum_n q_nk = sum_l (q^T q)_kl (rows sum to 1)
                lq = lq - mumu + torch.dot(gram.sum(1), pph)
                d_pp = (pph[:, None] + pph[None, :] - 2.0 * (pch @ pch.T)).clamp_min(0.0)
                v = v + 0.5 * (d_pp * gram).sum()
            lq = lq + lols
        return q_out, mu_out, torch.stack([lq, lols, v])

    @staticmethod
    def setup_context(ctx, inputs, output):
        z, prototypes, tau, weight = inputs
        q_out, mu_out, _ = output
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(z, prototypes, tau, weight, q_out, mu_out)

    @staticmethod
    def backward(ctx, g_q: Tensor | None, g_mu: Tensor | None, g_sums: Tensor | None):
        z, prototypes, tau, weight, q_all, mu_all = ctx.saved_tensors
        need_z, need_p, need_tau = ctx.needs_input_grad[:3]
        eager = not torch.compiler.is_compiling()
        n = z.shape[0]
        heads, k, hd = prototypes.shape
        work = F._work_dtype(torch.promote_types(z.dtype, prototypes.dtype))
        grad_z = z.new_empty(z.shape) if need_z else None
        direct_z = eager and z.dtype == work
        chunks, rows = _row_chunks(n, max(k, hd), eager, z.device.type)
        with torch.autocast(device_type=z.device.type, enabled=False):
            p = prototypes.to(work)
            t = tau.to(work)
            w = None if weight is None else weight.to(work).unsqueeze(-1)
            if g_sums is None:
                alpha = beta = z.new_zeros((), dtype=work)
            else:
                g = g_sums.to(work)
                alpha, beta = g[0] + g[2], g[1] - g[2]        # V = L_q - L_OLS in value
            centre = p.mean(dim=1, keepdim=True)
            pc = p - centre
            pp = pc.square().sum(-1)
            zc_buf, r_buf, m_buf = (_scratch(rows, hd, z, work, eager) for _ in range(3))
            e_buf, s_buf = (_scratch(rows, k, z, work, eager) for _ in range(2))
            # (rows, hd + 1) with a last column of ones: the bias of e rides in the product
            a_buf = _scratch(rows, hd + 1, z, work, eager)
            if a_buf is not None:
                a_buf[:, hd] = 1.0
            grad_p = torch.zeros_like(p) if need_p else None
            tau_gd = tau_q = z.new_zeros((), dtype=work)
            neg_inv_t = -1.0 / t
            for h in range(heads):
                c, pch, pph = centre[h, 0], pc[h], pp[h]
                cols = slice(h * hd, (h + 1) * hd)
                w_e = torch.cat([pch.T, (pph * alpha).unsqueeze(0)]) * neg_inv_t   # (hd+1, K)
                pch_m2 = pch * -2.0
                gcol = z.new_zeros((k,), dtype=work)
                gp = z.new_zeros((k, hd), dtype=work)
                for n0, n1 in chunks:
                    m_rows = n1 - n0
                    zr = z[n0:n1, cols].to(work)
                    zc = torch.sub(zr, c, out=_rows(zc_buf, m_rows))
                    q = q_all[h, n0:n1].to(work)
                    r = torch.sub(zr, mu_all[n0:n1, cols].to(work), out=_rows(r_buf, m_rows))
                    if w is not None:
                        r = r.mul_(w[n0:n1])                                        # z - mu
                    if g_mu is not None:
                        m = torch.addcmul(g_mu[n0:n1, cols].to(work), r, -2.0 * beta,
                                          out=_rows(m_buf, m_rows))
                    else:
                        m = torch.mul(r, -2.0 * beta, out=_rows(m_buf, m_rows))
                    # e, scaled by -1/tau: (m - 2 alpha zc) pc^T + alpha ||pc||^2 (+ G_q)
                    if a_buf is not None:
                        torch.addcmul(m, zc, -2.0 * alpha, out=a_buf[:m_rows, :hd])
                        e = torch.mm(a_buf[:m_rows], w_e, out=e_buf[:m_rows])
                    else:
                        e = torch.addcmul(m, zc, -2.0 * alpha) @ w_e[:hd] + w_e[hd]
                    if g_q is not None:
                        e = e.addcmul_(g_q[h, n0:n1].to(work), neg_inv_t)
                    ebar = torch.mul(q, e, out=_rows(s_buf, m_rows)).sum(-1, keepdim=True)
                    gd = e.sub_(ebar.sub_(alpha)).mul_(q)     # q (alpha - (e - <q, e>) / tau)
                    if need_tau:                              # ||pc||^2 - 2 zc pc^T
                        s = torch.addmm(pph, zc, pch.T, alpha=-2.0, out=_rows(s_buf, m_rows))
                        tau_gd = tau_gd + torch.dot(gd.reshape(-1), s.reshape(-1))
                        tau_q = tau_q + torch.dot(q.reshape(-1), s.reshape(-1))
                    if need_p:
                        gp = torch.addmm(gp, q.T, m)
                        gp = torch.addmm(gp, gd.T, zc, alpha=-2.0)
                        gcol = gcol + gd.sum(0)
                    if need_z:                        # 2 beta r + 2 zc sum_k g - 2 g pc
                        gz = torch.mm(gd, pch_m2, out=_rows(m_buf, m_rows))
                        gz = gz.addcmul_(r, 2.0 * beta)
                        gsum = gd.sum(-1, keepdim=True).mul_(2.0)
                        if direct_z:
                            torch.addcmul(gz, zc, gsum, out=grad_z[n0:n1, cols])
                        else:
                            grad_z[n0:n1, cols] = torch.addcmul(gz, zc, gsum)
                if need_p:
                    grad_p[h] = gp.addcmul_(gcol.unsqueeze(-1), pch, value=2.0)
        grad_p = grad_p.to(prototypes.dtype) if need_p else None
        # sum q (e - <q, e>) S / tau^2 = -(sum (gd - alpha q) S) / tau
        grad_tau = ((tau_gd - alpha * tau_q) * neg_inv_t).to(tau.dtype) if need_tau else None
        return grad_z, grad_p, grad_tau, None


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
        self._step = 0                        # Python mirror of the buffer temperature_step
        self._temperature_problem: str | None = None
        self.register_buffer("temperature_step", torch.zeros((), dtype=torch.long))
        if callable(temperature):
            if learnable_temperature:
                raise ValueError("temperature: a schedule cannot also be learnable; pass a float")
            self._schedule = temperature
            value = float(temperature(0))
            F.check_temperature(value, "temperature")
            self.register_buffer("_fixed_temperature", torch.tensor(value))
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
        """tau now, a 0-dim tensor (carries a gradient when learnable). Never synchronises.

        A fixed or scheduled tau lives in the buffer ``_fixed_temperature``: it was checked in
        Python when it was set (:meth:`set_temperature`, :meth:`advance_schedule`).
        """
        if self._temperature_problem is not None:
            raise ValueError(self._temperature_problem)
        if self.log_temperature is not None:
            return self.log_temperature.exp()
        return self._fixed_temperature

    @property
    def temperature(self) -> float:
        """tau now, as a float."""
        if self._schedule is not None and self._temperature_problem is None:
            return float(self._schedule(self._step))
        return float(self.current_temperature().detach())

    def set_temperature(self, value: float) -> None:
        """Fix tau to ``value`` (> 0); replaces a schedule; sets a learnable tau's current value."""
        F.check_temperature(value, "value")
        if self.log_temperature is not None:
            with torch.no_grad():
                self.log_temperature.fill_(math.log(float(value)))
            return
        self._schedule = None
        self._temperature_problem = None
        self._fixed_temperature.fill_(float(value))

    def advance_schedule(self, steps: int = 1) -> int:
        """Advance the schedule's step counter by ``steps`` (>= 0); return the new step.

        The counter is kept twice, as the buffer ``temperature_step`` (saved in the state dict,
        broadcast by DDP) and as a Python int (so that neither this method nor the forward pass
        reads a tensor); :meth:`sync_temperature_from_buffers` re-reads the buffer. The scheduled
        value is checked here; a bad one is reported by the next forward pass.
        """
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"steps: expected an int >= 0, got {steps!r}")
        self.temperature_step += steps
        self._step += steps
        self._apply_schedule()
        return self._step

    def _apply_schedule(self) -> None:
        """Evaluate the schedule at the Python step, check it, store it in the buffer."""
        if self._schedule is None:
            return
        value = float(self._schedule(self._step))
        try:
            F.check_temperature(value, "temperature")
        except ValueError as err:
            self._temperature_problem = f"{err} (schedule at step {self._step})"
            return
        self._temperature_problem = None
        self._fixed_temperature.fill_(value)

    def sync_temperature_from_buffers(self) -> int:
        """Re-read the step counter from its buffer (one host read) and re-apply the schedule.

        Needed only after the buffer was changed behind the layer's back (e.g. by a collective,
        see :mod:`ddcl_theory.runtime.distributed`); loading a state dict calls it. Returns the step.
        """
        self._step = int(self.temperature_step)
        self._apply_schedule()
        return self._step

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs) -> None:
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)
        self.sync_temperature_from_buffers()

    # ----------------------------------------------------------------------------- forward
    def forward(self, x: Tensor, mask: Tensor | None = None) -> DDCLOutput:
        """x (B, T, dim), mask (B, T) bool with True = valid token -> :class:`DDCLOutput`.

        No host-device synchronisation and no data-dependent shape: masked tokens are computed
        like the others and weighted by 0.
        """
        valid = check_tokens(x, mask, self.dim)
        tau = self.current_temperature()
        if self.log_temperature is None:      # a copy: the buffer may change before backward
            tau = tau.clone()
        b, t, _ = x.shape
        n = b * t
        h, k, hd = self.heads, self.num_prototypes, self.head_dim
        # Everything runs on (B*T, features) matrices: in-place steps below then act on fresh
        # tensors, never on views (autograd would copy whole tensors to rebase a view).
        x2 = x.reshape(n, self.dim)
        if valid is None:
            x_in, keep = x2, None
        else:
            keep = valid.reshape(n, 1)
            x_in = torch.where(keep, x2, torch.zeros((), dtype=x.dtype, device=x.device))
        z = self.in_proj(x_in)                                                # (B*T, H*hd)
        q, mu, sums = _PrototypeReadout.apply(z, self.prototypes, tau,
                                              None if valid is None else valid.reshape(n))
        mu3 = mu.view(b, t, h * hd)

        # pooled: W_out (mean over valid tokens of mu) + bias; zeros for rows without a token
        if valid is None:
            pooled = (self.out_proj(mu3.mean(1)) if t > 0
                      else mu3.new_zeros((b, self.dim)))
            denom = float(h * max(n, 1))
        else:
            counts = valid.sum(1, keepdim=True)                               # (B, 1)
            mean_mu = mu3.sum(1) / counts.clamp_min(1).to(mu3.dtype)
            pooled = self.out_proj(mean_mu)
            pooled = torch.where(counts > 0, pooled,
                                 torch.zeros((), dtype=pooled.dtype, device=pooled.device))
            denom = (valid.sum().clamp_min(1) * h).to(sums.dtype)

        # output: LayerNorm(x + W_out mu + b), zero rows where masked. In-place steps only act on
        # tensors created here whose autograd nodes do not keep them (linear, add, layer_norm).
        out = self.out_proj(mu)                                               # (B*T, dim)
        fresh = self.projections
        if self.residual:
            if fresh and x_in.dtype == out.dtype:
                out = out.add_(x_in)
            else:
                out = out + x_in
            fresh = True
        if self.use_norm:
            out = self.norm(out)
            fresh = True
        if keep is not None:
            zero = torch.zeros((), dtype=out.dtype, device=out.device)
            out = out.masked_fill_(~keep, zero) if fresh else out.masked_fill(~keep, zero)

        l_q, l_ols, v = (sums / denom).unbind(0)
        return DDCLOutput(out.view(b, t, self.dim),
                          q.view(h, b, t, k).permute(1, 0, 2, 3),             # (B, H, T, K)
                          pooled, DDCLLosses(l_q, l_ols, v),
                          z.view(b, t, h, hd).transpose(1, 2),
                          mu3.view(b, t, h, hd).transpose(1, 2))

    # ----------------------------------------------------------------------------- prototypes
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

