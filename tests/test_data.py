"""Data loaders: checksums, fallbacks with a notice, patch extraction."""
from __future__ import annotations

import numpy as np
import pytest

from ddcl_theory import data


def test_image_patches_tile_the_image_exactly():
    rng = np.random.default_rng(0)
    images = rng.random((2, 8, 8, 3)).astype(np.float32)
    patches = data.image_patches(images, 4)
    assert patches.shape == (2, 4, 48)
    # the top-left patch is the top-left 4x4 block, row-major
    assert np.array_equal(patches[0, 0].reshape(4, 4, 3), images[0, :4, :4])
    assert np.array_equal(patches[1, 3].reshape(4, 4, 3), images[1, 4:, 4:])
    with pytest.raises(ValueError, match="patch"):
        data.image_patches(images, 3)
    with pytest.raises(ValueError, match="images"):
        data.image_patches(images[0], 4)


def test_missing_data_falls_back_with_a_visible_notice(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(data, "data_dirs", lambda: [tmp_path])
    with pytest.warns(data.FallbackDataWarning):
        images = data.load_cifar10()
    assert images.source == "digits" and "NOTICE" in capsys.readouterr().out
    assert images.x_train.ndim == 4 and images.x_train.max() <= 1.0
    with pytest.warns(data.FallbackDataWarning):
        text, source = data.load_text()
    assert source == "python-docstrings" and len(text) > 10_000


def test_corrupt_file_is_rejected_not_used(monkeypatch, tmp_path):
    (tmp_path / data.FILES["tinyshakespeare"].name).write_text("not shakespeare")
    monkeypatch.setattr(data, "data_dirs", lambda: [tmp_path])
    with pytest.raises(ValueError, match="sha256"):
        data.find("tinyshakespeare")
    with pytest.raises(ValueError, match="key"):
        data.find("mnist")


@pytest.mark.skipif(data.find("cifar10") is None, reason="CIFAR-10 subset not in a data directory")
def test_real_cifar_subset_has_the_documented_shape():
    images = data.load_cifar10()
    assert images.x_train.shape == (10_000, 32, 32, 3) and images.x_test.shape == (1_000, 32, 32, 3)
    assert np.bincount(images.y_train).tolist() == [1000] * 10
    assert images.label_names[0] == "airplane"
