"""ddcl_theory.theory.diffusion: claims L1-L4 and L11 (identities, conditions, counterexamples).
The L5 cost accounting is tested in test_experiments_overhead, the learned attention matrices in
test_experiments_learned_attention."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from ddcl_theory.theory import diffusion as D
from ddcl_theory.theory.symbolic import SymbolicCheck

seeds = st.integers(0, 2**31 - 1)
sizes = st.integers(1, 8)
taus = st.floats(0.0, 1.0)


def _rng(seed):
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------- input checks
def test_check_row_stochastic_rejects_bad_matrices():
    with pytest.raises(ValueError, match="p"):
        D.check_row_stochastic(np.ones((2, 3)) / 3)
    with pytest.raises(ValueError, match="sum to 1"):
        D.check_row_stochastic(np.ones((2, 2)))
    with pytest.raises(ValueError, match="negative"):
        D.check_row_stochastic(np.array([[1.5, -0.5], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="tau"):
        D.euler_step(np.ones((2, 1)), np.eye(2), -0.1)
    with pytest.raises(ValueError, match="x"):
        D.euler_step(np.ones((3, 1)), np.eye(2), 0.5)


# ---------------------------------------------------------------------------- L1
def test_L1_symbolic_I_minus_P_kills_ones_and_gershgorin_discs_fit():
    for n in (2, 3):
        kills = D.sym_laplacian_kills_ones(n)
        assert isinstance(kills, SymbolicCheck)
        assert kills.holds and kills.residual == sp.zeros(n, 1)
        gersh = D.sym_gershgorin_radius_gap(n)
        assert gersh.holds and tuple(gersh.residual) == (0,) * n
    eigs = D.sym_two_by_two_eigenvalues()
    a, b = sp.symbols("a b", nonnegative=True)
    assert eigs.holds and eigs.details["eigenvalues"] == {0, a + b}


@settings(max_examples=60, deadline=None)
@given(seed=seeds, t=sizes, causal=st.booleans(), scale=st.floats(0.1, 10.0))
def test_L1_spectrum_of_I_minus_P_in_unit_disc_around_one(seed, t, causal, scale):
    p = D.random_attention(t, _rng(seed), scale=scale, causal=causal)
    lap = D.random_walk_laplacian(p)
    np.testing.assert_allclose(lap @ np.ones(t), 0.0, atol=1e-12)
    assert D.disc_excess(p) <= 1e-9
    assert np.abs(D.laplacian_spectrum(p)).min() <= 1e-9          # 0 is an eigenvalue


def test_L1_disc_is_attained_by_a_permutation():
    """The bound is tight: the swap P = [[0,1],[1,0]] gives eigenvalue 2 = 1 + 1."""
    assert np.isclose(D.disc_excess(np.array([[0.0, 1.0], [1.0, 0.0]])), 0.0)


# ---------------------------------------------------------------------------- L2
def test_L2_euler_step_is_lazy_random_walk_symbolically():
    check = D.sym_euler_is_lazy_walk(3)
    assert check.holds and check.residual == sp.zeros(3, 2)


@settings(max_examples=30, deadline=None)
@given(seed=seeds, t=sizes, tau=taus)
def test_L2_euler_step_equals_lazy_walk_and_stays_stochastic(seed, t, tau):
    rng = _rng(seed)
    p = D.random_attention(t, rng)
    x = rng.standard_normal((t, 3))
    a = D.lazy_walk(p, tau)
    np.testing.assert_allclose(D.euler_step(x, p, tau), a @ x, atol=1e-12)
    D.check_row_stochastic(a)                                       # tau in [0, 1] keeps A >= 0


def test_L2_euler_steps_converge_to_heat_kernel_at_first_order():
    p = D.random_attention(6, _rng(3))
    k = D.heat_kernel(p, 2.0)
    D.check_row_stochastic(k)
    errs = [np.abs(D.euler_heat(p, 2.0, n) - k).max() for n in (16, 32, 64, 128)]
    ratios = np.array(errs[:-1]) / np.array(errs[1:])
    assert np.all(np.abs(ratios - 2.0) < 0.2)                       # error ~ C / n


# ---------------------------------------------------------------------------- L3
def test_L3_laplacian_head_blind_to_the_mean_symbolically():
    check = D.sym_mean_blindness(3)
    assert check.holds and check.residual == sp.zeros(3, 2)


def test_L3_output_mean_is_zero_iff_column_stochastic_symbolically():
    check = D.sym_output_mean(3)
    assert check.holds
    total, defect = check.details["total"], check.details["defect"]
    # total = (1^T - 1^T P) Xc: expressed through the column-sum defects only
    p = D.sym_stochastic(3)
    c = sp.symbols("c1:3")
    xc = sp.Matrix(list(c) + [-sum(c)])
    assert sp.expand(total[0] - (defect * xc)[0]) == 0
    doubly = {p[0, 0]: sp.Rational(1, 2), p[0, 1]: sp.Rational(1, 4),
              p[1, 0]: sp.Rational(1, 4), p[1, 1]: sp.Rational(1, 2),
              p[2, 0]: sp.Rational(1, 4), p[2, 1]: sp.Rational(1, 4)}
    assert total.subs(doubly) == sp.zeros(1, 1)


@settings(max_examples=30, deadline=None)
@given(seed=seeds, t=st.integers(2, 8))
def test_L3_mean_shift_changes_attention_head_not_laplacian_head(seed, t):
    rng = _rng(seed)
    p = D.random_attention(t, rng)
    x, m, shift = rng.standard_normal((t, 3)), rng.standard_normal((3, 3)), rng.standard_normal(3)
    np.testing.assert_allclose(D.laplacian_head(x + shift, p, m), D.laplacian_head(x, p, m),
                               atol=1e-10)
    np.testing.assert_allclose(D.attention_head(x + shift, p, m) - D.attention_head(x, p, m),
                               np.tile(shift @ m, (t, 1)), atol=1e-10)


def test_L3_output_mean_nonzero_for_row_but_not_column_stochastic_P():
    p, x, _ = D.variance_counterexample()
    out = D.laplacian_head(x, p, np.eye(1))
    assert abs(out.mean()) > 0.1
    ps = D.symmetric_stochastic(5, _rng(0))
    xs = _rng(1).standard_normal((5, 2))
    np.testing.assert_allclose(D.laplacian_head(xs, ps, np.eye(2)).mean(axis=0), 0.0, atol=1e-12)


# ---------------------------------------------------------------------------- L4
@settings(max_examples=40, deadline=None)
@given(seed=seeds, t=sizes, tau=taus)
def test_L4_symmetric_P_never_raises_variance_or_dirichlet_energy(seed, t, tau):
    rng = _rng(seed)
    p = D.symmetric_stochastic(t, rng, scale=3.0)
    x = rng.standard_normal((t, 2))
    y = D.euler_step(x, p, tau)
    assert D.within_variance(y) <= D.within_variance(x) + 1e-12
    assert D.dirichlet_energy(y, p) <= D.dirichlet_energy(x, p) + 1e-12


@settings(max_examples=40, deadline=None)
@given(seed=seeds, t=sizes, tau=taus)
def test_L4_reversible_P_never_raises_pi_weighted_variance_or_energy(seed, t, tau):
    rng = _rng(seed)
    p, pi = D.reversible_stochastic(t, rng, scale=3.0)
    np.testing.assert_allclose(pi @ p, pi, atol=1e-12)
    x = rng.standard_normal((t, 2))
    y = D.euler_step(x, p, tau)
    assert D.within_variance(y, pi) <= D.within_variance(x, pi) + 1e-12
    assert D.dirichlet_energy(y, p, pi) <= D.dirichlet_energy(x, p, pi) + 1e-12


def test_L4_counterexample_general_P_raises_variance_from_3_16_to_1_4():
    p, x, tau = D.variance_counterexample()
    assert D.within_variance(x) == pytest.approx(3 / 16)
    assert D.within_variance(D.euler_step(x, p, tau)) == pytest.approx(1 / 4)


def test_L4_uniform_variance_can_rise_for_a_reversible_P():
    """Reversibility protects only the pi-weighted variance, not the uniform one."""
    rng = _rng(0)
    rises = []
    for _ in range(200):
        p, _ = D.reversible_stochastic(4, rng, scale=3.0)
        x = rng.standard_normal((4, 1))
        rises.append(D.within_variance(D.euler_step(x, p, 1.0)) - D.within_variance(x))
    assert max(rises) > 0.01


def test_L4_learned_M_sign_decides_diffusion_or_sharpening():
    rng = _rng(5)
    p = D.symmetric_stochastic(6, rng)
    x = rng.standard_normal((6, 3))
    q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    neg = q @ np.diag([-0.2, -0.5, -0.9]) @ q.T
    pos = -neg
    assert D.within_variance(D.residual_laplacian_step(x, p, neg)) < D.within_variance(x)
    assert D.within_variance(D.residual_laplacian_step(x, p, pos)) > D.within_variance(x)


# ---------------------------------------------------------------------------- L11
def test_L11_causal_characteristic_polynomial_is_product_of_diagonal_terms():
    check = D.sym_causal_charpoly(3)
    assert check.holds
    assert sp.simplify(check.details["charpoly"] - check.details["product"]) == 0


@settings(max_examples=30, deadline=None)
@given(seed=seeds, t=sizes)
def test_L11_causal_spectrum_is_one_minus_diagonal_and_first_token_fixed(seed, t):
    p = D.random_attention(t, _rng(seed), causal=True)
    eig = np.sort(D.laplacian_spectrum(p).real)
    np.testing.assert_allclose(eig, np.sort(1 - np.diag(p)), atol=1e-8)
    assert p[0, 0] == 1.0 and eig.min() >= -1e-12 and eig.max() < 1.0
    x = _rng(seed + 1).standard_normal((t, 2))
    np.testing.assert_array_equal(D.euler_step(x, p, 0.7)[0], x[0])


# ---------------------------------------------------------------------------- L5
# ---------------------------------------------------------------------------- worst-case gains
@settings(max_examples=20, deadline=None)
@given(seed=seeds, t=st.integers(2, 6), tau=st.floats(0.05, 1.0))
def test_L4_variance_and_energy_gains_bound_every_input_and_are_attained(seed, t, tau):
    rng = _rng(seed)
    p = D.random_attention(t, rng, scale=2.0)
    gv, ge = D.variance_gain(p, tau), D.energy_gain(p, tau)
    xs = rng.standard_normal((200, t, 1))
    rv = [D.within_variance(D.euler_step(x, p, tau)) / D.within_variance(x) for x in xs]
    re_ = [D.dirichlet_energy(D.euler_step(x, p, tau), p) / D.dirichlet_energy(x, p) for x in xs]
    assert max(rv) <= gv * (1 + 1e-9) and max(re_) <= ge * (1 + 1e-9)
    # attained: the top right singular vector realises the variance gain
    c = np.eye(t) - 1 / t
    _, _, vt = np.linalg.svd(c @ D.lazy_walk(p, tau) @ c)
    x_star = vt[0][:, None]
    ratio = D.within_variance(D.euler_step(x_star, p, tau)) / D.within_variance(x_star)
    assert ratio == pytest.approx(gv, rel=1e-8)


def test_L4_gain_exceeds_one_for_the_counterexample_and_not_for_symmetric_P():
    p, _, tau = D.variance_counterexample()
    assert D.variance_gain(p, tau) > 1.0
    ps = D.symmetric_stochastic(6, _rng(2), scale=3.0)
    for tau in (0.25, 0.5, 1.0):
        assert D.variance_gain(ps, tau) <= 1 + 1e-12
        assert D.energy_gain(ps, tau) <= 1 + 1e-12


def test_sinkhorn_gives_a_doubly_stochastic_matrix():
    p = D.sinkhorn(np.exp(3 * _rng(5).standard_normal((6, 6))))
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-14)
    np.testing.assert_allclose(p.sum(0), 1.0, atol=1e-8)
    assert D.check_row_stochastic(p) is not None
    with pytest.raises(ValueError, match="weights"):
        D.sinkhorn(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="iters"):
        D.sinkhorn(np.ones((3, 3)), iters=0)
