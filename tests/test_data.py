"""Data loaders: checksums, fallbacks with a notice, patch extraction."""
from __future__ import annotations

import numpy as np
import pytest

from ddcl_theory import data
from ddcl_theory.data import digest, files


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


def test_the_package_reexports_the_public_names_of_its_modules():
    from ddcl_theory.data import cache, cifar10_rest

    for name in data.__all__:
        assert hasattr(data, name), name
    assert data.FILES is files.FILES and data.find is files.find and data.verify is files.verify
    assert data.DataIntegrityError is files.DataIntegrityError
    assert data.cache_dir is cache.cache_dir and data.CACHE_ENV == cache.CACHE_ENV
    assert data.load_cifar10_rest is cifar10_rest.load_cifar10_rest
    assert data.cifar10_eval_pool is cifar10_rest.cifar10_eval_pool


def test_missing_data_falls_back_with_a_visible_notice(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(files, "data_dirs", lambda: [tmp_path])
    with pytest.warns(data.FallbackDataWarning):
        images = data.load_cifar10()
    assert images.source == "digits" and "NOTICE" in capsys.readouterr().out
    assert images.x_train.ndim == 4 and images.x_train.max() <= 1.0
    with pytest.warns(data.FallbackDataWarning):
        text, source = data.load_text()
    assert source == "python-docstrings" and len(text) > 10_000


@pytest.mark.skipif(data.find("cifar10") is None, reason="CIFAR-10 subset not in a data directory")
def test_real_cifar_subset_has_the_documented_shape():
    images = data.load_cifar10()
    assert images.x_train.shape == (10_000, 32, 32, 3) and images.x_test.shape == (1_000, 32, 32, 3)
    assert np.bincount(images.y_train).tolist() == [1000] * 10
    assert images.label_names[0] == "airplane"


def _staged(key):
    path = data.find(key)
    if path is None:
        pytest.skip(f"{key} not in a data directory")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(data.FILES))
def test_recorded_content_digest_matches_the_staged_file(key):
    path = _staged(key)
    spec = data.FILES[key]
    if digest.file_sha256(path) != spec.sha256:
        pytest.skip(f"{path} is not the staged file (verified by content digest)")
    assert digest.content_digest(spec.scheme, path) == spec.content_digest


def test_sst2_train_rows_come_sorted_and_dev_rows_in_file_order():
    _staged("sst2_train")
    sentences, labels = data.load_sst2("train")
    pairs = list(zip(sentences, labels.tolist()))
    assert len(pairs) == 67_349 and pairs == sorted(pairs)
    assert np.bincount(labels).tolist() == [29_780, 37_569]
    sentences, labels = data.load_sst2("dev")
    first = _staged("sst2_dev").read_text(encoding="utf-8").split("\n")[1]
    assert len(sentences) == 872 and sentences[0] == first.split("\t")[0].strip()


def test_imdb_splits_are_balanced_and_keep_the_markup():
    _staged("imdb")
    for split in ("train", "test"):
        texts, labels = data.load_imdb(split)
        assert len(texts) == 5_000 and np.bincount(labels).tolist() == [2_500, 2_500]
        assert labels[:2_500].max() == 0  # neg rows first, as in the file
    assert any("<br />" in t for t in texts)
    with pytest.raises(ValueError, match="split"):
        data.load_imdb("dev")


def test_loaders_say_how_to_fetch_a_missing_text_data_set(monkeypatch, tmp_path):
    monkeypatch.setattr(files, "data_dirs", lambda: [tmp_path])
    for load in (lambda: data.load_imdb("train"), lambda: data.load_sst2("dev"),
                 lambda: data.load_20newsgroups("train")):
        with pytest.raises(FileNotFoundError, match="python -m ddcl_theory.data ensure"):
            load()


def test_text_corpus_is_the_file_unchanged():
    path = _staged("tinyshakespeare")
    text, source = data.load_text()
    assert source == "tinyshakespeare" and text == path.read_text(encoding="utf-8")
    assert len(text) == 1_115_394
