"""Training and probing readouts of frozen tokens: the DDCL readout with a linear head, linear
probes, k-means and DDCL clusterings (the text chapter's methods, claim D14).

Supervised: on [CLS] and on the mean, a logistic-regression probe solved to convergence
(:func:`linear_probe`, deterministic); the DDCL readout
(:class:`~ddcl_theory.layers.readouts.DDCLPooledReadout`) and its linear head are trained
together by :func:`train_classifier` (AdamW, mini-batches, a fixed number of epochs, on
:func:`ddcl_theory.runtime.training.fit`; seeds vary the initialisation and the batch order).
The evidence of record (claim D14) uses the tuned forms, scored the same way: every
configuration of either arm is fitted on the fit rows of the same validation folds of the
training split (:func:`tuning_folds`) and scored by its validation accuracy, ties broken by its
validation cross-entropy (:class:`Score`, :func:`best`). The probes: :func:`probe_scores` (an
L2 logistic regression per value of C) and :func:`probe_fit` (one C, with per-item test
correctness). The DDCL readout: :func:`ddcl_readout_fit` (trained to its validation plateau,
configured by one :class:`DDCLReadoutConfig`: its number of epochs is chosen on a validation
split held out of the training split, its temperature is a stated fraction of the critical
temperature of the loss it trains; the test set, when given, is scored once, by the readout of
the best validation epoch).
Unsupervised: k-means (:func:`kmeans_clusters`, scikit-learn, k-means++ seeding) on a readout,
and DDCL clustering (:func:`ddcl_clusters`: a projection-free DDCL layer fitted by minimising
L_q, each sequence given to its dominant prototype). Clusterings are scored with
:func:`ddcl_theory.metrics.clustering.purity` beside the Hungarian ACC.
"""
from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Sequence
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
from ddcl_theory.metrics.convergence import Convergence, convergence
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.training import fit
from ddcl_theory.theory.collapse import critical_temperature

__all__ = ["TrainConfig", "ProbeLog", "train_classifier", "linear_probe", "ddcl_probe",
           "kmeans_clusters", "DDCLClusters", "ddcl_clusters", "Score", "best", "tuning_folds",
           "probe_scores", "ProbeFit", "probe_fit", "DDCLReadoutConfig", "ReadoutRun",
           "validation_split", "ddcl_readout_fit"]


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
        c: the inverse regularisation the probe used, when one was set.
    """

    test_acc: float
    train_acc: float
    l_q: list[float] = field(default_factory=list)
    l_ols: list[float] = field(default_factory=list)
    v: list[float] = field(default_factory=list)
    fraction_used: float | None = None
    c: float | None = None


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


# ------------------------------------------------------------------------ tuned readouts (D14)
@dataclass(frozen=True)
class Score:
    """How one configuration did on held-out rows: accuracy and mean cross-entropy, one value per
    validation fold (the tuning folds), and their means.

    Configurations are ranked by :meth:`key`: the higher mean accuracy first, ties broken by the
    lower mean cross-entropy (the same order for every readout)."""

    acc: tuple[float, ...]
    loss: tuple[float, ...]

    @property
    def mean_acc(self) -> float:
        return float(np.mean(self.acc))

    @property
    def mean_loss(self) -> float:
        return float(np.mean(self.loss))

    def key(self) -> tuple[float, float]:
        """Sort key: smaller is better (-accuracy, cross-entropy)."""
        return (-self.mean_acc, self.mean_loss)


def best(scores: Sequence[Score]) -> int:
    """Index of the best :class:`Score` (:meth:`Score.key`; the first of exact ties)."""
    if not scores:
        raise ValueError("scores: expected at least one score")
    return min(range(len(scores)), key=lambda i: scores[i].key())


def tuning_folds(y: np.ndarray, fraction: float, folds: int,
                 seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The first ``folds`` folds of a stratified k-fold partition of the labels ``y`` with
    k = round(1 / ``fraction``), shuffled by ``seed``: ``[(fit rows, validation rows), ...]``,
    sorted; the validation rows of different folds are disjoint. Every readout is tuned on
    these same folds. Draws too small for k folds of every class (the paper profile's smoke
    test) get :func:`validation_split` with seeds ``seed, seed + 1, ...`` instead."""
    from sklearn.model_selection import StratifiedKFold

    y = np.asarray(y)
    k = round(1 / fraction) if 0 < fraction < 1 else 0
    if k < 2:
        raise ValueError(f"fraction: expected a share in (0, 0.5], got {fraction!r}")
    if isinstance(folds, bool) or not isinstance(folds, int) or not 1 <= folds <= k:
        raise ValueError(f"folds: expected an int in [1, {k}], got {folds!r}")
    if y.ndim != 1 or y.size == 0:
        raise ValueError(f"y: expected (N,) labels, got shape {y.shape}")
    if int(np.bincount(y)[np.unique(y)].min()) < k:
        return [validation_split(y, fraction, seed + i) for i in range(folds)]
    split = StratifiedKFold(k, shuffle=True, random_state=seed).split(np.zeros(len(y)), y)
    return [(np.sort(a), np.sort(b)) for a, b in list(split)[:folds]]


def _standardised(f_fit: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    std = Standardiser.fit(torch.from_numpy(np.asarray(f_fit, dtype=np.float32)))
    return [std(torch.from_numpy(np.asarray(f, dtype=np.float32))).double().numpy()
            for f in (f_fit, *others)]


def _logistic(c: float, max_iter: int, warm_start: bool = False):
    from sklearn.linear_model import LogisticRegression
    return LogisticRegression(C=c, max_iter=max_iter, warm_start=warm_start)


def _cross_entropy(clf, x: np.ndarray, y: np.ndarray) -> float:
    proba = clf.predict_proba(x)
    cols = np.searchsorted(clf.classes_, y)
    return float(-np.mean(np.log(np.clip(proba[np.arange(len(y)), cols], 1e-12, None))))


def probe_scores(features: np.ndarray, y: np.ndarray,
                 folds: Sequence[tuple[np.ndarray, np.ndarray]], cs: Sequence[float], *,
                 max_iter: int = 5000) -> list[Score]:
    """One :class:`Score` per inverse regularisation in ``cs``: an L2 logistic regression
    (scikit-learn, lbfgs) fitted on each fold's fit rows of ``features`` (N, d), standardised
    with those rows' statistics, and scored on the fold's validation rows. The values of C are
    fitted in increasing order, each from the previous solution (a warm start: the same
    optimum, fewer iterations)."""
    features, y = np.asarray(features), np.asarray(y)
    if features.ndim != 2 or len(features) != len(y):
        raise ValueError(f"features: expected (N, d) with N = {len(y)} labels, got "
                         f"{features.shape}")
    if not cs or any(not c > 0 for c in cs):
        raise ValueError(f"cs: expected positive inverse regularisations, got {cs!r}")
    acc: list[list[float]] = [[] for _ in cs]
    loss: list[list[float]] = [[] for _ in cs]
    for fit_rows, val_rows in folds:
        a, b = _standardised(features[fit_rows], features[val_rows])
        clf = _logistic(min(cs), max_iter, warm_start=True)
        for i in np.argsort(cs, kind="stable"):
            clf.set_params(C=cs[i])
            with warnings.catch_warnings():      # a large C on separable rows may stop at
                warnings.simplefilter("ignore")  # max_iter; its score still counts
                clf.fit(a, y[fit_rows])
            acc[i].append(float((clf.predict(b) == y[val_rows]).mean()))
            loss[i].append(_cross_entropy(clf, b, y[val_rows]))
    return [Score(tuple(a), tuple(l)) for a, l in zip(acc, loss)]


@dataclass
class ProbeFit:
    """A logistic-regression probe fitted at one C (:func:`probe_fit`).

    Attributes:
        c: the inverse regularisation; converged: lbfgs met its tolerance before ``max_iter``.
        val: its :class:`Score` on the validation rows (one fold).
        train_acc: accuracy on the fit rows.
        test_correct: (n_test,) 1 where the probe's test prediction is right, else 0.
    """

    c: float
    converged: bool
    val: Score
    train_acc: float
    test_correct: np.ndarray

    @property
    def test_acc(self) -> float:
        return float(self.test_correct.mean())


def probe_fit(features: np.ndarray, y: np.ndarray, fit_rows: np.ndarray, val_rows: np.ndarray,
              test_features: np.ndarray, test_y: np.ndarray, c: float, *,
              max_iter: int = 5000) -> ProbeFit:
    """An L2 logistic regression at ``c`` fitted on ``features[fit_rows]`` (standardised with
    their statistics), scored on ``val_rows`` and on the test set."""
    from sklearn.exceptions import ConvergenceWarning

    features, y = np.asarray(features), np.asarray(y)
    a, b, t = _standardised(features[fit_rows], features[val_rows], test_features)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        clf = _logistic(c, max_iter).fit(a, y[fit_rows])
    converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
    val = Score((float((clf.predict(b) == y[val_rows]).mean()),),
                (_cross_entropy(clf, b, y[val_rows]),))
    return ProbeFit(float(c), converged, val, float((clf.predict(a) == y[fit_rows]).mean()),
                    (clf.predict(t) == np.asarray(test_y)).astype(np.int8))


@dataclass(frozen=True)
class DDCLReadoutConfig:
    """One DDCL readout, trained to its validation plateau (the configuration of claims D14 and
    D17; the text chapter names it :data:`ddcl_theory.experiments.text_readout.DDCL_READOUT`).

    Attributes:
        name: the configuration's name, printed on the pages that use it.
        heads, head_dim: of the :class:`DDCLPooledReadout` (K prototypes per head; K is the
            caller's: the number of classes in the text chapter).
        relative_temperature: tau = ``relative_temperature`` * T_c, T_c the critical temperature
            of ``objective`` (:func:`ddcl_theory.theory.collapse.critical_temperature`) on the
            projected tokens that seed the prototypes, fixed for the run.
        objective: the loss the readout trains beside the cross-entropy and whose T_c sets tau:
            "quantisation" (L_q with q differentiated, what the layer's ``l_q`` is).
        beta: weight of L_q in the loss CE + beta * L_q.
        lr, weight_decay, batch_size: AdamW on mini-batches of sequences.
        max_epochs: cap on the epochs; min_epochs: no stop before.
        plateau_rel, plateau_window: the plateau rule on the validation loss
            (:func:`ddcl_theory.metrics.convergence.convergence`).
        patience: stop also when the validation loss has not improved for this many epochs
            (the run has passed its validation optimum).
        validation_fraction: share of the training split held out (stratified) to choose the
            epoch and stop; the readout trains on the rest.
        init_sequences, lloyd_steps: k-means++ then Lloyd steps on the projected tokens of the
            first ``init_sequences`` training sequences seed the prototypes.
    """

    name: str = "DDCL readout v2"
    heads: int = 1
    head_dim: int = 32
    relative_temperature: float = 0.25
    objective: str = "quantisation"
    beta: float = 0.01
    lr: float = 3e-3
    weight_decay: float = 1e-4
    batch_size: int = 64
    max_epochs: int = 40
    min_epochs: int = 6
    plateau_rel: float = 0.01
    plateau_window: int = 3
    patience: int = 5
    validation_fraction: float = 0.2
    init_sequences: int = 256
    lloyd_steps: int = 10

    def __post_init__(self) -> None:
        for name in ("heads", "head_dim", "batch_size", "max_epochs", "min_epochs",
                     "plateau_window", "patience", "init_sequences"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {v!r}")
        if self.min_epochs > self.max_epochs:
            raise ValueError(f"min_epochs: expected <= max_epochs={self.max_epochs}, got "
                             f"{self.min_epochs}")
        for name in ("relative_temperature", "lr", "plateau_rel"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: expected a number > 0, got {getattr(self, name)!r}")
        for name in ("beta", "weight_decay"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name}: expected a number >= 0, got {getattr(self, name)!r}")
        if not 0 < self.validation_fraction < 1:
            raise ValueError(f"validation_fraction: expected a number in (0, 1), got "
                             f"{self.validation_fraction!r}")
        if self.objective not in ("quantisation", "free_energy"):
            raise ValueError(f"objective: expected 'quantisation' or 'free_energy', got "
                             f"{self.objective!r}")

    def describe(self) -> str:
        """The configuration in one sentence (for the pages)."""
        heads = f"{self.heads} head" + ("s" if self.heads > 1 else "")
        return (f"{self.name}: {heads} of width {self.head_dim}, K prototypes seeded "
                f"by k-means++ and {self.lloyd_steps} Lloyd steps, tau = "
                f"{self.relative_temperature:g} T_c of L_q ({self.objective}, fixed), loss CE + "
                f"{self.beta:g} L_q, AdamW lr {self.lr:g}, weight decay {self.weight_decay:g}, "
                f"batches of {self.batch_size}; epochs chosen on a "
                f"{self.validation_fraction:.0%} validation split: at most {self.max_epochs}, "
                f"stop after {self.min_epochs} or more when the validation loss plateaus "
                f"(change <= {self.plateau_rel:.0%} over windows of {self.plateau_window}) or "
                f"has not improved for {self.patience}; the epoch of least validation loss is "
                f"the one reported")


@dataclass
class ReadoutRun:
    """One DDCL readout trained by :func:`ddcl_readout_fit`.

    Attributes:
        train_loss: mean training loss (CE + beta L_q) per epoch; val_loss: validation CE per
            epoch (the curve of the stop rule); val_acc: validation accuracy per epoch.
        best_epoch: 1-based epoch of least validation loss (the reported model); epochs: run.
        stopped: "plateau", "passed optimum" or "max epochs".
        convergence: the plateau test of ``val_loss`` by the configuration's rule.
        tau, t_c: the temperature and the critical temperature it is a fraction of (on the
            projected seed tokens at the start); t_c_end: the same critical temperature on
            the same tokens projected by the reported readout (tau / t_c_end < 1: still below
            it at the end).
        l_q, l_ols, v: the layer's loss terms per training step.
        fraction_used: share of the prototypes that are some evaluated token's dominant one
            (test tokens, else validation tokens), mean over heads.
        train_acc: accuracy of the reported readout on the rows it trained on.
        test_correct: (n_test,) 1 where the reported readout's test prediction is right, else
            0; None when no test set was given (a tuning run). The test set is scored once, by
            the reported readout.
    """

    train_loss: list[float]
    val_loss: list[float]
    val_acc: list[float]
    best_epoch: int
    epochs: int
    stopped: str
    convergence: Convergence
    tau: float
    t_c: float
    t_c_end: float
    l_q: list[float]
    l_ols: list[float]
    v: list[float]
    fraction_used: float
    train_acc: float
    test_correct: np.ndarray | None = None

    @property
    def finished(self) -> bool:
        """The run reached its validation plateau or passed its validation optimum."""
        return self.stopped != "max epochs"

    @property
    def val(self) -> Score:
        """Validation accuracy and cross-entropy of the reported readout (its best epoch)."""
        return Score((self.val_acc[self.best_epoch - 1],), (self.val_loss[self.best_epoch - 1],))

    @property
    def selected_test_acc(self) -> float:
        """Test accuracy of the reported readout (the epoch of least validation loss)."""
        if self.test_correct is None:
            raise ValueError("test_correct: this run was given no test set")
        return float(np.mean(self.test_correct))


def validation_split(y: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, validation rows), sorted: a stratified random split of the labels ``y``
    (scikit-learn's ``train_test_split`` with ``random_state=seed``)."""
    from sklearn.model_selection import train_test_split

    y = np.asarray(y)
    rows = np.arange(len(y))
    n_classes = len(np.unique(y))
    test_size: float | int = fraction
    if math.ceil(fraction * len(y)) < n_classes:     # tiny draws (the paper smoke test): one
        test_size = n_classes                         # validation row per class at least
    if len(y) - math.ceil(test_size if isinstance(test_size, int) else fraction * len(y)) \
            < n_classes:
        raise ValueError(f"y: {len(y)} rows cannot hold {n_classes} classes on both sides of "
                         f"a stratified validation split")
    a, b = train_test_split(rows, test_size=test_size, random_state=seed, stratify=y)
    return np.sort(a), np.sort(b)


def _stop_reason(val_loss: list[float], config: DDCLReadoutConfig) -> str | None:
    epoch = len(val_loss)
    if epoch < config.min_epochs:
        return None
    if convergence(val_loss, rel=config.plateau_rel, window=config.plateau_window).plateau:
        return "plateau"
    if epoch - 1 - int(np.argmin(val_loss)) >= config.patience:
        return "passed optimum"
    return None


def ddcl_readout_fit(train: PackedTokens, y_train: Tensor, val: PackedTokens, y_val: Tensor,
                     test: PackedTokens | None = None, y_test: Tensor | None = None, *,
                     num_prototypes: int, config: DDCLReadoutConfig, seed: int,
                     num_classes: int | None = None) -> ReadoutRun:
    """Train a :class:`DDCLPooledReadout` with ``config`` and ``num_prototypes`` (K per head)
    on frozen packed tokens until its validation loss plateaus or passes its optimum (at most
    ``config.max_epochs``); the readout of the epoch of least validation loss is the one
    reported.

    Tokens are standardised with the training tokens' statistics. The prototypes are seeded by
    :meth:`DDCLPooledReadout.calibrate` (k-means++ and Lloyd steps on the projected tokens of the
    first ``config.init_sequences`` training sequences); then tau = relative_temperature *
    ``critical_temperature(projected seed tokens, objective=config.objective)`` (the mean over
    heads). After each epoch the validation CE and accuracy are recorded and the state of the
    best epoch kept; the test set (optional: tuning runs have none) is scored once, by that
    state. ``num_classes`` defaults to the largest label + 1. The loop keeps no checkpoints (the
    stop rule reads the whole validation curve; a run takes seconds): a caller that needs
    resumption keeps whole runs as units of its run directory.
    """
    if len(train) != len(y_train) or len(val) != len(y_val):
        raise ValueError("y_train, y_val: expected one label per sequence")
    if (test is None) != (y_test is None) or (test is not None and len(test) != len(y_test)):
        raise ValueError("test, y_test: expected both (one label per sequence) or neither")
    gen = profile.seed_everything(seed)
    std = Standardiser.fit(train.values)
    tr, va = train.standardised(std), val.standardised(std)
    te = test.standardised(std) if test is not None else None
    labels = [y_train, y_val] + ([y_test] if y_test is not None else [])
    classes = num_classes or int(max(int(y.max()) for y in labels)) + 1
    device = tr.values.device
    model = DDCLPooledReadout(tr.values.shape[1], classes, num_prototypes, heads=config.heads,
                              head_dim=config.head_dim).to(device)
    seed_tokens, _ = tr.batch(torch.arange(min(config.init_sequences, len(tr))))

    def head_tc() -> float:
        z = model.ddcl.in_proj(seed_tokens).double()
        return float(np.mean([critical_temperature(
            z[:, h * config.head_dim:(h + 1) * config.head_dim], objective=config.objective)
            for h in range(config.heads)]))

    with torch.no_grad():
        model.calibrate(seed_tokens, 0.1, generator=gen, lloyd_steps=config.lloyd_steps)
        t_c = head_tc()
        tau = config.relative_temperature * t_c
        model.ddcl.temperature.set(tau)

    def inputs(data: PackedTokens, idx: Tensor) -> tuple[Tensor, Tensor, int]:
        tokens, seg = data.batch(idx)
        return tokens, seg, len(idx)

    def predict(data: PackedTokens, y: Tensor, batch: int = 256) -> tuple[float, Tensor]:
        """(mean CE, (n,) correctness) of the model on ``data``."""
        loss, right = 0.0, []
        with torch.no_grad():
            for i in range(0, len(data), batch):
                idx = torch.arange(i, min(len(data), i + batch))
                logits = model(*inputs(data, idx))[0]
                yy = y[idx.to(y.device)]
                loss += float(nnf.cross_entropy(logits, yy, reduction="sum"))
                right.append(logits.argmax(-1) == yy)
        return loss / len(data), torch.cat(right)

    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    terms: dict[str, list[float]] = {t: [] for t in _TERMS}
    val_curve: list[float] = []
    best_state: dict[str, Tensor] = {}

    def batches(_epoch: int) -> list[Tensor]:
        for values in terms.values():
            values.clear()
        return _batches(len(tr), config.batch_size, gen)

    def loss(forward, idx: Tensor) -> Tensor:
        logits, out = forward(*inputs(tr, idx))
        value = nnf.cross_entropy(logits, y_train[idx.to(y_train.device)]) \
            + config.beta * out.losses.l_q
        for t in _TERMS:
            terms[t].append(float(getattr(out.losses, t).detach()))
        if not torch.isfinite(value):
            raise FloatingPointError("ddcl_readout_fit: the loss became non-finite")
        return value

    def end_of_round(_epoch: int) -> dict:
        model.eval()
        vl, right = predict(va, y_val)
        model.train()
        if not val_curve or vl < min(val_curve):
            best_state.update(copy.deepcopy(model.state_dict()))
        val_curve.append(vl)
        return {"val_loss": vl, "val_acc": float(right.float().mean()),
                **{t: list(v) for t, v in terms.items()}}

    def stop_if(_metrics: dict) -> bool:
        return _stop_reason(val_curve, config) is not None

    log = fit(model, opt, rounds=config.max_epochs, batches=batches, loss=loss, device=device,
              generators={"batches": gen}, end_of_round=end_of_round,
              stop_if=stop_if, desc="DDCL readout epochs")
    metrics = log.metrics
    val_loss = [float(m["val_loss"]) for m in metrics]
    reason = _stop_reason(val_loss, config) or "max epochs"
    train_loss = [float(np.mean(x)) for x in log.losses] if log.losses else []
    model.load_state_dict(best_state)
    model.eval()
    _, train_right = predict(tr, y_train)
    test_correct = None
    if te is not None:
        test_correct = predict(te, y_test)[1].cpu().numpy().astype(np.int8)
    with torch.no_grad():
        shown = te if te is not None else va
        dominant = model.ddcl(shown.values.unsqueeze(1)).assignments[:, :, 0].argmax(-1)
        t_c_end = head_tc()
    used = float(np.mean([torch.unique(dominant[:, h]).numel() / num_prototypes
                          for h in range(dominant.shape[1])]))
    return ReadoutRun(
        train_loss, val_loss, [float(m["val_acc"]) for m in metrics],
        int(np.argmin(val_loss)) + 1, len(metrics), reason,
        convergence(val_loss, rel=config.plateau_rel, window=config.plateau_window),
        float(tau), t_c, t_c_end, *([x for m in metrics for x in m[t]] for t in _TERMS),
        fraction_used=used, train_acc=float(train_right.float().mean()),
        test_correct=test_correct)
