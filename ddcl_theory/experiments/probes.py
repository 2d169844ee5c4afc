"""Training and probing readouts of frozen tokens: the DDCL readout with a linear head, linear
probes, k-means and DDCL clusterings (the text chapter's methods, claim D14).

Supervised: on [CLS] and on the mean, a logistic-regression probe solved to convergence
(:func:`linear_probe`, deterministic); the DDCL readout
(:class:`~ddcl_theory.layers.readouts.DDCLPooledReadout`) and its linear head are trained
together by :func:`train_classifier` (AdamW, mini-batches, a fixed number of epochs, on
:func:`ddcl_theory.runtime.training.fit`; seeds vary the initialisation and the batch order).
Unsupervised: k-means (:func:`kmeans_clusters`, scikit-learn, k-means++ seeding) on a readout,
and DDCL clustering (:func:`ddcl_clusters`: a projection-free DDCL layer fitted by minimising
L_q, each sequence given to its dominant prototype). Clusterings are scored with
:func:`ddcl_theory.metrics.clustering.purity` beside the Hungarian ACC.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as nnf
from torch import Tensor, nn

from ddcl_theory.layers.ddcl import DDCLAttention
from ddcl_theory.layers.readouts import (
    DDCLPooledReadout,
    PackedTokens,
    Standardiser,
    lloyd,
    segment_mean,
)
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.training import fit

__all__ = ["TrainConfig", "ProbeLog", "train_classifier", "linear_probe", "ddcl_probe",
           "kmeans_clusters", "DDCLClusters", "ddcl_clusters"]


@dataclass(frozen=True)
class TrainConfig:
    """How every head (probe or DDCL readout) is trained.

    Attributes:
        epochs, batch_size, lr, weight_decay: AdamW on cross-entropy, mini-batches.
        beta: weight of L_q in the DDCL readout's loss (CE + beta * L_q).
        init_sequences: sequences whose tokens seed the prototypes (k-means++).
    """

    epochs: int = 20
    batch_size: int = 64
    lr: float = 2e-3
    weight_decay: float = 1e-4
    beta: float = 0.01
    init_sequences: int = 256

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "init_sequences"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {v!r}")
        for name in ("lr", "weight_decay", "beta"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v >= 0 and np.isfinite(v)):
                raise ValueError(f"{name}: expected a finite number >= 0, got {v!r}")


@dataclass
class ProbeLog:
    """One training run of a head.

    Attributes:
        test_acc: accuracy on the test set after training; train_acc: on the training set.
        l_q, l_ols, v: DDCL loss terms per step (empty for a linear probe).
        fraction_used: share of the prototypes that are some test token's dominant one (DDCL).
    """

    test_acc: float
    train_acc: float
    l_q: list[float] = field(default_factory=list)
    l_ols: list[float] = field(default_factory=list)
    v: list[float] = field(default_factory=list)
    fraction_used: float | None = None


def _batches(n: int, size: int, generator: torch.Generator) -> list[Tensor]:
    order = torch.randperm(n, generator=generator)
    return [order[i:i + size] for i in range(0, n, size)]


def _accuracy(predict, n: int, y: Tensor, batch: int = 256) -> float:
    with torch.no_grad():
        pred = torch.cat([predict(torch.arange(i, min(n, i + batch))) for i in range(0, n, batch)])
    return float((pred.cpu() == y.cpu()).float().mean())


_TERMS = ("l_q", "l_ols", "v")


def train_classifier(model: nn.Module, inputs, n_train: int, y_train: Tensor,
                     config: TrainConfig, generator: torch.Generator, ddcl_beta: float = 0.0, *,
                     run: RunDir | None = None,
                     name: str = "state") -> tuple[list[float], list[float], list[float]]:
    """Train ``model`` with AdamW on CE (+ ``ddcl_beta`` * L_q when the model returns a layer
    output) through :func:`ddcl_theory.runtime.training.fit`, one epoch per round, batches in
    a random order drawn from ``generator``; ``inputs(index) -> model arguments`` for the
    sequences at ``index``, ``model(*args) -> (logits, DDCLOutput | None)``. ``run`` and
    ``name`` keep its checkpoints. Returns the per-step L_q, L_OLS, V (empty without a layer).
    """
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    terms: dict[str, list[float]] = {t: [] for t in _TERMS}          # this epoch's

    def batches(_epoch: int) -> list[Tensor]:
        for values in terms.values():
            values.clear()
        return _batches(n_train, config.batch_size, generator)

    def loss(forward, idx: Tensor) -> Tensor:
        logits, out = forward(*inputs(idx))
        value = nnf.cross_entropy(logits, y_train[idx.to(y_train.device)])
        if out is not None:
            value = value + ddcl_beta * out.losses.l_q
            for t in _TERMS:
                terms[t].append(float(getattr(out.losses, t).detach()))
        if not torch.isfinite(value):
            raise FloatingPointError("train_classifier: the loss became non-finite")
        return value

    log = fit(model, opt, rounds=config.epochs, batches=batches, loss=loss,
              device=next(model.parameters()).device, run=run, name=name,
              generators={"batches": generator},
              end_of_round=lambda _r: {t: list(v) for t, v in terms.items()},
              desc="readout epochs")
    return tuple([x for m in log.metrics for x in m.get(t, [])] for t in _TERMS)


def linear_probe(f_train: Tensor, y_train: Tensor, f_test: Tensor, y_test: Tensor, *,
                 c: float = 1.0, max_iter: int = 2000) -> ProbeLog:
    """Test accuracy of an L2-regularised logistic regression (scikit-learn, lbfgs, inverse
    regularisation ``c``) on fixed features (N, d), standardised with the training statistics.

    A convex problem solved to convergence: the strongest simple baseline, and deterministic
    (no seed dependence).
    """
    from sklearn.linear_model import LogisticRegression

    if f_train.dim() != 2 or f_test.dim() != 2 or f_train.shape[1] != f_test.shape[1]:
        raise ValueError(f"f_train, f_test: expected (N, d) features of one width, got "
                         f"{tuple(f_train.shape)} and {tuple(f_test.shape)}")
    if not c > 0:
        raise ValueError(f"c: expected a number > 0, got {c!r}")
    std = Standardiser.fit(f_train)
    a, b = std(f_train).cpu().double().numpy(), std(f_test).cpu().double().numpy()
    ya, yb = y_train.cpu().numpy(), y_test.cpu().numpy()
    clf = LogisticRegression(C=c, max_iter=max_iter).fit(a, ya)
    return ProbeLog(float((clf.predict(b) == yb).mean()), float((clf.predict(a) == ya).mean()))


def ddcl_probe(train: PackedTokens, y_train: Tensor, test: PackedTokens, y_test: Tensor, *,
               num_prototypes: int, config: TrainConfig, seed: int, heads: int = 1,
               head_dim: int | None = None, temperature_fraction: float = 0.1,
               run: RunDir | None = None, name: str = "state") -> ProbeLog:
    """Train a :class:`DDCLPooledReadout` on frozen packed tokens; report accuracies.

    Tokens are standardised per feature with the statistics of the training tokens. The
    prototypes are seeded by k-means++ and Lloyd steps on the projected tokens of the first
    ``config.init_sequences`` training sequences, and the temperature is set from their spread
    (:meth:`DDCLPooledReadout.calibrate`). Loss: CE + ``config.beta`` * L_q. ``run`` and
    ``name`` keep the training's checkpoints (:func:`train_classifier`).
    """
    if len(train) != len(y_train) or len(test) != len(y_test):
        raise ValueError(f"y_train, y_test: expected {len(train)} and {len(test)} labels, got "
                         f"{len(y_train)} and {len(y_test)}")
    gen = profile.seed_everything(seed)
    std = Standardiser.fit(train.values)
    tr, te = train.standardised(std), test.standardised(std)
    classes = int(max(y_train.max(), y_test.max())) + 1
    device = tr.values.device
    model = DDCLPooledReadout(tr.values.shape[1], classes, num_prototypes, heads=heads,
                              head_dim=head_dim).to(device)
    seed_tokens, _ = tr.batch(torch.arange(min(config.init_sequences, len(tr))))
    model.calibrate(seed_tokens, temperature_fraction, generator=gen)

    def inputs(data: PackedTokens, idx: Tensor) -> tuple[Tensor, Tensor, int]:
        tokens, seg = data.batch(idx)
        return tokens, seg, len(idx)

    hist = train_classifier(model, lambda i: inputs(tr, i), len(tr), y_train, config, gen,
                            ddcl_beta=config.beta, run=run, name=name)
    test_acc = _accuracy(lambda i: model(*inputs(te, i))[0].argmax(-1), len(te), y_test)
    train_acc = _accuracy(lambda i: model(*inputs(tr, i))[0].argmax(-1), len(tr), y_train)
    with torch.no_grad():
        dominant = model.ddcl(te.values.unsqueeze(1)).assignments[:, :, 0].argmax(-1)  # (m, H)
    used = float(np.mean([torch.unique(dominant[:, h]).numel() / num_prototypes
                          for h in range(dominant.shape[1])]))
    return ProbeLog(test_acc, train_acc, *hist, fraction_used=used)


def kmeans_clusters(features: np.ndarray | Tensor, k: int, seed: int,
                    n_init: int = 10) -> np.ndarray:
    """(N,) cluster labels of k-means (scikit-learn, k-means++ seeding, ``n_init`` restarts) on
    per-feature standardised (N, d) features."""
    from sklearn.cluster import KMeans

    f = features.detach().cpu().numpy() if isinstance(features, Tensor) else np.asarray(features)
    if f.ndim != 2 or f.shape[0] < k:
        raise ValueError(f"features: expected (N, d) with N >= k={k}, got {f.shape}")
    f = f.astype(np.float64)
    f = (f - f.mean(0)) / np.maximum(f.std(0), 1e-6)
    return KMeans(k, n_init=n_init, random_state=seed).fit_predict(f).astype(np.int64)


@dataclass
class DDCLClusters:
    """A DDCL clustering: labels (N,) and the fitting history (L_q, L_OLS, V per step)."""

    labels: np.ndarray
    l_q: list[float]
    l_ols: list[float]
    v: list[float]
    layer: DDCLAttention


def ddcl_clusters(data: PackedTokens, k: int, *, seed: int, steps: int = 100, lr: float = 0.05,
                  temperature_fraction: float = 0.05, max_tokens: int = 20000,
                  lloyd_steps: int = 10, run: RunDir | None = None,
                  name: str = "state") -> DDCLClusters:
    """Fit a projection-free one-head DDCL layer with ``k`` prototypes on the tokens by
    minimising L_q; each sequence goes to the prototype it over-uses most: the largest ratio of
    its mean assignment qbar_nk (over its tokens) to the corpus-wide mean assignment qbar_k
    (the plain largest qbar_nk sends every sequence to the biggest token cluster). When every
    sequence is a single vector (e.g. a pooled document), each goes to its largest q_nk.

    Tokens are standardised per feature; the temperature is ``temperature_fraction`` times the
    mean squared distance of the tokens to their mean (scale-free). The prototypes start from
    k-means++ and are fitted by full-batch Adam on at most ``max_tokens`` tokens drawn at
    random (k-means++ then ``lloyd_steps`` Lloyd steps first, see :func:`lloyd`); then every
    token is assigned. With one token per sequence (e.g. a pooled vector) this
    is soft k-means at a fixed temperature (deterministic annealing without the annealing).
    The fit is :func:`ddcl_theory.runtime.training.fit` with one step per round (``run`` and
    ``name`` keep its checkpoints, every quarter of the steps).
    """
    gen = profile.seed_everything(seed)
    std = Standardiser.fit(data.values)
    z = std(data.values)
    fit_tokens = z if len(z) <= max_tokens \
        else z[torch.randperm(len(z), generator=gen)[:max_tokens]]
    spread = float(((fit_tokens - fit_tokens.mean(0)) ** 2).sum(-1).mean())
    layer = DDCLAttention(z.shape[1], k, heads=1, temperature=temperature_fraction * spread,
                          residual=False, norm=False, projections=False).to(z.device)
    with torch.no_grad():
        layer.init_prototypes_from(fit_tokens.unsqueeze(0), generator=gen)
        layer.prototypes[0].copy_(lloyd(fit_tokens, layer.prototypes[0], lloyd_steps))
    opt = torch.optim.Adam([layer.prototypes], lr=lr)
    step_terms: dict[str, float] = {}

    def loss(forward, batch: Tensor) -> Tensor:
        losses = forward(batch).losses
        step_terms.update({t: float(getattr(losses, t).detach()) for t in _TERMS})
        return losses.l_q

    log = fit(layer, opt, rounds=steps, batches=lambda _step: [fit_tokens.unsqueeze(0)],
              loss=loss, device=z.device, run=run, name=name,
              end_of_round=lambda _step: dict(step_terms),
              checkpoint_every=max(1, steps // 4), desc="DDCL clustering", train_mode=False)
    hist = tuple([m[t] for m in log.metrics] for t in _TERMS)
    with torch.no_grad():
        q = layer(z.unsqueeze(0)).assignments[0, 0]                         # (total, K)
        seg = torch.repeat_interleave(torch.arange(len(data), device=z.device), data.lengths)
        share = segment_mean(q, seg, len(data))                              # (N, K)
        if bool((data.lengths == 1).all()):                                 # one vector each
            labels = share.argmax(-1)
        else:
            labels = (share / share.mean(0, keepdim=True).clamp_min(1e-12)).argmax(-1)
    return DDCLClusters(labels.cpu().numpy().astype(np.int64), *hist, layer=layer)
