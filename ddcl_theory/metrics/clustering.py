"""Reading a clustering against true classes: accuracy under the Hungarian matching, purity,
NMI, ARI, and how clusters fill classes.

* :func:`contingency` -- the one (clusters, classes) count table the others read.
* :func:`clustering_acc` -- accuracy of the best one-to-one matching of clusters to classes;
  :func:`hungarian_matching` exposes the matching itself, so a chapter can say which class each
  cluster stands for, and :func:`class_fill` how many objects each class receives and how many
  clusters a class holds the majority of (a method that "piles onto" a large class gives it
  several clusters).
* :func:`purity` -- many-to-one accuracy; :func:`nmi`, :func:`ari` -- scikit-learn's scores.

Labels are (N,) arrays or tensors. :func:`contingency` and the functions with ``n_classes`` /
``n_clusters`` take non-negative integer labels as indices; :func:`clustering_acc`,
:func:`purity`, :func:`nmi` and :func:`ari` take any labels (only equality matters).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["contingency", "hungarian_matching", "clustering_acc", "purity", "nmi", "ari",
           "ClassFill", "class_fill"]


def _label_pair(y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    """Two non-empty (N,) NumPy arrays of labels."""
    a, b = (np.asarray(y.detach().cpu().numpy() if hasattr(y, "detach") else y)
            for y in (y_true, y_pred))
    if a.ndim != 1 or a.shape != b.shape or a.size == 0:
        raise ValueError(f"y_true, y_pred: expected two non-empty (N,) arrays, got {a.shape}, "
                         f"{b.shape}")
    return a, b


def _dense(y: np.ndarray) -> np.ndarray:
    """Labels renamed 0 .. (distinct values - 1) in sorted order."""
    return np.unique(y, return_inverse=True)[1].reshape(-1)


def contingency(y_true, y_pred, n_classes: int | None = None,
                n_clusters: int | None = None) -> np.ndarray:
    """(n_clusters, n_classes) counts: entry [j, c] = objects in cluster j whose class is c.

    Labels are non-negative ints; the sizes default to max label + 1.
    """
    a, b = _label_pair(y_true, y_pred)
    for name, arr in (("y_true", a), ("y_pred", b)):
        if not np.issubdtype(arr.dtype, np.integer) or arr.min() < 0:
            raise ValueError(f"{name}: expected non-negative integer labels, got dtype "
                             f"{arr.dtype}")
    n_classes = int(a.max()) + 1 if n_classes is None else n_classes
    n_clusters = int(b.max()) + 1 if n_clusters is None else n_clusters
    if a.max() >= n_classes or b.max() >= n_clusters:
        raise ValueError(f"n_classes, n_clusters: labels up to {a.max()}, {b.max()} do not fit "
                         f"({n_classes}, {n_clusters})")
    table = np.zeros((n_clusters, n_classes), dtype=np.int64)
    np.add.at(table, (b.astype(np.int64), a.astype(np.int64)), 1)
    return table


def _matching(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of the one-to-one matching that maximises the matched counts (Hungarian)."""
    from scipy.optimize import linear_sum_assignment

    return linear_sum_assignment(table, maximize=True)


def hungarian_matching(y_true, y_pred, n_classes: int | None = None,
                       n_clusters: int | None = None) -> dict[int, int]:
    """The one-to-one map cluster -> class that maximises the number of matched objects.

    Solved with ``scipy.optimize.linear_sum_assignment`` on the contingency table; with more
    clusters than classes some clusters stay unmatched (absent from the dict), and vice versa.
    """
    rows, cols = _matching(contingency(y_true, y_pred, n_classes, n_clusters))
    return {int(r): int(c) for r, c in zip(rows, cols)}


def clustering_acc(y_true, y_pred) -> float:
    """Clustering accuracy: the best one-to-one matching of clusters to classes (Hungarian).

    ``max_pi (1/N) sum_i [y_true_i == pi(y_pred_i)]`` over injective maps ``pi`` from cluster
    ids to class ids, solved with ``scipy.optimize.linear_sum_assignment`` on the contingency
    table. Invariant to relabelling of either argument; clusters and classes may differ in number.
    """
    a, b = _label_pair(y_true, y_pred)
    table = contingency(_dense(a), _dense(b))
    rows, cols = _matching(table)
    return float(table[rows, cols].sum() / a.shape[0])


def purity(y_true, y_pred) -> float:
    """Many-to-one clustering accuracy: each cluster votes for its majority class.

    Equals the Hungarian ACC when clusters and classes are equally many and the majority classes
    differ; with more clusters than classes it can reach 1 where the Hungarian ACC cannot.
    """
    a, b = _label_pair(y_true, y_pred)
    return float(contingency(_dense(a), _dense(b)).max(1).sum() / a.size)


def nmi(y_true, y_pred) -> float:
    """Normalised mutual information (arithmetic normalisation; scikit-learn)."""
    from sklearn.metrics import normalized_mutual_info_score

    return float(normalized_mutual_info_score(*_label_pair(y_true, y_pred)))


def ari(y_true, y_pred) -> float:
    """Adjusted Rand index (scikit-learn)."""
    from sklearn.metrics import adjusted_rand_score

    return float(adjusted_rand_score(*_label_pair(y_true, y_pred)))


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
    c = table.shape[1]
    filled = np.zeros(c, dtype=np.int64)
    correct = np.zeros(c, dtype=np.int64)
    for j, k in zip(*_matching(table)):
        filled[k] = table[j].sum()
        correct[k] = table[j, k]
    sizes = table.sum(1)
    majority = np.bincount(table[sizes > 0].argmax(1), minlength=c)
    return ClassFill(true_sizes=table.sum(0), filled=filled, correct=correct,
                     majority_clusters=majority, cluster_sizes=sizes)
