"""Reading a clustering against true classes: the Hungarian matching and how clusters fill classes.

:func:`ddcl_theory.metrics.geometry.clustering_acc` gives the accuracy of the best one-to-one matching of
clusters to classes; this module exposes the matching itself, so a chapter can say which class
each cluster stands for, how many objects each class receives, and how many clusters a class
holds the majority of (a method that "piles onto" a large class gives it several clusters).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["contingency", "hungarian_matching", "matched_accuracy", "ClassFill", "class_fill"]


def _labels(y, name: str, n: int | None = None) -> np.ndarray:
    if hasattr(y, "detach"):
        y = y.detach().cpu().numpy()
    arr = np.asarray(y)
    if arr.ndim != 1 or (n is not None and arr.shape[0] != n):
        raise ValueError(f"{name}: expected shape ({'N' if n is None else n},), got {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name}: expected at least one label, got none")
    if not np.issubdtype(arr.dtype, np.integer) or arr.min() < 0:
        raise ValueError(f"{name}: expected non-negative integer labels, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def contingency(y_true, y_pred, n_classes: int | None = None,
                n_clusters: int | None = None) -> np.ndarray:
    """(n_clusters, n_classes) counts: entry [j, c] = objects in cluster j whose class is c.

    Labels are non-negative ints; the sizes default to max label + 1.
    """
    a = _labels(y_true, "y_true")
    b = _labels(y_pred, "y_pred", a.shape[0])
    n_classes = int(a.max()) + 1 if n_classes is None else n_classes
    n_clusters = int(b.max()) + 1 if n_clusters is None else n_clusters
    if a.max() >= n_classes or b.max() >= n_clusters:
        raise ValueError(f"n_classes, n_clusters: labels up to {a.max()}, {b.max()} do not fit "
                         f"({n_classes}, {n_clusters})")
    table = np.zeros((n_clusters, n_classes), dtype=np.int64)
    np.add.at(table, (b, a), 1)
    return table


def hungarian_matching(y_true, y_pred, n_classes: int | None = None,
                       n_clusters: int | None = None) -> dict[int, int]:
    """The one-to-one map cluster -> class that maximises the number of matched objects.

    Solved with ``scipy.optimize.linear_sum_assignment`` on the contingency table; with more
    clusters than classes some clusters stay unmatched (absent from the dict), and vice versa.
    """
    from scipy.optimize import linear_sum_assignment

    table = contingency(y_true, y_pred, n_classes, n_clusters)
    rows, cols = linear_sum_assignment(table, maximize=True)
    return {int(r): int(c) for r, c in zip(rows, cols)}


def matched_accuracy(y_true, y_pred, n_classes: int | None = None,
                     n_clusters: int | None = None) -> float:
    """Fraction of objects whose cluster is matched to their class (equals clustering ACC)."""
    table = contingency(y_true, y_pred, n_classes, n_clusters)
    mapping = hungarian_matching(y_true, y_pred, n_classes, n_clusters)
    return float(sum(table[j, c] for j, c in mapping.items()) / table.sum())


@dataclass(frozen=True)
class ClassFill:
    """How a clustering fills the true classes.

    Attributes:
        true_sizes: (C,) objects per class.
        filled: (C,) size of the cluster matched to each class (0 when no cluster is).
        correct: (C,) objects of each class inside the cluster matched to it.
        majority_clusters: (C,) number of clusters whose most frequent class is c (ties go to
            the lower class index); non-empty clusters only.
        cluster_sizes: (n_clusters,) objects per cluster.
    """

    true_sizes: np.ndarray
    filled: np.ndarray
    correct: np.ndarray
    majority_clusters: np.ndarray
    cluster_sizes: np.ndarray

    @property
    def empty_classes(self) -> int:
        """Classes that receive no object through the matching."""
        return int((self.filled == 0).sum())


def class_fill(y_true, y_pred, n_classes: int | None = None,
               n_clusters: int | None = None) -> ClassFill:
    """Per class: its size, the size of the cluster matched to it, the objects it gets right,
    and how many clusters it is the majority of."""
    table = contingency(y_true, y_pred, n_classes, n_clusters)
    mapping = hungarian_matching(y_true, y_pred, table.shape[1], table.shape[0])
    c = table.shape[1]
    filled = np.zeros(c, dtype=np.int64)
    correct = np.zeros(c, dtype=np.int64)
    for j, k in mapping.items():
        filled[k] = table[j].sum()
        correct[k] = table[j, k]
    sizes = table.sum(1)
    majority = np.bincount(table[sizes > 0].argmax(1), minlength=c)
    return ClassFill(true_sizes=table.sum(0), filled=filled, correct=correct,
                     majority_clusters=majority, cluster_sizes=sizes)
