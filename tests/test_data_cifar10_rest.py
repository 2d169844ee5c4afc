"""ddcl_theory.data.cifar10_rest: the train images outside the subset and the evaluation pool."""
from __future__ import annotations

import numpy as np
import pytest

from ddcl_theory import data
from ddcl_theory.data import cifar10_rest as R
from ddcl_theory.data import derive, files

NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def _synthetic_rest(per_class: int = 30) -> R.TrainImages:
    """A stand-in for the rest: ``per_class`` images a class, labels shuffled, increasing index."""
    rng = np.random.default_rng(1)
    n = per_class * len(NAMES)
    y = rng.permutation(np.repeat(np.arange(len(NAMES)), per_class)).astype(np.int64)
    train_index = np.sort(rng.choice(5 * n, size=n, replace=False)).astype(np.int64)
    x = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
    return R.TrainImages(x, y, train_index, NAMES)


def test_the_pool_is_stratified_in_official_order_and_drawn_from_the_rest():
    rest = _synthetic_rest()
    pool = R.cifar10_eval_pool(50, rest=rest)
    assert len(pool) == 50 and np.bincount(pool.y, minlength=10).tolist() == [5] * 10
    assert np.all(np.diff(pool.train_index) > 0)
    rows = np.searchsorted(rest.train_index, pool.train_index)
    assert np.array_equal(rest.train_index[rows], pool.train_index)  # each one a rest image
    assert np.array_equal(rest.x[rows], pool.x) and np.array_equal(rest.y[rows], pool.y)
    assert pool.x.dtype == np.uint8 and pool.label_names == NAMES


def test_the_pool_is_fixed_by_its_seed_and_nested_in_a_larger_one():
    rest = _synthetic_rest()
    first = R.cifar10_eval_pool(100, rest=rest)
    assert np.array_equal(R.cifar10_eval_pool(100, rest=rest).train_index, first.train_index)
    assert not np.array_equal(R.cifar10_eval_pool(100, seed=1, rest=rest).train_index,
                              first.train_index)
    larger = R.cifar10_eval_pool(200, rest=rest)
    assert np.isin(first.train_index, larger.train_index).all()


@pytest.mark.parametrize("n", [0, -10, 55, 310, 10.0])
def test_the_pool_size_must_be_a_multiple_of_the_classes_within_the_rest(n):
    with pytest.raises(ValueError, match="n: expected a positive multiple of 10 of at most 300"):
        R.cifar10_eval_pool(n, rest=_synthetic_rest())


def test_float_images_are_the_uint8_images_scaled_to_the_unit_interval():
    rest = _synthetic_rest(per_class=2)
    scaled = rest.float_images()
    assert scaled.dtype == np.float32 and scaled.shape == rest.x.shape
    assert np.array_equal(np.rint(scaled * 255).astype(np.uint8), rest.x)


def test_a_missing_rest_file_is_an_error_naming_the_file_and_the_fetch(monkeypatch, tmp_path):
    monkeypatch.setattr(files, "data_dirs", lambda: [tmp_path])
    for load in (data.load_cifar10_rest, data.cifar10_eval_pool):
        with pytest.raises(FileNotFoundError, match="cifar10_rest.npz") as err:
            load()
        assert "python -m ddcl_theory.data ensure cifar10_rest" in str(err.value)


# ---------------------------------------------------------------------------------------------
# the staged files (the real CIFAR-10 train set)


def _staged(key: str):
    path = data.find(key)
    if path is None:
        pytest.skip(f"{data.FILES[key].name} is in no data directory, so the real train set "
                    f"cannot be checked: run `make data` (python -m ddcl_theory.data ensure {key})")
    return path


@pytest.fixture(scope="module")
def real_rest() -> R.TrainImages:
    _staged("cifar10_rest")
    return data.load_cifar10_rest()


def test_the_real_rest_holds_40000_images_in_official_order(real_rest):
    assert real_rest.x.shape == (40_000, 32, 32, 3) and real_rest.x.dtype == np.uint8
    assert real_rest.y.shape == (40_000,) and real_rest.y.dtype == np.int64
    assert real_rest.train_index.dtype == np.int64 and np.all(np.diff(real_rest.train_index) > 0)
    assert np.bincount(real_rest.y).tolist() == [4_000] * 10
    assert real_rest.label_names == NAMES


def test_subset_and_rest_are_disjoint_and_make_the_whole_train_set(real_rest):
    with np.load(_staged("cifar10")) as z:
        subset_index, subset_labels = z["train_index"], z["y_train"]
    assert np.intersect1d(subset_index, real_rest.train_index).size == 0
    assert np.array_equal(np.union1d(subset_index, real_rest.train_index), np.arange(50_000))
    assert np.array_equal(real_rest.train_index, derive.cifar10_rest_index())
    assert np.bincount(np.concatenate([subset_labels, real_rest.y])).tolist() == [5_000] * 10


def test_the_default_pool_of_the_real_rest_is_1000_a_class_and_reproducible(real_rest):
    pool = data.cifar10_eval_pool(rest=real_rest)
    assert len(pool) == data.EVAL_POOL_SIZE == 10_000
    assert np.bincount(pool.y).tolist() == [1_000] * 10
    assert np.isin(pool.train_index, real_rest.train_index).all()
    assert np.array_equal(data.cifar10_eval_pool(rest=real_rest).train_index, pool.train_index)
