"""The linear segmentation probe of L10 at paper scale: frozen patch features to ADE20K's
150 classes, scored by mIoU over the pixels the benchmark labels.

Each patch of a ``patch`` x ``patch`` grid takes as its target the class most of its labelled
pixels carry (:func:`patch_targets`; a patch with no labelled pixel is left out of the fit). A
linear map from the patch features to the 150 classes is fitted on those targets (:func:`fit_probe`, the dense-features chapter's
full-batch probe; standardise the features first with the training images' statistics,
:func:`~ddcl_theory.experiments.dense_features.standardise`). Its patch predictions are upsampled to pixels and compared with every
labelled pixel (:func:`probe_scores`): mIoU over the classes that occur, and pixel accuracy,
with unlabelled pixels (id 0) ignored as the benchmark does.

    >>> seg = ade20k.ade20k_arrays("training", 224)
    >>> targets = patch_targets(seg.labels, 16)                       # (N, 196)
    >>> train_features, val_features = standardise(train_features, val_features)
    >>> probe = fit_probe(train_features, targets, steps=500, lr=1e-3, seed=0)
    >>> probe_scores(probe, val_features, val.labels, 16)             # (mIoU, pixel accuracy)
"""
from __future__ import annotations

import numpy as np
import torch

from ddcl_theory.data.ade20k import NUM_CLASSES
from ddcl_theory.experiments.dense_features import train_probe
from ddcl_theory.metrics import segmentation

__all__ = ["patch_targets", "fit_probe", "predict_patches", "probe_scores"]


def _grid(labels: np.ndarray, patch: int) -> tuple[int, int]:
    if labels.ndim != 3:
        raise ValueError(f"labels: expected (N, S, S) class ids, got shape {labels.shape}")
    if isinstance(patch, bool) or not isinstance(patch, int) or patch < 1:
        raise ValueError(f"patch: expected a positive int, got {patch!r}")
    n, h, w = labels.shape
    if h % patch or w % patch:
        raise ValueError(f"patch: {patch} does not divide the label maps' {h} x {w}")
    return h // patch, w // patch


def patch_targets(labels: np.ndarray, patch: int) -> np.ndarray:
    """(N, (S/patch)^2) int64: each patch's most frequent labelled class, 0..149 (archive id
    minus 1; the lowest id among equals), or -1 where the patch holds no labelled pixel."""
    gh, gw = _grid(labels, patch)
    n = labels.shape[0]
    tiles = labels.reshape(n, gh, patch, gw, patch).transpose(0, 1, 3, 2, 4)
    tiles = tiles.reshape(n * gh * gw, patch * patch).astype(np.int64)
    width = NUM_CLASSES + 1
    flat = (np.arange(tiles.shape[0])[:, None] * width + tiles).ravel()
    counts = np.bincount(flat, minlength=tiles.shape[0] * width).reshape(-1, width)
    counts[:, 0] = 0                                          # unlabelled pixels do not vote
    target = counts.argmax(1) - 1
    target[counts.sum(1) == 0] = -1
    return target.reshape(n, gh * gw)


def fit_probe(features: torch.Tensor, targets: np.ndarray | torch.Tensor, *, steps: int,
              lr: float, seed: int) -> torch.nn.Linear:
    """A linear probe (dim -> 150) on patch features (N, T, dim) and :func:`patch_targets`
    (N, T), fitted on the patches with a target."""
    targets = torch.as_tensor(np.asarray(targets), dtype=torch.long, device=features.device)
    if features.shape[:-1] != targets.shape:
        raise ValueError(f"targets: expected shape {tuple(features.shape[:-1])}, got "
                         f"{tuple(targets.shape)}")
    keep = targets >= 0
    if not bool(keep.any()):
        raise ValueError("targets: no patch holds a labelled pixel")
    return train_probe(features[keep], targets[keep], steps=steps, lr=lr, seed=seed,
                       num_classes=NUM_CLASSES)


@torch.no_grad()
def predict_patches(probe: torch.nn.Linear, features: torch.Tensor, batch: int = 4096
                    ) -> np.ndarray:
    """(N, T) int64 class (0..149) of every patch."""
    flat = features.reshape(-1, features.shape[-1])
    out = [probe(flat[i:i + batch]).argmax(-1) for i in range(0, flat.shape[0], batch)]
    return torch.cat(out).reshape(features.shape[:-1]).cpu().numpy()


def probe_scores(probe: torch.nn.Linear, features: torch.Tensor, labels: np.ndarray,
                 patch: int) -> tuple[float, float]:
    """(mIoU, pixel accuracy) of the probe's patch predictions upsampled to ``labels``
    (N, S, S), over the labelled pixels only (ids 1..150)."""
    gh, gw = _grid(labels, patch)
    if features.shape[:2] != (labels.shape[0], gh * gw):
        raise ValueError(f"features: expected ({labels.shape[0]}, {gh * gw}, dim) for these "
                         f"labels, got {tuple(features.shape)}")
    pred = segmentation.upsample_labels(
        predict_patches(probe, features).reshape(-1, gh, gw), patch)
    labelled = labels > 0
    if not labelled.any():
        raise ValueError("labels: no labelled pixel to score")
    conf = segmentation.confusion_matrix(pred[labelled], labels[labelled].astype(np.int64) - 1,
                                         NUM_CLASSES)
    return segmentation.miou(conf), segmentation.pixel_accuracy(conf)
