"""Tuning the readouts of frozen features (ddcl_theory.experiments.probes): folds, scores, fits."""
from __future__ import annotations

import numpy as np
import pytest

from ddcl_theory.experiments import probes as P


def _task(n=300, d=12, noise=0.6, seed=0):
    rng = np.random.default_rng(seed)
    f = rng.standard_normal((n, d)).astype(np.float32)
    y = (f[:, 0] + 0.5 * f[:, 1] + noise * rng.standard_normal(n) > 0).astype(np.int64)
    return f, y


def test_validation_split_holds_every_class_on_both_sides_of_tiny_draws():
    y = np.repeat(np.arange(20), 3)                  # 60 rows, 20 classes: 20% would be 12
    tr, va = P.validation_split(y, 0.2, seed=0)
    assert set(y[va]) == set(range(20)) and set(y[tr]) == set(range(20))
    big = np.repeat(np.arange(4), 50)
    tr, va = P.validation_split(big, 0.2, seed=0)       # ordinary draws: sklearn's own 20%
    assert len(va) == 40 and len(tr) == 160
    with pytest.raises(ValueError, match="y:"):
        P.validation_split(np.arange(20), 0.2, seed=0)


def test_tuning_folds_are_stratified_disjoint_and_cover_the_draw_with_five_folds():
    y = np.repeat([0, 1, 2], [40, 30, 30])
    folds = P.tuning_folds(y, 0.2, 5, seed=0)
    vals = [v for _, v in folds]
    assert sorted(np.concatenate(vals).tolist()) == list(range(100))       # a partition
    for fit, val in folds:
        assert set(fit).isdisjoint(val) and len(fit) + len(val) == 100
        assert np.bincount(y[val]).tolist() == [8, 6, 6]                   # stratified
    assert [np.array_equal(a[1], b[1]) for a, b in
            zip(folds[:2], P.tuning_folds(y, 0.2, 2, seed=0))] == [True, True]
    with pytest.raises(ValueError, match="folds"):
        P.tuning_folds(y, 0.2, 6, seed=0)
    tiny = np.repeat(np.arange(20), 3)           # fewer rows than folds: a seeded split
    (fit, val), = P.tuning_folds(tiny, 0.2, 1, seed=0)
    assert set(tiny[val]) == set(tiny[fit]) == set(range(20))
    with pytest.raises(ValueError, match="y:"):
        P.tuning_folds(np.array([], dtype=np.int64), 0.2, 1, seed=0)


def test_best_prefers_accuracy_then_the_lower_cross_entropy_then_the_first():
    scores = [P.Score((0.8,), (0.5,)), P.Score((0.9,), (0.7,)), P.Score((0.9,), (0.4,)),
              P.Score((0.9,), (0.4,))]
    assert P.best(scores) == 2
    assert P.Score((0.8, 0.9), (0.2, 0.4)).mean_acc == pytest.approx(0.85)
    with pytest.raises(ValueError, match="scores"):
        P.best([])


def test_probe_scores_rank_a_sensible_c_above_a_crippling_one():
    f, y = _task()
    folds = P.tuning_folds(y, 0.2, 2, seed=0)
    cs = (1e-6, 1e-2, 1.0)
    scores = P.probe_scores(f, y, folds, cs)
    assert len(scores) == 3 and all(len(s.acc) == 2 for s in scores)
    assert P.best(scores) != 0                       # C = 1e-6 shrinks every weight to ~0
    assert scores[0].mean_loss > scores[P.best(scores)].mean_loss
    with pytest.raises(ValueError, match="cs"):
        P.probe_scores(f, y, folds, (0.0,))


def test_probe_fit_scores_the_test_items_it_is_given_and_converges():
    f, y = _task()
    fit, val = P.validation_split(y[:200], 0.2, seed=1)
    out = P.probe_fit(f[:200], y[:200], fit, val, f[200:], y[200:], 0.1)
    assert out.converged and out.test_correct.shape == (100,)
    assert set(np.unique(out.test_correct)) <= {0, 1} and out.test_acc > 0.7
    assert out.test_acc == pytest.approx(out.test_correct.mean())
    assert len(out.val.acc) == 1 and out.c == 0.1
