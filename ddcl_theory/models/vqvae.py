"""A small convolutional VQ-VAE whose bottleneck is any quantiser of
:mod:`ddcl_theory.layers.quantizers`.

The encoder halves the image side twice with strided convolutions and maps to ``latent_dim``
channels; every cell of the resulting (H/4, W/4) grid is one token for the quantiser. The decoder
mirrors it with transposed convolutions. Images enter centred (the data mean subtracted by the
caller), so the trivial reconstruction "every pixel at the data mean" is the constant 0 output.

Shapes: ``forward(images (B, C, H, W)) -> VQVAEOutput`` with ``reconstruction`` (B, C, H, W),
``tokens`` (B, T, latent_dim) with T = (H/4)(W/4), and the quantiser's output (see
:class:`ddcl_theory.layers.quantizers.QuantizerOutput`). ``H`` and ``W`` must be multiples of 4
(van den Oord et al. 2017, scaled down).
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from ddcl_theory.layers.quantizers import Quantizer, QuantizerOutput
from ddcl_theory.runtime.validate import check_positive_int, check_shape

__all__ = ["VQVAE", "ConvDecoder", "ConvEncoder", "VQVAEOutput"]


class ConvEncoder(nn.Module):
    """(B, C, H, W) -> (B, latent_dim, H/4, W/4): two stride-2 4x4 convolutions and a 1x1 map."""

    def __init__(self, in_channels: int, hidden: int, latent_dim: int) -> None:
        super().__init__()
        for name, v in (("in_channels", in_channels), ("hidden", hidden),
                        ("latent_dim", latent_dim)):
            check_positive_int(v, name)
        self.net = nn.Sequential(
            nn.Conv2d(in_channels, hidden, 4, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(hidden, hidden, 4, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(hidden, latent_dim, 1))

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class ConvDecoder(nn.Module):
    """(B, latent_dim, h, w) -> (B, C, 4h, 4w): a 3x3 convolution and two stride-2 transposed
    4x4 convolutions; linear output (centred pixels)."""

    def __init__(self, latent_dim: int, hidden: int, out_channels: int) -> None:
        super().__init__()
        for name, v in (("latent_dim", latent_dim), ("hidden", hidden),
                        ("out_channels", out_channels)):
            check_positive_int(v, name)
        self.net = nn.Sequential(
            nn.Conv2d(latent_dim, hidden, 3, padding=1), nn.ReLU(),
            nn.ConvTranspose2d(hidden, hidden, 4, stride=2, padding=1), nn.ReLU(),
            nn.ConvTranspose2d(hidden, out_channels, 4, stride=2, padding=1))

    def forward(self, z: Tensor) -> Tensor:
        return self.net(z)


@dataclass
class VQVAEOutput:
    """What :meth:`VQVAE.forward` returns.

    Attributes:
        reconstruction: (B, C, H, W) decoded images (centred pixel scale).
        tokens: (B, T, D) the encoder's tokens before quantisation.
        quantized: the quantiser's output (codes, assignments, auxiliary loss).
    """

    reconstruction: Tensor
    tokens: Tensor
    quantized: QuantizerOutput


class VQVAE(nn.Module):
    """Encoder -> quantiser on the grid tokens -> decoder.

    Args:
        quantizer: a :class:`ddcl_theory.layers.quantizers.Quantizer` with ``dim == latent_dim``.
        in_channels: image channels C.
        hidden: channels of the hidden convolutions.
        latent_dim: token size D (the code vectors' size).
    """

    def __init__(self, quantizer: Quantizer, *, in_channels: int = 3, hidden: int = 32,
                 latent_dim: int = 16) -> None:
        super().__init__()
        if not isinstance(quantizer, Quantizer):
            raise ValueError(f"quantizer: expected a ddcl_theory.layers.quantizers.Quantizer, "
                             f"got {type(quantizer).__name__}")
        if quantizer.dim != latent_dim:
            raise ValueError(f"latent_dim: expected the quantizer's dim={quantizer.dim}, "
                             f"got {latent_dim}")
        self.encoder = ConvEncoder(in_channels, hidden, latent_dim)
        self.quantizer = quantizer
        self.decoder = ConvDecoder(latent_dim, hidden, in_channels)
        self.in_channels, self.latent_dim = in_channels, latent_dim

    def encode(self, images: Tensor) -> Tensor:
        """(B, C, H, W) -> tokens (B, T, D), T = (H/4)(W/4), row-major over the grid."""
        check_shape(images, "images", ("B", self.in_channels, "H", "W"))
        h, w = images.shape[-2:]
        if h % 4 or w % 4 or h < 4 or w < 4:
            raise ValueError(f"images: expected H and W multiples of 4, got {h}x{w}")
        z = self.encoder(images)                                   # (B, D, h, w)
        return z.flatten(2).transpose(1, 2)

    def decode(self, tokens: Tensor, grid: tuple[int, int]) -> Tensor:
        """tokens (B, T, D) on a ``grid`` (h, w) with h*w = T -> images (B, C, 4h, 4w)."""
        b, t, d = tokens.shape
        if grid[0] * grid[1] != t:
            raise ValueError(f"grid: expected h*w = T = {t}, got {grid}")
        return self.decoder(tokens.transpose(1, 2).reshape(b, d, *grid))

    def forward(self, images: Tensor) -> VQVAEOutput:
        tokens = self.encode(images)
        grid = (images.shape[-2] // 4, images.shape[-1] // 4)
        q = self.quantizer(tokens)
        return VQVAEOutput(self.decode(q.quantized, grid), tokens, q)
