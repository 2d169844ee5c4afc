"""One trained ViT of the head-count study (L6-L8) and what is measured of it.

:class:`ViTRun` is the record the L6-L8 decisions read, whatever trained the model (the
package's ViT, :mod:`ddcl_theory.experiments.laplacian_study`, or transformers' ViT under the
DeiT recipe, :mod:`ddcl_theory.experiments.deit_recipe`); :func:`measure_vit` fills its
measurements from a model that returns its hidden states.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ddcl_theory.metrics import geometry as metrics
from ddcl_theory.metrics.participation import participation_ratio

__all__ = ["ViTRun", "measure_vit"]


@dataclass(frozen=True)
class ViTRun:
    """One trained ViT of the study, read at its validation optimum (``best_epoch``; the
    terminal runs at their last epoch) and measured on the evaluation pool (tokens of every
    image, ANOVA per token) and on training images. ``train_loss``: the mean training loss of
    every epoch run; ``val_loss``, ``val_acc``: after every epoch (the terminal runs: after the
    last only).

    ``stream[l]``: the absolute ANOVA split of the residual stream after block ``l + 1``
    (before any LayerNorm); ``final``: after the final LayerNorm, the tokens the classifier
    reads (their mean in the package's ViT; the CLS token, one of them, in the DeiT recipe's).
    NC1 of the pool and of the training images (``nc1``, ``nc1_train``, ``etf_gap_train``) are
    of what the classifier reads; ``k99`` and ``pr`` (participation ratio) of all the final
    tokens; ``k99_stream``, ``pr_stream`` of the last block's output before it.
    ``correct``: the pool's per-image correctness, packed bits (:attr:`correct_items`).
    """

    part: str
    n_train: int
    dim: int
    setting: str
    laplacian_heads: int
    seed: int
    val_loss: tuple[float, ...]
    val_acc: tuple[float, ...]
    train_loss: tuple[float, ...]
    best_epoch: int
    epochs: int
    patience: int | None
    eval_acc: float
    train_acc: float
    nc1_train: float
    etf_gap_train: float
    stream: tuple[metrics.AnovaSplit, ...]
    final: metrics.AnovaSplit
    nc1: float
    k99: int
    pr: float
    k99_stream: int
    pr_stream: float
    correct: bytes
    n_eval: int

    @property
    def epochs_run(self) -> int:
        return len(self.train_loss)

    @property
    def past_optimum(self) -> bool:
        """Stopped by early stopping: ``patience`` epochs without a new lowest validation loss
        followed the optimum (not cut by the cap). False for runs without early stopping."""
        return self.patience is not None and self.epochs_run - self.best_epoch >= self.patience

    @property
    def correct_items(self) -> np.ndarray:
        """Per image of the evaluation pool, 1 where the prediction is right, (n_eval,)."""
        return np.unpackbits(np.frombuffer(self.correct, dtype=np.uint8))[: self.n_eval]


@torch.no_grad()
def _forward_all(model: nn.Module, x: torch.Tensor, chunk: int = 1000
                 ) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
    """Logits (N, C), the residual streams after each block [(N, T, d)] and the final
    LayerNorm's tokens (N, T, d) of ``model`` on ``x`` (N, T, p), in chunks."""
    logits, streams, final = [], [], []
    for i in range(0, x.shape[0], chunk):
        out, states = model(x[i:i + chunk], return_hidden=True)
        logits.append(out)
        streams.append(states[1:])
        final.append(model.norm(states[-1]))
    return (torch.cat(logits), [torch.cat(s) for s in zip(*streams)], torch.cat(final))


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.double().cpu().numpy()


def measure_vit(model: nn.Module, x_eval: torch.Tensor, y_eval: torch.Tensor,
                x_train: torch.Tensor, y_train: torch.Tensor) -> dict:
    """The measurements of :class:`ViTRun` of one model (evaluation mode): on the pool
    ``x_eval`` (N, T, p) accuracy, per-image correctness, the ANOVA splits, NC1, k99 and the
    participation ratio; on training images ``x_train`` accuracy, NC1 and the ETF gap of the
    final tokens' sequence means."""
    logits, streams, final = _forward_all(model, x_eval)
    labels = y_eval.cpu().numpy()
    correct = (logits.argmax(-1) == y_eval).cpu().numpy()
    split = [metrics.anova_split(_numpy(s), labels) for s in streams]
    tokens = _numpy(final)
    flat = tokens.reshape(-1, tokens.shape[-1])
    stream_flat = _numpy(streams[-1]).reshape(-1, tokens.shape[-1])
    tr_logits, _, tr_final = _forward_all(model, x_train)
    collapse = metrics.neural_collapse(_numpy(tr_final.mean(1)), y_train.cpu().numpy())
    return dict(
        eval_acc=float(correct.mean()),
        train_acc=float((tr_logits.argmax(-1) == y_train).float().mean()),
        nc1_train=collapse.nc1, etf_gap_train=collapse.etf_gap,
        stream=tuple(split), final=metrics.anova_split(tokens, labels),
        nc1=metrics.neural_collapse(tokens.mean(axis=1), labels).nc1,
        k99=metrics.k99(flat), pr=participation_ratio(flat),
        k99_stream=metrics.k99(stream_flat), pr_stream=participation_ratio(stream_flat),
        correct=np.packbits(correct.astype(np.uint8)).tobytes(), n_eval=int(len(labels)))
