"""The MLP models (ddcl_theory.models.mlp): the row autoencoder with a DDCL soft-quantiser
bottleneck."""
from __future__ import annotations

import pytest
import torch

from ddcl_theory.models.mlp import QuantizedMLPAutoencoder, TokenMLP


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
    with pytest.raises(ValueError, match="^hidden: expected an int >= 1"):
        QuantizedMLPAutoencoder(5, 4, hidden=0, latent=3)
    with pytest.raises(ValueError, match="^num_codes: expected an int >= 1"):
        QuantizedMLPAutoencoder(5, True, hidden=8, latent=3)
    with pytest.raises(ValueError, match=r"^x: expected shape \(N, F\)"):
        QuantizedMLPAutoencoder(5, 4, hidden=8, latent=3)(torch.randn(2, 3, 5))


def test_token_mlp_maps_each_token_and_checks_its_arguments():
    torch.manual_seed(0)
    model = TokenMLP(4, 8, 2)
    x = torch.randn(3, 5, 4)
    assert torch.allclose(model(x)[1, 2], model(x[1:2, 2:3])[0, 0])
    with pytest.raises(ValueError, match="^d_out: expected an int >= 1"):
        TokenMLP(4, 8, 0)
    with pytest.raises(ValueError, match=r"^x: expected shape \(B, T, d_in\)"):
        model(torch.randn(5, 4))
