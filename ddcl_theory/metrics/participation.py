"""The participation ratio: an effective dimension of a cloud of representations.

For the eigenvalues ``lambda_i`` of the covariance of (N, d) features,

    PR = (sum_i lambda_i)^2 / sum_i lambda_i^2  =  1 / sum_i r_i^2,

with ``r_i = lambda_i / sum_j lambda_j`` the explained-variance ratios. It lies in ``[1, rank]``
(1 for variance along one direction, ``d`` for isotropic variance) and, unlike the component
count ``k99``, it moves continuously with the spectrum, so it can resolve a change of a few
percent at a small width (claim L8 of the Laplacian-heads chapter).
"""
from __future__ import annotations

import numpy as np

from ddcl_theory.metrics.geometry import explained_variance_ratios

__all__ = ["participation_ratio"]


def participation_ratio(features) -> float:
    """``(sum lambda)^2 / sum lambda^2`` of the covariance of (N, d) features (for token
    representations reshape (B, T, d) to (B*T, d)); 0.0 for constant features."""
    ratios = explained_variance_ratios(features)
    square = float(np.sum(ratios ** 2))
    return 1.0 / square if square > 0 else 0.0
