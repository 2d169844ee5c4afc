"""The rest of the CIFAR-10 training set, and a fixed evaluation pool drawn from it.

``cifar10_rest.npz`` holds the 40,000 official training images that are not in the subset
(``cifar10_subset.npz``, the images every chapter trains on), in official order: together the
two files are the whole official training set, and their ``train_index`` arrays are disjoint.
The staged test split has only 1,000 images; :func:`cifar10_eval_pool` draws a larger evaluation
set from the rest. An image of the pool is never trained on: a run that trains on rest images
beyond the subset must leave out the pool's ``train_index``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ddcl_theory.data.files import find, missing_error

EVAL_POOL_SIZE = 10_000
EVAL_POOL_SEED = 0


@dataclass(frozen=True)
class TrainImages:
    """CIFAR-10 training images with their positions in the official train order.

    Attributes:
        x: uint8 (N, 32, 32, 3), HWC, RGB.
        y: int64 (N,) labels, indices into ``label_names``.
        train_index: int64 (N,), increasing, each image's position in the official 50,000-image
            train order (``data_batch_1..5`` concatenated).
        label_names: the ten class names in the official order.
    """

    x: np.ndarray
    y: np.ndarray
    train_index: np.ndarray
    label_names: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.y)

    def float_images(self) -> np.ndarray:
        """``x`` as float32 (N, 32, 32, 3) in [0, 1], the scale :func:`load_cifar10` gives."""
        return self.x.astype(np.float32) / 255.0

    def take(self, rows: np.ndarray) -> TrainImages:
        """The images at positions ``rows`` (int array into this set), in the given order."""
        return TrainImages(self.x[rows], self.y[rows], self.train_index[rows], self.label_names)


def load_cifar10_rest() -> TrainImages:
    """The 40,000 CIFAR-10 training images not in the subset, in official order (4,000 a class).

    No fallback: raises ``FileNotFoundError`` naming ``cifar10_rest.npz`` and how to fetch it
    when the file is in no data directory.
    """
    path = find("cifar10_rest")
    if path is None:
        raise missing_error("cifar10_rest", "CIFAR-10, the rest of the training set")
    with np.load(path) as z:
        return TrainImages(z["x_train"], z["y_train"].astype(np.int64),
                           z["train_index"].astype(np.int64),
                           tuple(str(s) for s in z["label_names"]))


def cifar10_eval_pool(n: int = EVAL_POOL_SIZE, *, seed: int = EVAL_POOL_SEED,
                      rest: TrainImages | None = None) -> TrainImages:
    """A fixed evaluation pool of ``n`` images of the rest of the train set, ``n / 10`` a class.

    The draw: one ``numpy.random.default_rng(seed)``; for each class in label order, a permutation
    of that class's images (in official order), of which the first ``n / 10`` are taken. The pool
    is returned in official order. The same ``n`` and ``seed`` always give the same images, and
    with one seed a smaller pool lies inside a larger one.

    Args:
        n: pool size, a positive multiple of the number of classes, at most the rest's size.
        seed: the generator's seed.
        rest: the images to draw from (default :func:`load_cifar10_rest`).
    """
    rest = load_cifar10_rest() if rest is None else rest
    n_classes = len(rest.label_names)
    counts = np.bincount(rest.y, minlength=n_classes)
    per_class = n // n_classes if isinstance(n, (int, np.integer)) else 0
    if per_class < 1 or n % n_classes or per_class > counts.min():
        raise ValueError(f"n: expected a positive multiple of {n_classes} of at most "
                         f"{n_classes * int(counts.min()):,}, got {n!r}")
    rng = np.random.default_rng(seed)
    chosen = [np.flatnonzero(rest.y == c)[rng.permutation(int(counts[c]))[:per_class]]
              for c in range(n_classes)]
    return rest.take(np.sort(np.concatenate(chosen)))
