"""Two time scales (D8): singular-perturbation eigenvalues, Schur complement, Sylvester inertia.

The SymPy checks are in test_theory_timescales_symbolic.py, the coupled model in
test_theory_coupled_model.py."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddcl_theory.theory import timescales as ts

SEEDS = st.integers(min_value=0, max_value=2**31 - 1)



def _random_blocks(seed: int, m: int = 3, n: int = 4, symmetric: bool = False) -> ts.Blocks:
    """A well-conditioned SPD fast block A (eigenvalues in [1, 3]) and arbitrary B, C, E
    (with ``symmetric``: C = B^T and G SPD)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(m, m)))
    a = q @ np.diag(rng.uniform(1.0, 3.0, m)) @ q.T
    b = rng.normal(size=(m, n))
    e = rng.normal(size=(n, n))
    if symmetric:   # E = B^T A^-1 B + (SPD): then G is SPD (its Schur complement is)
        e = b.T @ np.linalg.solve(a, b) + e @ e.T + np.eye(n)
    c = b.T if symmetric else rng.normal(size=(n, m))
    return ts.Blocks(a, b, c, e)


def _random_symmetric(seed: int, size: int) -> np.ndarray:
    """A symmetric matrix with eigenvalues of both signs, bounded away from 0."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(size, size)))
    lam = rng.uniform(0.5, 2.0, size) * rng.choice([-1.0, 1.0], size)
    return q @ np.diag(lam) @ q.T


# ---------------------------------------------------------------------------- Schur complement

@settings(max_examples=25, deadline=None)
@given(seed=SEEDS, m=st.integers(1, 4), n=st.integers(1, 4))
def test_schur_complement_is_inverse_of_slow_block_of_inverse(seed, m, n):
    """For SPD G = [[A, B], [B^T, E]]: S^{-1} = (G^{-1})_{theta theta} and det G = det A det S."""
    blocks = _random_blocks(seed, m, n, symmetric=True)
    g = blocks.full()
    s = ts.schur_complement(blocks)
    np.testing.assert_allclose(np.linalg.inv(s), np.linalg.inv(g)[m:, m:], rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(np.linalg.det(g), np.linalg.det(blocks.a) * np.linalg.det(s),
                               rtol=1e-8)
    assert np.all(np.linalg.eigvalsh(s) > 0)     # SPD G => SPD Schur complement


def test_schur_complement_singular_fast_block_raises():
    blocks = ts.Blocks(np.zeros((2, 2)), np.ones((2, 1)), np.ones((1, 2)), np.eye(1))
    with pytest.raises(ValueError, match="blocks.a"):
        ts.schur_complement(blocks)


def test_blocks_split_round_trip_and_bad_m():
    g = np.arange(25.0).reshape(5, 5)
    np.testing.assert_array_equal(ts.Blocks.split(g, 2).full(), g)
    with pytest.raises(ValueError, match="m:"):
        ts.Blocks.split(g, 0)
    with pytest.raises(ValueError, match="g:"):
        ts.Blocks.split(np.ones((2, 3)), 1)


# ---------------------------------------------------------------------------- eps expansion

@settings(max_examples=10, deadline=None)
@given(seed=SEEDS)
def test_slow_eigenvalue_error_scales_as_eps_squared(seed):
    blocks = _random_blocks(seed)
    eps = np.logspace(-5, -3, 5)
    err = np.array([ts.slow_eigenvalue_error(blocks, e) for e in eps])
    assert np.all(err > 0)
    assert ts.loglog_slope(eps, err) == pytest.approx(2.0, abs=0.1)


@settings(max_examples=10, deadline=None)
@given(seed=SEEDS)
def test_fast_eigenvalues_tend_to_eig_minus_a(seed):
    blocks = _random_blocks(seed)
    errs = [ts.fast_eigenvalue_error(blocks, e) for e in (1e-4, 1e-3)]
    assert errs[0] < 1e-2 and errs[0] < errs[1]


def test_jacobian_is_minus_diag_times_g():
    blocks = _random_blocks(0, 2, 3)
    j = ts.jacobian(blocks, 0.1)
    np.testing.assert_allclose(j[:2], -blocks.full()[:2])
    np.testing.assert_allclose(j[2:], -0.1 * blocks.full()[2:])
    with pytest.raises(ValueError, match="eps"):
        ts.jacobian(blocks, 0.0)


# ---------------------------------------------------------------------------- Sylvester inertia

@settings(max_examples=25, deadline=None)
@given(seed=SEEDS, m=st.integers(1, 4), n=st.integers(1, 4),
       eps=st.floats(min_value=1e-4, max_value=1e4))
def test_shared_potential_inertia_of_jacobian_does_not_depend_on_eps(seed, m, n, eps):
    """J(eps) = -D H is similar to -D^(1/2) H D^(1/2), congruent to -H: same real spectrum signs."""
    g = _random_symmetric(seed, m + n)
    blocks = ts.Blocks.split(g, m)
    lam = np.linalg.eigvals(ts.jacobian(blocks, eps))
    assert np.max(np.abs(lam.imag)) < 1e-6 * max(1.0, np.max(np.abs(lam)))
    assert ts.inertia(lam) == ts.inertia(np.linalg.eigvalsh(-g))


def test_two_objective_system_can_change_stability_with_eps():
    """a = 1, e = -1/2, b = 1, c = -1: S = 1/2 > 0 (stable reduced system), eps* = -a/e = 2."""
    blocks = ts.Blocks(np.array([[1.0]]), np.array([[1.0]]), np.array([[-1.0]]),
                       np.array([[-0.5]]))
    assert ts.max_real_part(blocks, 1.5) < 0 < ts.max_real_part(blocks, 2.5)
    crit = ts.critical_eps(lambda e: ts.max_real_part(blocks, e), np.logspace(-2, 2, 9))
    assert crit == pytest.approx(2.0, rel=1e-8)


@settings(max_examples=15, deadline=None)
@given(seed=SEEDS, eta=st.floats(min_value=0.05, max_value=0.6))
def test_discrete_critical_eps_is_where_eta_lambda_max_of_dh_reaches_two(seed, eta):
    blocks = _random_blocks(seed, symmetric=True)   # SPD: continuous flow stable for every eps
    grid = np.logspace(-4, 4, 33)
    crit = ts.critical_eps(lambda e: ts.spectral_radius_discrete(blocks, e, eta) - 1, grid)
    lam_max = lambda e: np.max(np.linalg.eigvals(-ts.jacobian(blocks, e)).real)
    if eta * lam_max(grid[-1]) < 2:
        assert crit is None
    else:
        assert crit is not None
        assert eta * lam_max(crit) == pytest.approx(2.0, rel=1e-6)


def test_critical_eps_none_when_never_crossing_and_grid_validation():
    assert ts.critical_eps(lambda e: -1.0, [0.1, 1.0]) is None
    with pytest.raises(ValueError, match="eps_grid"):
        ts.critical_eps(lambda e: -1.0, [1.0])


# ---------------------------------------------------------------------------- helpers

def test_loglog_slope_exact_power_law_and_bad_input():
    x = np.logspace(-3, 0, 6)
    assert ts.loglog_slope(x, 3 * x**2) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="positive"):
        ts.loglog_slope(x, -x)


def test_inertia_counts():
    assert ts.inertia(np.array([1.0, -2.0, 0.0, 3 + 1j])) == ts.Inertia(2, 1, 1)


@settings(max_examples=25, deadline=None)
@given(seed=SEEDS)
def test_match_eigenvalues_recovers_permutation(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=6) + 1j * rng.normal(size=6)
    perm = rng.permutation(6)
    a, b = ts.match_eigenvalues(x, x[perm])
    np.testing.assert_array_equal(a, b)
