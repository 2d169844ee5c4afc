"""ddcl_theory.functional: distances, soft assignments (D1), loss terms (the D3 identity)."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ddcl_theory import functional as F

SMALL = settings(max_examples=25, deadline=None)


def _pair(seed: int, n: int, k: int, d: int, dtype=torch.float64, scale: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, d, generator=g, dtype=dtype) * scale
    p = torch.randn(k, d, generator=g, dtype=dtype) * scale
    return z, p


@SMALL
@given(seed=st.integers(0, 10_000), n=st.integers(1, 12), k=st.integers(1, 7), d=st.integers(1, 6),
       shift=st.floats(-100, 100))
def test_squared_distances_equal_direct_differences(seed, n, k, d, shift):
    z, p = _pair(seed, n, k, d)
    z, p = z + shift, p + shift
    direct = ((z[:, None, :] - p[None, :, :]) ** 2).sum(-1)
    got = F.squared_distances(z, p)
    assert got.shape == (n, k)
    assert bool((got >= 0).all())
    torch.testing.assert_close(got, direct, rtol=1e-9, atol=1e-9)


def test_squared_distances_clamped_at_zero_for_identical_points():
    p = torch.full((3, 5), 1e3, dtype=torch.float32) + torch.arange(3.0)[:, None]
    d = F.squared_distances(p, p)
    assert bool((d >= 0).all())
    assert torch.allclose(d.diagonal(), torch.zeros(3))


@SMALL
@given(seed=st.integers(0, 10_000), n=st.integers(0, 10), k=st.integers(1, 8),
       tau=st.floats(1e-3, 1e3))
def test_soft_assign_rows_on_the_simplex(seed, n, k, tau):
    z, p = _pair(seed, n, k, 4)
    q = F.soft_assign(z, p, tau)
    assert q.shape == (n, k)
    assert bool((q >= 0).all())
    torch.testing.assert_close(q.sum(-1), torch.ones(n, dtype=q.dtype), rtol=0, atol=1e-12)


@SMALL
@given(seed=st.integers(0, 10_000), n=st.integers(1, 9), k=st.integers(1, 6),
       tau=st.sampled_from([0.05, 0.5, 1.0, 3.0, 40.0]))
def test_q_nk_equals_exp_minus_d_nk_over_tau_normalised(seed, n, k, tau):
    """The temperature convention itself: q_nk = exp(-||z_n - p_k||^2 / tau) / sum_j (...)."""
    z, p = _pair(seed, n, k, 3)
    d = ((z[:, None, :] - p[None, :, :]) ** 2).sum(-1)
    w = torch.exp(-(d - d.min(dim=1, keepdim=True).values) / tau)
    torch.testing.assert_close(F.soft_assign(z, p, tau), w / w.sum(dim=1, keepdim=True),
                               rtol=1e-10, atol=1e-12)

@SMALL
@given(seed=st.integers(0, 10_000))
def test_soft_assign_equivariant_under_token_and_prototype_permutations(seed):
    z, p = _pair(seed, 9, 5, 3)
    g = torch.Generator().manual_seed(seed + 1)
    rows, cols = torch.randperm(9, generator=g), torch.randperm(5, generator=g)
    q = F.soft_assign(z, p, 0.7)
    torch.testing.assert_close(F.soft_assign(z[rows], p, 0.7), q[rows])
    torch.testing.assert_close(F.soft_assign(z, p[cols], 0.7), q[:, cols])


def test_soft_assign_zero_temperature_limit_is_nearest_prototype():
    z, p = _pair(3, 50, 6, 4)
    q = F.soft_assign(z, p, 1e-6)
    nearest = F.squared_distances(z, p).argmin(-1)
    hard = torch.nn.functional.one_hot(nearest, 6).to(q.dtype)
    torch.testing.assert_close(q, hard, rtol=0, atol=1e-8)


def test_soft_assign_large_temperature_limit_is_uniform():
    z, p = _pair(4, 20, 5, 3)
    q = F.soft_assign(z, p, 1e9)
    torch.testing.assert_close(q, torch.full_like(q, 0.2), rtol=0, atol=1e-7)


def test_soft_centroid_is_a_convex_combination():
    z, p = _pair(5, 7, 4, 3)
    q = F.soft_assign(z, p, 1.0)
    mu = F.soft_centroid(q, p)
    torch.testing.assert_close(mu, q @ p)
    # each coordinate lies between the prototypes' min and max
    assert bool((mu <= p.max(0).values + 1e-12).all() and (mu >= p.min(0).values - 1e-12).all())


@SMALL
@given(seed=st.integers(0, 10_000), n=st.integers(1, 10), k=st.integers(1, 6), d=st.integers(1, 5),
       scale=st.floats(1e-2, 1e2), boltzmann=st.booleans())
def test_decomposition_identity_Lq_equals_Lols_plus_V_float64(seed, n, k, d, scale, boltzmann):
    """L_q = L_OLS + V (to 1e-10 relative) for any q on the simplex, not only the Boltzmann one."""
    z, p = _pair(seed, n, k, d, scale=scale)
    if boltzmann:
        q = F.soft_assign(z, p, scale ** 2)
    else:
        q = torch.softmax(torch.randn(n, k, generator=torch.Generator().manual_seed(seed),
                                      dtype=torch.float64) * 3, -1)
    l_q, l_ols, v = F.loss_terms(z, p, q)
    assert float(v) >= -1e-10 * max(1.0, float(l_q))
    assert abs(float(l_q) - float(l_ols + v)) <= 1e-10 * max(float(l_q), 1e-300) + 1e-300
    # definitions, term by term
    mu = q @ p
    direct = (q * ((z[:, None] - p[None]) ** 2).sum(-1)).sum(-1).mean()
    torch.testing.assert_close(l_q, direct, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(l_ols, ((z - mu) ** 2).sum(-1).mean(), rtol=1e-10, atol=1e-12)


def test_loss_terms_of_empty_batch_are_zero():
    l_q, l_ols, v = F.loss_terms(torch.zeros(0, 3), torch.randn(4, 3), torch.zeros(0, 4))
    assert float(l_q) == float(l_ols) == float(v) == 0.0


@SMALL
@given(seed=st.integers(0, 10_000), n=st.integers(1, 10), k=st.integers(1, 6))
def test_masked_loss_terms_equal_the_terms_of_the_kept_tokens_alone(seed, n, k):
    z, p = _pair(seed, n, k, 3)
    q = F.soft_assign(z, p, 0.9)
    mask = torch.rand(n, generator=torch.Generator().manual_seed(seed)) > 0.4
    garbage = torch.where(mask[:, None], z, torch.full_like(z, float("nan")))
    got = F.loss_terms(garbage, p, q, mask)
    want = F.loss_terms(z[mask], p, q[mask])
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-15)
    assert all(bool(torch.isfinite(t)) for t in got)


def test_loss_terms_with_no_kept_token_are_zero_and_keep_the_graph():
    z, p = _pair(1, 4, 3, 2)
    p.requires_grad_(True)
    terms = F.loss_terms(z, p, F.soft_assign(z, p, 1.0), torch.zeros(4, dtype=torch.bool))
    assert all(float(t.detach()) == 0.0 for t in terms)
    (grad,) = torch.autograd.grad(sum(terms), p)
    assert bool((grad == 0).all())


def test_gradcheck_soft_assign_float64():
    z, p = _pair(6, 5, 3, 2)
    z.requires_grad_(True)
    p.requires_grad_(True)
    tau = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b, t: F.soft_assign(a, b, t), (z, p, tau))


def test_gradcheck_loss_terms_float64():
    z, p = _pair(7, 5, 3, 2)
    z.requires_grad_(True)
    p.requires_grad_(True)

    def terms(a, b):
        return torch.stack(F.loss_terms(a, b, F.soft_assign(a, b, 1.3)))

    assert torch.autograd.gradcheck(terms, (z, p))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_inputs_give_finite_rows_summing_to_one(dtype):
    z, p = _pair(8, 16, 5, 8, dtype=torch.float32, scale=10.0)
    q = F.soft_assign(z.to(dtype), p.to(dtype), 0.05)
    assert q.dtype == dtype
    assert bool(torch.isfinite(q).all())
    assert torch.allclose(q.float().sum(-1), torch.ones(16), atol=1e-2)
    assert all(bool(torch.isfinite(t)) for t in F.loss_terms(z.to(dtype), p.to(dtype), q))


def test_softmax_runs_in_float32_under_autocast():
    z, p = _pair(9, 16, 5, 8, dtype=torch.float32, scale=30.0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q = F.soft_assign(z, p, 1.0)
        d = F.squared_distances(z, p)
    assert d.dtype == torch.float32
    torch.testing.assert_close(d, F.squared_distances(z, p))
    torch.testing.assert_close(q, F.soft_assign(z, p, 1.0))


@pytest.mark.parametrize("tau", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_temperature_raises(tau):
    z, p = _pair(0, 3, 2, 2)
    with pytest.raises(ValueError, match="temperature"):
        F.soft_assign(z, p, tau)


def test_bad_shapes_raise_naming_the_argument():
    z, p = _pair(0, 3, 2, 2)
    with pytest.raises(ValueError, match="z"):
        F.soft_assign(z[0], p, 1.0)
    with pytest.raises(ValueError, match="prototypes"):
        F.soft_assign(z, p[:, :1], 1.0)
    with pytest.raises(ValueError, match="prototypes"):
        F.soft_assign(z, p[:0], 1.0)
    with pytest.raises(ValueError, match="q"):
        F.loss_terms(z, p, torch.ones(3, 3) / 3)
    with pytest.raises(ValueError, match="mask"):
        F.loss_terms(z, p, torch.ones(3, 2) / 2, torch.ones(3))          # not bool
    with pytest.raises(ValueError, match="mask"):
        F.loss_terms(z, p, torch.ones(3, 2) / 2, torch.ones(2, dtype=torch.bool))
