"""The model every readout trains in: token encoder -> readout -> linear classifier.

:func:`build_readout` makes a readout of :mod:`ddcl_theory.layers.peers`,
:func:`bank_parameters` names its bank (the parameters with their own learning rate),
:class:`ReadoutClassifier` wraps it; :func:`ddcl_tokens`, :func:`ddcl_critical_temperature`
and :func:`critical_ratio` give the tokens a DDCL readout's prototypes see, their T_c and
tau / T_c
(:func:`ddcl_theory.theory.collapse.critical_temperature`).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ddcl_theory.experiments.peer_readouts.data import TokenSet
from ddcl_theory.experiments.peer_readouts.settings import (
    ENCODERS,
    READOUTS,
    PeerSettings,
)
from ddcl_theory.layers.peers import (
    DDCLReadoutAdapter,
    PerceiverReadout,
    ReadoutOutput,
    SlotAttentionReadout,
)
from ddcl_theory.models.mlp import TokenMLP
from ddcl_theory.theory.collapse import critical_temperature


def build_readout(kind: str, s: PeerSettings) -> nn.Module:
    """The readout ``kind`` ("ddcl", "slot" or "perceiver") of width ``s.dim`` with S slots."""
    if kind == "ddcl":
        return DDCLReadoutAdapter(s.dim, s.num_slots, temperature=s.ddcl_temperature,
                                  residual=False, norm=False)
    if kind == "slot":
        return SlotAttentionReadout(s.dim, s.num_slots, iterations=s.slot_iterations,
                                    temperature=s.slot_temperature, init=s.slot_init,
                                    init_std=s.slot_init_std)
    if kind == "perceiver":
        return PerceiverReadout(s.dim, s.num_slots, temperature=s.perceiver_temperature,
                                softmax_over=s.perceiver_softmax, latent_std=s.perceiver_latent_std)
    raise ValueError(f"kind: expected one of {READOUTS}, got {kind!r}")


def bank_parameters(readout: nn.Module) -> list[nn.Parameter]:
    """The readout's bank: DDCL prototypes, Perceiver latents, Slot initial slots (or mean and
    log-std of the Gaussian)."""
    if isinstance(readout, DDCLReadoutAdapter):
        return [readout.layer.prototypes]
    if isinstance(readout, PerceiverReadout):
        return [readout.latents]
    if isinstance(readout, SlotAttentionReadout):
        if readout.init == "learned":
            return [readout.initial_slots]
        return [readout.slot_mu, readout.slot_log_sigma]
    raise ValueError(f"readout: expected a readout of ddcl_theory.layers.peers, "
                     f"got {type(readout).__name__}")


class ReadoutClassifier(nn.Module):
    """Token encoder (d_in -> dim) -> readout -> linear classifier on ``pooled``.

    ``encoder``: ``"mlp"`` (a per-token two-layer MLP of width ``hidden``) or ``"linear"`` (one
    linear map per token: on frozen encoder tokens the readout then adds nothing but its own
    mechanism to a linear probe).
    """

    def __init__(self, d_in: int, readout: nn.Module, dim: int, hidden: int,
                 n_classes: int, encoder: str = "mlp") -> None:
        super().__init__()
        if encoder not in ENCODERS:
            raise ValueError(f"encoder: expected one of {ENCODERS}, got {encoder!r}")
        self.encoder = TokenMLP(d_in, hidden, dim) if encoder == "mlp" else nn.Linear(d_in, dim)
        self.readout = readout
        self.head = nn.Linear(dim, n_classes)

    def forward(self, x: Tensor, mask: Tensor,
                generator: torch.Generator | None = None) -> tuple[Tensor, ReadoutOutput]:
        z = self.encoder(x)
        if isinstance(self.readout, SlotAttentionReadout):
            out = self.readout(z, mask, generator=generator)
        else:
            out = self.readout(z, mask)
        return self.head(out.pooled), out


def trim_padding(tokens: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Drop the trailing columns of a batch (B, T, d), (B, T) where no row has a valid token
    (the readouts give the same outputs: padding gets exactly zero weight)."""
    cols = mask.any(0)
    if bool(cols.all()) or not bool(cols.any()):
        return tokens, mask
    last = int(torch.nonzero(cols).max()) + 1
    return tokens[:, :last], mask[:, :last]


@torch.no_grad()
def ddcl_tokens(model: ReadoutClassifier, data: TokenSet, batch: int = 256) -> Tensor:
    """(N_valid, head_dim) the projected tokens that a DDCL readout's prototypes see."""
    if not isinstance(model.readout, DDCLReadoutAdapter):
        raise ValueError("model: expected a ReadoutClassifier with a DDCL readout")
    out = []
    for start in range(0, data.tokens.shape[0], batch):
        x, m = trim_padding(data.tokens[start:start + batch], data.mask[start:start + batch])
        out.append(model.readout.layer.in_proj(model.encoder(x))[m])
    return torch.cat(out)


#: The loss a DDCL readout trains beside the cross-entropy, and hence its collapse threshold:
#: L_q with the soft assignment q differentiated (``layers/ddcl.py``), whose collapsed bank is a
#: saddle only below T_c = 4 lambda_max, twice the free energy's 2 lambda_max.
TRAINED_OBJECTIVE = "quantisation"


def ddcl_critical_temperature(model: ReadoutClassifier, data: TokenSet,
                              objective: str = TRAINED_OBJECTIVE) -> float:
    """T_c of the projected tokens of ``data`` that a DDCL readout's prototypes see
    (:func:`ddcl_theory.theory.collapse.critical_temperature`, in float64): by default that of
    the loss the readout trains, L_q with q differentiated (4 lambda_max of their covariance
    with divisor N); ``objective="free_energy"`` gives F's 2 lambda_max. At least two valid
    tokens."""
    z = ddcl_tokens(model, data)
    if z.shape[0] < 2:
        raise ValueError(f"data: expected at least two valid tokens, got {z.shape[0]}")
    return critical_temperature(z, objective=objective)


def critical_ratio(model: ReadoutClassifier, data: TokenSet) -> float:
    """tau / T_c of a DDCL readout on the projected tokens of ``data`` (T_c of the trained
    L_q, :data:`TRAINED_OBJECTIVE`)."""
    return model.readout.layer.temperature.value / ddcl_critical_temperature(model, data)


@torch.no_grad()
def ddcl_trace_temperature(model: ReadoutClassifier, data: TokenSet, fraction: float) -> float:
    """``fraction`` times the mean squared distance of the projected tokens of ``data`` to their
    mean (the trace of their covariance): the scale-free temperature of the text chapter's
    readout (:meth:`ddcl_theory.layers.readouts.DDCLPooledReadout.calibrate`)."""
    z = ddcl_tokens(model, data).to(torch.float64)
    return max(fraction * float(((z - z.mean(0)) ** 2).sum(-1).mean()), 1e-6)


def near_equal_(bank: nn.Parameter, noise: float, gen: torch.Generator) -> None:
    """In place: every row of ``bank`` (..., S, d) at its first row plus ``noise`` * N(0, 1)."""
    with torch.no_grad():
        flat = bank.view(-1, bank.shape[-1])
        jitter = torch.randn(flat.shape, generator=gen, dtype=flat.dtype) * noise
        flat.copy_(flat[:1].expand_as(flat) + jitter.to(flat.device))
