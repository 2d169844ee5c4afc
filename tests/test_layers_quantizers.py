"""The three VQ bottlenecks (claim D11): shapes, the straight-through gradient, the soft
quantiser's exact gradient, the VQ-VAE loss, usage bookkeeping."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ddcl_theory.layers.quantizers import (
    KINDS,
    EMAVectorQuantizer,
    HardVQ,
    SoftDDCLQuantizer,
    make_quantizer,
    soft_centroid_jacobian,
    uniform_codebook,
)


def _tokens(b=2, t=5, d=3, seed=0, dtype=torch.float32):
    return torch.randn(b, t, d, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("kind", KINDS)
def test_every_quantizer_returns_the_documented_shapes(kind):
    q = make_quantizer(kind, 3, 4)
    z = _tokens()
    out = q(z)
    assert out.quantized.shape == (2, 5, 3)
    assert out.codes.shape == (2, 5) and out.codes.dtype == torch.int64
    assert out.assignments.shape == (2, 5, 4)
    assert torch.allclose(out.assignments.sum(-1), torch.ones(2, 5), atol=1e-6)
    assert out.loss.dim() == 0 and torch.isfinite(out.loss)
    assert torch.equal(out.assignments.argmax(-1), out.codes)
    assert q.lookup(out.codes).shape == (2, 5, 3)


@pytest.mark.parametrize("kind", KINDS)
def test_quantizers_reject_tokens_of_the_wrong_shape(kind):
    q = make_quantizer(kind, 3, 4)
    with pytest.raises(ValueError, match="z: expected shape"):
        q(torch.randn(5, 3))
    with pytest.raises(ValueError, match="z: expected shape"):
        q(torch.randn(2, 5, 4))


def test_make_quantizer_rejects_an_unknown_kind():
    with pytest.raises(ValueError, match=r"^kind: expected one of \('soft', 'hard', 'ema'\)"):
        make_quantizer("gumbel", 3, 4)


def test_quantizer_arguments_are_checked():
    with pytest.raises(ValueError, match="^num_codes: expected an int >= 1"):
        HardVQ(3, 0)
    with pytest.raises(ValueError, match="^dim: expected an int >= 1"):
        SoftDDCLQuantizer(True, 4)
    with pytest.raises(ValueError, match="^beta: expected a finite number >= 0"):
        SoftDDCLQuantizer(3, 4, beta=-1.0)
    with pytest.raises(ValueError, match=r"^decay: expected a number in \(0, 1\)"):
        EMAVectorQuantizer(3, 4, decay=1.5)
    with pytest.raises(ValueError, match="^commitment_weight: expected a finite number >= 0"):
        EMAVectorQuantizer(3, 4, commitment_weight=float("nan"))
    with pytest.raises(ValueError, match="^threshold_ema_dead_code: expected"):
        EMAVectorQuantizer(3, 4, threshold_ema_dead_code=-2.0)
    with pytest.raises(ValueError, match="^z: expected a floating-point tensor"):
        HardVQ(3, 4)(torch.ones(2, 5, 3, dtype=torch.long))


def test_soft_centroid_jacobian_checks_the_token_and_the_bank():
    with pytest.raises(ValueError, match=r"^z: expected shape \(D,\), got \(1, 3\)"):
        soft_centroid_jacobian(torch.zeros(1, 3), torch.zeros(4, 3), 1.0)
    with pytest.raises(ValueError, match=r"^prototypes: expected shape \(K, 3\), got \(4, 2\)"):
        soft_centroid_jacobian(torch.zeros(3), torch.zeros(4, 2), 1.0)


def test_soft_output_is_the_soft_centroid_of_the_bank():
    q = SoftDDCLQuantizer(3, 4, temperature=0.7, beta=0.5)
    z = _tokens()
    out = q(z)
    bank = q.codebook.detach()
    d = ((z[..., None, :] - bank) ** 2).sum(-1)                          # (B, T, K)
    expected_q = torch.softmax(-d / 0.7, dim=-1)
    assert torch.allclose(out.assignments, expected_q, atol=1e-5)
    assert torch.allclose(out.quantized, expected_q @ bank, atol=1e-5)
    l_q = (expected_q * d).sum(-1).mean()
    assert torch.allclose(out.loss, 0.5 * l_q, rtol=1e-4)
    assert torch.equal(out.codes, d.argmin(-1))                         # argmax q = nearest code


def test_soft_quantizer_gradient_is_exact_in_float64():
    q = SoftDDCLQuantizer(3, 4, temperature=0.8).double()
    z = _tokens(dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: q(x).quantized, (z,), eps=1e-6, atol=1e-6)
    assert torch.autograd.gradcheck(lambda x: q(x).loss, (z,), eps=1e-6, atol=1e-6)


def test_hard_codes_are_the_nearest_codes():
    q = HardVQ(3, 6)
    with torch.no_grad():
        q.embedding.copy_(torch.randn(6, 3, generator=torch.Generator().manual_seed(1)))
    z = _tokens(b=3, t=7)
    out = q(z)
    brute = ((z[..., None, :] - q.embedding.detach()) ** 2).sum(-1).argmin(-1)
    assert torch.equal(out.codes, brute)
    assert torch.allclose(out.quantized, q.embedding.detach()[brute])


def test_straight_through_passes_the_decoder_gradient_unchanged():
    q = HardVQ(3, 6, straight_through=True)
    z = _tokens().requires_grad_(True)
    w = torch.randn(2, 5, 3)
    (q(z).quantized * w).sum().backward()
    assert torch.equal(z.grad, w)                     # d quantized / d z = identity
    assert q.embedding.grad is None or torch.count_nonzero(q.embedding.grad) == 0


def test_without_straight_through_the_encoder_gets_no_reconstruction_gradient():
    q = HardVQ(3, 6, straight_through=False)
    z = _tokens().requires_grad_(True)
    out = q(z)
    (out.quantized ** 2).sum().backward()
    assert z.grad is None or torch.count_nonzero(z.grad) == 0
    assert torch.count_nonzero(q.embedding.grad) > 0  # the codebook still learns from it


def test_vq_vae_loss_is_codebook_plus_beta_commitment():
    beta = 0.25
    q = HardVQ(3, 6, beta=beta)
    z = _tokens().requires_grad_(True)
    out = q(z)
    e = q.embedding.detach()[out.codes]
    mse = ((e - z.detach()) ** 2).mean()
    assert torch.allclose(out.loss, (1 + beta) * mse, rtol=1e-5)
    out.loss.backward()
    # commitment only reaches z: beta * 2 (z - e) / numel
    assert torch.allclose(z.grad, beta * 2 * (z.detach() - e) / z.numel(), atol=1e-7)
    # the codebook term only reaches the used codes: 2 (e - z) / numel summed per code
    expected = torch.zeros_like(q.embedding)
    expected.index_add_(0, out.codes.reshape(-1), (2 * (e - z.detach()) / z.numel()).reshape(-1, 3))
    assert torch.allclose(q.embedding.grad, expected, atol=1e-7)


def test_ema_adapter_initialises_by_kmeans_on_the_first_training_batch():
    torch.manual_seed(0)
    q = EMAVectorQuantizer(3, 4, kmeans_init=True)
    z = torch.cat([torch.randn(1, 50, 3) * 0.01 + c for c in (-3.0, -1.0, 1.0, 3.0)], dim=1)
    out = q(z)
    # four well separated blobs, four codes: k-means puts one code on each blob
    assert out.codes.unique().numel() == 4
    assert torch.allclose(out.quantized, q.lookup(out.codes), atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.integers(1, 6), st.integers(1, 5), st.integers(0, 1000))
def test_soft_assignments_lie_on_the_simplex_and_codes_count_usage(b, t, k, seed):
    q = SoftDDCLQuantizer(2, k, temperature=0.5)
    z = _tokens(b, t, 2, seed)
    out = q(z)
    a = out.assignments
    assert torch.all(a >= 0) and torch.allclose(a.sum(-1), torch.ones(b, t), atol=1e-5)
    used = torch.bincount(out.codes.reshape(-1), minlength=k) > 0
    assert 1 <= int(used.sum()) <= min(k, b * t)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 1000), st.floats(0.05, 5.0))
def test_soft_centroid_jacobian_is_the_assignment_covariance_over_tau(seed, tau):
    from ddcl_theory import functional as F
    from ddcl_theory.layers.quantizers import soft_centroid_jacobian

    g = torch.Generator().manual_seed(seed)
    bank = torch.randn(5, 3, generator=g, dtype=torch.float64)
    z = torch.randn(3, generator=g, dtype=torch.float64)
    mu = lambda x: F.soft_centroid(F.soft_assign(x[None], bank, tau), bank)[0]  # noqa: E731
    auto = torch.autograd.functional.jacobian(mu, z)
    closed = soft_centroid_jacobian(z, bank, tau)
    assert torch.allclose(auto, closed, atol=1e-10)
    # trace = (2 / tau) * v of the token
    q = F.soft_assign(z[None], bank, tau)[0]
    v = (q * ((bank - q @ bank) ** 2).sum(-1)).sum()
    assert torch.allclose(torch.trace(closed), 2 / tau * v, atol=1e-12)


def test_uniform_codebook_is_the_hard_vq_start_and_the_soft_bank_can_take_it():
    codes = uniform_codebook(8, 3, generator=torch.Generator().manual_seed(1))
    assert codes.shape == (8, 3) and codes.abs().max() <= 1 / 8
    assert torch.equal(codes, uniform_codebook(8, 3, generator=torch.Generator().manual_seed(1)))
    torch.manual_seed(5)
    hard = HardVQ(3, 8)
    torch.manual_seed(5)
    assert torch.equal(hard.codebook, uniform_codebook(8, 3))    # the same draw
    soft = SoftDDCLQuantizer(3, 8)
    soft.set_codebook(hard.codebook.detach())
    assert torch.equal(soft.codebook, hard.codebook)
    z = _tokens(d=3)
    assert torch.equal(soft(z).codes, hard(z).codes)             # argmax q = nearest code
    with pytest.raises(ValueError, match="codes: expected shape"):
        soft.set_codebook(torch.zeros(7, 3))
    with pytest.raises(ValueError, match="num_codes"):
        uniform_codebook(0, 3)
