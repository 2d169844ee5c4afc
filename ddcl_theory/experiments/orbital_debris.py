"""DDCL against k-means on a synthetic catalogue of orbital debris (claim D13).

Data: :func:`ddcl_theory.data.debris.generate` (a fresh catalogue per seed), the five
observed columns standardised (z-scores over the catalogue). Methods, each with K = 4 clusters:

* ``ddcl`` - a DDCL clustering head: a projection-free
  :class:`~ddcl_theory.layers.ddcl.DDCLAttention` bank on the standardised rows, seeded by one
  k-means++ draw, trained full batch by Adam on L_q for ``epochs`` epochs at tau = r T_c
  (T_c = 2 lambda_max of the data covariance, F's collapse temperature; for the trained L_q,
  q differentiated, it is 4 lambda_max = 2 T_c); cluster = argmax q.
  ``ddcl_sgd`` is the same head trained by plain full-batch gradient descent (a control: is a
  behaviour of the separation Adam's doing?).
* ``readout`` - DDCL as a readout: an MLP encoder, the DDCL soft quantiser of
  :mod:`ddcl_theory.layers.quantizers` (K = 4) on its output, an MLP decoder reconstructing the
  row from the soft centroid; trained full batch on reconstruction MSE + beta L_q;
  cluster = argmax q.
* ``kmeans`` - scikit-learn ``KMeans`` with 10 k-means++ restarts (its usual setting), and
  ``kmeans1`` - a single k-means++ start (the same seeding budget as the DDCL head).

Every DDCL epoch records L_q, L_OLS and V of the forward pass (V >= 0 is checked at every one),
the decomposition error |L_q - L_OLS - V| and the prototype separation (min and mean pairwise
distance, trace of the prototype covariance) after the update.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ddcl_theory.data import debris
from ddcl_theory.experiments import require_positive_ints
from ddcl_theory.experiments.laplacian_vit import num_threads
from ddcl_theory.layers.ddcl import DDCLAttention
from ddcl_theory.metrics import clustering
from ddcl_theory.metrics.prototypes import SEPARATION_KINDS, separation
from ddcl_theory.metrics.seeds import compare
from ddcl_theory.models.mlp import QuantizedMLPAutoencoder
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.progress import progress
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.training import fit
from ddcl_theory.theory.collapse import critical_temperature

__all__ = [
    "CHECKPOINT_EVERY",
    "METHODS",
    "DDCLTrace",
    "DebrisResult",
    "DebrisRun",
    "DebrisSettings",
    "decreases",
    "fit_ddcl_head",
    "fit_ddcl_readout",
    "fit_kmeans",
    "is_monotone",
    "largest_drop",
    "run",
    "standardise",
    "summary",
    "variant_parts",
]

METHODS = ("ddcl", "ddcl_sgd", "readout", "kmeans", "kmeans1")
#: Epochs between checkpoints of a DDCL training loop (paper profile).
CHECKPOINT_EVERY = 50


@dataclass(frozen=True)
class DebrisSettings:
    """Scale of the debris experiment; :meth:`from_profile` picks it from the active profile.

    Attributes:
        n_objects: catalogue size (one catalogue per seed).
        seeds: seeds of the catalogues and of the methods' initialisations.
        num_clusters: K (4 classes).
        epochs: full-batch epochs of the DDCL head and readout (500 in the claim).
        lr: Adam step of the DDCL head's prototypes.
        relative_temperature: r in tau = r T_c for the head and the readout.
        temperature_sweep: further r values for the head (robustness; the main r included).
        kmeans_restarts: k-means++ restarts of ``kmeans``.
        readout_hidden, readout_latent, readout_lr, readout_beta: the readout's MLP width, token
            size, Adam step and L_q weight.
        sigma_r, sigma_i: measurement noise of the catalogue.
        sgd_lr: step of the gradient-descent control ``ddcl_sgd``.
        reference_overlap_free: also run ``kmeans`` on catalogues drawn without the boundary
            populations (well separated classes).
        threads: torch threads during the run (None: leave as is).
    """

    n_objects: int
    seeds: tuple[int, ...]
    num_clusters: int = 4
    epochs: int = 500
    lr: float = 0.05
    relative_temperature: float = 0.1
    temperature_sweep: tuple[float, ...] = (0.03, 0.1, 0.3)
    kmeans_restarts: int = 10
    readout_hidden: int = 32
    readout_latent: int = 4
    readout_lr: float = 0.01
    readout_beta: float = 0.25
    sgd_lr: float = 0.5
    sigma_r: float = 0.01
    sigma_i: float = 0.5
    reference_overlap_free: bool = True
    threads: int | None = 1

    @classmethod
    def from_profile(cls) -> DebrisSettings:
        p = profile.current()
        return cls(n_objects=p.pick(cpu=3000, paper=20000, smoke=500),
                   seeds=p.pick(cpu=(0, 1, 2, 3, 4), paper=tuple(range(10)), smoke=(0, 1)),
                   epochs=p.pick(cpu=500, paper=500, smoke=5),
                   threads=p.pick(cpu=1, paper=None))

    def __post_init__(self) -> None:
        require_positive_ints(self, skip=(
            "seeds", "lr", "relative_temperature", "temperature_sweep", "readout_lr", "sgd_lr",
            "readout_beta", "sigma_r", "sigma_i", "reference_overlap_free", "threads"))
        if len(self.seeds) < 2:
            raise ValueError(f"seeds: expected at least two seeds (for a spread), "
                             f"got {self.seeds!r}")
        if self.relative_temperature not in self.temperature_sweep:
            raise ValueError(f"relative_temperature: expected one of temperature_sweep "
                             f"{self.temperature_sweep}, got {self.relative_temperature!r}")
        if (any(not r > 0 for r in self.temperature_sweep)
                or not (self.lr > 0 and self.readout_lr > 0)):
            raise ValueError("temperature_sweep, lr, readout_lr: expected positive values")


@dataclass
class DDCLTrace:
    """Per-epoch record of a DDCL bank during training; every list has ``epochs`` entries.

    l_q, l_ols, v: loss terms of the epoch's forward pass; identity_error: |L_q - L_OLS - V| /
    max(L_q, 1e-12); separation: {kind: values after the epoch's update} for the kinds of
    :data:`ddcl_theory.metrics.prototypes.SEPARATION_KINDS`, plus the value before training at
    ``separation_start``.
    """

    l_q: list[float]
    l_ols: list[float]
    v: list[float]
    identity_error: list[float]
    separation: dict[str, list[float]]
    separation_start: dict[str, float]

    @property
    def min_v(self) -> float:
        return float(min(self.v))

    def separation_path(self, kind: str) -> np.ndarray:
        """(epochs + 1,) the separation before training and after every epoch."""
        return np.array([self.separation_start[kind]] + self.separation[kind])


@dataclass
class DebrisRun:
    """One method on one catalogue."""

    method: str
    seed: int
    overlap: bool
    relative_temperature: float | None
    acc: float
    nmi: float
    ari: float
    fill: clustering.ClassFill
    trace: DDCLTrace | None


@dataclass
class DebrisResult:
    settings: DebrisSettings
    runs: list[DebrisRun]
    class_sizes: np.ndarray          # (4,) per catalogue (the same for every seed)

    def select(self, method: str, *, overlap: bool = True,
               r: float | None = None) -> list[DebrisRun]:
        """Runs of one method; for ``ddcl`` the relative temperature (default the main one)."""
        if method not in METHODS:
            raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
        if method == "ddcl" and r is None:
            r = self.settings.relative_temperature
        return [x for x in self.runs if x.method == method and x.overlap == overlap
                and (method != "ddcl" or x.relative_temperature == r)]


def standardise(features: np.ndarray) -> np.ndarray:
    """Column z-scores (population std; a constant column stays 0)."""
    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"features: expected shape (N, F), got {x.shape}")
    std = x.std(0)
    return (x - x.mean(0)) / np.where(std > 0, std, 1.0)


def _measure(losses, bank: torch.Tensor) -> dict:
    """One epoch's record: the loss terms of its forward pass, the decomposition error and the
    separations of the bank after the update."""
    l_q, l_ols, v = (float(t.detach()) for t in (losses.l_q, losses.l_ols, losses.v))
    return {"l_q": l_q, "l_ols": l_ols, "v": v,
            "identity_error": abs(l_q - l_ols - v) / max(l_q, 1e-12),
            "separation": {kind: float(separation(bank.detach(), kind))
                           for kind in SEPARATION_KINDS}}


def _trace(start: dict[str, float], epochs: list[dict]) -> DDCLTrace:
    """A :class:`DDCLTrace` from the separations before training and the epochs' records."""
    return DDCLTrace([e["l_q"] for e in epochs], [e["l_ols"] for e in epochs],
                     [e["v"] for e in epochs], [e["identity_error"] for e in epochs],
                     {k: [e["separation"][k] for e in epochs] for k in SEPARATION_KINDS}, start)


def _separations(bank: torch.Tensor) -> dict[str, float]:
    return {k: float(separation(bank.detach(), k)) for k in SEPARATION_KINDS}


def _fit_full_batch(model: nn.Module, opt: torch.optim.Optimizer, epochs: int, inputs,
                    loss_and_terms, bank: Callable[[], torch.Tensor], gen: torch.Generator,
                    run_dir: RunDir | None, name: str) -> list[dict]:
    """``epochs`` full-batch steps through :func:`ddcl_theory.runtime.training.fit`; the
    records of :func:`_measure` of every epoch. ``loss_and_terms(forward, inputs)`` returns the
    loss and the DDCL loss terms of the forward pass."""
    seen = {}

    def loss(forward, batch):
        value, seen["terms"] = loss_and_terms(forward, batch)
        return value

    log = fit(model, opt, rounds=epochs, batches=lambda _: (inputs,), loss=loss, device="cpu",
              run=run_dir, name=name, generators={"init": gen},
              end_of_round=lambda _: _measure(seen["terms"], bank()),
              checkpoint_every=CHECKPOINT_EVERY, desc=name, train_mode=False)
    return log.metrics


def fit_ddcl_head(x: np.ndarray, k: int, relative_temperature: float, epochs: int, lr: float,
                  seed: int, optimizer: str = "adam", run_dir: RunDir | None = None,
                  name: str = "ddcl") -> tuple[np.ndarray, DDCLTrace]:
    """DDCL clustering head on rows ``x`` (N, F): (cluster of each row (N,), trace).

    ``optimizer``: ``"adam"`` or ``"sgd"`` (plain full-batch gradient descent), step ``lr``.
    With an enabled ``run_dir`` the epochs resume from the last checkpoint saved under ``name``.
    """
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer: expected 'adam' or 'sgd', got {optimizer!r}")
    gen = profile.seed_everything(seed)
    z = torch.as_tensor(x, dtype=torch.float32)
    # trains L_q with q differentiated; T_c here is F's (2 lambda_max), not L_q's (4 lambda_max)
    tau = relative_temperature * critical_temperature(z, objective="free_energy")
    layer = DDCLAttention(z.shape[1], k, heads=1, temperature=tau, residual=False, norm=False,
                          projections=False)
    tokens = z[None]                                                   # one sequence of N rows
    layer.init_prototypes_from(tokens, generator=gen)
    opt = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)([layer.prototypes], lr=lr)
    start = _separations(layer.prototypes[0])

    def loss(forward, batch):
        losses = forward(batch).losses
        return losses.l_q, losses

    records = _fit_full_batch(layer, opt, epochs, tokens, loss, lambda: layer.prototypes[0], gen,
                              run_dir, name)
    with torch.no_grad():
        pred = layer(tokens).assignments[0, 0].argmax(-1).numpy()
    return pred, _trace(start, records)


def fit_ddcl_readout(x: np.ndarray, k: int, relative_temperature: float, epochs: int,
                     lr: float, hidden: int, latent: int, beta: float,
                     seed: int, run_dir: RunDir | None = None,
                     name: str = "readout") -> tuple[np.ndarray, DDCLTrace]:
    """DDCL as a readout: MLP encoder -> soft quantiser (K codes) -> MLP decoder, trained on
    reconstruction MSE + beta L_q; (cluster = argmax q of each row (N,), trace)."""
    gen = profile.seed_everything(seed)
    xt = torch.as_tensor(x, dtype=torch.float32)
    model = QuantizedMLPAutoencoder(xt.shape[1], k, hidden, latent, beta)
    quantizer = model.quantizer
    with torch.no_grad():
        z0 = model.encoder(xt)
        # MSE + beta L_q (q differentiated); F's T_c (2 lambda_max), not L_q's (4 lambda_max)
        quantizer.layer.set_temperature(
            relative_temperature * critical_temperature(z0, objective="free_energy"))
        quantizer.layer.init_prototypes_from(z0[None], generator=gen)
    params = [*model.encoder.parameters(), *model.decoder.parameters(), *quantizer.parameters()]
    opt = torch.optim.Adam(params, lr=lr)
    start = _separations(quantizer.codebook)

    def loss(forward, rows):
        recon, out = forward(rows)
        return ((recon - rows) ** 2).mean() + beta * out.losses.l_q, out.losses

    records = _fit_full_batch(model, opt, epochs, xt, loss, lambda: quantizer.codebook, gen,
                              run_dir, name)
    with torch.no_grad():
        pred = quantizer(model.encoder(xt)[None]).codes[0].numpy()
    return pred, _trace(start, records)


def fit_kmeans(x: np.ndarray, k: int, restarts: int, seed: int) -> np.ndarray:
    """scikit-learn KMeans (k-means++ seeding, ``restarts`` starts) -> cluster of each row."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    # one BLAS/OpenMP thread: the same result, and no oversubscription
    with threadpool_limits(limits=1):
        return KMeans(n_clusters=k, n_init=restarts, random_state=seed).fit(x).labels_


def _score(method: str, seed: int, overlap: bool, r: float | None, y: np.ndarray,
           pred: np.ndarray, k: int, trace: DDCLTrace | None) -> DebrisRun:
    c = len(debris.CLASSES)
    return DebrisRun(method, seed, overlap, r, clustering.clustering_acc(y, pred),
                     clustering.nmi(y, pred), clustering.ari(y, pred),
                     clustering.class_fill(y, pred, c, k), trace)


def _catalogue_runs(s: DebrisSettings, seed: int, overlap: bool,
                    run_dir: RunDir | None) -> tuple[list[DebrisRun], np.ndarray]:
    """Every method on the catalogue of one seed: (runs, class sizes)."""
    k = s.num_clusters
    cat = debris.generate(s.n_objects, seed, sigma_r=s.sigma_r, sigma_i=s.sigma_i,
                          overlap=overlap)
    x, y = standardise(cat.features), cat.labels
    out = [_score("kmeans", seed, overlap, None, y, fit_kmeans(x, k, s.kmeans_restarts, seed), k,
                  None)]
    if not overlap:
        return out, cat.class_sizes
    for r in s.temperature_sweep:
        pred, trace = fit_ddcl_head(x, k, r, s.epochs, s.lr, seed, run_dir=run_dir,
                                    name=f"ddcl-r{r:g}-seed{seed}")
        out.append(_score("ddcl", seed, overlap, r, y, pred, k, trace))
    pred, trace = fit_ddcl_head(x, k, s.relative_temperature, s.epochs, s.sgd_lr, seed,
                                optimizer="sgd", run_dir=run_dir, name=f"ddcl_sgd-seed{seed}")
    out.append(_score("ddcl_sgd", seed, overlap, s.relative_temperature, y, pred, k, trace))
    out.append(_score("kmeans1", seed, overlap, None, y, fit_kmeans(x, k, 1, seed), k, None))
    pred, trace = fit_ddcl_readout(x, k, s.relative_temperature, s.epochs, s.readout_lr,
                                   s.readout_hidden, s.readout_latent, s.readout_beta, seed,
                                   run_dir=run_dir, name=f"readout-seed{seed}")
    out.append(_score("readout", seed, overlap, s.relative_temperature, y, pred, k, trace))
    return out, cat.class_sizes


def run(settings: DebrisSettings | None = None) -> DebrisResult:
    """Every method on one catalogue per seed (and the overlap-free reference if asked).

    In the paper profile every finished catalogue is kept in the run directory
    (:class:`ddcl_theory.runtime.rundir.RunDir`) and an interrupted DDCL training resumes from
    its last checkpoint.
    """
    s = settings or DebrisSettings.from_profile()
    run_dir = RunDir("orbital_debris", s)
    found: list[DebrisRun] = []
    sizes = None
    with num_threads(s.threads):
        for seed in progress(s.seeds, desc="debris seeds"):
            for overlap in ((True, False) if s.reference_overlap_free else (True,)):
                unit = run_dir.unit(f"seed{seed}-overlap{int(overlap)}",
                                    lambda seed=seed, overlap=overlap:
                                    _catalogue_runs(s, seed, overlap, run_dir))
                found += unit[0]
                if overlap:
                    sizes = unit[1]
    run_dir.finish()
    return DebrisResult(s, found, np.asarray(sizes))


def summary(runs: list[DebrisRun], field: str) -> tuple[float, float]:
    """(mean, population std) of a score field over runs."""
    values = np.array([getattr(x, field) for x in runs], dtype=np.float64)
    return float(values.mean()), float(values.std())


def is_monotone(path: np.ndarray, rtol: float = 1e-6) -> bool:
    """True when ``path`` never decreases by more than ``rtol`` times its largest magnitude."""
    return decreases(path, rtol) == 0


def decreases(path: np.ndarray, rtol: float = 1e-6) -> int:
    """Number of steps at which ``path`` decreases by more than ``rtol`` times its largest
    magnitude (smaller moves are rounding, not decreases)."""
    p = np.asarray(path, dtype=np.float64)
    scale = max(float(np.abs(p).max()), 1e-12)
    return int((np.diff(p) < -rtol * scale).sum())


def largest_drop(path: np.ndarray) -> float:
    """Largest fall below the running maximum, relative to the path's largest magnitude:
    max_t (max_{s <= t} p_s - p_t) / max |p| (0 for a non-decreasing path)."""
    p = np.asarray(path, dtype=np.float64)
    scale = max(float(np.abs(p).max()), 1e-12)
    return float((np.maximum.accumulate(p) - p).max() / scale)


# ------------------------------------------------------------------------- analysis
def variant_parts(result: DebrisResult, method: str, kind: str = "min") -> dict:
    """What D13 needs of one DDCL variant (``"ddcl"`` head or ``"readout"``) against k-means
    (10 restarts), on the catalogues with overlap.

    Keys: acc / nmi / ari ((mean, std) over seeds), compare (+1 / 0 / -1: above, within, below
    k-means by more than the hypot of the spreads), monotone (per seed: separation ``kind`` never
    decreases), decreases (per seed: epochs at which it decreased, :func:`decreases`),
    largest_drop (per seed, :func:`largest_drop`), ratio (per seed: final / initial
    separation), min_v, leo_clusters (mean number of clusters whose majority is
    LEO), empty (class-slots left empty over all seeds), fills (no empty class in any seed and
    LEO the majority of at most one cluster on average).
    """
    runs, km = result.select(method), result.select("kmeans")
    acc = {"v": summary(runs, "acc"), "kmeans": summary(km, "acc")}
    leo = debris.CLASSES.index("LEO")
    paths = [x.trace.separation_path(kind) for x in runs]
    leo_clusters = float(np.mean([x.fill.majority_clusters[leo] for x in runs]))
    empty = int(sum(x.fill.empty_classes for x in runs))
    return {"acc": acc["v"], "nmi": summary(runs, "nmi"), "ari": summary(runs, "ari"),
            "compare": compare(acc, "v", "kmeans"),
            "monotone": [is_monotone(p) for p in paths],
            "decreases": [decreases(p) for p in paths],
            "largest_drop": [largest_drop(p) for p in paths],
            "ratio": [float(p[-1] / p[0]) if p[0] > 0 else float("inf") for p in paths],
            "min_v": min(x.trace.min_v for x in runs),
            "leo_clusters": leo_clusters, "empty": empty,
            "fills": empty == 0 and leo_clusters <= 1.0}
