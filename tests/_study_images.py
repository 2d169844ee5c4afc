"""Tiny synthetic images for the Laplacian-head study's tests (no file read)."""
from __future__ import annotations

import numpy as np

from ddcl_theory.experiments import laplacian_vit as lv


def synthetic_images(n_fit=96, n_val=48, n_eval=60, size=8, seed=0) -> lv.StudyImages:
    """Images whose brightness carries the label for half of them (the rest: labels at
    random, which a model can only memorise, so its validation loss turns up), drawn from
    their own generator."""
    rng = np.random.default_rng(seed)

    def draw(n):
        y = rng.integers(0, 10, n).astype(np.int64)
        x = rng.random((n, size, size, 3)) * 0.5 + y[:, None, None, None] / 20
        noisy = rng.random(n) < 0.5
        y[noisy] = rng.integers(0, 10, int(noisy.sum()))
        return x.astype(np.float32), y

    return lv.StudyImages(*draw(n_fit), *draw(n_val), *draw(n_eval), "synthetic", 10)
