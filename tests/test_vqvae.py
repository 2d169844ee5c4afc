"""The convolutional VQ-VAE and the soft-against-hard VQ experiment (claim D11)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from ddcl_theory.experiments import soft_vq
from ddcl_theory.layers.quantizers import HardVQ, make_quantizer
from ddcl_theory.models.vqvae import VQVAE
from ddcl_theory.runtime import profile


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
    with pytest.raises(ValueError, match="images"):
        model(torch.randn(2, 1, 16, 16))                      # wrong channels
    with pytest.raises(ValueError, match="multiples of 4"):
        model(torch.randn(2, 3, 10, 16))
    with pytest.raises(ValueError, match="latent_dim"):
        VQVAE(HardVQ(4, 8), latent_dim=5)
    with pytest.raises(ValueError, match="grid"):
        model.decode(torch.randn(1, 6, 4), (2, 2))


def test_critical_temperature_is_twice_the_top_eigenvalue_and_scales_quadratically():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 50, 4, generator=g, dtype=torch.float64) * torch.tensor([3.0, 1.0, 0.5, 0.1],
                                                                      dtype=torch.float64)
    flat = z.reshape(-1, 4).double()
    cov = torch.cov(flat.T, correction=0)
    assert soft_vq.critical_temperature(z) == pytest.approx(2 * float(torch.linalg.eigvalsh(cov)[-1]),
                                                            rel=1e-10)
    assert soft_vq.critical_temperature(2.5 * z) == pytest.approx(6.25 * soft_vq.critical_temperature(z),
                                                                  rel=1e-9)


def test_soft_quantiser_needs_no_estimator_and_hard_vq_does():
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(0)) * 0.2
    g = soft_vq.encoder_gradients(x, num_codes=8, latent_dim=4, hidden=8)
    assert g.soft > 0 and g.hard_straight_through > 0
    assert g.hard_without_estimator == 0.0


def _tiny(**kw):
    base = dict(n_train=48, n_test=16, downsample=2, hidden=8, latent_dim=4, num_codes=8,
                epochs=2, batch_size=16, lr=2e-3, beta=0.25, relative_temperatures=(0.1, 1.0),
                main_temperature=0.1, seeds=(0,), n_show=2, threads=1)
    base.update(kw)
    return soft_vq.SoftVQSettings(**base)


@pytest.fixture(scope="module")
def tiny_result():
    return soft_vq.run(_tiny())


def test_vq_experiment_records_usage_per_epoch_from_the_first_batch(tiny_result):
    res = tiny_result
    assert {r.method for r in res.runs} == set(soft_vq.METHODS)
    assert len(res.runs) == 4                                 # two temperatures + hard + ema
    for r in res.runs:
        assert len(r.usage) == len(r.perplexity) == len(r.test_mse) == 2
        assert all(1 / 8 <= u <= 1 for u in r.usage + [r.first_batch_usage, r.test_usage])
        # one epoch sees the first batch and more: never fewer codes than the first batch
        assert r.usage[0] >= r.first_batch_usage
        assert all(1 <= p <= 8 + 1e-9 for p in r.perplexity + r.soft_perplexity)
        assert r.reconstructions.shape[0] == 2 and r.reconstructions.min() >= 0
    hard = res.select("hard")[0]
    assert hard.soft_perplexity == pytest.approx(hard.perplexity)    # one-hot assignments
    assert res.trivial_mse > 0


def test_vq_experiment_is_deterministic_given_the_seed(tiny_result):
    again = soft_vq.train_one(_tiny(), "soft", 0, soft_vq.prepare_images(_tiny())[:3], 0.1)
    first = tiny_result.select("soft", 0.1)[0]
    assert again.usage == first.usage and again.test_mse == pytest.approx(first.test_mse, rel=1e-6)


def test_d11_verdict_is_a_verdict_word(tiny_result):
    grads = soft_vq.EncoderGradients(1.0, 1.0, 0.0)
    v = soft_vq.verdict_d11(tiny_result, grads)
    assert v.verdict in ("reproduced", "qualified", "not reproduced")
    table = soft_vq.temperature_table(tiny_result)
    assert [row["r"] for row in table] == [0.1, 1.0]
    # without the gradient check passing, nothing is reproduced
    bad = soft_vq.verdict_d11(tiny_result, soft_vq.EncoderGradients(0.0, 1.0, 0.0))
    assert bad.verdict == "not reproduced"


def test_settings_are_checked():
    with pytest.raises(ValueError, match="main_temperature"):
        _tiny(main_temperature=0.5)
    with pytest.raises(ValueError, match="epochs"):
        _tiny(epochs=0)
    with pytest.raises(ValueError, match="relative_temperatures"):
        _tiny(relative_temperatures=(0.1, -1.0))


def test_paper_profile_changes_the_vq_settings(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    cpu = soft_vq.SoftVQSettings.from_profile()
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    paper = soft_vq.SoftVQSettings.from_profile()
    assert cpu != paper and paper.epochs >= 44 and paper.num_codes == cpu.num_codes == 64
    monkeypatch.delenv(profile.PROFILE_ENV)
    assert soft_vq.SoftVQSettings.from_profile() == cpu
    assert dataclasses.replace(cpu).downsample == 2
