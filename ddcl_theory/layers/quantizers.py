"""Vector quantisers for a VQ-VAE bottleneck, all with one interface (claim D11).

Every quantiser maps tokens ``z`` (B, T, D) to :class:`QuantizerOutput`:

* :class:`SoftDDCLQuantizer` - the DDCL soft quantiser: q = softmax_k(-||z - p_k||^2 / tau), the
  output is the soft centroid mu = sum_k q_k p_k (a projection-free
  :class:`~ddcl_theory.layers.ddcl.DDCLAttention`), and the auxiliary loss is beta * L_q. The map
  z -> mu is differentiable, so the encoder gets the reconstruction gradient with no estimator.
* :class:`HardVQ` - the VQ-VAE quantiser of van den Oord et al. (2017): the nearest code e(z), the
  straight-through estimator z + sg(e - z) (switchable off), and the loss
  ||sg(z) - e||^2 + beta ||z - sg(e)||^2 (codebook and commitment terms, means over elements).
  The codebook starts uniform in [-1/K, 1/K], as in the reference implementations
  (:func:`uniform_codebook`; :meth:`SoftDDCLQuantizer.set_codebook` gives the soft quantiser
  the same start).
* :class:`EMAVectorQuantizer` - a thin adapter of ``vector_quantize_pytorch.VectorQuantize``
  (EMA codebook, k-means initialisation on the first batch, expiry of dead codes): the strongest
  widely used hard quantiser.

``codes`` are the hard codes (the argmax of q for the soft quantiser); :meth:`Quantizer.lookup`
returns the code vectors of given codes, so any quantiser's reconstruction can also be decoded
from its hard codes alone.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as nnf
from torch import Tensor, nn

from ddcl_theory import functional as F
from ddcl_theory.layers.ddcl import DDCLAttention
from ddcl_theory.runtime.validate import (check_choice, check_non_negative_float,
                                          check_positive_int, check_real_range, check_shape,
                                          check_tokens)

__all__ = [
    "KINDS",
    "EMAVectorQuantizer",
    "HardVQ",
    "Quantizer",
    "QuantizerOutput",
    "SoftDDCLQuantizer",
    "make_quantizer",
    "soft_centroid_jacobian",
    "uniform_codebook",
]


@dataclass
class QuantizerOutput:
    """What a quantiser returns for tokens (B, T, D) and a bank of K codes.

    Attributes:
        quantized: (B, T, D) what the decoder receives.
        codes: (B, T) int64 hard code of each token (nearest code, or argmax of q).
        assignments: (B, T, K) assignment of each token to the codes: the soft q for the soft
            quantiser, one-hot rows for the hard ones. Rows sum to 1.
        loss: scalar auxiliary loss to add to the reconstruction loss.
    """

    quantized: Tensor
    codes: Tensor
    assignments: Tensor
    loss: Tensor


def uniform_codebook(num_codes: int, dim: int, *,
                     generator: torch.Generator | None = None) -> Tensor:
    """(K, D) codes uniform in [-1/K, 1/K]: the VQ-VAE's usual start (drawn from ``generator``,
    else from the global generator, as :class:`HardVQ` draws its codebook)."""
    check_positive_int(num_codes, "num_codes")
    check_positive_int(dim, "dim")
    return torch.empty(num_codes, dim).uniform_(-1.0 / num_codes, 1.0 / num_codes,
                                                generator=generator)


class Quantizer(nn.Module):
    """Base class: ``dim`` D, ``num_codes`` K, ``forward(z) -> QuantizerOutput``, ``lookup``."""

    soft: bool = False

    def __init__(self, dim: int, num_codes: int) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.num_codes = check_positive_int(num_codes, "num_codes")

    @property
    def codebook(self) -> Tensor:
        """(K, D) the current code vectors."""
        raise NotImplementedError

    def lookup(self, codes: Tensor) -> Tensor:
        """codes (...) int64 -> code vectors (..., D)."""
        return self.codebook[codes]


class SoftDDCLQuantizer(Quantizer):
    """DDCL soft quantisation: the soft centroid of a bank of K prototypes at temperature tau.

    Args:
        dim: token size D.
        num_codes: K prototypes.
        temperature: tau > 0.
        beta: weight of L_q in the auxiliary loss (>= 0).
        prototype_std: standard deviation of the random normal initial prototypes.
    """

    soft = True

    def __init__(self, dim: int, num_codes: int, *, temperature: float = 1.0, beta: float = 0.25,
                 prototype_std: float = 0.5) -> None:
        super().__init__(dim, num_codes)
        self.beta = check_non_negative_float(beta, "beta")
        self.layer = DDCLAttention(dim, num_codes, heads=1, temperature=temperature,
                                   residual=False, norm=False, projections=False,
                                   prototype_std=prototype_std)

    @property
    def codebook(self) -> Tensor:
        return self.layer.prototypes[0]

    @property
    def temperature(self) -> float:
        return self.layer.temperature.value

    @torch.no_grad()
    def set_codebook(self, codes: Tensor) -> None:
        """Start the bank at ``codes`` (K, D), e.g. :func:`uniform_codebook` (the hard VQ-VAE's
        start) instead of the random normal one."""
        check_shape(codes, "codes", (self.num_codes, self.dim))
        self.layer.prototypes[0].copy_(codes.to(self.layer.prototypes.dtype))

    def forward(self, z: Tensor) -> QuantizerOutput:
        check_tokens(z, None, self.dim, name="z")
        out = self.layer(z)
        q = out.assignments[:, 0]                                      # (B, T, K)
        return QuantizerOutput(out.centroids[:, 0], q.argmax(-1), q, self.beta * out.losses.l_q)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_codes={self.num_codes}, beta={self.beta:g}"


class HardVQ(Quantizer):
    """Nearest-code quantisation with the straight-through estimator (VQ-VAE).

    Args:
        dim: token size D.
        num_codes: K codes.
        beta: commitment weight (0.25 in the VQ-VAE paper).
        straight_through: pass the decoder's gradient to the encoder through z + sg(e - z); with
            False the decoder sees e(z) and the encoder gets no reconstruction gradient.
    """

    def __init__(self, dim: int, num_codes: int, *, beta: float = 0.25,
                 straight_through: bool = True) -> None:
        super().__init__(dim, num_codes)
        self.beta = check_non_negative_float(beta, "beta")
        self.straight_through = bool(straight_through)
        self.embedding = nn.Parameter(uniform_codebook(num_codes, dim))

    @property
    def codebook(self) -> Tensor:
        return self.embedding

    def forward(self, z: Tensor) -> QuantizerOutput:
        check_tokens(z, None, self.dim, name="z")
        b, t, d = z.shape
        flat = z.reshape(b * t, d)
        codes = F.squared_distances(flat.detach(), self.embedding.detach()).argmin(-1)
        e = self.embedding[codes].reshape(b, t, d).to(z.dtype)
        loss = nnf.mse_loss(e, z.detach()) + self.beta * nnf.mse_loss(z, e.detach())
        quantized = z + (e - z).detach() if self.straight_through else e
        onehot = nnf.one_hot(codes, self.num_codes).to(z.dtype).reshape(b, t, self.num_codes)
        return QuantizerOutput(quantized, codes.reshape(b, t), onehot, loss)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, num_codes={self.num_codes}, beta={self.beta:g}, "
                f"straight_through={self.straight_through}")


class EMAVectorQuantizer(Quantizer):
    """``vector_quantize_pytorch.VectorQuantize`` behind the common interface.

    Args:
        dim: token size D.
        num_codes: K codes.
        decay: EMA decay of the codebook.
        commitment_weight: weight of the commitment loss.
        kmeans_init: initialise the codebook by k-means on the first training batch.
        threshold_ema_dead_code: codes whose EMA cluster size falls below this are replaced by
            random tokens of the batch (dead-code expiry); 0 switches it off.
    """

    def __init__(self, dim: int, num_codes: int, *, decay: float = 0.99,
                 commitment_weight: float = 0.25, kmeans_init: bool = True,
                 threshold_ema_dead_code: float = 2.0) -> None:
        super().__init__(dim, num_codes)
        check_real_range(decay, "decay", 0.0, 1.0, low_open=True, high_open=True)
        check_non_negative_float(commitment_weight, "commitment_weight")
        check_non_negative_float(threshold_ema_dead_code, "threshold_ema_dead_code")
        from vector_quantize_pytorch import VectorQuantize

        self.vq = VectorQuantize(dim=dim, codebook_size=num_codes, decay=decay,
                                 commitment_weight=commitment_weight, kmeans_init=kmeans_init,
                                 threshold_ema_dead_code=threshold_ema_dead_code)

    @property
    def codebook(self) -> Tensor:
        return self.vq.codebook

    def forward(self, z: Tensor) -> QuantizerOutput:
        check_tokens(z, None, self.dim, name="z")
        quantized, codes, loss = self.vq(z)
        onehot = nnf.one_hot(codes, self.num_codes).to(z.dtype)
        return QuantizerOutput(quantized, codes, onehot, loss.reshape(()))


KINDS = ("soft", "hard", "ema")


def soft_centroid_jacobian(z: Tensor, prototypes: Tensor, temperature: float) -> Tensor:
    """d mu / d z for one token z (D,) and a bank (K, D):
    (2 / tau) sum_k q_k (p_k - mu)(p_k - mu)^T.

    This is why the soft quantiser needs no estimator, and where its gradient fades: the map
    z -> mu has the Jacobian 2/tau times the covariance of the prototypes under q, whose trace
    is 2/tau times the token's v = sum_k q_k ||p_k - mu||^2. It vanishes when q is one-hot (cold
    limit: a hard quantiser with no gradient at all) or when the prototypes coincide
    (collapse). Returns (D, D) in z's dtype.
    """
    check_shape(z, "z", ("D",))
    check_shape(prototypes, "prototypes", ("K", z.shape[0]))
    q = F.soft_assign(z[None], prototypes, temperature)[0]                 # (K,)
    centred = prototypes - q @ prototypes                                  # (K, D)
    return (2.0 / temperature) * (centred.T * q) @ centred


def make_quantizer(kind: str, dim: int, num_codes: int, *, temperature: float = 1.0,
                   beta: float = 0.25) -> Quantizer:
    """A quantiser by name: ``"soft"`` (DDCL, tau = ``temperature``, loss beta * L_q),
    ``"hard"`` (VQ-VAE with straight-through, commitment ``beta``) or ``"ema"``
    (VectorQuantize with k-means init and dead-code expiry, commitment ``beta``)."""
    check_choice(kind, "kind", KINDS)
    if kind == "soft":
        return SoftDDCLQuantizer(dim, num_codes, temperature=temperature, beta=beta)
    if kind == "hard":
        return HardVQ(dim, num_codes, beta=beta)
    return EMAVectorQuantizer(dim, num_codes, commitment_weight=beta)
