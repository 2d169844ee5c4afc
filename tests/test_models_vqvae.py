"""The convolutional VQ-VAE (ddcl_theory.models.vqvae) with each quantiser."""
from __future__ import annotations

import pytest
import torch

from ddcl_theory.layers.quantizers import HardVQ, make_quantizer
from ddcl_theory.models.vqvae import VQVAE


@pytest.mark.parametrize("kind", ["soft", "hard", "ema"])
def test_vqvae_reconstructs_images_of_the_input_shape(kind):
    model = VQVAE(make_quantizer(kind, 4, 8), in_channels=3, hidden=8, latent_dim=4)
    x = torch.randn(2, 3, 16, 12)
    out = model(x)
    assert out.reconstruction.shape == x.shape
    assert out.tokens.shape == (2, 4 * 3, 4)                  # (H/4)(W/4) tokens of size D
    assert out.quantized.quantized.shape == out.tokens.shape


def test_tokens_are_the_encoder_grid_read_row_by_row():
    model = VQVAE(HardVQ(4, 8), hidden=8, latent_dim=4)
    x = torch.randn(1, 3, 8, 12)
    grid = model.encoder(x)                                   # (1, D, 2, 3)
    tokens = model.encode(x)
    for i in range(2):
        for j in range(3):
            assert torch.equal(tokens[0, i * 3 + j], grid[0, :, i, j])
    assert torch.allclose(model.decode(tokens, (2, 3)), model.decoder(grid))


def test_vqvae_rejects_bad_images_and_mismatched_sizes():
    model = VQVAE(HardVQ(4, 8), hidden=8, latent_dim=4)
    with pytest.raises(ValueError, match=r"^images: expected shape \(B, 3, H, W\)"):
        model(torch.randn(2, 1, 16, 16))                      # wrong channels
    with pytest.raises(ValueError, match="^images: expected a tensor"):
        model([[0.0]])
    with pytest.raises(ValueError, match="multiples of 4"):
        model(torch.randn(2, 3, 10, 16))
    with pytest.raises(ValueError, match="latent_dim"):
        VQVAE(HardVQ(4, 8), latent_dim=5)
    with pytest.raises(ValueError, match="grid"):
        model.decode(torch.randn(1, 6, 4), (2, 2))
