"""Readouts of frozen token embeddings: baselines, a DDCL readout, probes and clusterings.

A *readout* turns a sequence of token embeddings (B, T, d) with a mask (B, T) into one vector
per sequence. Compared here, all on the same frozen tokens:

* ``cls``: the first token ([CLS]);
* ``mean``: the mean over the tokens under the attention mask;
* ``ddcl``: :class:`DDCLPooledReadout`, the ``pooled`` output of a :class:`DDCLAttention` layer (the
  mean projected soft centroid), trained together with a linear head on cross-entropy
  + ``beta`` * L_q.

Supervised evaluation: on [CLS] and on the mean, a logistic-regression probe solved to
convergence (:func:`linear_probe`, deterministic); the DDCL readout and its linear head are trained
together by :func:`train_classifier` (AdamW, mini-batches, a fixed number of epochs; seeds vary the
initialisation and the batch order), test accuracy per seed. Unsupervised evaluation: k-means
(:func:`kmeans_clusters`, scikit-learn, k-means++ seeding) on a readout, and DDCL clustering
(:func:`ddcl_clusters`: a projection-free DDCL layer fitted by minimising L_q, each sequence
given to its dominant prototype). :func:`purity` scores clusterings with more clusters than
classes (many-to-one matching), beside the Hungarian ACC of :mod:`ddcl_theory.metrics.geometry`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as nnf
from torch import Tensor, nn

from ddcl_theory.layers.ddcl import DDCLAttention, DDCLOutput
from ddcl_theory.runtime import profile

__all__ = ["Standardiser", "masked_mean", "first_token", "PackedTokens", "segment_mean",
           "lloyd", "DDCLPooledReadout", "TrainConfig", "TrainLog", "train_classifier",
           "linear_probe", "ddcl_probe", "kmeans_clusters", "DDCLClusters", "ddcl_clusters",
           "purity"]


def _check_tokens(x: Tensor, mask: Tensor) -> None:
    if not isinstance(x, Tensor) or x.dim() != 3:
        raise ValueError(f"x: expected shape (B, T, d), got {getattr(x, 'shape', x)!r}")
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.shape != x.shape[:2]:
        raise ValueError(f"mask: expected a bool tensor of shape {tuple(x.shape[:2])}, got "
                         f"{getattr(mask, 'dtype', None)} {tuple(getattr(mask, 'shape', ()))}")


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """(B, d): the mean of x (B, T, d) over the tokens where mask (B, T) is True (0 if none)."""
    _check_tokens(x, mask)
    w = mask.to(x.dtype).unsqueeze(-1)
    return (x * w).sum(1) / w.sum(1).clamp_min(1)


def first_token(x: Tensor, mask: Tensor) -> Tensor:
    """(B, d): the first token of every sequence (the [CLS] token of a BERT encoder)."""
    _check_tokens(x, mask)
    return x[:, 0]


@dataclass(frozen=True)
class Standardiser:
    """Per-feature standardisation with statistics of the training tokens or vectors.

    Attributes:
        mean, std: (d,) float32 tensors.
    """

    mean: Tensor
    std: Tensor

    @classmethod
    def fit(cls, x: Tensor, mask: Tensor | None = None) -> "Standardiser":
        """From vectors (N, d), or from the valid tokens of x (B, T, d) under mask (B, T)."""
        rows = x[mask] if mask is not None else x
        if rows.dim() != 2 or rows.shape[0] < 2:
            raise ValueError(f"x: expected at least two vectors (N, d), got {tuple(rows.shape)}")
        std, mean = torch.std_mean(rows.float(), dim=0)
        return cls(mean, std.clamp_min(1e-6))

    def __call__(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """Standardised float32 copy of x (..., d); masked tokens (mask False) set to 0."""
        out = (x.float() - self.mean.to(x.device)) / self.std.to(x.device)
        if mask is not None:
            out = out * mask.unsqueeze(-1)
        return out


@dataclass(frozen=True)
class PackedTokens:
    """The valid tokens of N sequences stacked without padding.

    Attributes:
        values: (total, d) float32 tokens.
        offsets: (N + 1,) int64; sequence i owns rows ``offsets[i]:offsets[i + 1]``.
    """

    values: Tensor
    offsets: Tensor

    def __post_init__(self) -> None:
        if self.values.dim() != 2:
            raise ValueError(f"values: expected shape (total, d), got {tuple(self.values.shape)}")
        off = self.offsets
        if off.dim() != 1 or off.numel() < 2 or int(off[0]) != 0 \
                or int(off[-1]) != self.values.shape[0] or bool((off.diff() < 1).any()):
            raise ValueError("offsets: expected (N + 1,) increasing from 0 to total, every "
                             "sequence with at least one token")

    @classmethod
    def from_padded(cls, x: Tensor, mask: Tensor) -> "PackedTokens":
        """From padded x (B, T, d) and mask (B, T); every row needs a valid token."""
        _check_tokens(x, mask)
        lengths = mask.sum(1)
        offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
        return cls(x[mask].float(), offsets)

    def __len__(self) -> int:
        return self.offsets.numel() - 1

    @property
    def lengths(self) -> Tensor:
        return self.offsets.diff()

    def batch(self, index: Tensor) -> tuple[Tensor, Tensor]:
        """The tokens of the sequences at ``index`` (n,): (tokens (m, d), segment ids (m,) in
        [0, n), saying which of the n sequences each token belongs to)."""
        index = index.to(self.offsets.device)
        lengths = self.lengths[index]
        seg = torch.repeat_interleave(torch.arange(len(index), device=index.device), lengths)
        starts = torch.repeat_interleave(self.offsets[index], lengths)
        first = torch.repeat_interleave(lengths.cumsum(0) - lengths, lengths)
        rows = starts + torch.arange(int(lengths.sum()), device=index.device) - first
        return self.values[rows], seg

    def standardised(self, std: "Standardiser") -> "PackedTokens":
        return PackedTokens(std(self.values), self.offsets)


def segment_mean(values: Tensor, segments: Tensor, n: int) -> Tensor:
    """(n, d): the mean of the rows of values (m, d) that carry each segment id (0 if none)."""
    out = values.new_zeros((n, values.shape[1])).index_add_(0, segments, values)
    counts = torch.bincount(segments, minlength=n).clamp_min(1).to(values.dtype)
    return out / counts[:, None]


@torch.no_grad()
def lloyd(z: Tensor, centres: Tensor, iterations: int = 10) -> Tensor:
    """``iterations`` k-means (Lloyd) steps on rows of z (N, d) from ``centres`` (K, d).

    k-means++ seeding (D^2 sampling) likes outliers: on frozen-encoder tokens it can spend a
    prototype on far-away tokens, which then owns almost no typical token; at a fixed temperature
    its assignments saturate at 0 and it never moves (a dead prototype from the start; we saw it
    decide whole runs of the K = 2 readout). Lloyd steps move every seed to the mean of the
    points it owns, which removed that dead start in our runs; they are a local method, so a
    seed that owns only outliers stays with them. A centre that owns no point stays put.
    Returns the new (K, d) centres (float64 arithmetic, z's dtype).
    """
    if z.dim() != 2 or centres.dim() != 2 or z.shape[1] != centres.shape[1]:
        raise ValueError(f"z, centres: expected (N, d) and (K, d), got {tuple(z.shape)} and "
                         f"{tuple(centres.shape)}")
    x = z.detach().to(torch.float64)
    c = centres.detach().to(torch.float64).clone()
    for _ in range(iterations):
        label = torch.cdist(x, c).argmin(1)
        sums = torch.zeros_like(c).index_add_(0, label, x)
        counts = torch.bincount(label, minlength=c.shape[0]).to(x.dtype)
        filled = counts > 0
        c[filled] = sums[filled] / counts[filled, None]
    return c.to(z.dtype)


class DDCLPooledReadout(nn.Module):
    """A DDCL-Attention layer read out through ``pooled``, then a linear head.

    ``pooled`` (B, dim) is the masked mean over a sequence's tokens of y_t = W_out mu_t + b: an
    affine image of the mean soft centroid, which lies in the convex hull of the K prototypes,
    so a bottleneck of dimension at most K - 1 per head. Residual and LayerNorm do not enter
    ``pooled`` and are off.

    The layer has no token-token interaction, so it runs on packed tokens (no padding): every
    token goes through the layer as a sequence of length one and the per-sequence mean is taken
    afterwards (:func:`segment_mean`); this equals the layer's own ``pooled`` on the padded batch
    (tested), and the loss terms are the same means over valid tokens.

    Args:
        dim: token width d; num_classes: C; num_prototypes: K per head;
        heads, head_dim, temperature: as in :class:`DDCLAttention`.
    """

    def __init__(self, dim: int, num_classes: int, num_prototypes: int, *, heads: int = 1,
                 head_dim: int | None = None, temperature: float = 1.0) -> None:
        super().__init__()
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"num_classes: expected an int >= 2, got {num_classes!r}")
        self.ddcl = DDCLAttention(dim, num_prototypes, heads=heads, head_dim=head_dim,
                                  temperature=temperature, residual=False, norm=False)
        self.head = nn.Linear(dim, num_classes)

    def pooled(self, tokens: Tensor, segments: Tensor, n: int) -> tuple[Tensor, DDCLOutput]:
        """tokens (m, dim) of n sequences, segment ids (m,) -> (pooled (n, dim), layer output
        on the (m, 1, dim) token batch).

        ``pooled`` = W_out (mean of the soft centroids) + b, the layer's ``pooled`` by linearity;
        averaging the centroids (H*hd wide) before W_out spares the backward pass through W_out
        for every token.
        """
        out = self.ddcl(tokens.unsqueeze(1))
        mu = out.centroids[:, :, 0].reshape(tokens.shape[0], -1)                 # (m, H*hd)
        return self.ddcl.out_proj(segment_mean(mu, segments, n)), out

    def forward(self, tokens: Tensor, segments: Tensor, n: int) -> tuple[Tensor, DDCLOutput]:
        """-> (logits (n, C), layer output)."""
        pooled, out = self.pooled(tokens, segments, n)
        return self.head(pooled), out

    @torch.no_grad()
    def calibrate(self, tokens: Tensor, fraction: float,
                  generator: torch.Generator | None = None, lloyd_steps: int = 10) -> float:
        """Seed the prototypes by k-means++ and ``lloyd_steps`` k-means steps (:func:`lloyd`) on
        the projected ``tokens`` (m, dim) and set the
        temperature to ``fraction`` times their mean squared distance to their mean (so that
        the initial assignments are neither one-hot nor uniform whatever the scale); return tau.
        """
        if not fraction > 0:
            raise ValueError(f"fraction: expected a number > 0, got {fraction!r}")
        self.ddcl.init_prototypes_from(tokens.unsqueeze(1), generator=generator)
        z = self.ddcl.in_proj(tokens)
        bank = self.ddcl.prototypes
        for h in range(self.ddcl.heads):
            cols = slice(h * self.ddcl.head_dim, (h + 1) * self.ddcl.head_dim)
            bank[h].copy_(lloyd(z[:, cols], bank[h], lloyd_steps))
        spread = float(((z - z.mean(0)) ** 2).sum(-1).mean()) / self.ddcl.heads
        tau = max(fraction * spread, 1e-6)
        self.ddcl.set_temperature(tau)
        return tau


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
class TrainLog:
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


def train_classifier(model: nn.Module, forward, n_train: int, y_train: Tensor,
                     config: TrainConfig, generator: torch.Generator,
                     ddcl_beta: float = 0.0) -> tuple[list[float], list[float], list[float]]:
    """Train ``model`` with AdamW on CE (+ ``ddcl_beta`` * L_q when ``forward`` returns a layer
    output); ``forward(index) -> (logits, DDCLOutput | None)``. Returns the per-step L_q, L_OLS, V.
    """
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    hist: tuple[list[float], list[float], list[float]] = ([], [], [])
    model.train()
    for _ in range(config.epochs):
        for idx in _batches(n_train, config.batch_size, generator):
            logits, out = forward(idx)
            loss = nnf.cross_entropy(logits, y_train[idx.to(y_train.device)])
            if out is not None:
                loss = loss + ddcl_beta * out.losses.l_q
                for h, name in zip(hist, ("l_q", "l_ols", "v")):
                    h.append(float(getattr(out.losses, name).detach()))
            if not torch.isfinite(loss):
                raise FloatingPointError("train_classifier: the loss became non-finite")
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    return hist


def linear_probe(f_train: Tensor, y_train: Tensor, f_test: Tensor, y_test: Tensor, *,
                 c: float = 1.0, max_iter: int = 2000) -> TrainLog:
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
    return TrainLog(float((clf.predict(b) == yb).mean()), float((clf.predict(a) == ya).mean()))


def ddcl_probe(train: PackedTokens, y_train: Tensor, test: PackedTokens, y_test: Tensor, *,
               num_prototypes: int, config: TrainConfig, seed: int, heads: int = 1,
               head_dim: int | None = None, temperature_fraction: float = 0.1) -> TrainLog:
    """Train a :class:`DDCLPooledReadout` on frozen packed tokens; report accuracies.

    Tokens are standardised per feature with the statistics of the training tokens. The
    prototypes are seeded by k-means++ and Lloyd steps on the projected tokens of the first
    ``config.init_sequences`` training sequences, and the temperature is set from their spread
    (:meth:`DDCLPooledReadout.calibrate`). Loss: CE + ``config.beta`` * L_q.
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

    def run(data: PackedTokens, idx: Tensor):
        tokens, seg = data.batch(idx)
        return model(tokens, seg, len(idx))

    hist = train_classifier(model, lambda i: run(tr, i), len(tr), y_train, config, gen,
                            ddcl_beta=config.beta)
    test_acc = _accuracy(lambda i: run(te, i)[0].argmax(-1), len(te), y_test)
    train_acc = _accuracy(lambda i: run(tr, i)[0].argmax(-1), len(tr), y_train)
    with torch.no_grad():
        dominant = model.ddcl(te.values.unsqueeze(1)).assignments[:, :, 0].argmax(-1)  # (m, H)
    used = float(np.mean([torch.unique(dominant[:, h]).numel() / num_prototypes
                          for h in range(dominant.shape[1])]))
    return TrainLog(test_acc, train_acc, *hist, fraction_used=used)


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
                  lloyd_steps: int = 10) -> DDCLClusters:
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
    """
    gen = profile.seed_everything(seed)
    std = Standardiser.fit(data.values)
    z = std(data.values)
    fit = z if len(z) <= max_tokens else z[torch.randperm(len(z), generator=gen)[:max_tokens]]
    spread = float(((fit - fit.mean(0)) ** 2).sum(-1).mean())
    layer = DDCLAttention(z.shape[1], k, heads=1, temperature=temperature_fraction * spread,
                          residual=False, norm=False, projections=False).to(z.device)
    with torch.no_grad():
        layer.init_prototypes_from(fit.unsqueeze(0), generator=gen)
        layer.prototypes[0].copy_(lloyd(fit, layer.prototypes[0], lloyd_steps))
    opt = torch.optim.Adam([layer.prototypes], lr=lr)
    hist: tuple[list[float], list[float], list[float]] = ([], [], [])
    for _ in range(steps):
        losses = layer(fit.unsqueeze(0)).losses
        opt.zero_grad()
        losses.l_q.backward()
        opt.step()
        for h, name in zip(hist, ("l_q", "l_ols", "v")):
            h.append(float(getattr(losses, name).detach()))
    with torch.no_grad():
        q = layer(z.unsqueeze(0)).assignments[0, 0]                         # (total, K)
        seg = torch.repeat_interleave(torch.arange(len(data), device=z.device), data.lengths)
        share = segment_mean(q, seg, len(data))                              # (N, K)
        if bool((data.lengths == 1).all()):                                 # one vector each
            labels = share.argmax(-1)
        else:
            labels = (share / share.mean(0, keepdim=True).clamp_min(1e-12)).argmax(-1)
    return DDCLClusters(labels.cpu().numpy().astype(np.int64), *hist, layer=layer)


def purity(y_true, y_pred) -> float:
    """Many-to-one clustering accuracy: each cluster votes for its majority class.

    Equals the Hungarian ACC when clusters and classes are equally many and the majority classes
    differ; with more clusters than classes it can reach 1 where the Hungarian ACC cannot.
    """
    a, b = np.asarray(y_true), np.asarray(y_pred)
    if a.ndim != 1 or a.shape != b.shape or a.size == 0:
        raise ValueError(f"y_true, y_pred: expected two non-empty (N,) arrays, got {a.shape}, "
                         f"{b.shape}")
    _, ia = np.unique(a, return_inverse=True)
    _, ib = np.unique(b, return_inverse=True)
    table = np.zeros((ib.max() + 1, ia.max() + 1), dtype=np.int64)
    np.add.at(table, (ib, ia), 1)
    return float(table.max(1).sum() / a.size)
