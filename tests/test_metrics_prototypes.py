"""ddcl_theory.metrics.prototypes: k-means++ seeding, usage, perplexity and the separation S(P)."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ddcl_theory.metrics.prototypes import kmeans_pp_init, perplexity, separation, usage


def test_kmeans_pp_picks_distinct_data_points_and_is_seeded():
    z = torch.randn(100, 3)
    a = kmeans_pp_init(z, 8, generator=torch.Generator().manual_seed(1))
    b = kmeans_pp_init(z, 8, generator=torch.Generator().manual_seed(1))
    assert a.shape == (8, 3)
    torch.testing.assert_close(a, b)
    match = (a[:, None, :] == z[None, :, :]).all(-1)          # (8, 100)
    assert bool(match.any(-1).all())                          # every pick is a row of z
    assert int(match.any(0).sum()) == 8                       # eight different rows


def test_kmeans_pp_prefers_far_points():
    """Two tight, far-apart clusters: D^2 sampling puts one seed in each (almost surely)."""
    g = torch.Generator().manual_seed(0)
    near, far = torch.randn(50, 2, generator=g), torch.randn(50, 2, generator=g)
    z = torch.cat([near * 1e-3, far * 1e-3 + 100])
    for seed in range(10):
        c = kmeans_pp_init(z, 2, generator=torch.Generator().manual_seed(seed))
        assert sorted((c[:, 0] > 50).tolist()) == [False, True]


def test_kmeans_pp_with_duplicate_points_still_returns_k_rows():
    z = torch.tensor([[0.0, 0.0]] * 5 + [[1.0, 1.0]])
    c = kmeans_pp_init(z, 4, generator=torch.Generator().manual_seed(0))
    assert c.shape == (4, 2)


def test_kmeans_pp_bad_arguments_raise():
    with pytest.raises(ValueError, match="k"):
        kmeans_pp_init(torch.randn(5, 2), 0)
    with pytest.raises(ValueError, match="z"):
        kmeans_pp_init(torch.randn(3, 2), 4)
    with pytest.raises(ValueError, match="z"):
        kmeans_pp_init(torch.randn(5), 2)


def test_usage_on_a_hand_example():
    q = torch.tensor([[0.9, 0.1, 0.0], [0.6, 0.4, 0.0], [0.2, 0.8, 0.0], [0.7, 0.3, 0.0]])
    u = usage(q)
    torch.testing.assert_close(u.histogram, torch.tensor([0.75, 0.25, 0.0], dtype=torch.float64))
    torch.testing.assert_close(u.mass, torch.tensor([0.6, 0.4, 0.0], dtype=torch.float64))
    assert u.fraction_used == pytest.approx(2 / 3)
    assert u.dead == 1


def test_perplexity_bounds_and_hand_values():
    assert float(perplexity(torch.full((5, 4), 0.25))) == pytest.approx(4.0)
    assert float(perplexity(torch.eye(3)[[0, 0, 0]])) == pytest.approx(1.0)
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])                # mean (1/2, 1/2)
    assert float(perplexity(q)) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="q"):
        perplexity(torch.zeros(0, 3))


def test_separation_kinds_on_hand_computed_examples():
    p = torch.tensor([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0]])
    # pairwise distances: 5, 1, sqrt(18)
    assert float(separation(p, "min")) == pytest.approx(1.0)
    assert float(separation(p, "mean")) == pytest.approx((5 + 1 + math.sqrt(18)) / 3)
    # centroid (1, 5/3); trace of the covariance (divisor K)
    pbar = p.mean(0)
    assert float(separation(p, "trace")) == pytest.approx(float(((p - pbar) ** 2).sum() / 3))
    assert float(separation(torch.tensor([[0.0, 0.0], [2.0, 0.0]]), "trace")) == pytest.approx(1.0)


def test_separation_of_coincident_and_single_prototypes_is_zero():
    p = torch.ones(4, 3)
    for kind in ("min", "mean", "trace"):
        assert float(separation(p, kind)) == 0.0
        assert float(separation(torch.randn(1, 3), kind)) == 0.0


def test_separation_is_batched_over_leading_dims():
    p = torch.randn(2, 5, 3)
    s = separation(p, "min")
    assert s.shape == (2,)
    assert float(s[1]) == pytest.approx(float(separation(p[1], "min")))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(2, 8), d=st.integers(1, 5))
def test_separation_trace_is_scaled_mean_squared_pairwise_distance(seed, k, d):
    """tr Cov(P) = (K-1)/(2K) * mean over ordered pairs i != j of ||p_i - p_j||^2; min <= mean."""
    p = torch.randn(k, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    sq = ((p[:, None] - p[None]) ** 2).sum(-1)
    mean_sq = sq.sum() / (k * (k - 1))
    assert float(separation(p, "trace")) == pytest.approx(float(mean_sq) * (k - 1) / (2 * k))
    assert float(separation(p, "min")) <= float(separation(p, "mean")) + 1e-12


def test_separation_bad_kind_raises():
    with pytest.raises(ValueError, match="kind"):
        separation(torch.randn(3, 2), "max")
    with pytest.raises(ValueError, match="prototypes"):
        separation(torch.randn(3), "min")
