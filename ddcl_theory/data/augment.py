"""Image augmentation on the device, for a DeiT-style recipe: crop and flip, label smoothing,
mixup and cutmix.

Every function takes a batch where it lives (CPU or GPU) and draws its randomness from a CPU
``torch.Generator`` (the per-image offsets and flips are drawn on the CPU and moved; the batch
scalars of mixup and cutmix are host numbers), so a run checkpointed with its generator
resumes with the same draws, and no step waits on the device.

    >>> g = torch.Generator().manual_seed(0)
    >>> x = torch.rand(8, 3, 32, 32); y = torch.randint(0, 10, (8,))
    >>> x = random_crop_flip(x, pad=4, gen=g)
    >>> t = smooth_labels(y, 10, 0.1)
    >>> x, t = mix_batch(x, t, gen=g, mixup_alpha=0.8, cutmix_alpha=1.0)
    >>> loss = soft_cross_entropy(torch.randn(8, 10), t)
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from scipy.special import betaincinv
from torch import Tensor

from ddcl_theory.runtime.validate import check_non_negative_float, check_real_range, check_shape

__all__ = ["random_crop_flip", "smooth_labels", "mix_batch", "soft_cross_entropy",
           "beta_sample"]


def random_crop_flip(x: Tensor, pad: int, gen: torch.Generator, flip: bool = True) -> Tensor:
    """Each image of ``x`` (B, C, H, W) zero-padded by ``pad`` pixels, cropped back to H x W at
    an offset of its own, and (``flip``) mirrored left-right with probability 1/2."""
    check_shape(x, "x", ("B", "C", "H", "W"))
    if not isinstance(pad, int) or pad < 0:
        raise ValueError(f"pad: expected an int >= 0, got {pad!r}")
    b, _, h, w = x.shape
    offsets = torch.randint(0, 2 * pad + 1, (b, 2), generator=gen).to(x.device)
    flips = (torch.rand(b, generator=gen) < 0.5).to(x.device) if flip else None
    if pad:
        padded = F.pad(x, (pad, pad, pad, pad))
        rows = offsets[:, :1] + torch.arange(h, device=x.device)               # (B, H)
        cols = offsets[:, 1:] + torch.arange(w, device=x.device)               # (B, W)
        batch = torch.arange(b, device=x.device)[:, None, None]
        x = padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]]
        x = x.permute(0, 3, 1, 2)                                              # (B, C, H, W)
    if flips is not None:
        x = torch.where(flips[:, None, None, None], x.flip(-1), x)
    return x.contiguous()


def smooth_labels(y: Tensor, num_classes: int, smoothing: float) -> Tensor:
    """One-hot targets (B, num_classes) of the labels ``y`` (B,), each row moved ``smoothing``
    of the way towards the uniform distribution (rows sum to 1)."""
    check_shape(y, "y", ("B",))
    smoothing = check_real_range(smoothing, "smoothing", 0.0, 1.0)
    if y.device.type == "cpu":
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= num_classes):
            raise ValueError(f"y: expected labels in [0, num_classes={num_classes}), got "
                             f"[{int(y.min())}, {int(y.max())}]")
    else:                                      # checked on the device, without waiting for it
        torch._assert_async(((y >= 0) & (y < num_classes)).all(),
                            f"y: expected labels in [0, num_classes={num_classes})")
    one_hot = F.one_hot(y, num_classes).float()
    return one_hot * (1.0 - smoothing) + smoothing / num_classes


def beta_sample(alpha: float, gen: torch.Generator) -> float:
    """One draw of Beta(alpha, alpha) (inverse CDF of a uniform from ``gen``): a host number."""
    u = float(torch.rand((), generator=gen, dtype=torch.float64))
    return float(betaincinv(alpha, alpha, u))


def mix_batch(x: Tensor, targets: Tensor, gen: torch.Generator, *, mixup_alpha: float = 0.8,
              cutmix_alpha: float = 1.0, switch_prob: float = 0.5, prob: float = 1.0
              ) -> tuple[Tensor, Tensor]:
    """Mixup or cutmix of a batch with its reverse, as DeiT's recipe: with probability ``prob``
    the batch is mixed; then cutmix (when ``cutmix_alpha`` > 0, with probability
    ``switch_prob`` if mixup is on too) or mixup, with lambda ~ Beta(alpha, alpha).

    Mixup: ``lam x + (1 - lam) x[::-1]``. Cutmix: a box of area about ``(1 - lam) H W`` at a
    random centre, clipped to the image, copied from ``x[::-1]``; lambda is then the share of
    the image left uncovered. The targets (B, classes) mix with the same lambda.

    Returns the mixed images (B, C, H, W) and targets (B, classes).
    """
    check_shape(x, "x", ("B", "C", "H", "W"))
    check_shape(targets, "targets", (x.shape[0], "classes"))
    mixup_alpha = check_non_negative_float(mixup_alpha, "mixup_alpha")
    cutmix_alpha = check_non_negative_float(cutmix_alpha, "cutmix_alpha")
    switch_prob = check_real_range(switch_prob, "switch_prob", 0.0, 1.0)
    prob = check_real_range(prob, "prob", 0.0, 1.0)
    draws = torch.rand(2, generator=gen, dtype=torch.float64).tolist()
    if draws[0] >= prob or (mixup_alpha == 0 and cutmix_alpha == 0):
        return x, targets
    use_cutmix = cutmix_alpha > 0 and (mixup_alpha == 0 or draws[1] < switch_prob)
    lam = beta_sample(cutmix_alpha if use_cutmix else mixup_alpha, gen)
    other = x.flip(0)
    if use_cutmix:
        h, w = x.shape[-2:]
        cut = math.sqrt(1.0 - lam)
        ch, cw = int(h * cut), int(w * cut)
        cy = int(torch.randint(0, h, (), generator=gen))
        cx = int(torch.randint(0, w, (), generator=gen))
        y0, y1 = max(cy - ch // 2, 0), min(cy + ch // 2, h)
        x0, x1 = max(cx - cw // 2, 0), min(cx + cw // 2, w)
        mixed = x.clone()
        mixed[..., y0:y1, x0:x1] = other[..., y0:y1, x0:x1]
        lam = 1.0 - (y1 - y0) * (x1 - x0) / (h * w)
    else:
        mixed = lam * x + (1.0 - lam) * other
    return mixed, lam * targets + (1.0 - lam) * targets.flip(0)


def soft_cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean over the batch of ``-sum_c targets log softmax(logits)``; logits and targets
    (B, classes). Half-precision logits are read in float32."""
    check_shape(targets, "targets", tuple(logits.shape))
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return -(targets * F.log_softmax(logits, dim=-1)).sum(-1).mean()
