"""ddcl_theory.data.augment: crops and flips move pixels without changing them, label
smoothing and mixing keep targets on the simplex with the images' own lambda, the soft
cross-entropy is the hard one on one-hot targets, draws follow the generator."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from ddcl_theory.data import augment


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_crop_without_padding_or_flip_is_the_identity():
    x = torch.rand(5, 3, 8, 8)
    assert torch.equal(augment.random_crop_flip(x, 0, _gen(), flip=False), x)


@given(seed=st.integers(0, 2**16), pad=st.integers(0, 3))
@settings(max_examples=30, deadline=None)
def test_each_crop_is_a_window_of_the_padded_image_maybe_mirrored(seed, pad):
    x = torch.rand(4, 2, 6, 5, dtype=torch.float64)
    out = augment.random_crop_flip(x, pad, _gen(seed))
    padded = F.pad(x, (pad, pad, pad, pad))
    for b in range(len(x)):
        windows = [padded[b, :, i:i + 6, j:j + 5] for i in range(2 * pad + 1)
                   for j in range(2 * pad + 1)]
        assert any(torch.equal(out[b], w) or torch.equal(out[b], w.flip(-1)) for w in windows)


def test_the_same_generator_state_gives_the_same_crops_and_flips():
    x = torch.rand(16, 3, 8, 8)
    a = augment.random_crop_flip(x, 2, _gen(3))
    assert torch.equal(a, augment.random_crop_flip(x, 2, _gen(3)))
    assert not torch.equal(a, augment.random_crop_flip(x, 2, _gen(4)))


def test_about_half_the_images_are_mirrored():
    x = torch.arange(8.0).expand(2000, 1, 1, 8).contiguous()
    out = augment.random_crop_flip(x, 0, _gen(1))
    share = (out[:, 0, 0, 0] == 7).double().mean().item()
    assert abs(share - 0.5) < 0.05


def test_smoothed_labels_lie_on_the_simplex_with_the_label_on_top():
    y = torch.tensor([0, 3, 9, 3])
    t = augment.smooth_labels(y, 10, 0.1)
    assert torch.allclose(t.sum(-1), torch.ones(4))
    assert torch.equal(t.argmax(-1), y)
    assert t.max().item() == pytest.approx(0.9 + 0.01) and t.min().item() == pytest.approx(0.01)
    assert torch.equal(augment.smooth_labels(y, 10, 0.0), F.one_hot(y, 10).float())
    with pytest.raises(ValueError, match="y: expected labels in"):
        augment.smooth_labels(torch.tensor([10]), 10, 0.1)
    with pytest.raises(ValueError, match="smoothing"):
        augment.smooth_labels(y, 10, 1.5)


def _distinct(b: int = 6, size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Images of one constant value each and one-hot targets of distinct classes."""
    x = torch.arange(1.0, b + 1).view(b, 1, 1, 1).expand(b, 3, size, size).contiguous()
    return x.double(), F.one_hot(torch.arange(b), b).double()


@given(seed=st.integers(0, 2**16))
@settings(max_examples=40, deadline=None)
def test_mixup_mixes_images_and_targets_with_one_lambda(seed):
    x, t = _distinct()
    mixed, targets = augment.mix_batch(x, t, _gen(seed), mixup_alpha=0.8, cutmix_alpha=0.0)
    lam = targets[0, 0].item()
    assert torch.allclose(targets.sum(-1), torch.ones(6, dtype=torch.float64))
    assert torch.allclose(mixed, lam * x + (1 - lam) * x.flip(0))
    assert torch.allclose(targets, lam * t + (1 - lam) * t.flip(0))


@given(seed=st.integers(0, 2**16))
@settings(max_examples=40, deadline=None)
def test_cutmix_lambda_is_the_share_of_pixels_left_uncovered(seed):
    x, t = _distinct()
    mixed, targets = augment.mix_batch(x, t, _gen(seed), mixup_alpha=0.0, cutmix_alpha=1.0)
    kept = (mixed == x).double().mean(dim=(1, 2, 3))             # per image: pixels of its own
    lam = targets.diagonal()                                     # the own class's weight
    assert torch.allclose(kept, lam)
    assert torch.allclose(targets.sum(-1), torch.ones(6, dtype=torch.float64))
    assert bool(((mixed == x) | (mixed == x.flip(0))).all())


def test_both_on_switch_between_mixup_and_cutmix_and_prob_zero_leaves_the_batch():
    x, t = _distinct()
    kinds = set()
    for seed in range(60):
        mixed, _ = augment.mix_batch(x, t, _gen(seed), switch_prob=0.5)
        kinds.add("cutmix" if bool(((mixed == x) | (mixed == x.flip(0))).all()) else "mixup")
    assert kinds == {"cutmix", "mixup"}
    same, same_t = augment.mix_batch(x, t, _gen(0), prob=0.0)
    assert same is x and same_t is t
    with pytest.raises(ValueError, match="mixup_alpha"):
        augment.mix_batch(x, t, _gen(0), mixup_alpha=-1.0)
    with pytest.raises(ValueError, match="targets: expected shape"):
        augment.mix_batch(x, t[:3], _gen(0))


def test_beta_draws_have_the_beta_distributions_mean_and_variance():
    g = _gen(7)
    for alpha in (0.8, 1.0):
        draws = np.array([augment.beta_sample(alpha, g) for _ in range(4000)])
        var = 1 / (4 * (2 * alpha + 1))
        assert abs(draws.mean() - 0.5) < 4 * np.sqrt(var / 4000)
        assert draws.var() == pytest.approx(var, rel=0.1)


def test_soft_cross_entropy_of_one_hot_targets_is_the_cross_entropy():
    logits = torch.randn(7, 5, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 5, (7,))
    got = augment.soft_cross_entropy(logits, F.one_hot(y, 5).double())
    assert got.dtype == torch.float64
    assert torch.allclose(got, F.cross_entropy(logits, y))
    t = augment.smooth_labels(y, 5, 0.1).double()
    assert torch.autograd.gradcheck(lambda z: augment.soft_cross_entropy(z, t), (logits,))
    half = augment.soft_cross_entropy(logits.detach().bfloat16(), t.float())
    assert half.dtype == torch.float32
