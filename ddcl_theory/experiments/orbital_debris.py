"""DDCL against k-means on a synthetic catalogue of orbital debris (claim D13).

Data: :func:`ddcl_theory.data.debris.generate` (a fresh catalogue per seed), the five
observed columns standardised (z-scores over the catalogue). Methods, each with K = 4 clusters:

* ``ddcl`` - a DDCL clustering head: a projection-free
  :class:`~ddcl_theory.layers.ddcl.DDCLAttention` bank on the standardised rows, seeded by one
  k-means++ draw (one start: :data:`DDCL_STARTS`), trained full batch by Adam on L_q (q
  differentiated) for ``epochs`` epochs at tau = r T_c, with T_c the collapse temperature of
  the loss trained: ``critical_temperature(z, objective="quantisation")`` = 4 lambda_max of
  the data covariance; cluster = argmax q, read after every epoch of :func:`checkpoint_epochs`
  (the step scales of the trend) and at the end.
  ``ddcl_sgd`` is the same head trained by plain full-batch gradient descent (a control: is a
  behaviour of the separation Adam's doing?).
* ``readout`` - DDCL as a readout: an MLP encoder, the DDCL soft quantiser of
  :mod:`ddcl_theory.layers.quantizers` (K = 4) on its output, an MLP decoder reconstructing the
  row from the soft centroid; trained full batch on reconstruction MSE + beta L_q (q
  differentiated, so tau = r times L_q's T_c of the initial encoder output); cluster = argmax q.
* ``kmeans1`` - scikit-learn ``KMeans`` with ``n_init`` = :data:`DDCL_STARTS` (one k-means++
  start: the DDCL head's budget; the peer of the deciding comparison), and ``kmeans`` - with
  ``kmeans_restarts`` (10) starts, shown beside.
* ``gmm`` - scikit-learn ``GaussianMixture``, k-means initialisation, ``n_init`` =
  :data:`DDCL_STARTS`, covariance type chosen by BIC among ``gmm_covariances`` (shown beside).

Every DDCL epoch records the training loss (the loss the optimiser minimised), L_q, L_OLS and V
of the forward pass (V >= 0 is checked at every one), the decomposition error
|L_q - L_OLS - V| and the prototype separation (min and mean pairwise distance, trace of the
prototype covariance) after the update. A run's plateau is
``metrics.convergence.convergence(loss, rel=PLATEAU_REL, window=epochs // 10)``.

Scales: the catalogue of ``n_objects`` (the largest) carries every method; the smaller catalogues
of ``trend_objects`` carry the deciding pair (head at the main r, ``kmeans1``) and the peers
shown beside. Seed s draws the same catalogue for every method at a size (paired).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ddcl_theory.data import debris
from ddcl_theory.layers.ddcl import DDCLAttention
from ddcl_theory.metrics import clustering
from ddcl_theory.metrics.convergence import Convergence, convergence
from ddcl_theory.metrics.prototypes import SEPARATION_KINDS, separation
from ddcl_theory.models.mlp import QuantizedMLPAutoencoder
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.progress import progress
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, setting
from ddcl_theory.runtime.threads import num_threads
from ddcl_theory.runtime.training import fit
from ddcl_theory.theory.collapse import critical_temperature

__all__ = [
    "CHECKPOINT_EVERY",
    "DDCL_STARTS",
    "GMM_COVARIANCES",
    "METHODS",
    "PLATEAU_REL",
    "DDCLTrace",
    "DebrisResult",
    "DebrisRun",
    "DebrisSettings",
    "decreases",
    "checkpoint_epochs",
    "fit_ddcl_head",
    "fit_ddcl_readout",
    "fit_gmm",
    "fit_kmeans",
    "is_monotone",
    "largest_drop",
    "run",
    "standardise",
    "summary",
    "variant_parts",
]

METHODS = ("ddcl", "ddcl_sgd", "readout", "kmeans", "kmeans1", "gmm")
#: Epochs between checkpoints of a DDCL training loop (paper profile).
CHECKPOINT_EVERY = 50
#: Starts of the DDCL head (one k-means++ draw of its prototypes): the budget of its peers.
DDCL_STARTS = 1
#: Covariance types among which BIC chooses the Gaussian mixture's.
GMM_COVARIANCES = ("full", "tied", "diag", "spherical")
#: Plateau rule of a DDCL run: the mean training loss of the last tenth of the epochs within
#: this fraction of the tenth before (metrics.convergence with window = epochs // 10).
PLATEAU_REL = 0.01


@dataclass(frozen=True)
class DebrisSettings(Settings):
    """Scale of the debris experiment: cpu five catalogues of 3000 objects (the step scales of
    the trend: the head's epoch checkpoints); reference ten seeds (the D13 rule) at 1000, 3000
    and 10000 objects; paper ten seeds at 2000, 5000 and 20000 objects (paper smoke test: two
    catalogues of 500 objects, 5 epochs).

    Attributes:
        n_objects: catalogue size (one catalogue per seed and size); the largest scale.
        trend_objects: smaller catalogue sizes for the scale trend (each < ``n_objects``).
        seeds: seeds of the catalogues and of the methods' initialisations.
        num_clusters: K (4 classes).
        epochs: full-batch epochs of the DDCL head and readout (500 in the claim).
        lr: Adam step of the DDCL head's prototypes.
        relative_temperature: r in tau = r T_c for the head and the readout.
        temperature_sweep: further r values for the head (robustness; the main r included).
        kmeans_restarts: k-means++ restarts of ``kmeans`` (beside; ``kmeans1`` has
            :data:`DDCL_STARTS`).
        gmm_covariances: covariance types among which BIC picks the Gaussian mixture's.
        readout_hidden, readout_latent, readout_lr, readout_beta: the readout's MLP width, token
            size, Adam step and L_q weight.
        sigma_r, sigma_i: measurement noise of the catalogue.
        sgd_lr: step of the gradient-descent control ``ddcl_sgd``.
        reference_overlap_free: also run ``kmeans`` on catalogues drawn without the boundary
            populations (well separated classes).
        threads: torch threads during the run (None: leave as is).
    """

    n_objects: int = setting(3000, reference=10000, paper=20000, smoke=500, ge=1)
    seeds: tuple[int, ...] = setting((0, 1, 2, 3, 4), reference=tuple(range(10)),
                                     paper=tuple(range(10)), smoke=(0, 1), ge=0)
    trend_objects: tuple[int, ...] = setting((), reference=(1000, 3000), paper=(2000, 5000),
                                             smoke=(), ge=4)
    num_clusters: int = setting(4, ge=1)
    epochs: int = setting(500, smoke=5, ge=1)
    lr: float = setting(0.05, gt=0)
    relative_temperature: float = setting(0.1, gt=0)
    temperature_sweep: tuple[float, ...] = setting((0.03, 0.1, 0.3), gt=0, nonempty=True)
    kmeans_restarts: int = setting(10, ge=1)
    gmm_covariances: tuple[str, ...] = setting(GMM_COVARIANCES, choices=GMM_COVARIANCES,
                                               nonempty=True)
    readout_hidden: int = setting(32, ge=1)
    readout_latent: int = setting(4, ge=1)
    readout_lr: float = setting(0.01, gt=0)
    readout_beta: float = setting(0.25, ge=0)
    sgd_lr: float = setting(0.5, gt=0)
    sigma_r: float = setting(0.01, ge=0)
    sigma_i: float = setting(0.5, ge=0)
    reference_overlap_free: bool = setting(True)
    threads: int | None = setting(1, paper=None, ge=1)

    def check(self) -> None:
        if len(self.seeds) < 2:
            raise ValueError(f"DebrisSettings.seeds: expected at least two seeds (for a "
                             f"spread), got {self.seeds!r}")
        if self.relative_temperature not in self.temperature_sweep:
            raise ValueError(f"DebrisSettings.relative_temperature: expected one of "
                             f"temperature_sweep {self.temperature_sweep}, got "
                             f"{self.relative_temperature!r}")
        if (list(self.trend_objects) != sorted(set(self.trend_objects))
                or any(n >= self.n_objects for n in self.trend_objects)):
            raise ValueError(f"DebrisSettings.trend_objects: expected increasing sizes >= 4 "
                             f"below n_objects {self.n_objects}, got {self.trend_objects!r}")

    @property
    def object_scales(self) -> tuple[int, ...]:
        """Every catalogue size, increasing (the last is ``n_objects``)."""
        return (*self.trend_objects, self.n_objects)


@dataclass
class DDCLTrace:
    """Per-epoch record of a DDCL bank during training; every list has ``epochs`` entries.

    loss: the training loss of the epoch (what the optimiser minimised: L_q for the head, MSE +
    beta L_q for the readout); l_q, l_ols, v: loss terms of the epoch's forward pass;
    identity_error: |L_q - L_OLS - V| / max(L_q, 1e-12); separation: {kind: values after the
    epoch's update} for the kinds of :data:`ddcl_theory.metrics.prototypes.SEPARATION_KINDS`,
    plus the value before training at ``separation_start``; assignments_at: {epoch: cluster of
    each row after that epoch's update} at the epochs asked for.
    """

    loss: list[float]
    l_q: list[float]
    l_ols: list[float]
    v: list[float]
    identity_error: list[float]
    separation: dict[str, list[float]]
    separation_start: dict[str, float]
    assignments_at: dict[int, tuple[int, ...]]

    @property
    def min_v(self) -> float:
        return float(min(self.v))

    @property
    def convergence(self) -> Convergence:
        """The plateau test of the training loss: window = a tenth of the epochs, change
        within :data:`PLATEAU_REL`."""
        return convergence(self.loss, rel=PLATEAU_REL, window=max(1, len(self.loss) // 10))

    def separation_path(self, kind: str) -> np.ndarray:
        """(epochs + 1,) the separation before training and after every epoch."""
        return np.array([self.separation_start[kind]] + self.separation[kind])


@dataclass
class DebrisRun:
    """One method on one catalogue of ``n_objects`` objects; ``acc_at``: {epoch: ACC after it}
    for the head's checkpoint epochs (empty for the other methods); ``config``: the peer's
    configuration as fitted (e.g. the mixture's covariance type chosen by BIC)."""

    method: str
    seed: int
    n_objects: int
    overlap: bool
    relative_temperature: float | None
    acc: float
    nmi: float
    ari: float
    fill: clustering.ClassFill
    trace: DDCLTrace | None
    acc_at: dict[int, float]
    config: str = ""


@dataclass
class DebrisResult:
    settings: DebrisSettings
    runs: list[DebrisRun]
    class_sizes: np.ndarray          # (4,) per catalogue (the same for every seed)

    def select(self, method: str, *, overlap: bool = True, r: float | None = None,
               n: int | None = None) -> list[DebrisRun]:
        """Runs of one method in seed order, on the catalogues of ``n`` objects (default the
        largest); for ``ddcl`` the relative temperature (default the main one)."""
        if method not in METHODS:
            raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
        if method == "ddcl" and r is None:
            r = self.settings.relative_temperature
        n = self.settings.n_objects if n is None else n
        return sorted((x for x in self.runs if x.method == method and x.overlap == overlap
                       and x.n_objects == n
                       and (method != "ddcl" or x.relative_temperature == r)),
                      key=lambda x: x.seed)


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


def _trace(start: dict[str, float], epochs: list[dict], loss: list[float]) -> DDCLTrace:
    """A :class:`DDCLTrace` from the separations before training, the epochs' records and the
    training loss of every epoch."""
    return DDCLTrace(list(loss), [e["l_q"] for e in epochs], [e["l_ols"] for e in epochs],
                     [e["v"] for e in epochs], [e["identity_error"] for e in epochs],
                     {k: [e["separation"][k] for e in epochs] for k in SEPARATION_KINDS}, start,
                     {i + 1: tuple(e["assignments"]) for i, e in enumerate(epochs)
                      if e.get("assignments") is not None})


def checkpoint_epochs(epochs: int) -> tuple[int, ...]:
    """Epochs after which the head's clusters are read (the step scales of the trend): a
    twenty-fifth, a fifth and all of ``epochs`` (20, 100, 500 for 500), increasing, distinct."""
    if not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs: expected an int >= 1, got {epochs!r}")
    return tuple(sorted({max(1, epochs // 25), max(1, epochs // 5), epochs}))


def _separations(bank: torch.Tensor) -> dict[str, float]:
    return {k: float(separation(bank.detach(), k)) for k in SEPARATION_KINDS}


def _fit_full_batch(model: nn.Module, opt: torch.optim.Optimizer, epochs: int, inputs,
                    loss_and_terms, bank: Callable[[], torch.Tensor], gen: torch.Generator,
                    run_dir: RunDir | None, name: str,
                    assign: Callable[[], np.ndarray] | None = None,
                    read_at: tuple[int, ...] = ()) -> tuple[list[dict], list[float]]:
    """``epochs`` full-batch steps through :func:`ddcl_theory.runtime.training.fit`: (the
    records of :func:`_measure` of every epoch, the training loss of every epoch).
    ``loss_and_terms(forward, inputs)`` returns the loss and the DDCL loss terms of the forward
    pass; after the epochs of ``read_at`` the record also holds ``assign()`` (the clusters)."""
    seen = {}

    def loss(forward, batch):
        value, seen["terms"] = loss_and_terms(forward, batch)
        return value

    def end(r: int) -> dict:
        record = _measure(seen["terms"], bank())
        if r + 1 in read_at:
            record["assignments"] = [int(c) for c in assign()]
        return record

    log = fit(model, opt, rounds=epochs, batches=lambda _: (inputs,), loss=loss, device="cpu",
              run=run_dir, name=name, generators={"init": gen}, end_of_round=end,
              checkpoint_every=CHECKPOINT_EVERY, desc=name, train_mode=False)
    return log.metrics, [float(x[0]) for x in log.losses]


def fit_ddcl_head(x: np.ndarray, k: int, relative_temperature: float, epochs: int, lr: float,
                  seed: int, optimizer: str = "adam", run_dir: RunDir | None = None,
                  name: str = "ddcl", read_at: tuple[int, ...] = ()
                  ) -> tuple[np.ndarray, DDCLTrace]:
    """DDCL clustering head on rows ``x`` (N, F): (cluster of each row (N,), trace).

    Trains L_q (q differentiated) at tau = ``relative_temperature`` times L_q's collapse
    temperature (``critical_temperature(z, objective="quantisation")``, 4 lambda_max).
    ``optimizer``: ``"adam"`` or ``"sgd"`` (plain full-batch gradient descent), step ``lr``.
    ``read_at``: epochs after which the clusters are kept in ``trace.assignments_at``.
    With an enabled ``run_dir`` the epochs resume from the last checkpoint saved under ``name``.
    """
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer: expected 'adam' or 'sgd', got {optimizer!r}")
    gen = profile.seed_everything(seed)
    z = torch.as_tensor(x, dtype=torch.float32)
    # the loss trained is L_q with q differentiated: its own threshold, 4 lambda_max
    tau = relative_temperature * critical_temperature(z, objective="quantisation")
    layer = DDCLAttention(z.shape[1], k, heads=1, temperature=tau, residual=False, norm=False,
                          projections=False)
    tokens = z[None]                                                   # one sequence of N rows
    layer.init_prototypes_from(tokens, generator=gen)
    opt = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)([layer.prototypes], lr=lr)
    start = _separations(layer.prototypes[0])

    def loss(forward, batch):
        losses = forward(batch).losses
        return losses.l_q, losses

    def assign() -> np.ndarray:
        with torch.no_grad():
            return layer(tokens).assignments[0, 0].argmax(-1).numpy()

    records, curve = _fit_full_batch(layer, opt, epochs, tokens, loss,
                                     lambda: layer.prototypes[0], gen, run_dir, name, assign,
                                     read_at)
    return assign(), _trace(start, records, curve)


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
        # MSE + beta L_q with q differentiated: L_q's own threshold, 4 lambda_max
        quantizer.layer.temperature.set(
            relative_temperature * critical_temperature(z0, objective="quantisation"))
        quantizer.layer.init_prototypes_from(z0[None], generator=gen)
    params = [*model.encoder.parameters(), *model.decoder.parameters(), *quantizer.parameters()]
    opt = torch.optim.Adam(params, lr=lr)
    start = _separations(quantizer.codebook)

    def loss(forward, rows):
        recon, out = forward(rows)
        return ((recon - rows) ** 2).mean() + beta * out.losses.l_q, out.losses

    records, curve = _fit_full_batch(model, opt, epochs, xt, loss, lambda: quantizer.codebook,
                                     gen, run_dir, name)
    with torch.no_grad():
        pred = quantizer(model.encoder(xt)[None]).codes[0].numpy()
    return pred, _trace(start, records, curve)


def fit_kmeans(x: np.ndarray, k: int, restarts: int, seed: int) -> np.ndarray:
    """scikit-learn KMeans (k-means++ seeding, ``restarts`` starts) -> cluster of each row."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    # one BLAS/OpenMP thread: the same result, and no oversubscription
    with threadpool_limits(limits=1):
        return KMeans(n_clusters=k, n_init=restarts, random_state=seed).fit(x).labels_


def fit_gmm(x: np.ndarray, k: int, starts: int, seed: int,
            covariances: tuple[str, ...] = GMM_COVARIANCES) -> tuple[np.ndarray, str]:
    """scikit-learn GaussianMixture (k-means initialisation, ``starts`` initialisations per
    covariance type, its default tolerance and iterations), the covariance type of the lowest
    BIC among ``covariances``: (cluster of each row = most probable component, that type)."""
    from sklearn.mixture import GaussianMixture
    from threadpoolctl import threadpool_limits

    best = None
    with threadpool_limits(limits=1):
        for cov in covariances:
            gm = GaussianMixture(n_components=k, covariance_type=cov, n_init=starts,
                                 random_state=seed).fit(x)
            bic = float(gm.bic(x))
            if best is None or bic < best[0]:
                best = (bic, cov, gm.predict(x))
    return best[2], best[1]


def _score(method: str, seed: int, n: int, overlap: bool, r: float | None, y: np.ndarray,
           pred: np.ndarray, k: int, trace: DDCLTrace | None, config: str = "") -> DebrisRun:
    c = len(debris.CLASSES)
    acc_at = ({e: clustering.clustering_acc(y, np.asarray(a))
               for e, a in trace.assignments_at.items()} if trace is not None else {})
    return DebrisRun(method, seed, n, overlap, r, clustering.clustering_acc(y, pred),
                     clustering.nmi(y, pred), clustering.ari(y, pred),
                     clustering.class_fill(y, pred, c, k), trace, acc_at, config)


def _catalogue_runs(s: DebrisSettings, seed: int, n: int, overlap: bool,
                    run_dir: RunDir | None) -> tuple[list[DebrisRun], np.ndarray]:
    """The methods on the catalogue of one seed and size: (runs, class sizes). Every method on
    the largest catalogue with overlap; the deciding pair and the peers beside on the smaller
    ones; only ``kmeans`` on the overlap-free reference."""
    k = s.num_clusters
    cat = debris.generate(n, seed, sigma_r=s.sigma_r, sigma_i=s.sigma_i, overlap=overlap)
    x, y = standardise(cat.features), cat.labels
    out = [_score("kmeans", seed, n, overlap, None, y, fit_kmeans(x, k, s.kmeans_restarts, seed),
                  k, None, f"n_init={s.kmeans_restarts}")]
    if not overlap:
        return out, cat.class_sizes
    largest = n == s.n_objects
    tag = f"n{n}-seed{seed}"
    for r in (s.temperature_sweep if largest else (s.relative_temperature,)):
        pred, trace = fit_ddcl_head(x, k, r, s.epochs, s.lr, seed, run_dir=run_dir,
                                    name=f"ddcl-r{r:g}-{tag}",
                                    read_at=checkpoint_epochs(s.epochs))
        out.append(_score("ddcl", seed, n, overlap, r, y, pred, k, trace))
    out.append(_score("kmeans1", seed, n, overlap, None, y, fit_kmeans(x, k, DDCL_STARTS, seed),
                      k, None, f"n_init={DDCL_STARTS}"))
    pred, cov = fit_gmm(x, k, DDCL_STARTS, seed, s.gmm_covariances)
    out.append(_score("gmm", seed, n, overlap, None, y, pred, k, None,
                      f"covariance_type={cov} (BIC), n_init={DDCL_STARTS}"))
    if not largest:
        return out, cat.class_sizes
    pred, trace = fit_ddcl_head(x, k, s.relative_temperature, s.epochs, s.sgd_lr, seed,
                                optimizer="sgd", run_dir=run_dir, name=f"ddcl_sgd-{tag}")
    out.append(_score("ddcl_sgd", seed, n, overlap, s.relative_temperature, y, pred, k, trace))
    pred, trace = fit_ddcl_readout(x, k, s.relative_temperature, s.epochs, s.readout_lr,
                                   s.readout_hidden, s.readout_latent, s.readout_beta, seed,
                                   run_dir=run_dir, name=f"readout-{tag}")
    out.append(_score("readout", seed, n, overlap, s.relative_temperature, y, pred, k, trace))
    return out, cat.class_sizes


def run(settings: DebrisSettings | None = None) -> DebrisResult:
    """Every method on one catalogue per seed and size (and the overlap-free reference at the
    largest size if asked).

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
            for n in s.object_scales:
                largest = n == s.n_objects
                for overlap in ((True, False) if s.reference_overlap_free and largest
                                else (True,)):
                    unit = run_dir.unit(f"seed{seed}-n{n}-overlap{int(overlap)}",
                                        lambda seed=seed, n=n, overlap=overlap:
                                        _catalogue_runs(s, seed, n, overlap, run_dir))
                    found += unit[0]
                    if overlap and largest:
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
    """The parts of the source's claim beyond accuracy, for one DDCL variant (``"ddcl"`` head
    or ``"readout"``) on the largest catalogues with overlap, shown beside the deciding test.

    Keys: acc / nmi / ari ((mean, std) over seeds), monotone (per seed: separation ``kind`` never
    decreases), decreases (per seed: epochs at which it decreased, :func:`decreases`),
    largest_drop (per seed, :func:`largest_drop`), ratio (per seed: final / initial
    separation), min_v, plateau (per seed: the training loss reached its plateau),
    leo_clusters (mean number of clusters whose majority is LEO), empty (class-slots left empty
    over all seeds), fills (no empty class in any seed and LEO the majority of at most one
    cluster on average).
    """
    runs = result.select(method)
    leo = debris.CLASSES.index("LEO")
    paths = [x.trace.separation_path(kind) for x in runs]
    leo_clusters = float(np.mean([x.fill.majority_clusters[leo] for x in runs]))
    empty = int(sum(x.fill.empty_classes for x in runs))
    return {"acc": summary(runs, "acc"), "nmi": summary(runs, "nmi"), "ari": summary(runs, "ari"),
            "monotone": [is_monotone(p) for p in paths],
            "decreases": [decreases(p) for p in paths],
            "largest_drop": [largest_drop(p) for p in paths],
            "ratio": [float(p[-1] / p[0]) if p[0] > 0 else float("inf") for p in paths],
            "min_v": min(x.trace.min_v for x in runs),
            "plateau": [x.trace.convergence.plateau for x in runs],
            "leo_clusters": leo_clusters, "empty": empty,
            "fills": empty == 0 and leo_clusters <= 1.0}
