"""DINO-style self-distillation of a small ViT (Caron et al. 2021), at CPU scale.

A student ViT (:class:`ddcl_theory.models.vit.ViT`, mean pooling, whose classifier is replaced by
a projection head :class:`DinoHead`) is trained to match an exponential-moving-average copy of
itself, the teacher, across two augmented views of an image: the loss is the cross-entropy
between the teacher's centred, sharpened distribution on one view and the student's distribution
on the other (:func:`dino_loss`). Centring (subtracting a running mean of the teacher's outputs)
and sharpening (a low teacher temperature) together keep the outputs from collapsing to one
dimension or to the uniform distribution.

Shapes: patches (B, T, patch_dim); ``patch_features`` (B, T, dim); the head's output (B, K).
"""
from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ddcl_theory.models.vit import ViT
from ddcl_theory.runtime.validate import (check_positive_float, check_probability,
                                          check_real_range, check_shape)

__all__ = ["DinoHead", "dino_vit", "patch_features", "dino_loss", "SelfDistillation"]


class DinoHead(nn.Module):
    """Projection head: MLP ``dim -> hidden -> bottleneck``, l2-normalised, then a linear map to
    ``out_dim`` logits (the DINO head, without weight normalisation). (B, dim) -> (B, out_dim)."""

    def __init__(self, dim: int, out_dim: int, *, hidden: int = 64, bottleneck: int = 32) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, bottleneck))
        self.last = nn.Linear(bottleneck, out_dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.last(F.normalize(self.mlp(x), dim=-1))


def dino_vit(num_patches: int, patch_dim: int, out_dim: int, *, dim: int, depth: int, heads: int,
             laplacian_heads: int | Sequence[int] = 0, mlp_ratio: int = 2) -> ViT:
    """A mean-pooling :class:`ViT` whose classifier is a :class:`DinoHead` with ``out_dim``
    outputs: ``model(patches (B, T, patch_dim)) -> (B, out_dim)``."""
    model = ViT(num_patches, patch_dim, out_dim, dim=dim, depth=depth, heads=heads,
                laplacian_heads=laplacian_heads, mlp_ratio=mlp_ratio, pool="mean")
    model.head = DinoHead(dim, out_dim)
    return model


def patch_features(model: ViT, patches: Tensor) -> Tensor:
    """The frozen dense features of ``model``: its final LayerNorm on the last residual stream,
    (B, T, patch_dim) -> (B, T, dim) (no gradient)."""
    with torch.no_grad():
        _, states = model(patches, return_hidden=True)
        return model.norm(states[-1])


def dino_loss(student_logits: Tensor, teacher_logits: Tensor, center: Tensor, *,
              student_temp: float, teacher_temp: float) -> Tensor:
    """Mean over the batch of ``H(softmax((t - center) / teacher_temp), softmax(s /
    student_temp))``: student and teacher logits (B, K), center (K,) -> scalar. The teacher side
    carries no gradient."""
    check_shape(teacher_logits, "teacher_logits", tuple(student_logits.shape))
    target = F.softmax((teacher_logits.detach() - center) / teacher_temp, dim=-1)
    return -(target * F.log_softmax(student_logits / student_temp, dim=-1)).sum(-1).mean()


class SelfDistillation(nn.Module):
    """Student, EMA teacher and the teacher's running centre, as one checkpointable module.

    Args:
        student: the network trained (its parameters are the optimiser's).
        momentum: teacher EMA momentum (teacher <- m teacher + (1 - m) student).
        center_momentum: momentum of the running mean of the teacher's logits.
        student_temp, teacher_temp: softmax temperatures (teacher sharper).

    ``forward(view_a, view_b)`` (two (B, T, patch_dim) views of the same images) returns the
    symmetric loss (student on each view against the teacher on the other) and updates the
    centre; call :meth:`update_teacher` after each optimiser step.
    """

    def __init__(self, student: nn.Module, *, momentum: float = 0.99,
                 center_momentum: float = 0.9, student_temp: float = 0.1,
                 teacher_temp: float = 0.04) -> None:
        super().__init__()
        check_probability(momentum, "momentum")
        check_probability(center_momentum, "center_momentum")
        check_positive_float(student_temp, "student_temp")
        check_real_range(teacher_temp, "teacher_temp (at most student_temp)", 0.0, student_temp,
                         low_open=True)
        self.student = student
        self.teacher = copy.deepcopy(student)
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        out_dim = student.head.last.out_features
        self.register_buffer("center", torch.zeros(out_dim))
        self.momentum, self.center_momentum = momentum, center_momentum
        self.student_temp, self.teacher_temp = student_temp, teacher_temp

    def forward(self, view_a: Tensor, view_b: Tensor) -> Tensor:
        s_a, s_b = self.student(view_a), self.student(view_b)
        with torch.no_grad():
            t_a, t_b = self.teacher(view_a), self.teacher(view_b)
        kw = dict(student_temp=self.student_temp, teacher_temp=self.teacher_temp)
        loss = 0.5 * (dino_loss(s_a, t_b, self.center, **kw)
                      + dino_loss(s_b, t_a, self.center, **kw))
        with torch.no_grad():
            batch_center = torch.cat([t_a, t_b]).float().mean(0)
            self.center.mul_(self.center_momentum).add_(batch_center,
                                                        alpha=1 - self.center_momentum)
        return loss

    @torch.no_grad()
    def update_teacher(self) -> None:
        """One EMA step of the teacher towards the student."""
        for t, s in zip(self.teacher.parameters(), self.student.parameters()):
            t.mul_(self.momentum).add_(s.detach(), alpha=1 - self.momentum)

    @torch.no_grad()
    def teacher_entropies(self, patches: Tensor) -> tuple[float, float]:
        """(mean per-image entropy, entropy of the batch-mean distribution) of the teacher's
        centred, sharpened output on ``patches``, in nats. Collapse to one dimension drives the
        second to 0; collapse to the uniform distribution drives the first to log K."""
        p = F.softmax((self.teacher(patches) - self.center) / self.teacher_temp, dim=-1)
        per_image = -torch.special.xlogy(p, p).sum(-1).mean()
        mean = p.mean(0)
        return float(per_image), float(-torch.special.xlogy(mean, mean).sum())
