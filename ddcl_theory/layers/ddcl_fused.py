"""The fast path of the same equations as :class:`~ddcl_theory.layers.ddcl.DDCLAttention`'s
explicit forward (``explicit=True``, which the tests compare it with on values and gradients).

:func:`prototype_readout` computes, for all heads at once, the soft assignments q, the soft
centroids mu and the summed loss terms (L_q, L_OLS, V) of projected tokens z against the
prototype banks, with a hand-derived backward pass. The distances come from one matrix product
per head and the norms; masks act by multiplication (every token is computed, masked ones get
weight 0); only the outputs (z, q, mu) are kept for the backward pass, which recomputes the rest
head by head in chunks of tokens, so that peak memory is a small multiple of the input's size,
linear in T.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ddcl_theory import functional as F

__all__ = ["PrototypeReadout", "prototype_readout"]

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


class PrototypeReadout(torch.autograd.Function):
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

    Backward (derived by hand; float64 gradcheck and the layer's explicit path in the tests):
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
        work = F.work_dtype(mu_dtype)
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
        work = F.work_dtype(torch.promote_types(z.dtype, prototypes.dtype))
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


def prototype_readout(z: Tensor, prototypes: Tensor, tau: Tensor,
                      weight: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """z (N, H*hd), prototypes (H, K, hd), tau 0-dim, weight (N,) bool or None -> (q, mu, sums).

    q (H, N, K), mu (N, H*hd), sums (3,) = (L_q, L_OLS, V) summed over heads and valid tokens;
    see :class:`PrototypeReadout`.
    """
    return PrototypeReadout.apply(z, prototypes, tau, weight)
