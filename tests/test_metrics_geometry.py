"""Metrics on hand-built cases: ANOVA identities, Neural Collapse on a simplex ETF, k99, CDNV,
clustering ACC/NMI/ARI."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ddcl_theory.metrics.clustering import ari, clustering_acc, nmi
from ddcl_theory.metrics import geometry as metrics


def simplex_etf(c: int, d: int, scale: float = 1.0, seed: int = 0) -> np.ndarray:
    """(C, d) class means forming a simplex ETF: centred, equal norms, cosines -1/(C-1)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((d, c)))          # (d, C) orthonormal columns
    m = np.sqrt(c / (c - 1)) * (np.eye(c) - np.ones((c, c)) / c)
    return scale * (q @ m).T


# ---------------------------------------------------------------- ANOVA

@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 6), t=st.integers(1, 5), d=st.integers(1, 4), seed=st.integers(0, 10**6))
def test_anova_total_equals_within_plus_between_sequence(n, t, d, seed):
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((n, t, d)) * rng.uniform(0.1, 3.0)
    labels = rng.integers(0, 3, size=n)
    a = metrics.anova_split(h, labels)
    assert a.total == pytest.approx(a.within_sequence + a.between_sequence, rel=1e-10, abs=1e-12)
    assert a.between_sequence == pytest.approx(a.within_class + a.between_class, rel=1e-10,
                                               abs=1e-12)
    assert min(a.within_sequence, a.between_sequence, a.within_class, a.between_class) >= 0


def test_anova_hand_case():
    # two sequences of two 1-d tokens: [0, 2] (class 0) and [4, 6] (class 1)
    h = np.array([[[0.0], [2.0]], [[4.0], [6.0]]])
    a = metrics.anova_split(h, [0, 1])
    assert a.within_sequence == pytest.approx(1.0)      # deviations +-1 around 1 and 5
    assert a.between_sequence == pytest.approx(4.0)     # means 1, 5 around 3
    assert a.total == pytest.approx(5.0)
    assert a.within_class == pytest.approx(0.0) and a.between_class == pytest.approx(4.0)
    assert a.fractions()["within_sequence"] == pytest.approx(0.2)


def test_anova_constant_sequences_have_no_within_sequence_variance():
    h = np.repeat(np.arange(6.0).reshape(3, 1, 2), 4, axis=1)
    a = metrics.anova_split(torch.tensor(h))
    assert a.within_sequence == 0.0 and a.within_class is None


def test_anova_rejects_wrong_shape():
    with pytest.raises(ValueError, match="tokens"):
        metrics.anova_split(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="labels"):
        metrics.anova_split(np.zeros((3, 2, 2)), [0, 1])


# ---------------------------------------------------------------- Neural Collapse

@pytest.mark.parametrize("c", [2, 3, 5, 10])
def test_neural_collapse_simplex_etf_is_perfect(c):
    means = simplex_etf(c, d=c + 3, scale=2.5) + 7.0            # an offset must not matter
    labels = np.repeat(np.arange(c), 4)
    nc = metrics.neural_collapse(means[labels], labels)
    assert nc.nc1 == pytest.approx(0.0, abs=1e-20)
    assert nc.equinorm == pytest.approx(0.0, abs=1e-12)
    assert nc.cos_mean == pytest.approx(-1.0 / (c - 1), abs=1e-12)
    assert nc.etf_cos == -1.0 / (c - 1)
    assert nc.cos_std == pytest.approx(0.0, abs=1e-12) and nc.etf_gap == pytest.approx(0.0, abs=1e-12)


def test_neural_collapse_nc1_grows_with_within_class_noise():
    c, d = 4, 6
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(c), 50)
    noise = rng.standard_normal((len(labels), d))
    means = simplex_etf(c, d)
    nc_small = metrics.neural_collapse(means[labels] + 0.05 * noise, labels).nc1
    nc_big = metrics.neural_collapse(means[labels] + 0.5 * noise, labels).nc1
    assert 0 < nc_small < nc_big
    # isotropic noise sigma^2 I: tr(Sigma_W Sigma_B^+)/C ~ sigma^2 tr(Sigma_B^+)/C with
    # Sigma_B = (1/C) M^T M, eigenvalues 1/(C-1) on a (C-1)-dim space -> sigma^2 (C-1)^2 / C
    assert nc_big == pytest.approx(0.25 * (c - 1) ** 2 / c, rel=0.3)


def test_neural_collapse_unequal_norms_detected():
    means = np.array([[1.0, 0.0], [-3.0, 0.0], [0.0, 2.0]])
    nc = metrics.neural_collapse(means, [0, 1, 2])
    assert nc.equinorm > 0.1 and nc.etf_gap > 0.01


def test_neural_collapse_needs_two_classes():
    with pytest.raises(ValueError, match="labels"):
        metrics.neural_collapse(np.zeros((3, 2)), [1, 1, 1])


# ---------------------------------------------------------------- k99

@settings(max_examples=30, deadline=None)
@given(r=st.integers(1, 6), seed=st.integers(0, 10**6))
def test_k99_of_rank_r_data_at_most_r(r, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((40, r)) @ rng.standard_normal((r, 10)) + rng.standard_normal(10)
    assert 1 <= metrics.k99(x) <= r


def test_k99_isotropic_needs_almost_all_components():
    x = np.eye(8) * np.array([1, -1] * 4)[:, None]
    x = np.concatenate([x, -x])                   # centred, covariance proportional to I
    assert metrics.k99(x) == 8                    # 7/8 < 0.99
    assert metrics.k99(x, threshold=0.5) == 4


def test_k99_hand_case_variances():
    # variances 98, 1.5, 0.5 along axes: 98/100 < 0.99 <= 99.5/100
    rng = np.random.default_rng(1)
    z = rng.standard_normal((2000, 3))
    z = (z - z.mean(0)) / z.std(0)
    z = np.linalg.qr(z)[0] * np.sqrt(2000)        # exactly orthogonal, unit variance columns
    x = z * np.sqrt([98.0, 1.5, 0.5])
    assert metrics.k99(x) == 2
    assert metrics.k99(np.ones((5, 3))) == 0
    with pytest.raises(ValueError, match="threshold"):
        metrics.k99(x, threshold=1.5)


# ---------------------------------------------------------------- CDNV

def test_cdnv_hand_case():
    # class 0 at +-1 around 0, class 1 at +-1 around 4: (1 + 1) / (2 * 16)
    x = np.array([[-1.0], [1.0], [3.0], [5.0]])
    assert metrics.cdnv(x, [0, 0, 1, 1]) == pytest.approx(2 / 32)


def test_cdnv_zero_at_collapse_and_scale_invariant():
    means = simplex_etf(5, 7)
    labels = np.repeat(np.arange(5), 3)
    assert metrics.cdnv(means[labels], labels) == pytest.approx(0.0, abs=1e-25)
    rng = np.random.default_rng(0)
    x = means[labels] + 0.1 * rng.standard_normal((15, 7))
    assert metrics.cdnv(3.0 * x + 1.0, labels) == pytest.approx(metrics.cdnv(x, labels))


def test_cdnv_drops_rare_classes():
    x = np.array([[-1.0], [1.0], [3.0], [5.0], [100.0]])
    assert metrics.cdnv(x, [0, 0, 1, 1, 2]) == pytest.approx(2 / 32)
    with pytest.raises(ValueError, match="labels"):
        metrics.cdnv(x, [0, 0, 1, 2, 3])


# ---------------------------------------------------------------- clustering

@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), k=st.integers(2, 6))
def test_clustering_acc_invariant_to_label_permutation(seed, k):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, size=30)
    pred = rng.integers(0, k, size=30)
    perm = rng.permutation(k)
    assert clustering_acc(y, perm[pred]) == pytest.approx(clustering_acc(y, pred))
    assert clustering_acc(y, perm[y]) == 1.0
    assert nmi(y, perm[y]) == pytest.approx(1.0)
    assert ari(y, perm[y]) == pytest.approx(1.0)


def test_clustering_acc_hand_case():
    y = [0, 0, 0, 1, 1, 1]
    pred = [2, 2, 1, 1, 1, 1]           # best matching: 2->0, 1->1 gives 5/6
    assert clustering_acc(y, pred) == pytest.approx(5 / 6)
    assert clustering_acc(y, [0, 0, 0, 0, 0, 0]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="y_pred"):
        clustering_acc(y, [0, 1])


# ---------------------------------------------------------------- sign balance

def test_sign_balance_extremes_and_antisymmetric_part_ignored():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 5))
    psd = a @ a.T
    skew = a - a.T
    assert metrics.sign_balance(psd) == pytest.approx(1.0)
    assert metrics.sign_balance(-psd + skew) == pytest.approx(-1.0)
    assert metrics.sign_balance(np.diag([1.0, -1.0, 2.0, -2.0])) == pytest.approx(0.0)
    assert metrics.sign_balance(np.zeros((3, 3))) == 0.0
    with pytest.raises(ValueError, match="matrix"):
        metrics.sign_balance(np.zeros((2, 3)))
