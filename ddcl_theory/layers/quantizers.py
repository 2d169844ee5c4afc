"""Vector quantisers for a VQ-VAE bottleneck, all with one interface (claim D11).

Every quantiser maps tokens ``z`` (B, T, D) to :class:`QuantizerOutput`:

* :class:`SoftDDCLQuantizer` - the DDCL soft quantiser: q = softmax_k(-||z - p_k||^2 / tau), the
  output is the soft centroid mu = sum_k q_k p_k (a projection-free
  :class:`~ddcl_theory.layers.ddcl.DDCLAttention`), and the auxiliary loss is beta * L_q. The map
  z -> mu is differentiable, so the encoder gets the reconstruction gradient with no estimator.
* :class:`HardVQ` - the VQ-VAE quantiser of van den Oord et al. (2017): the nearest code e(z), the
  straight-through estimator z + sg(e - z) (switchable off), and the loss
  ||sg(z) - e||^2 + beta ||z - sg(e)||^2 (codebook and commitment terms, means over elements).
  The codebook starts uniform in [-1/K, 1/K], as in the reference implementations.
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

__all__ = [
    "KINDS",
    "EMAVectorQuantizer",
    "HardVQ",
    "Quantizer",
    "QuantizerOutput",
    "SoftDDCLQuantizer",
    "make_quantizer",
    "soft_centroid_jacobian",
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


class Quantizer(nn.Module):
    """Base class: ``dim`` D, ``num_codes`` K, ``forward(z) -> QuantizerOutput``, ``lookup``."""

    soft: bool = False

    def __init__(self, dim: int, num_codes: int) -> None:
        super().__init__()
        for name, v in (("dim", dim), ("num_codes", num_codes)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {v!r}")
        self.dim, self.num_codes = dim, num_codes

    @property
    def codebook(self) -> Tensor:
        """(K, D) the current code vectors."""
        raise NotImplementedError

    def lookup(self, codes: Tensor) -> Tensor:
        """codes (...) int64 -> code vectors (..., D)."""
        return self.codebook[codes]

    def _check(self, z: Tensor) -> None:
        if not isinstance(z, Tensor) or z.dim() != 3 or z.shape[-1] != self.dim:
            raise ValueError(f"z: expected shape (B, T, {self.dim}), got "
                             f"{tuple(z.shape) if isinstance(z, Tensor) else type(z).__name__}")
        if not z.is_floating_point():
            raise ValueError(f"z: expected a floating-point tensor, got {z.dtype}")


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
        _check_non_negative(beta, "beta")
        self.beta = float(beta)
        self.layer = DDCLAttention(dim, num_codes, heads=1, temperature=temperature,
                                   residual=False, norm=False, projections=False,
                                   prototype_std=prototype_std)

    @property
    def codebook(self) -> Tensor:
        return self.layer.prototypes[0]

    @property
    def temperature(self) -> float:
        return self.layer.temperature

    def forward(self, z: Tensor) -> QuantizerOutput:
        self._check(z)
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
        _check_non_negative(beta, "beta")
        self.beta = float(beta)
        self.straight_through = bool(straight_through)
        self.embedding = nn.Parameter(torch.empty(num_codes, dim).uniform_(-1.0 / num_codes,
                                                                            1.0 / num_codes))

    @property
    def codebook(self) -> Tensor:
        return self.embedding

    def forward(self, z: Tensor) -> QuantizerOutput:
        self._check(z)
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
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay: expected a value in (0, 1), got {decay!r}")
        _check_non_negative(commitment_weight, "commitment_weight")
        _check_non_negative(threshold_ema_dead_code, "threshold_ema_dead_code")
        from vector_quantize_pytorch import VectorQuantize

        self.vq = VectorQuantize(dim=dim, codebook_size=num_codes, decay=decay,
                                 commitment_weight=commitment_weight, kmeans_init=kmeans_init,
                                 threshold_ema_dead_code=threshold_ema_dead_code)

    @property
    def codebook(self) -> Tensor:
        return self.vq.codebook

    def forward(self, z: Tensor) -> QuantizerOutput:
        self._check(z)
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
    if z.dim() != 1 or prototypes.dim() != 2 or prototypes.shape[1] != z.shape[0]:
        raise ValueError(f"z, prototypes: expected shapes (D,) and (K, D), got {tuple(z.shape)} "
                         f"and {tuple(prototypes.shape)}")
    q = F.soft_assign(z[None], prototypes, temperature)[0]                 # (K,)
    centred = prototypes - q @ prototypes                                  # (K, D)
    return (2.0 / temperature) * (centred.T * q) @ centred


def make_quantizer(kind: str, dim: int, num_codes: int, *, temperature: float = 1.0,
                   beta: float = 0.25) -> Quantizer:
    """A quantiser by name: ``"soft"`` (DDCL, tau = ``temperature``, loss beta * L_q),
    ``"hard"`` (VQ-VAE with straight-through, commitment ``beta``) or ``"ema"``
    (VectorQuantize with k-means init and dead-code expiry, commitment ``beta``)."""
    if kind == "soft":
        return SoftDDCLQuantizer(dim, num_codes, temperature=temperature, beta=beta)
    if kind == "hard":
        return HardVQ(dim, num_codes, beta=beta)
    if kind == "ema":
        return EMAVectorQuantizer(dim, num_codes, commitment_weight=beta)
    raise ValueError(f"kind: expected one of {KINDS}, got {kind!r}")


def _check_non_negative(value: float, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name}: expected a number >= 0, got {value!r}")
