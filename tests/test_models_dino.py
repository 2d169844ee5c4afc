"""ddcl_theory.models.dino: the DINO head, loss, EMA teacher and centre."""
from __future__ import annotations

import math

import pytest
import torch

from ddcl_theory.models import dino


def small(lap: int = 0):
    torch.manual_seed(0)
    return dino.dino_vit(16, 12, 8, dim=16, depth=1, heads=2, laplacian_heads=lap)


def test_shapes_of_head_and_features():
    model = small(lap=2)
    x = torch.randn(3, 16, 12)
    assert model(x).shape == (3, 8)
    assert dino.patch_features(model, x).shape == (3, 16, 16)
    assert model.laplacian_heads == (2,)


def test_loss_is_cross_entropy_with_sharpened_centred_teacher():
    s, t = torch.randn(4, 8), torch.randn(4, 8)
    center = torch.randn(8)
    loss = dino.dino_loss(s, t, center, student_temp=0.1, teacher_temp=0.04)
    p = torch.softmax((t - center) / 0.04, -1)
    assert loss.item() == pytest.approx(-(p * torch.log_softmax(s / 0.1, -1)).sum(-1).mean().item(),
                                        rel=1e-6)
    uniform = dino.dino_loss(torch.zeros(2, 8), torch.zeros(2, 8), torch.zeros(8),
                             student_temp=0.1, teacher_temp=0.04)
    assert uniform.item() == pytest.approx(math.log(8))
    with pytest.raises(ValueError, match=r"^teacher_logits: expected shape \(4, 8\), got \(4, 4\)"):
        dino.dino_loss(s, t[:, :4], center, student_temp=0.1, teacher_temp=0.04)


def test_teacher_gets_no_gradient_and_follows_the_student_by_ema():
    pair = dino.SelfDistillation(small(), momentum=0.5)
    x, y = torch.randn(4, 16, 12), torch.randn(4, 16, 12)
    opt = torch.optim.SGD(pair.student.parameters(), lr=0.1)
    before = [p.clone() for p in pair.teacher.parameters()]
    loss = pair(x, y)
    loss.backward()
    assert all(p.grad is None for p in pair.teacher.parameters())
    assert pair.center.abs().sum() > 0                      # the centre moved
    opt.step()
    pair.update_teacher()
    for b, t, s in zip(before, pair.teacher.parameters(), pair.student.parameters()):
        assert torch.allclose(t, 0.5 * b + 0.5 * s)


def test_entropies_in_range_and_arguments_checked():
    pair = dino.SelfDistillation(small())
    per_image, of_mean = pair.teacher_entropies(torch.randn(6, 16, 12))
    assert 0 <= per_image <= of_mean + 1e-6 <= math.log(8) + 1e-6
    with pytest.raises(ValueError, match=r"^momentum: expected a number in \[0, 1\)"):
        dino.SelfDistillation(small(), momentum=1.0)
    with pytest.raises(ValueError, match=r"^center_momentum: expected a number in \[0, 1\)"):
        dino.SelfDistillation(small(), center_momentum=-0.1)
    with pytest.raises(ValueError, match=r"^teacher_temp \(at most student_temp\): .*\(0, 0.1\]"):
        dino.SelfDistillation(small(), teacher_temp=0.5, student_temp=0.1)
    with pytest.raises(ValueError, match="^student_temp: expected a finite number > 0"):
        dino.SelfDistillation(small(), teacher_temp=-0.5, student_temp=-0.1)
