"""Dense-prediction scores: confusion matrix, mean intersection over union, pixel accuracy.

``miou`` averages the IoU ``TP / (TP + FP + FN)`` over the classes that occur in the target or
the prediction (a class absent from both has no IoU and is left out), as ADE20K's benchmark code
does over its evaluation set.
"""
from __future__ import annotations

import numpy as np

__all__ = ["confusion_matrix", "class_iou", "miou", "pixel_accuracy", "upsample_labels"]


def confusion_matrix(pred: np.ndarray, target: np.ndarray, num_classes: int) -> np.ndarray:
    """(C, C) int64 counts, rows the target class, columns the predicted one; any equal shapes."""
    pred, target = np.asarray(pred), np.asarray(target)
    if pred.shape != target.shape:
        raise ValueError(f"pred: expected the target's shape {target.shape}, got {pred.shape}")
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes: expected a positive int, got {num_classes!r}")
    for name, a in (("pred", pred), ("target", target)):
        if a.size and (a.min() < 0 or a.max() >= num_classes):
            raise ValueError(f"{name}: labels must lie in [0, {num_classes})")
    flat = target.ravel().astype(np.int64) * num_classes + pred.ravel().astype(np.int64)
    return np.bincount(flat, minlength=num_classes ** 2).reshape(num_classes, num_classes)


def class_iou(conf: np.ndarray) -> np.ndarray:
    """IoU per class from a confusion matrix, (C,) float64, NaN where a class never occurs."""
    conf = np.asarray(conf, dtype=np.float64)
    tp = np.diag(conf)
    union = conf.sum(0) + conf.sum(1) - tp
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, tp / union, np.nan)


def miou(conf: np.ndarray) -> float:
    """Mean IoU over the classes that occur (in target or prediction)."""
    iou = class_iou(conf)
    if np.all(np.isnan(iou)):
        raise ValueError("conf: no class occurs (empty confusion matrix)")
    return float(np.nanmean(iou))


def pixel_accuracy(conf: np.ndarray) -> float:
    """Fraction of correctly labelled pixels."""
    conf = np.asarray(conf)
    total = conf.sum()
    if total == 0:
        raise ValueError("conf: empty confusion matrix")
    return float(np.trace(conf) / total)


def upsample_labels(labels: np.ndarray, factor: int) -> np.ndarray:
    """Nearest-neighbour upsampling of label maps: (N, h, w) -> (N, h*factor, w*factor)."""
    if labels.ndim != 3:
        raise ValueError(f"labels: expected shape (N, h, w), got {labels.shape}")
    if not isinstance(factor, int) or factor < 1:
        raise ValueError(f"factor: expected a positive int, got {factor!r}")
    return labels.repeat(factor, axis=1).repeat(factor, axis=2)
