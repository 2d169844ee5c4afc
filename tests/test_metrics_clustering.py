"""Hungarian matching of clusters to classes, against a brute-force search over all maps."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddcl_theory.metrics import clustering


def brute_force_accuracy(y_true, y_pred) -> float:
    """max over injective maps cluster -> class of the matched fraction (all permutations)."""
    classes, clusters = sorted(set(y_true)), sorted(set(y_pred))
    best = 0
    if len(clusters) <= len(classes):
        for image in itertools.permutations(classes, len(clusters)):
            m = dict(zip(clusters, image))
            best = max(best, sum(m[p] == t for t, p in zip(y_true, y_pred)))
    else:
        for chosen in itertools.permutations(clusters, len(classes)):
            m = dict(zip(chosen, classes))
            best = max(best, sum(m.get(p) == t for t, p in zip(y_true, y_pred)))
    return best / len(y_true)


labels = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), min_size=1, max_size=14)


@settings(max_examples=150, deadline=None)
@given(labels)
def test_hungarian_accuracy_equals_the_brute_force_optimum(pairs):
    y_true = [t for t, _ in pairs]
    y_pred = [p for _, p in pairs]
    expected = brute_force_accuracy(y_true, y_pred)
    assert clustering.clustering_acc(y_true, y_pred) == pytest.approx(expected)
    table = clustering.contingency(y_true, y_pred)
    matched = sum(table[j, c] for j, c in clustering.hungarian_matching(y_true, y_pred).items())
    assert matched / len(y_true) == pytest.approx(expected)


@settings(max_examples=60, deadline=None)
@given(labels, st.permutations(range(5)))
def test_accuracy_does_not_depend_on_cluster_names(pairs, perm):
    y_true = [t for t, _ in pairs]
    y_pred = [p for _, p in pairs]
    renamed = [perm[p] for p in y_pred]
    assert clustering.clustering_acc(y_true, renamed) == pytest.approx(
        clustering.clustering_acc(y_true, y_pred))


def test_matching_is_one_to_one():
    y_true = [0, 0, 0, 1, 1, 2]
    y_pred = [3, 3, 1, 1, 1, 0]
    m = clustering.hungarian_matching(y_true, y_pred)
    assert m == {3: 0, 1: 1, 0: 2}
    assert len(set(m.values())) == len(m)


def test_contingency_counts_pairs():
    table = clustering.contingency([0, 1, 1, 2], [1, 1, 0, 1], n_classes=3, n_clusters=2)
    assert table.tolist() == [[0, 1, 0], [1, 1, 1]]
    with pytest.raises(ValueError, match="n_classes"):
        clustering.contingency([0, 5], [0, 1], n_classes=3)


def test_class_fill_of_a_clustering_that_piles_onto_the_large_class():
    # 8 objects of class 0, 2 of class 1, 2 of class 2; two clusters split class 0
    y_true = [0] * 8 + [1, 1, 2, 2]
    y_pred = [0] * 4 + [1] * 4 + [2, 2, 2, 2]
    fill = clustering.class_fill(y_true, y_pred, n_classes=3, n_clusters=3)
    assert fill.true_sizes.tolist() == [8, 2, 2]
    assert fill.majority_clusters.tolist() == [2, 1, 0]       # ties go to the lower class
    assert fill.cluster_sizes.tolist() == [4, 4, 4]
    assert fill.correct.sum() / 12 == pytest.approx(clustering.clustering_acc(y_true, y_pred))
    assert fill.empty_classes == 0 and fill.filled.sum() == 12


def test_perfect_clustering_fills_every_class_with_its_size():
    y = np.array([2, 0, 1, 1, 0, 2, 2])
    fill = clustering.class_fill(y, (y + 1) % 3)
    assert np.array_equal(fill.filled, fill.true_sizes)
    assert np.array_equal(fill.correct, fill.true_sizes)
    assert fill.majority_clusters.tolist() == [1, 1, 1]


def test_fewer_clusters_than_classes_leave_classes_empty():
    fill = clustering.class_fill([0, 1, 2, 3], [0, 0, 0, 0], n_classes=4, n_clusters=4)
    assert fill.empty_classes == 3


def test_labels_are_checked():
    with pytest.raises(ValueError, match="y_pred"):
        clustering.contingency([0, 1], [0])
    with pytest.raises(ValueError, match="non-negative integer"):
        clustering.contingency([0.5, 1.0], [0, 1])
    with pytest.raises(ValueError, match="y_true"):
        clustering.contingency([], [])
