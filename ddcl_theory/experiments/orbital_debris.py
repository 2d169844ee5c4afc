"""DDCL against k-means on a synthetic catalogue of orbital debris (claim D13).

Data: :func:`ddcl_theory.data.debris.generate` (this book's own generator; a fresh catalogue per
seed and size), the five observed columns standardised (z-scores over the catalogue).

Shared starts (the paired design): for a seed and a catalogue, :func:`shared_starts` draws
``starts`` k-means++ seedings (scikit-learn's ``kmeans_plusplus``, the seeding ``KMeans`` itself
uses), and start i is handed to both arms:

* ``kmeans`` - scikit-learn ``KMeans(init=start_i, n_init=1)``; its own objective: the inertia
  (sum of squared distances to the nearest centre);
* ``ddcl`` - a DDCL clustering head whose K prototypes *are* start i: a projection-free
  :class:`~ddcl_theory.layers.ddcl.DDCLAttention` bank on the standardised rows, trained full
  batch by Adam on L_q (q differentiated) for ``epochs`` epochs at tau = r T_c, with T_c the
  collapse temperature of the loss trained, ``critical_temperature(z, objective="quantisation")``
  = 4 lambda_max of the data covariance; cluster = argmax q. Its own objective: L_q of the
  final prototypes.

Start 0 of each arm is the one-start comparison; the multi-start comparison keeps, per arm, the
start of its own lowest objective (:func:`own_best`), never the one of the best accuracy.

Beside, on the largest catalogue and the first ``beside_seeds`` seeds, from start 0 where a method
takes a start: the head at the other temperatures of ``temperature_sweep``; ``ddcl_sgd``, the
head trained by plain full-batch gradient descent (a control: is a behaviour of the separation
Adam's doing?); ``readout``, DDCL as a readout (an MLP encoder, the DDCL soft quantiser of
:mod:`ddcl_theory.layers.quantizers` on its output, an MLP decoder reconstructing the row from the
soft centroid; trained on reconstruction MSE + beta L_q; its prototypes live in the latent space,
so it seeds itself by k-means++ there); ``gmm``, scikit-learn ``GaussianMixture`` (k-means
initialisation, one start, covariance type chosen by BIC among ``gmm_covariances``).

Every DDCL epoch records the training loss (the loss the optimiser minimised), L_q, L_OLS and V of
the forward pass (V >= 0 is checked at every one), the decomposition error |L_q - L_OLS - V| and
the prototype separation (min and mean pairwise distance, trace of the prototype covariance) after
the update; the head also keeps its clusters after :func:`settle_epoch` (the accuracy's own curve
over the last tenth of the epochs). A run's plateau is
``metrics.convergence.convergence(loss, rel=PLATEAU_REL, window=epochs // 10)``.

Scales: every shared start of both arms runs on the catalogue of ``n_objects`` (the largest,
where the claim is decided) for every seed, and on the smaller catalogues of ``trend_objects``
for the first ``trend_seeds`` seeds (the scale trend); the methods beside run on the largest.
The overlap-free reference (catalogues without the boundary populations, well separated
classes) runs every start of ``kmeans`` at the largest size.
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
from ddcl_theory.runtime.settings import Settings, confirmatory_seeds, setting
from ddcl_theory.runtime.threads import num_threads
from ddcl_theory.runtime.training import fit
from ddcl_theory.theory.collapse import critical_temperature

__all__ = [
    "CHECKPOINT_EVERY",
    "GMM_COVARIANCES",
    "METHODS",
    "PLATEAU_REL",
    "SHARED",
    "DDCLTrace",
    "DebrisResult",
    "DebrisRun",
    "DebrisSettings",
    "classes_owned",
    "decreases",
    "fit_ddcl_head",
    "fit_ddcl_readout",
    "fit_gmm",
    "fit_kmeans_from",
    "is_monotone",
    "largest_drop",
    "nondecreasing_share",
    "own_best",
    "run",
    "settle_epoch",
    "shared_starts",
    "standardise",
]

METHODS = ("ddcl", "kmeans", "ddcl_sgd", "readout", "gmm")
#: The two arms of the paired design: both run from every shared start.
SHARED = ("ddcl", "kmeans")
#: Epochs between checkpoints of a DDCL training loop (reference and paper profiles).
CHECKPOINT_EVERY = 50
#: Covariance types among which BIC chooses the Gaussian mixture's.
GMM_COVARIANCES = ("full", "tied", "diag", "spherical")
#: Plateau rule of a DDCL run: the mean training loss of the last tenth of the epochs within
#: this fraction of the tenth before (metrics.convergence with window = epochs // 10).
PLATEAU_REL = 0.01
#: A step of a separation path counts as a fall when it is larger than this fraction of the
#: path's largest value (smaller moves are float32 rounding, and the jitter of a settled bank
#: under a constant Adam step, about 1e-6 to 1e-5).
FALL_RTOL = 1e-4


@dataclass(frozen=True)
class DebrisSettings(Settings):
    """Scale of the debris experiment: cpu five catalogues of 2000 objects (two of 1000 for the
    trend); reference the 26 seeds of the D13 rule's power analysis at 10000 objects (three of
    them at 1000 and 3000 for the trend); paper the same at 20000 (2000, 5000) objects (paper
    smoke test: two catalogues of 500 objects, two starts, 5 epochs).

    Attributes:
        n_objects: catalogue size (one catalogue per seed and size); the largest scale.
        trend_objects: smaller catalogue sizes for the scale trend (each < ``n_objects``).
        seeds: seeds of the catalogues and of the shared starts.
        trend_seeds: how many of the seeds (the first) run the catalogues of ``trend_objects``.
        starts: k-means++ starts shared by both arms on the largest catalogue (start 0 is the
            one-start comparison; each arm's best start by its own objective the multi-start
            one).
        num_clusters: K (4 classes).
        epochs: full-batch epochs of the DDCL head and readout (500 in the claim).
        lr: Adam step of the DDCL head's prototypes.
        relative_temperature: r in tau = r T_c for the head and the readout.
        temperature_sweep: further r values for the head (robustness; the main r included).
        beside_seeds: how many of the seeds (the first) run the methods beside the paired arms.
        gmm_covariances: covariance types among which BIC picks the Gaussian mixture's.
        readout_hidden, readout_latent, readout_lr, readout_beta: the readout's MLP width, token
            size, Adam step and L_q weight.
        sigma_r, sigma_i: measurement noise of the catalogue.
        sgd_lr: step of the gradient-descent control ``ddcl_sgd``.
        reference_overlap_free: also run ``kmeans`` on catalogues drawn without the boundary
            populations (well separated classes).
        threads: torch threads during the run (None: leave as is).
    """

    n_objects: int = setting(2000, reference=10000, paper=20000, smoke=500, ge=4)
    seeds: tuple[int, ...] = setting((0, 1, 2, 3, 4), reference=confirmatory_seeds(26),
                                     paper=confirmatory_seeds(26), smoke=(0, 1), ge=0)
    trend_objects: tuple[int, ...] = setting((1000,), reference=(1000, 3000),
                                             paper=(2000, 5000), smoke=(), ge=4)
    trend_seeds: int = setting(2, reference=3, paper=3, smoke=0, ge=0)
    starts: int = setting(10, smoke=2, ge=1)
    num_clusters: int = setting(4, ge=1)
    epochs: int = setting(500, smoke=5, ge=1)
    lr: float = setting(0.05, gt=0)
    relative_temperature: float = setting(0.1, gt=0)
    temperature_sweep: tuple[float, ...] = setting((0.03, 0.1, 0.3), gt=0, nonempty=True)
    beside_seeds: int = setting(2, smoke=2, ge=0)
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
        if len(self.seeds) < 2 or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"DebrisSettings.seeds: expected at least two distinct seeds (for "
                             f"a spread), got {self.seeds!r}")
        if self.relative_temperature not in self.temperature_sweep:
            raise ValueError(f"DebrisSettings.relative_temperature: expected one of "
                             f"temperature_sweep {self.temperature_sweep}, got "
                             f"{self.relative_temperature!r}")
        if (list(self.trend_objects) != sorted(set(self.trend_objects))
                or any(n >= self.n_objects for n in self.trend_objects)):
            raise ValueError(f"DebrisSettings.trend_objects: expected increasing sizes >= 4 "
                             f"below n_objects {self.n_objects}, got {self.trend_objects!r}")
        for name in ("trend_seeds", "beside_seeds"):
            if getattr(self, name) > len(self.seeds):
                raise ValueError(f"DebrisSettings.{name}: expected at most the "
                                 f"{len(self.seeds)} seeds, got {getattr(self, name)!r}")

    @property
    def object_scales(self) -> tuple[int, ...]:
        """Every catalogue size, increasing (the last is ``n_objects``)."""
        return (*self.trend_objects, self.n_objects)

    def seeds_at(self, n: int) -> tuple[int, ...]:
        """The seeds that run the catalogues of ``n`` objects: all at ``n_objects``, the first
        ``trend_seeds`` at the smaller sizes."""
        if n not in self.object_scales:
            raise ValueError(f"n: expected one of {self.object_scales}, got {n!r}")
        return self.seeds if n == self.n_objects else self.seeds[:self.trend_seeds]


@dataclass
class DDCLTrace:
    """Per-epoch record of a DDCL bank during training; every list has ``epochs`` entries.

    loss: the training loss of the epoch (what the optimiser minimised: L_q for the head, MSE +
    beta L_q for the readout); l_q, l_ols, v: loss terms of the epoch's forward pass;
    identity_error: |L_q - L_OLS - V| / max(L_q, 1e-12); separation: {kind: values after the
    epoch's update} for the kinds of :data:`ddcl_theory.metrics.prototypes.SEPARATION_KINDS`,
    plus the value before training at ``separation_start``; assignments_at: {epoch: cluster of
    each row after that epoch's update} at the epochs asked for; final_l_q: L_q of the final
    prototypes (the head's own objective; NaN where not measured).
    """

    loss: list[float]
    l_q: list[float]
    l_ols: list[float]
    v: list[float]
    identity_error: list[float]
    separation: dict[str, list[float]]
    separation_start: dict[str, float]
    assignments_at: dict[int, tuple[int, ...]]
    final_l_q: float = float("nan")

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
    """One method on one catalogue of ``n_objects`` objects.

    ``start``: the index of the shared k-means++ start it ran from (None for a method that seeds
    itself); ``objective``: the method's own objective at its end (k-means inertia, the head's
    final L_q; None for the others); ``acc_at``: {epoch: ACC after it} at the head's
    :func:`settle_epoch` and its last epoch (empty for the other methods); ``config``: the peer's
    configuration as fitted (e.g. the mixture's covariance type chosen by BIC)."""

    method: str
    seed: int
    n_objects: int
    overlap: bool
    relative_temperature: float | None
    start: int | None
    acc: float
    nmi: float
    ari: float
    fill: clustering.ClassFill
    trace: DDCLTrace | None
    acc_at: dict[int, float]
    objective: float | None = None
    config: str = ""

    @property
    def classes_owned(self) -> int:
        """Classes that are the most frequent class of at least one cluster
        (:func:`classes_owned`)."""
        return classes_owned(self.fill)

    @property
    def nondecreasing(self) -> float:
        """Share of the epochs at which the smallest prototype distance did not fall
        (:func:`nondecreasing_share`); NaN for a method without a trace."""
        if self.trace is None:
            return float("nan")
        return nondecreasing_share(self.trace.separation_path("min"))


@dataclass
class DebrisResult:
    settings: DebrisSettings
    runs: list[DebrisRun]
    class_sizes: np.ndarray          # (4,) per catalogue (the same for every seed)

    def select(self, method: str, *, overlap: bool = True, r: float | None = None,
               n: int | None = None, start: int | None = 0) -> list[DebrisRun]:
        """Runs of one method in seed order, on the catalogues of ``n`` objects (default the
        largest); for ``ddcl`` the relative temperature (default the main one); for the arms
        the shared ``start`` (default 0; ignored by the methods that seed themselves)."""
        if method not in METHODS:
            raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
        if method == "ddcl" and r is None:
            r = self.settings.relative_temperature
        n = self.settings.n_objects if n is None else n
        return sorted((x for x in self.runs if x.method == method and x.overlap == overlap
                       and x.n_objects == n
                       and (method != "ddcl" or x.relative_temperature == r)
                       and (method not in SHARED or x.start == start)),
                      key=lambda x: x.seed)

    def starts_of(self, method: str, seed: int, *, overlap: bool = True,
                  n: int | None = None) -> list[DebrisRun]:
        """Every shared start of one arm (``ddcl`` at the main temperature, or ``kmeans``) on
        the catalogue of ``n`` objects (default the largest) of ``seed``, in start order."""
        if method not in SHARED:
            raise ValueError(f"method: expected one of {SHARED}, got {method!r}")
        r = self.settings.relative_temperature
        n = self.settings.n_objects if n is None else n
        return sorted((x for x in self.runs if x.method == method and x.seed == seed
                       and x.overlap == overlap and x.n_objects == n
                       and x.start is not None
                       and (method != "ddcl" or x.relative_temperature == r)),
                      key=lambda x: x.start)

    def best(self, method: str, *, overlap: bool = True,
             n: int | None = None) -> list[DebrisRun]:
        """Per seed that ran the catalogue of ``n`` objects (default the largest; in seed
        order), the run of the arm's start with the lowest own objective (:func:`own_best`)."""
        n = self.settings.n_objects if n is None else n
        return [own_best(self.starts_of(method, seed, overlap=overlap, n=n))
                for seed in self.settings.seeds_at(n)]


def standardise(features: np.ndarray) -> np.ndarray:
    """Column z-scores (population std; a constant column stays 0)."""
    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"features: expected shape (N, F), got {x.shape}")
    std = x.std(0)
    return (x - x.mean(0)) / np.where(std > 0, std, 1.0)


def shared_starts(x: np.ndarray, k: int, starts: int, seed: int) -> np.ndarray:
    """(starts, k, F) k-means++ seedings of rows ``x`` (N, F): scikit-learn's
    ``kmeans_plusplus`` (the seeding ``KMeans`` uses), drawn in turn from one
    ``RandomState(seed)``, so the same arguments give the same starts."""
    from sklearn.cluster import kmeans_plusplus
    from threadpoolctl import threadpool_limits

    if isinstance(starts, bool) or not isinstance(starts, int) or starts < 1:
        raise ValueError(f"starts: expected an int >= 1, got {starts!r}")
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < k:
        raise ValueError(f"x: expected shape (N >= k={k}, F), got {x.shape}")
    stream = np.random.RandomState(seed)
    with threadpool_limits(limits=1):
        return np.stack([kmeans_plusplus(x, k, random_state=stream)[0] for _ in range(starts)])


def own_best(runs: list[DebrisRun]) -> DebrisRun:
    """The run of the lowest own objective (k-means inertia, the head's final L_q); ties go to
    the earlier start. Never chosen by accuracy."""
    if not runs or any(x.objective is None or not np.isfinite(x.objective) for x in runs):
        raise ValueError("runs: expected runs with a finite objective each")
    return min(runs, key=lambda x: (x.objective, x.start))


def _measure(losses, bank: torch.Tensor) -> dict:
    """One epoch's record: the loss terms of its forward pass, the decomposition error and the
    separations of the bank after the update."""
    l_q, l_ols, v = (float(t.detach()) for t in (losses.l_q, losses.l_ols, losses.v))
    return {"l_q": l_q, "l_ols": l_ols, "v": v,
            "identity_error": abs(l_q - l_ols - v) / max(l_q, 1e-12),
            "separation": {kind: float(separation(bank.detach(), kind))
                           for kind in SEPARATION_KINDS}}


def _trace(start: dict[str, float], epochs: list[dict], loss: list[float],
           final_l_q: float = float("nan")) -> DDCLTrace:
    """A :class:`DDCLTrace` from the separations before training, the epochs' records and the
    training loss of every epoch."""
    return DDCLTrace(list(loss), [e["l_q"] for e in epochs], [e["l_ols"] for e in epochs],
                     [e["v"] for e in epochs], [e["identity_error"] for e in epochs],
                     {k: [e["separation"][k] for e in epochs] for k in SEPARATION_KINDS}, start,
                     {i + 1: tuple(e["assignments"]) for i, e in enumerate(epochs)
                      if e.get("assignments") is not None}, final_l_q)


def settle_epoch(epochs: int) -> int:
    """The epoch nine tenths of the way through ``epochs`` (at least 1): the head's clusters
    are read there and at the end, so the accuracy's own curve over the last tenth shows
    whether the partition had settled."""
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs: expected an int >= 1, got {epochs!r}")
    return max(1, (9 * epochs) // 10)


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
                  name: str = "ddcl", read_at: tuple[int, ...] = (),
                  start: np.ndarray | None = None) -> tuple[np.ndarray, DDCLTrace]:
    """DDCL clustering head on rows ``x`` (N, F): (cluster of each row (N,), trace).

    Trains L_q (q differentiated) at tau = ``relative_temperature`` times L_q's collapse
    temperature (``critical_temperature(z, objective="quantisation")``, 4 lambda_max), with the
    prototypes started at ``start`` (k, F) (a shared k-means++ start), or at its own k-means++
    draw when None. ``optimizer``: ``"adam"`` or ``"sgd"`` (plain full-batch gradient descent),
    step ``lr``. ``read_at``: epochs after which the clusters are kept in
    ``trace.assignments_at``. ``trace.final_l_q``: L_q of the final prototypes. With an enabled
    ``run_dir`` the epochs resume from the last checkpoint saved under ``name``.
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
    if start is None:
        layer.init_prototypes_from(tokens, generator=gen)
    else:
        bank = torch.as_tensor(np.asarray(start), dtype=torch.float32)
        if bank.shape != (k, z.shape[1]):
            raise ValueError(f"start: expected shape ({k}, {z.shape[1]}), got "
                             f"{tuple(bank.shape)}")
        with torch.no_grad():
            layer.prototypes[0].copy_(bank)
    opt = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)([layer.prototypes], lr=lr)
    before = _separations(layer.prototypes[0])

    def loss(forward, batch):
        losses = forward(batch).losses
        return losses.l_q, losses

    def assign() -> np.ndarray:
        with torch.no_grad():
            return layer(tokens).assignments[0, 0].argmax(-1).numpy()

    records, curve = _fit_full_batch(layer, opt, epochs, tokens, loss,
                                     lambda: layer.prototypes[0], gen, run_dir, name, assign,
                                     read_at)
    with torch.no_grad():
        out = layer(tokens)
    return (out.assignments[0, 0].argmax(-1).numpy(),
            _trace(before, records, curve, float(out.losses.l_q)))


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
    before = _separations(quantizer.codebook)

    def loss(forward, rows):
        recon, out = forward(rows)
        return ((recon - rows) ** 2).mean() + beta * out.losses.l_q, out.losses

    records, curve = _fit_full_batch(model, opt, epochs, xt, loss, lambda: quantizer.codebook,
                                     gen, run_dir, name)
    with torch.no_grad():
        pred = quantizer(model.encoder(xt)[None]).codes[0].numpy()
    return pred, _trace(before, records, curve)


def fit_kmeans_from(x: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, float]:
    """scikit-learn ``KMeans`` from the centres ``start`` (k, F) (one start, its default
    tolerance and iteration limit): (cluster of each row (N,), inertia)."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    start = np.asarray(start, dtype=np.float64)
    # one BLAS/OpenMP thread: the same result, and no oversubscription
    with threadpool_limits(limits=1):
        km = KMeans(n_clusters=start.shape[0], init=start, n_init=1).fit(x)
    return km.labels_, float(km.inertia_)


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
           pred: np.ndarray, k: int, trace: DDCLTrace | None, *, start: int | None = None,
           objective: float | None = None, config: str = "") -> DebrisRun:
    c = len(debris.CLASSES)
    acc_at = ({e: clustering.clustering_acc(y, np.asarray(a))
               for e, a in trace.assignments_at.items()} if trace is not None else {})
    return DebrisRun(method, seed, n, overlap, r, start, clustering.clustering_acc(y, pred),
                     clustering.nmi(y, pred), clustering.ari(y, pred),
                     clustering.class_fill(y, pred, c, k), trace, acc_at, objective, config)


def _catalogue_runs(s: DebrisSettings, seed: int, n: int, overlap: bool,
                    run_dir: RunDir | None) -> tuple[list[DebrisRun], np.ndarray]:
    """The methods on the catalogue of one seed and size: (runs, class sizes). Both arms from
    every shared start on a catalogue with overlap (``kmeans`` alone on the overlap-free one),
    the methods beside on the largest for the first ``beside_seeds`` seeds."""
    k, r0 = s.num_clusters, s.relative_temperature
    cat = debris.generate(n, seed, sigma_r=s.sigma_r, sigma_i=s.sigma_i, overlap=overlap)
    x, y = standardise(cat.features), cat.labels
    largest = n == s.n_objects
    starts = shared_starts(x, k, s.starts, seed)
    tag = f"n{n}-seed{seed}"
    read_at = (settle_epoch(s.epochs), s.epochs)
    out = []
    for i, start in enumerate(starts):
        pred, inertia = fit_kmeans_from(x, start)
        out.append(_score("kmeans", seed, n, overlap, None, y, pred, k, None, start=i,
                          objective=inertia, config="init=shared start, n_init=1"))
        if not overlap:
            continue
        pred, trace = fit_ddcl_head(x, k, r0, s.epochs, s.lr, seed, run_dir=run_dir,
                                    name=f"ddcl-r{r0:g}-{tag}-start{i}", read_at=read_at,
                                    start=start)
        out.append(_score("ddcl", seed, n, overlap, r0, y, pred, k, trace, start=i,
                          objective=trace.final_l_q))
    if not (overlap and largest and seed in s.seeds[:s.beside_seeds]):
        return out, cat.class_sizes
    for r in s.temperature_sweep:
        if r == r0:
            continue
        pred, trace = fit_ddcl_head(x, k, r, s.epochs, s.lr, seed, run_dir=run_dir,
                                    name=f"ddcl-r{r:g}-{tag}-start0", start=starts[0])
        out.append(_score("ddcl", seed, n, overlap, r, y, pred, k, trace, start=0,
                          objective=trace.final_l_q))
    pred, trace = fit_ddcl_head(x, k, r0, s.epochs, s.sgd_lr, seed, optimizer="sgd",
                                run_dir=run_dir, name=f"ddcl_sgd-{tag}", start=starts[0])
    out.append(_score("ddcl_sgd", seed, n, overlap, r0, y, pred, k, trace))
    pred, trace = fit_ddcl_readout(x, k, r0, s.epochs, s.readout_lr, s.readout_hidden,
                                   s.readout_latent, s.readout_beta, seed, run_dir=run_dir,
                                   name=f"readout-{tag}")
    out.append(_score("readout", seed, n, overlap, r0, y, pred, k, trace))
    pred, cov = fit_gmm(x, k, 1, seed, s.gmm_covariances)
    out.append(_score("gmm", seed, n, overlap, None, y, pred, k, None,
                      config=f"covariance_type={cov} (BIC), n_init=1"))
    return out, cat.class_sizes


def run(settings: DebrisSettings | None = None) -> DebrisResult:
    """Every method on one catalogue per seed and size (and the overlap-free reference at the
    largest size if asked).

    In the reference and paper profiles every finished catalogue is kept in the run directory
    (:class:`ddcl_theory.runtime.rundir.RunDir`) and an interrupted DDCL training resumes from
    its last checkpoint.
    """
    s = settings or DebrisSettings.from_profile()
    run_dir = RunDir("orbital_debris", s)
    found: list[DebrisRun] = []
    sizes = None
    with num_threads(s.threads):
        for seed in progress(s.seeds, desc="debris seeds"):
            for n in (n for n in s.object_scales if seed in s.seeds_at(n)):
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


# ------------------------------------------------------------------------- analysis
def classes_owned(fill: clustering.ClassFill) -> int:
    """Classes that are the most frequent class of at least one cluster (0 .. C): 4 when every
    orbit class owns a cluster, fewer when clusters pile onto one class."""
    return int(np.count_nonzero(fill.majority_clusters))


def decreases(path: np.ndarray, rtol: float = FALL_RTOL) -> int:
    """Number of steps at which ``path`` decreases by more than ``rtol`` times its largest
    magnitude (smaller moves are rounding, not decreases)."""
    p = np.asarray(path, dtype=np.float64)
    if p.ndim != 1 or p.size < 2:
        raise ValueError(f"path: expected shape (T >= 2,), got {p.shape}")
    scale = max(float(np.abs(p).max()), 1e-12)
    return int((np.diff(p) < -rtol * scale).sum())


def nondecreasing_share(path: np.ndarray, rtol: float = FALL_RTOL) -> float:
    """Share of the steps of ``path`` (T,) at which it did not fall (:func:`decreases`): 1 for a
    monotone path."""
    p = np.asarray(path, dtype=np.float64)
    return 1.0 - decreases(p, rtol) / (p.size - 1)


def is_monotone(path: np.ndarray, rtol: float = FALL_RTOL) -> bool:
    """True when ``path`` never decreases by more than ``rtol`` times its largest magnitude."""
    return decreases(path, rtol) == 0


def largest_drop(path: np.ndarray) -> float:
    """Largest fall below the running maximum, relative to the path's largest magnitude:
    max_t (max_{s <= t} p_s - p_t) / max |p| (0 for a non-decreasing path)."""
    p = np.asarray(path, dtype=np.float64)
    scale = max(float(np.abs(p).max()), 1e-12)
    return float((np.maximum.accumulate(p) - p).max() / scale)
