"""ddcl_theory.models.dino: the ViT with [CLS] and mask tokens, the DINO and iBOT losses, the
masks, the EMA teacher and its centres, and the supervised ceiling."""
from __future__ import annotations

import math

import pytest
import torch

from ddcl_theory.models import dino

T, P = 16, 12                                    # tokens per image, features per patch


def vit(lap: int = 0, **kw) -> dino.DenseViT:
    torch.manual_seed(0)
    return dino.DenseViT(T, P, dim=16, depth=1, heads=2, laplacian_heads=lap, **kw)


def test_shapes_of_the_vit_features_and_head():
    model = vit(lap=2)
    x = torch.randn(3, T, P)
    assert model(x).shape == (3, 1 + T, 16)
    assert dino.patch_features(model, x, batch=2).shape == (3, T, 16)
    assert dino.cls_features(model, x, batch=2).shape == (3, 16)
    assert model.laplacian_heads == (2,)
    head = dino.DinoHead(16, 8)
    assert head(torch.randn(5, 3, 16)).shape == (5, 3, 8) and head.out_dim == 8
    with pytest.raises(ValueError, match=r"^patches: expected shape"):
        model(torch.randn(3, T + 1, P))
    with pytest.raises(ValueError, match=r"^mask: expected shape"):
        model(x, torch.zeros(3, T - 1, dtype=torch.bool))


def test_features_in_batches_equal_the_whole_batch():
    model = vit().eval()
    x = torch.randn(7, T, P)
    whole = model(x)
    assert torch.allclose(dino.patch_features(model, x, batch=3), whole[:, 1:], atol=1e-6)
    assert torch.allclose(dino.cls_features(model, x, batch=3), whole[:, 0], atol=1e-6)


def test_a_mask_replaces_exactly_the_masked_embeddings():
    model = vit().eval()
    x = torch.randn(2, T, P)
    mask = torch.zeros(2, T, dtype=torch.bool)
    assert torch.equal(model(x, mask), model(x))             # nothing masked: no change
    mask[0, 3] = True
    with torch.no_grad():
        model.mask_token.fill_(0.7)
        y = x.clone()
        y[0, 3] += 5.0                                       # change the masked patch only
    # the masked patch's content cannot reach the output; the other image is untouched
    assert torch.allclose(model(y, mask), model(x, mask), atol=1e-6)
    assert not torch.allclose(model(x, mask)[0], model(x)[0])
    assert torch.allclose(model(x, mask)[1], model(x)[1], atol=1e-6)


def test_dino_loss_is_cross_entropy_with_a_sharpened_centred_teacher():
    s, t = torch.randn(4, 8), torch.randn(4, 8)
    center = torch.randn(8)
    loss = dino.dino_loss(s, t, center, student_temp=0.1, teacher_temp=0.04)
    p = torch.softmax((t - center) / 0.04, -1)
    expected = -(p * torch.log_softmax(s / 0.1, -1)).sum(-1).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    uniform = dino.dino_loss(torch.zeros(2, 8), torch.zeros(2, 8), torch.zeros(8),
                             student_temp=0.1, teacher_temp=0.04)
    assert uniform.item() == pytest.approx(math.log(8))
    t.requires_grad_(True)
    dino.dino_loss(s.requires_grad_(True), t, center, student_temp=0.1,
                   teacher_temp=0.04).backward()
    assert t.grad is None and s.grad is not None             # no gradient to the teacher
    with pytest.raises(ValueError, match=r"^teacher_logits: expected shape"):
        dino.dino_loss(s, t[:, :4], center, student_temp=0.1, teacher_temp=0.04)


def test_masked_patch_loss_averages_the_masked_patches_per_image():
    torch.manual_seed(1)
    s, t = torch.randn(3, 5, 8), torch.randn(3, 5, 8)
    center = torch.randn(8)
    mask = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 1, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.bool)
    kw = dict(student_temp=0.1, teacher_temp=0.04)
    p = torch.softmax((t - center) / 0.04, -1)
    per_patch = -(p * torch.log_softmax(s / 0.1, -1)).sum(-1)
    # image 0 has one masked patch, image 1 three, image 2 none (left out of the mean)
    expected = 0.5 * (per_patch[0, 0] + per_patch[1, :3].mean())
    got = dino.masked_patch_loss(s, t, mask, center, **kw)
    assert got.item() == pytest.approx(expected.item(), rel=1e-6)
    nothing = dino.masked_patch_loss(s.requires_grad_(True), t, torch.zeros_like(mask),
                                     center, **kw)
    assert nothing.item() == 0.0 and nothing.requires_grad
    with pytest.raises(ValueError, match=r"^mask: expected shape"):
        dino.masked_patch_loss(s, t, mask[:, :4], center, **kw)


def test_random_masks_follow_the_share_and_ratio_and_the_generator():
    g = torch.Generator().manual_seed(0)
    m = dino.random_masks(2000, 64, g, low=0.1, high=0.5, share=0.5)
    assert m.shape == (2000, 64) and m.dtype == torch.bool
    counts = m.sum(1).float()
    masked = counts > 0
    assert 0.45 < masked.float().mean() < 0.55               # about half the images
    ratio = counts[masked] / 64
    assert ratio.min() >= 0.09 and ratio.max() <= 0.51       # rounded ratios in [0.1, 0.5]
    assert 0.27 < ratio.mean() < 0.33                        # uniform ratio: mean 0.3
    again = dino.random_masks(2000, 64, torch.Generator().manual_seed(0))
    assert torch.equal(m, again)
    assert not dino.random_masks(50, 64, g, share=0.0).any()
    with pytest.raises(ValueError, match=r"^high \(at least low = 0.5\)"):
        dino.random_masks(4, 8, g, low=0.5, high=0.2)


def pair(**kw) -> dino.SelfDistillation:
    return dino.SelfDistillation(vit(lap=1), 8, **kw)


def views(b: int = 4):
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(b, T, P, generator=g), torch.randn(b, T, P, generator=g)
    masks = dino.random_masks(2 * b, T, g, share=0.99)
    return x, y, masks[:b], masks[b:]


def test_teacher_gets_no_gradient_and_follows_the_student_by_ema():
    model = pair(momentum=0.5)
    opt = torch.optim.SGD([*model.student.parameters(), *model.student_head.parameters()],
                          lr=0.5)
    before = [p.clone() for p in (*model.teacher.parameters(),
                                  *model.teacher_head.parameters())]
    loss = model(*views())
    loss.backward()
    assert all(p.grad is None for p in model.teacher.parameters())
    assert model.center.abs().sum() > 0 and model.patch_center.abs().sum() > 0
    opt.step()
    model.update_teacher()
    students = (*model.student.parameters(), *model.student_head.parameters())
    teachers = (*model.teacher.parameters(), *model.teacher_head.parameters())
    moved = 0
    for b, t, s in zip(before, teachers, students):
        assert torch.allclose(t, 0.5 * b + 0.5 * s, atol=1e-6)
        moved += int(not torch.equal(t, b))
    assert moved > 0


def test_the_patch_weight_adds_the_masked_patch_loss():
    a, b = pair(patch_weight=0.0), pair(patch_weight=1.0)
    v = views()
    dino_only, both = a(*v), b(*v)
    # the same weights and views: the difference is the masked-patch loss, which is positive
    assert both.item() > dino_only.item() + 1e-3
    unmasked = (v[0], v[1], torch.zeros_like(v[2]), torch.zeros_like(v[3]))
    assert pair(patch_weight=1.0)(*unmasked).item() == pytest.approx(
        pair(patch_weight=0.0)(*unmasked).item(), rel=1e-6)


def test_entropies_in_range_and_arguments_checked():
    model = pair()
    per_image, of_mean = model.teacher_entropies(torch.randn(6, T, P))
    assert 0 <= per_image <= of_mean + 1e-6 <= math.log(8) + 1e-6
    with pytest.raises(ValueError, match=r"^momentum: expected a number in \[0, 1\)"):
        pair(momentum=1.0)
    with pytest.raises(ValueError, match=r"^center_momentum: expected a number in \[0, 1\)"):
        pair(center_momentum=-0.1)
    with pytest.raises(ValueError, match=r"^teacher_temp \(at most student_temp\): .*\(0, 0.1\]"):
        pair(teacher_temp=0.5, student_temp=0.1)
    with pytest.raises(ValueError, match="^student_temp: expected a finite number > 0"):
        pair(teacher_temp=-0.5, student_temp=-0.1)
    with pytest.raises(ValueError, match="^patch_weight"):
        pair(patch_weight=-1.0)


def test_segmentation_vit_reads_every_patch_token():
    model = dino.SegmentationViT(vit(), 11)
    out = model(torch.randn(3, T, P))
    assert out.shape == (3, T, 11)
    with pytest.raises(ValueError, match="^num_classes"):
        dino.SegmentationViT(vit(), 0)
