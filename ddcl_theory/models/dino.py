"""DINO and iBOT self-distillation of a small ViT, at CPU scale.

A student ViT (:class:`DenseViT`: a [CLS] token, a learned mask token, the house's Transformer
blocks with optional Laplacian heads) and a shared projection head (:class:`DinoHead`) are
trained to match an exponential-moving-average copy of themselves, the teacher, on two augmented
views of each image with two losses:

* DINO's image-level loss (Caron et al. 2021): the cross-entropy between the teacher's centred,
  sharpened distribution of the [CLS] token on one view and the student's on the other view
  (:func:`dino_loss`);
* iBOT's masked-patch loss (Zhou et al. 2022): the student sees each view with some patch
  embeddings replaced by the mask token and must predict, at those positions, the teacher's
  distribution for the unmasked patch (:func:`masked_patch_loss`). This objective is dense: it
  gives every patch token its own target, as segmentation reads every patch token.

Centring (a running mean of the teacher's outputs, one for [CLS] and one for patches) and
sharpening (a low teacher temperature) keep the outputs from collapsing to one dimension or to
the uniform distribution.

Shapes: patches (B, T, patch_dim); mask (B, T) bool, True where a patch is masked;
:func:`patch_features` (B, T, dim); :func:`cls_features` (B, dim); the head's output (..., K).
"""
from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ddcl_theory.models.transformer import TransformerStack
from ddcl_theory.runtime.validate import (check_positive_float, check_positive_int,
                                          check_probability, check_real_range, check_shape)

__all__ = ["DinoHead", "DenseViT", "patch_features", "cls_features", "dino_loss",
           "masked_patch_loss", "random_masks", "SelfDistillation", "SegmentationViT"]


class DinoHead(nn.Module):
    """Projection head: MLP ``dim -> hidden -> bottleneck``, l2-normalised, then a linear map to
    ``out_dim`` logits (the DINO head, without weight normalisation). (..., dim) -> (..., out_dim).
    """

    def __init__(self, dim: int, out_dim: int, *, hidden: int = 128,
                 bottleneck: int = 64) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, bottleneck))
        self.last = nn.Linear(bottleneck, out_dim, bias=False)

    @property
    def out_dim(self) -> int:
        return self.last.out_features

    def forward(self, x: Tensor) -> Tensor:
        return self.last(F.normalize(self.mlp(x), dim=-1))


class DenseViT(nn.Module):
    """A ViT on pre-extracted patches with a [CLS] token and a learned mask token.

    Patch embedding (linear), a learned [CLS] token prepended, learned positions, pre-norm
    blocks (:class:`~ddcl_theory.models.transformer.TransformerStack`, whose trailing
    ``laplacian_heads`` heads per layer are Laplacian), a final LayerNorm.

    Args:
        num_patches: tokens per image ``T``.
        patch_dim: features per flattened patch.
        dim, depth, heads, laplacian_heads, mlp_ratio: as :class:`~ddcl_theory.models.vit.ViT`.

    ``forward(patches (B, T, patch_dim), mask (B, T) bool | None) -> (B, 1 + T, dim)``: the
    normalised [CLS] token first, then the patch tokens; where ``mask`` is True the patch's
    embedding is replaced by the mask token before the positions are added.
    """

    def __init__(self, num_patches: int, patch_dim: int, *, dim: int, depth: int, heads: int,
                 laplacian_heads: int | Sequence[int] = 0, mlp_ratio: int = 2) -> None:
        super().__init__()
        self.num_patches = check_positive_int(num_patches, "num_patches")
        self.patch_dim = check_positive_int(patch_dim, "patch_dim")
        self.dim = check_positive_int(dim, "dim")
        self.embed = nn.Linear(patch_dim, dim)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, num_patches + 1, dim) * 0.02)
        self.stack = TransformerStack(dim, depth, heads, laplacian_heads=laplacian_heads,
                                      mlp_ratio=mlp_ratio)
        self.norm = nn.LayerNorm(dim)

    @property
    def laplacian_heads(self) -> tuple[int, ...]:
        return self.stack.laplacian_heads

    def forward(self, patches: Tensor, mask: Tensor | None = None) -> Tensor:
        check_shape(patches, "patches", ("B", self.num_patches, self.patch_dim))
        x = self.embed(patches)
        if mask is not None:
            check_shape(mask, "mask", tuple(patches.shape[:2]))
            x = torch.where(mask[..., None], self.mask_token.to(x.dtype), x)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.norm(self.stack(x)[-1])


def patch_features(model: DenseViT, patches: Tensor, *, batch: int = 256) -> Tensor:
    """The frozen dense features of ``model``: its normalised patch tokens, (B, T, patch_dim)
    -> (B, T, dim), computed ``batch`` images at a time without gradient."""
    with torch.no_grad():
        return torch.cat([model(patches[i:i + batch])[:, 1:]
                          for i in range(0, len(patches), batch)])


def cls_features(model: DenseViT, patches: Tensor, *, batch: int = 256) -> Tensor:
    """The frozen image-level features of ``model``: its normalised [CLS] token, (B, T,
    patch_dim) -> (B, dim), without gradient."""
    with torch.no_grad():
        return torch.cat([model(patches[i:i + batch])[:, 0]
                          for i in range(0, len(patches), batch)])


def _cross_entropy(student_logits: Tensor, teacher_logits: Tensor, center: Tensor, *,
                   student_temp: float, teacher_temp: float) -> Tensor:
    """Per-row ``H(softmax((t - center) / teacher_temp), softmax(s / student_temp))``: (..., K)
    -> (...). The teacher side carries no gradient."""
    target = F.softmax((teacher_logits.detach() - center) / teacher_temp, dim=-1)
    return -(target * F.log_softmax(student_logits / student_temp, dim=-1)).sum(-1)


def dino_loss(student_logits: Tensor, teacher_logits: Tensor, center: Tensor, *,
              student_temp: float, teacher_temp: float) -> Tensor:
    """Mean over the batch of ``H(softmax((t - center) / teacher_temp), softmax(s /
    student_temp))``: student and teacher logits (B, K), center (K,) -> scalar. The teacher side
    carries no gradient."""
    check_shape(teacher_logits, "teacher_logits", tuple(student_logits.shape))
    return _cross_entropy(student_logits, teacher_logits, center, student_temp=student_temp,
                          teacher_temp=teacher_temp).mean()


def masked_patch_loss(student_logits: Tensor, teacher_logits: Tensor, mask: Tensor,
                      center: Tensor, *, student_temp: float, teacher_temp: float) -> Tensor:
    """iBOT's masked-image-modelling loss: the cross-entropy between the teacher's centred,
    sharpened patch distribution (unmasked input) and the student's (masked input), averaged
    over the masked patches of each image, then over the images with a masked patch. Logits
    (B, T, K), mask (B, T) bool, center (K,) -> scalar (0 when nothing is masked)."""
    check_shape(teacher_logits, "teacher_logits", tuple(student_logits.shape))
    check_shape(mask, "mask", tuple(student_logits.shape[:2]))
    per_patch = _cross_entropy(student_logits, teacher_logits, center,
                               student_temp=student_temp, teacher_temp=teacher_temp)
    weights = mask.to(per_patch.dtype)
    counts = weights.sum(-1)
    has = counts > 0
    if not bool(has.any()):
        return per_patch.sum() * 0.0
    per_image = (per_patch * weights).sum(-1)[has] / counts[has]
    return per_image.mean()


def random_masks(batch: int, tokens: int, generator: torch.Generator, *, low: float = 0.1,
                 high: float = 0.5, share: float = 0.5) -> Tensor:
    """iBOT's masks: each image is masked with probability ``share``; a masked image hides a
    random ratio in ``[low, high]`` of its patches (chosen uniformly without replacement).
    Returns (batch, tokens) bool; every draw comes from ``generator``."""
    check_real_range(low, "low", 0.0, 1.0)
    check_real_range(high, f"high (at least low = {low})", low, 1.0)
    check_probability(share, "share")
    u = torch.rand(batch, 2, generator=generator)
    ratio = torch.where(u[:, 0] < share, low + (high - low) * u[:, 1], torch.zeros(batch))
    counts = torch.round(ratio * tokens).long()
    ranks = torch.rand(batch, tokens, generator=generator).argsort(-1).argsort(-1)
    return ranks < counts[:, None]


class SelfDistillation(nn.Module):
    """Student, EMA teacher and the teacher's running centres, as one checkpointable module.

    Args:
        student: a :class:`DenseViT` (its parameters and the head's are the optimiser's).
        out_dim: outputs of the shared projection head (K).
        momentum: teacher EMA momentum (teacher <- m teacher + (1 - m) student).
        center_momentum: momentum of the running means of the teacher's logits.
        student_temp, teacher_temp: softmax temperatures (teacher sharper).
        patch_weight: weight of the masked-patch loss beside the [CLS] loss (0: DINO alone).

    ``forward(view_a, view_b, mask_a, mask_b)`` (two (B, T, patch_dim) views of the same images
    and their (B, T) masks) returns ``cls_loss + patch_weight * patch_loss``: the student on
    each masked view against the teacher's [CLS] on the other unmasked view, and at the masked
    patches against the teacher's patch tokens of the same unmasked view; it updates both
    centres. Call :meth:`update_teacher` after each optimiser step.
    """

    def __init__(self, student: DenseViT, out_dim: int, *, momentum: float = 0.99,
                 center_momentum: float = 0.9, student_temp: float = 0.1,
                 teacher_temp: float = 0.04, patch_weight: float = 1.0) -> None:
        super().__init__()
        check_probability(momentum, "momentum")
        check_probability(center_momentum, "center_momentum")
        check_positive_float(student_temp, "student_temp")
        check_real_range(teacher_temp, "teacher_temp (at most student_temp)", 0.0, student_temp,
                         low_open=True)
        check_real_range(patch_weight, "patch_weight", 0.0, float("inf"))
        check_positive_int(out_dim, "out_dim")
        self.student = student
        self.student_head = DinoHead(student.dim, out_dim)
        self.teacher = copy.deepcopy(student)
        self.teacher_head = copy.deepcopy(self.student_head)
        for p in (*self.teacher.parameters(), *self.teacher_head.parameters()):
            p.requires_grad_(False)
        self.register_buffer("center", torch.zeros(out_dim))
        self.register_buffer("patch_center", torch.zeros(out_dim))
        self.momentum, self.center_momentum = momentum, center_momentum
        self.student_temp, self.teacher_temp = student_temp, teacher_temp
        self.patch_weight = patch_weight

    def _student_params(self) -> list[Tensor]:
        return [*self.student.parameters(), *self.student_head.parameters()]

    def _teacher_params(self) -> list[Tensor]:
        return [*self.teacher.parameters(), *self.teacher_head.parameters()]

    def forward(self, view_a: Tensor, view_b: Tensor, mask_a: Tensor, mask_b: Tensor) -> Tensor:
        s_a = self.student_head(self.student(view_a, mask_a))          # (B, 1 + T, K)
        s_b = self.student_head(self.student(view_b, mask_b))
        with torch.no_grad():
            t_a = self.teacher_head(self.teacher(view_a))
            t_b = self.teacher_head(self.teacher(view_b))
        kw = dict(student_temp=self.student_temp, teacher_temp=self.teacher_temp)
        cls_loss = 0.5 * (dino_loss(s_a[:, 0], t_b[:, 0], self.center, **kw)
                          + dino_loss(s_b[:, 0], t_a[:, 0], self.center, **kw))
        patch_loss = 0.5 * (
            masked_patch_loss(s_a[:, 1:], t_a[:, 1:], mask_a, self.patch_center, **kw)
            + masked_patch_loss(s_b[:, 1:], t_b[:, 1:], mask_b, self.patch_center, **kw))
        with torch.no_grad():
            w = 1 - self.center_momentum
            self.center.lerp_(torch.cat([t_a[:, 0], t_b[:, 0]]).float().mean(0), w)
            self.patch_center.lerp_(torch.cat([t_a[:, 1:], t_b[:, 1:]]).float()
                                    .mean((0, 1)), w)
        return cls_loss + self.patch_weight * patch_loss

    @torch.no_grad()
    def update_teacher(self) -> None:
        """One EMA step of the teacher towards the student, as one fused
        ``torch._foreach_lerp_`` over all parameters (teacher += (1 - m)(student - teacher))."""
        torch._foreach_lerp_(self._teacher_params(),
                             [p.detach() for p in self._student_params()], 1 - self.momentum)

    @torch.no_grad()
    def teacher_entropies(self, patches: Tensor) -> tuple[float, float]:
        """(mean per-image entropy, entropy of the batch-mean distribution) of the teacher's
        centred, sharpened [CLS] output on ``patches``, in nats. Collapse to one dimension
        drives the second to 0; collapse to the uniform distribution drives the first to
        log K."""
        logits = self.teacher_head(self.teacher(patches)[:, 0])
        p = F.softmax((logits - self.center) / self.teacher_temp, dim=-1)
        per_image = -torch.special.xlogy(p, p).sum(-1).mean()
        mean = p.mean(0)
        return float(per_image), float(-torch.special.xlogy(mean, mean).sum())


class SegmentationViT(nn.Module):
    """The ceiling: a :class:`DenseViT` trained with labels, a linear map on every patch token.

    ``forward(patches (B, T, patch_dim)) -> logits (B, T, num_classes)``; ``encoder`` is the
    ViT whose frozen patch features the probes read.
    """

    def __init__(self, encoder: DenseViT, num_classes: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.classifier = nn.Linear(encoder.dim, check_positive_int(num_classes, "num_classes"))

    def forward(self, patches: Tensor) -> Tensor:
        return self.classifier(self.encoder(patches)[:, 1:])
