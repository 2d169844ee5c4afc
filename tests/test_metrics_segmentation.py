"""ddcl_theory.metrics.segmentation: confusion matrix, mIoU, pixel accuracy on hand-made maps."""
from __future__ import annotations

import numpy as np
import pytest

from ddcl_theory.metrics import segmentation as seg


def test_confusion_counts_rows_target_columns_prediction():
    target = np.array([[0, 0], [1, 2]])
    pred = np.array([[0, 1], [1, 1]])
    conf = seg.confusion_matrix(pred, target, 3)
    assert conf.tolist() == [[1, 1, 0], [0, 1, 0], [0, 1, 0]]


def test_miou_and_pixel_accuracy_by_hand():
    target = np.array([[0, 0], [1, 2]])
    pred = np.array([[0, 1], [1, 1]])
    conf = seg.confusion_matrix(pred, target, 4)        # class 3 occurs nowhere: left out
    iou = seg.class_iou(conf)
    assert iou[:3].tolist() == pytest.approx([0.5, 1 / 3, 0.0]) and np.isnan(iou[3])
    assert seg.miou(conf) == pytest.approx((0.5 + 1 / 3) / 3)
    assert seg.pixel_accuracy(conf) == pytest.approx(0.5)


def test_perfect_prediction_scores_one():
    t = np.random.default_rng(0).integers(0, 5, (3, 8, 8))
    conf = seg.confusion_matrix(t, t, 5)
    assert seg.miou(conf) == 1.0 and seg.pixel_accuracy(conf) == 1.0


def test_upsample_labels_repeats_each_cell():
    up = seg.upsample_labels(np.array([[[1, 2], [3, 4]]]), 2)
    assert up.shape == (1, 4, 4) and up[0, :2, :2].tolist() == [[1, 1], [1, 1]]
    assert up[0, 3, 3] == 4


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="pred"):
        seg.confusion_matrix(np.zeros(3, int), np.zeros(4, int), 2)
    with pytest.raises(ValueError, match="target"):
        seg.confusion_matrix(np.zeros(3, int), np.full(3, 5), 2)
    with pytest.raises(ValueError, match="conf"):
        seg.miou(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="factor"):
        seg.upsample_labels(np.zeros((1, 2, 2), int), 0)
