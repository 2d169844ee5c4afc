"""Peer readouts of DDCL-Attention: Slot Attention and a Perceiver-style latent readout (claim D17).

Both map tokens x (B, T, dim) with a mask (B, T) (True = valid token) to a set of S vectors per
sequence and a per-sequence summary ``pooled`` (B, dim), like :attr:`DDCLOutput.pooled`, so that
the readouts are interchangeable in one training loop (:class:`DDCLReadoutAdapter` puts a
one-head :class:`~ddcl_theory.layers.ddcl.DDCLAttention` behind the same interface).

Slot Attention (Locatello et al. 2020), our formalisation. Slots s_1..s_S in R^dim are drawn,
then refined ``iterations`` times:

    k_t, v_t = W_k LN(x_t), W_v LN(x_t)
    a_st     = softmax_s( <W_q LN(s_s), k_t> / (sqrt(dim) * tau) )     (slots compete for a token)
    w_st     = a_st / (sum_t' a_st' + eps)                              (weighted mean over tokens)
    s_s      = GRU(sum_t w_st v_t, s_s);   s_s = s_s + MLP(LN(s_s))

Initial slots (documented choice, ``init``):

* ``"gaussian"`` (the original): s_s = mu + sigma * n_s with learned mu, log sigma (one of each
  shared by all slots) and fresh standard normal noise n_s on every call, *also at inference*.
  Pass ``generator=`` to :meth:`SlotAttentionReadout.forward` to make a call reproducible (tests,
  evaluation): the noise is then drawn from that generator (it must live on x's device).
* ``"learned"``: one learned initial vector per slot (S, dim); the forward pass is deterministic.

Perceiver-style readout (Jaegle et al. 2021), our formalisation. A learned latent array
L (S, dim) reads the tokens once through cross-attention:

    q_s = W_q LN(l_s),  k_t, v_t = W_k LN(x_t), W_v LN(x_t),  e_st = <q_s, k_t> / (sqrt(dim) tau)
    softmax_over="tokens"  (standard): a_st = softmax_t(e_st)                 (no competition)
    softmax_over="latents" (inverted): a_st = softmax_s(e_st), then w_st = a_st / (sum_t a_st + eps)
    h_s = l_s + W_o sum_t w_st v_t;   h_s = h_s + MLP(LN(h_s))      (w = a in the standard case)

Shared conventions (those of :class:`~ddcl_theory.layers.ddcl.DDCLAttention`):

* batch first; ``mask`` is a bool (B, T) tensor, True = valid token. Masked tokens are replaced
  by zeros before anything else, get exactly zero attention and touch no output or gradient.
* ``pooled`` is the mean of the S states. A row with no valid token (fully masked, or T = 0) gets
  zeros in ``pooled``, ``states``, ``attention`` and ``vectors``, never NaN.
* float32 island: the whole forward pass runs in float32 (float64 when the input or the
  parameters are float64), with autocast disabled and the parameters cast to that dtype; the
  results are returned in x's dtype. float16/bfloat16 inputs and parameters are therefore safe.
* bad input raises ``ValueError`` naming the argument and the expected shape or dtype.
* single-head attention; no dropout.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as nnf
from torch import Tensor, nn

from ddcl_theory.functional import work_dtype
from ddcl_theory.layers.ddcl import DDCLAttention
from ddcl_theory.runtime.validate import (check_choice, check_positive_float, check_positive_int,
                                          valid_tokens)

__all__ = ["ReadoutOutput", "SlotAttentionReadout", "PerceiverReadout", "DDCLReadoutAdapter",
           "SLOT_INITS", "PERCEIVER_SOFTMAX", "gru_step"]

SLOT_INITS = ("gaussian", "learned")
PERCEIVER_SOFTMAX = ("tokens", "latents")


@dataclass
class ReadoutOutput:
    """What every readout of this module returns (S = number of slots, latents or prototypes).

    Attributes:
        pooled: (B, dim) per-sequence summary (zeros for rows without valid tokens).
        states: (B, S, dim) per-slot / per-latent output states.
        attention: (B, S, T) attention of slot/latent s on token t; zero at masked tokens.
            Slot Attention and the inverted Perceiver: softmax over S (each valid token's column
            sums to 1). Standard Perceiver: softmax over T (each row sums to 1).
        vectors: (B, S, d) the vectors whose collapse is measured: the final slots (Slot
            Attention), the learned latent array (Perceiver), the prototypes (DDCL), the latter
            two broadcast over the batch.
        aux_loss: 0-dim auxiliary loss to add to the task loss (DDCL's L_q; zero for the peers).
    """

    pooled: Tensor
    states: Tensor
    attention: Tensor
    vectors: Tensor
    aux_loss: Tensor


# ------------------------------------------------------------------------------------ helpers
def _linear(layer: nn.Linear, x: Tensor) -> Tensor:
    bias = None if layer.bias is None else layer.bias.to(x.dtype)
    return nnf.linear(x, layer.weight.to(x.dtype), bias)


def _norm(layer: nn.LayerNorm, x: Tensor) -> Tensor:
    weight = None if layer.weight is None else layer.weight.to(x.dtype)
    bias = None if layer.bias is None else layer.bias.to(x.dtype)
    return nnf.layer_norm(x, layer.normalized_shape, weight, bias, layer.eps)


class _MLP(nn.Module):
    """x + MLP(LN(x)) with one hidden ReLU layer, evaluated in x's dtype."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return x + _linear(self.fc2, torch.relu(_linear(self.fc1, _norm(self.norm, x))))


def gru_step(cell: nn.GRUCell, inputs: Tensor, hidden: Tensor) -> Tensor:
    """One step of ``cell`` (same equations as ``nn.GRUCell``) in ``inputs``' dtype.

    inputs, hidden: (N, dim) -> (N, dim). The cell's parameters are cast to inputs' dtype, so
    the step works for any parameter dtype (the float32 island).
    """
    dt = inputs.dtype
    gi = nnf.linear(inputs, cell.weight_ih.to(dt),
                    None if cell.bias_ih is None else cell.bias_ih.to(dt))
    gh = nnf.linear(hidden, cell.weight_hh.to(dt),
                    None if cell.bias_hh is None else cell.bias_hh.to(dt))
    i_r, i_z, i_n = gi.chunk(3, dim=-1)
    h_r, h_z, h_n = gh.chunk(3, dim=-1)
    reset = torch.sigmoid(i_r + h_r)
    update = torch.sigmoid(i_z + h_z)
    candidate = torch.tanh(i_n + reset * h_n)
    return (1 - update) * candidate + update * hidden


def _masked_softmax_over_tokens(logits: Tensor, valid: Tensor) -> Tensor:
    """softmax over the last axis (tokens) of logits (B, S, T) restricted to valid (B, T);
    exact zeros at masked tokens and on rows with no valid token."""
    keep = valid[:, None, :]
    filled = logits.masked_fill(~keep, torch.finfo(logits.dtype).min)
    attn = torch.softmax(filled, dim=-1)
    return torch.where(keep, attn, torch.zeros((), dtype=attn.dtype, device=attn.device))


def _competition(logits: Tensor, valid: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """Softmax over S (dim 1) of logits (B, S, T), zero at masked tokens; and the same weights
    renormalised over tokens, w = a / (sum_t a + eps). Returns (a, w)."""
    attn = torch.softmax(logits, dim=1)
    attn = torch.where(valid[:, None, :], attn,
                       torch.zeros((), dtype=attn.dtype, device=attn.device))
    return attn, attn / (attn.sum(-1, keepdim=True) + eps)


def _zero_empty_rows(valid: Tensor, *tensors: Tensor) -> list[Tensor]:
    """Set every leading-index row b with no valid token to zero in each tensor (B, ...)."""
    has = valid.any(dim=1)
    out = []
    for t in tensors:
        shape = (-1,) + (1,) * (t.dim() - 1)
        out.append(torch.where(has.reshape(shape), t, torch.zeros((), dtype=t.dtype,
                                                                  device=t.device)))
    return out


def _keys_values(x: Tensor, valid: Tensor, work: torch.dtype, norm: nn.LayerNorm,
                 to_k: nn.Linear, to_v: nn.Linear) -> tuple[Tensor, Tensor, Tensor]:
    """The shared start of both peers: x (B, T, d) in ``work`` with masked tokens zeroed, and
    the keys and values k, v (B, T, d) of the layer-normed tokens. Returns (xw, k, v)."""
    xw = torch.where(valid.unsqueeze(-1), x.to(work), torch.zeros((), dtype=work,
                                                                  device=x.device))
    tokens = _norm(norm, xw)
    return xw, _linear(to_k, tokens), _linear(to_v, tokens)


def _readout_output(x: Tensor, valid: Tensor, states: Tensor, attn: Tensor,
                    vectors: Tensor) -> ReadoutOutput:
    """The shared end of both peers: rows without a valid token zeroed, ``pooled`` the mean of
    the S states, everything in x's dtype, no auxiliary loss (zero)."""
    states, attn, vectors = _zero_empty_rows(valid, states, attn, vectors)
    pooled = states.mean(dim=1)
    dt = x.dtype
    return ReadoutOutput(pooled.to(dt), states.to(dt), attn.to(dt), vectors.to(dt),
                         x.new_zeros(()))


# ------------------------------------------------------------------------------- Slot Attention
class SlotAttentionReadout(nn.Module):
    """Slot Attention as a readout; see the module docstring for the equations.

    Args:
        dim: token feature size (also the slot size).
        num_slots: S >= 1 slots.
        iterations: number of attention/GRU rounds (>= 1); run at inference too.
        temperature: tau > 0 dividing the logits (1 = the usual 1/sqrt(dim) scaling).
        init: ``"gaussian"`` (learned mean and log-std shared by all slots, fresh noise per call)
            or ``"learned"`` (one learned initial vector per slot; deterministic).
        init_std: the initial sigma of ``"gaussian"``; the std of the random initial vectors of
            ``"learned"``.
        mlp_hidden: hidden width of the residual MLP (default 2 * dim).
        eps: added to the per-slot token mass before the weighted mean (keeps empty slots finite).

    ``forward(x, mask=None, generator=None) -> ReadoutOutput``; ``generator`` draws the Gaussian
    initial noise (ignored with ``init="learned"``).
    """

    def __init__(self, dim: int, num_slots: int, *, iterations: int = 3,
                 temperature: float = 1.0, init: str = "gaussian", init_std: float = 1.0,
                 mlp_hidden: int | None = None, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.num_slots = check_positive_int(num_slots, "num_slots")
        self.iterations = check_positive_int(iterations, "iterations")
        self.temperature = check_positive_float(temperature, "temperature")
        self.init = check_choice(init, "init", SLOT_INITS)
        init_std = check_positive_float(init_std, "init_std")
        hidden = check_positive_int(2 * dim if mlp_hidden is None else mlp_hidden, "mlp_hidden")
        self.eps = check_positive_float(eps, "eps")
        if init == "gaussian":
            self.slot_mu = nn.Parameter(torch.randn(1, dim) * dim ** -0.5)
            self.slot_log_sigma = nn.Parameter(torch.full((1, dim), math.log(init_std)))
            self.register_parameter("initial_slots", None)
        else:
            self.register_parameter("slot_mu", None)
            self.register_parameter("slot_log_sigma", None)
            self.initial_slots = nn.Parameter(torch.randn(num_slots, dim) * init_std)
        self.norm_tokens = nn.LayerNorm(dim)
        self.norm_slots = nn.LayerNorm(dim)
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(dim, dim, bias=False)
        self.to_v = nn.Linear(dim, dim, bias=False)
        self.gru = nn.GRUCell(dim, dim)
        self.mlp = _MLP(dim, hidden)

    def _param_dtype(self) -> torch.dtype:
        return self.to_q.weight.dtype

    def initial(self, batch: int, dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None) -> Tensor:
        """The initial slots (batch, S, dim) in ``dtype``; see ``init`` in the module docstring."""
        if self.init == "learned":
            return self.initial_slots.to(dtype).unsqueeze(0).expand(batch, -1, -1)
        kw = {"generator": generator} if generator is not None else {}
        noise = torch.randn(batch, self.num_slots, self.dim, dtype=dtype, device=device, **kw)
        return self.slot_mu.to(dtype) + self.slot_log_sigma.to(dtype).exp() * noise

    def forward(self, x: Tensor, mask: Tensor | None = None,
                generator: torch.Generator | None = None) -> ReadoutOutput:
        """x (B, T, dim), mask (B, T) bool (True = valid) -> :class:`ReadoutOutput`."""
        valid = valid_tokens(x, mask, self.dim)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise ValueError(f"generator: expected a torch.Generator, got "
                             f"{type(generator).__name__}")
        work = work_dtype(x.dtype, self._param_dtype())
        b, t, d = x.shape
        with torch.autocast(device_type=x.device.type, enabled=False):
            xw, k, v = _keys_values(x, valid, work, self.norm_tokens, self.to_k, self.to_v)
            scale = 1.0 / (math.sqrt(d) * self.temperature)
            slots = self.initial(b, work, x.device, generator)                 # (B, S, d)
            attn = xw.new_zeros(b, self.num_slots, t)
            for _ in range(self.iterations):
                q = _linear(self.to_q, _norm(self.norm_slots, slots))
                logits = torch.einsum("bsd,btd->bst", q, k) * scale             # (B, S, T)
                attn, weights = _competition(logits, valid, self.eps)
                updates = weights @ v                                          # (B, S, d)
                slots = gru_step(self.gru, updates.reshape(-1, d),
                                 slots.reshape(-1, d)).reshape(b, self.num_slots, d)
                slots = self.mlp(slots)
            return _readout_output(x, valid, slots, attn, slots)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, num_slots={self.num_slots}, iterations={self.iterations}, "
                f"temperature={self.temperature:g}, init={self.init!r}")


# ------------------------------------------------------------------------------------ Perceiver
class PerceiverReadout(nn.Module):
    """A Perceiver-style latent readout; see the module docstring for the equations.

    Args:
        dim: token feature size (also the latent size).
        num_latents: S >= 1 learned latents.
        temperature: tau > 0 dividing the logits (1 = the usual 1/sqrt(dim) scaling).
        softmax_over: ``"tokens"`` (standard cross-attention) or ``"latents"`` (inverted: latents
            compete for tokens, then a weighted mean over tokens as in Slot Attention).
        latent_std: standard deviation of the random normal initial latent array.
        mlp_hidden: hidden width of the residual MLP (default 2 * dim).
        eps: added to the per-latent token mass in the inverted variant.
    """

    def __init__(self, dim: int, num_latents: int, *, temperature: float = 1.0,
                 softmax_over: str = "tokens", latent_std: float = 1.0,
                 mlp_hidden: int | None = None, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.num_latents = check_positive_int(num_latents, "num_latents")
        self.temperature = check_positive_float(temperature, "temperature")
        self.softmax_over = check_choice(softmax_over, "softmax_over", PERCEIVER_SOFTMAX)
        latent_std = check_positive_float(latent_std, "latent_std")
        hidden = check_positive_int(2 * dim if mlp_hidden is None else mlp_hidden, "mlp_hidden")
        self.eps = check_positive_float(eps, "eps")
        self.latents = nn.Parameter(torch.randn(num_latents, dim) * latent_std)
        self.norm_tokens = nn.LayerNorm(dim)
        self.norm_latents = nn.LayerNorm(dim)
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(dim, dim, bias=False)
        self.to_v = nn.Linear(dim, dim, bias=False)
        self.to_out = nn.Linear(dim, dim)
        self.mlp = _MLP(dim, hidden)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> ReadoutOutput:
        """x (B, T, dim), mask (B, T) bool (True = valid) -> :class:`ReadoutOutput`."""
        valid = valid_tokens(x, mask, self.dim)
        work = work_dtype(x.dtype, self.latents.dtype)
        b, t, d = x.shape
        with torch.autocast(device_type=x.device.type, enabled=False):
            _, k, v = _keys_values(x, valid, work, self.norm_tokens, self.to_k, self.to_v)
            latents = self.latents.to(work)                                    # (S, d)
            q = _linear(self.to_q, _norm(self.norm_latents, latents))          # (S, d)
            logits = torch.einsum("sd,btd->bst", q, k) / (math.sqrt(d) * self.temperature)
            if self.softmax_over == "tokens":
                attn = _masked_softmax_over_tokens(logits, valid)
                weights = attn
            else:
                attn, weights = _competition(logits, valid, self.eps)
            read = weights @ v                                                 # (B, S, d)
            states = self.mlp(latents.unsqueeze(0) + _linear(self.to_out, read))
            vectors = latents.unsqueeze(0).expand(b, -1, -1)
            return _readout_output(x, valid, states, attn, vectors)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, num_latents={self.num_latents}, "
                f"temperature={self.temperature:g}, softmax_over={self.softmax_over!r}")


# ------------------------------------------------------------------------- DDCL, same interface
class DDCLReadoutAdapter(nn.Module):
    """A one-head :class:`DDCLAttention` behind the :class:`ReadoutOutput` interface.

    ``layer`` is the wrapped layer (``heads=1``; keyword arguments go to it). The fields:
    ``pooled`` = the layer's pooled; ``attention`` (B, K, T) = the assignments transposed
    (softmax over prototypes, zero at masked tokens); ``states`` (B, K, dim) = the image
    W_out p_k + b of each prototype (so that ``pooled`` = sum_k qbar_k states_k with qbar the
    mean assignment of the row's valid tokens); ``vectors`` (B, K, head_dim) = the prototypes;
    ``aux_loss`` = L_q. Rows without valid tokens get zeros everywhere, as in the peers.
    """

    def __init__(self, dim: int, num_prototypes: int, **kwargs) -> None:
        super().__init__()
        if kwargs.get("heads", 1) != 1:
            raise ValueError(f"heads: DDCLReadoutAdapter wraps a one-head layer, "
                             f"got {kwargs['heads']!r}")
        kwargs.pop("heads", None)
        self.layer = DDCLAttention(dim, num_prototypes, heads=1, **kwargs)
        self.dim = dim

    def forward(self, x: Tensor, mask: Tensor | None = None) -> ReadoutOutput:
        valid = valid_tokens(x, mask, self.dim)
        out = self.layer(x, valid)
        protos = self.layer.prototypes[0]                                      # (K, hd)
        b = x.shape[0]
        states = self.layer.out_proj(protos.to(out.pooled.dtype))              # (K, dim)
        states = states.unsqueeze(0).expand(b, -1, -1)
        vectors = protos.unsqueeze(0).expand(b, -1, -1)
        attn = out.assignments[:, 0].transpose(1, 2)                           # (B, K, T)
        states, vectors = _zero_empty_rows(valid, states, vectors)
        return ReadoutOutput(out.pooled, states.to(x.dtype), attn, vectors.to(x.dtype),
                             out.losses.l_q)
