"""Dense-prediction scores: confusion matrix, mean intersection over union, pixel accuracy.

``miou`` averages the IoU ``TP / (TP + FP + FN)`` over the classes that occur in the target or
the prediction (a class absent from both has no IoU and is left out), as ADE20K's benchmark code
does over its evaluation set.
"""
from __future__ import annotations

import numpy as np

__all__ = ["confusion_matrix", "class_iou", "miou", "pixel_accuracy", "upsample_labels",
           "image_counts", "miou_of_counts"]


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


def image_counts(pred: np.ndarray, target: np.ndarray, num_classes: int) -> np.ndarray:
    """(N, 3, C) int32: per image and class, the pixels predicted and labelled as the class,
    those predicted as it and those labelled as it, over the pixels whose ``target`` lies in
    [0, C) (others, e.g. -1 for unlabelled, are left out); ``pred``, ``target`` (N, ...). Summed
    over the images they are a confusion matrix's diagonal, column and row sums, so
    :func:`miou_of_counts` can reweight images (a bootstrap over them)."""
    pred, target = np.asarray(pred), np.asarray(target)
    if pred.shape != target.shape:
        raise ValueError(f"pred: expected the target's shape {target.shape}, got {pred.shape}")
    out = np.zeros((len(target), 3, num_classes), np.int32)
    for i in range(len(target)):
        keep = (target[i] >= 0) & (target[i] < num_classes)
        truth, guess = target[i][keep].astype(np.int64), pred[i][keep].astype(np.int64)
        if guess.size and (guess.min() < 0 or guess.max() >= num_classes):
            raise ValueError(f"pred: labels must lie in [0, {num_classes})")
        out[i, 0] = np.bincount(truth[truth == guess], minlength=num_classes)
        out[i, 1] = np.bincount(guess, minlength=num_classes)
        out[i, 2] = np.bincount(truth, minlength=num_classes)
    return out


def miou_of_counts(counts: np.ndarray, weights: np.ndarray | None = None):
    """:func:`miou` of :func:`image_counts` (N, 3, C) summed over the images: a float; with
    ``weights`` (B, N), each image's counts weighted by a row: (B,)."""
    c = np.asarray(counts).reshape(len(counts), -1).astype(np.float64)
    total = c.sum(0)[None] if weights is None else np.asarray(weights, float) @ c
    inter, predicted, labelled = (total.reshape(len(total), 3, -1)[:, k] for k in range(3))
    union = predicted + labelled - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = np.where(union > 0, inter / union, np.nan)
    if np.any(np.all(np.isnan(iou), axis=1)):
        raise ValueError("counts: no class occurs")
    out = np.nanmean(iou, axis=1)
    return out if weights is not None else float(out[0])
