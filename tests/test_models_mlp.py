"""The MLP models (ddcl_theory.models.mlp): the row autoencoder with a DDCL soft-quantiser
bottleneck."""
from __future__ import annotations

import pytest
import torch

from ddcl_theory.models.mlp import QuantizedMLPAutoencoder


def test_quantized_autoencoder_reconstructs_rows_from_the_soft_centroids():
    torch.manual_seed(0)
    model = QuantizedMLPAutoencoder(5, 4, hidden=8, latent=3)
    x = torch.randn(30, 5)
    recon, out = model(x)
    assert recon.shape == x.shape
    assert out.assignments.shape == (1, 1, 30, 4)
    q = out.assignments[0, 0]
    assert torch.allclose(q.sum(-1), torch.ones(30))
    assert torch.allclose(out.centroids[0, 0], q @ model.quantizer.codebook, atol=1e-6)
    assert torch.equal(recon, model.decoder(out.centroids[0, 0]))
    assert float(out.losses.v.detach()) >= 0


def test_quantized_autoencoder_gradient_reaches_encoder_decoder_and_bank():
    torch.manual_seed(0)
    model = QuantizedMLPAutoencoder(5, 4, hidden=8, latent=3)
    x = torch.randn(30, 5)
    recon, out = model(x)
    (((recon - x) ** 2).mean() + 0.25 * out.losses.l_q).backward()
    for part in (model.encoder, model.decoder, model.quantizer):
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in part.parameters())


def test_quantized_autoencoder_checks_its_arguments():
    with pytest.raises(ValueError, match="hidden"):
        QuantizedMLPAutoencoder(5, 4, hidden=0, latent=3)
    with pytest.raises(ValueError, match="num_codes"):
        QuantizedMLPAutoencoder(5, True, hidden=8, latent=3)
    with pytest.raises(ValueError, match="x"):
        QuantizedMLPAutoencoder(5, 4, hidden=8, latent=3)(torch.randn(2, 3, 5))
