"""The participation ratio on hand-built spectra."""
from __future__ import annotations

import numpy as np
import pytest

from ddcl_theory.metrics.participation import participation_ratio


def test_isotropic_cloud_has_full_participation():
    # the 2d vertices +-e_i of a cross polytope: covariance proportional to the identity
    d = 6
    x = np.concatenate([np.eye(d), -np.eye(d)])
    assert participation_ratio(x) == pytest.approx(d, rel=1e-12)


def test_one_direction_gives_one_and_constant_gives_zero():
    t = np.linspace(-1, 1, 11)[:, None]
    assert participation_ratio(t @ np.array([[1.0, 2.0, -1.0]])) == pytest.approx(1.0)
    assert participation_ratio(np.ones((5, 3))) == 0.0


def test_hand_spectrum():
    # variances 4 and 1 along two axes: PR = (4 + 1)^2 / (16 + 1) = 25 / 17
    x = np.array([[2.0, 0], [-2.0, 0], [0, 1.0], [0, -1.0]])
    assert participation_ratio(x) == pytest.approx(25 / 17, rel=1e-12)


def test_invariant_to_rotation_and_scale():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 5)) * np.array([3.0, 2.0, 1.0, 0.5, 0.1])
    q, _ = np.linalg.qr(rng.standard_normal((5, 5)))
    assert participation_ratio(7.0 * x @ q) == pytest.approx(participation_ratio(x), rel=1e-10)
