"""The learning-rate-ratio ablation (claim D9) and the linear analysis on real tokens (D8).

:func:`linear_analysis` builds :class:`~ddcl_theory.theory.coupled_model.CoupledModel` on
PCA-reduced CIFAR-10 patch tokens, finds its equilibria in float64 and computes the spectra of J(eps).

Joint training of a per-token MLP encoder, a one-head DDCL layer and a linear classifier on the
layer's ``pooled`` output, on CIFAR-10 patch tokens. Loss = cross-entropy + lam * L_q. Two
optimisers: the prototypes with learning rate ``lr_p``; everything else (encoder, the layer's
projections, the head) with ``lr_theta = eps * lr_p``. Both rates follow one cosine decay from
their start to ``final_lr_fraction`` of it at the last step (:func:`cosine_factor`), so the ratio
stays ``eps`` throughout and the separation can settle. Per epoch we record the prototype
separation (min pairwise distance), V, L_q, the assignment perplexity and the test accuracy.
:func:`run` trains one sweep at one run length; :func:`run_scales` trains the same sweep at
three run lengths, each with its own schedule (the scale trend).

Collapse rule (stated once, used everywhere): a run has collapsed at an epoch when

    S_min(P_t) / S_min(P_0) < ``COLLAPSE_SEPARATION_RATIO`` (0.05)   or
    perplexity of the mean assignment < ``COLLAPSE_PERPLEXITY`` (1.5),

and a run "collapses" when its last epoch satisfies the rule.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from ddcl_theory import data as ddata
from ddcl_theory.layers.ddcl import DDCLAttention
from ddcl_theory.metrics import prototypes as protos
from ddcl_theory.models.mlp import TokenMLP
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, confirmatory_seeds, setting
from ddcl_theory.runtime.progress import progress
from ddcl_theory.runtime.training import fit
from ddcl_theory.theory import coupled_model as cm
from ddcl_theory.theory import timescales as ts

COLLAPSE_SEPARATION_RATIO = 0.05
#: The eps of every sweep: the three of the D9 rule (0.01, 0.1 and 1) and three between.
MAIN_EPS = (0.01, 0.03, 0.1, 0.3, 0.5, 1.0)
COLLAPSE_PERPLEXITY = 1.5
#: Seeds of the confirmatory (reference) sweeps, from the power analysis of the D9 rule.
CONFIRMATORY_SEEDS = 40
OPTIMISERS = ("sgd", "adam")


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tokens:
    """Patch tokens (B, T, d) float32 with int64 labels (B,), train and test."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    source: str


def cifar_tokens(n_train_per_class: int, n_test: int, *, patch: int = 8,
                 classes: tuple[int, ...] | None = None, pca_dim: int | None = None) -> Tokens:
    """CIFAR-10 images cut into non-overlapping ``patch`` x ``patch`` patch tokens.

    Takes the first ``n_train_per_class`` training images of each class in ``classes`` (all ten
    when None) and the first ``n_test`` test images of those classes. Features are centred and
    scaled with training statistics; with ``pca_dim`` they are projected on the leading
    principal directions of the training tokens and whitened (unit variance per component).
    Labels are re-indexed 0..len(classes)-1 in the order of ``classes``.
    """
    if n_train_per_class < 1 or n_test < 1:
        raise ValueError(f"n_train_per_class, n_test: expected >= 1, got {n_train_per_class}, "
                         f"{n_test}")
    images = ddata.load_cifar10()
    classes = tuple(range(len(images.label_names))) if classes is None else tuple(classes)
    remap = {c: i for i, c in enumerate(classes)}
    train_idx = np.concatenate([np.flatnonzero(images.y_train == c)[:n_train_per_class]
                                for c in classes])
    test_idx = np.flatnonzero(np.isin(images.y_test, classes))[:n_test]
    x_tr = ddata.image_patches(images.x_train[train_idx], patch).astype(np.float64)
    x_te = ddata.image_patches(images.x_test[test_idx], patch).astype(np.float64)
    flat = x_tr.reshape(-1, x_tr.shape[-1])
    mean = flat.mean(0)
    if pca_dim is None:
        std = flat.std(0) + 1e-6
        transform = lambda a: (a - mean) / std
    else:
        if not 1 <= pca_dim <= flat.shape[1]:
            raise ValueError(f"pca_dim: expected 1..{flat.shape[1]}, got {pca_dim}")
        _, s, vt = np.linalg.svd(flat - mean, full_matrices=False)
        scale = s[:pca_dim] / np.sqrt(flat.shape[0])
        transform = lambda a: (a - mean) @ vt[:pca_dim].T / scale
    y_tr = np.array([remap[int(c)] for c in images.y_train[train_idx]], dtype=np.int64)
    y_te = np.array([remap[int(c)] for c in images.y_test[test_idx]], dtype=np.int64)
    return Tokens(transform(x_tr).astype(np.float32), y_tr, transform(x_te).astype(np.float32),
                  y_te, images.source)


# --------------------------------------------------------------------------------------------
# Settings and results
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AblationSettings(Settings):
    """The Adam sweep of D9 at eps 0.01 to 1, 256 training images; cpu 16 epochs and 5 seeds
    (a pilot), reference 48 epochs (run lengths 12, 24, 48) on the rule's confirmatory seeds,
    paper 48 on 2,000 images (paper smoke test: one seed, one epoch). Both learning rates decay
    by one cosine to ``final_lr_fraction`` of their start."""

    eps_values: tuple[float, ...] = setting(MAIN_EPS, gt=0, nonempty=True)
    seeds: tuple[int, ...] = setting(tuple(range(5)),
                                     reference=confirmatory_seeds(CONFIRMATORY_SEEDS),
                                     paper=confirmatory_seeds(CONFIRMATORY_SEEDS),
                                     smoke=confirmatory_seeds(1), ge=0, nonempty=True)
    classes: tuple[int, ...] = setting((0, 6), ge=0, nonempty=True)
    n_train_per_class: int = setting(128, paper=1000, ge=1)
    n_test: int = setting(500, paper=1000, ge=1)
    patch: int = setting(8, ge=1)
    hidden: int = setting(64, ge=1)
    dim: int = setting(16, ge=1)
    num_prototypes: int = setting(8, ge=1)
    temperature: float = setting(0.02, gt=0)
    lam: float = setting(1.0, ge=0)
    lr_p: float = setting(0.01, gt=0)
    optimiser: str = setting("adam", choices=OPTIMISERS)
    epochs: int = setting(16, reference=48, paper=48, smoke=1, ge=1)
    batch_size: int = setting(64, ge=1)
    final_lr_fraction: float = setting(0.01, gt=0, le=1)
    prototypes_see_task: bool = setting(True)

    @property
    def scales(self) -> tuple[int, ...]:
        """The three run lengths of the D9 trend, each trained with its own schedule by
        :func:`run_scales`: a quarter, a half and all of ``epochs`` (fewer when ``epochs`` is
        below four)."""
        return tuple(sorted({max(1, self.epochs // 4), max(1, self.epochs // 2), self.epochs}))


@dataclass(frozen=True)
class SGDAblationSettings(AblationSettings):
    """The plain-SGD sweep of D9 (the setting of the discrete analysis): the same eps, seeds,
    run lengths and schedule as the Adam sweep; ``lr_p`` is the prototypes' step size (the
    chapter sweeps two)."""

    optimiser: str = setting("sgd", choices=OPTIMISERS)
    lr_p: float = setting(1.0, gt=0)


@dataclass(frozen=True)
class SGDBesideSettings(SGDAblationSettings):
    """A second plain-SGD sweep, at the prototypes' step eta_P = 0.3, trained at the longest run
    length only: beside the one at eta_P = 1, it shows whether the critical ratio or the
    critical encoder step eps * eta_P stays put (the discrete analysis of D8)."""

    lr_p: float = setting(0.3, gt=0)


@dataclass
class RunHistory:
    """Per-epoch records of one (eps, seed) run; index 0 is before training."""

    eps: float
    seed: int
    separation: list[float] = field(default_factory=list)
    v: list[float] = field(default_factory=list)
    l_q: list[float] = field(default_factory=list)
    perplexity: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)   # mean loss of each epoch (no index 0)

    @property
    def separation_ratio(self) -> np.ndarray:
        s = np.asarray(self.separation)
        return s / s[0]

    @property
    def collapsed(self) -> bool:
        """The collapse rule on the last epoch (a diverged run counts as collapsed, whatever its
        last finite separation and perplexity were)."""
        return self.diverged or is_collapsed(self.separation_ratio[-1], self.perplexity[-1])

    @property
    def diverged(self) -> bool:
        """Training blew up: a non-finite L_q (the run stops at that epoch)."""
        return not bool(np.isfinite(self.l_q[-1]))

    @property
    def finite(self) -> bool:
        return all(np.all(np.isfinite(getattr(self, k)))
                   for k in ("separation", "v", "l_q", "perplexity", "accuracy"))


@dataclass
class AblationResult:
    """All runs of a sweep, with the settings that produced them."""

    settings: AblationSettings
    runs: list[RunHistory]
    data_source: str

    def by_eps(self, eps: float) -> list[RunHistory]:
        return [r for r in self.runs if r.eps == eps]

    def collapse_fraction(self, eps: float) -> float:
        runs = self.by_eps(eps)
        return float(np.mean([r.collapsed for r in runs]))

    def divergence_fraction(self, eps: float) -> float:
        return float(np.mean([r.diverged for r in self.by_eps(eps)]))

    def final(self, eps: float, key: str) -> np.ndarray:
        """Last-epoch values of ``key`` ("separation_ratio", "v", "accuracy", ...) per seed."""
        return np.array([np.asarray(getattr(r, key))[-1] for r in self.by_eps(eps)])

    def failure_modes(self) -> dict[str, int]:
        """How many runs ended diverged, with two prototypes met (separation rule), or with one
        prototype taking the tokens (perplexity rule); a run can count under both rules."""
        finite = [r for r in self.runs if not r.diverged]
        return {
            "diverged": int(sum(r.diverged for r in self.runs)),
            "separation": int(sum(r.separation_ratio[-1] < COLLAPSE_SEPARATION_RATIO
                                  for r in finite)),
            "perplexity": int(sum(r.perplexity[-1] < COLLAPSE_PERPLEXITY for r in finite)),
        }

    def stability_boundary(self) -> tuple[float | None, float | None]:
        """(largest eps below the first failing one, smallest eps where half the seeds fail)."""
        first = self.smallest_collapsing_eps()
        below = [e for e in sorted(self.settings.eps_values) if first is None or e < first]
        return (below[-1] if below else None), first

    def smallest_collapsing_eps(self) -> float | None:
        """Smallest eps at which at least half of the seeds collapse; None when none does."""
        for eps in sorted(self.settings.eps_values):
            if self.collapse_fraction(eps) >= 0.5:
                return eps
        return None


@dataclass
class ScaleSweep:
    """One sweep trained at each run length of ``settings.scales``, each with its own schedule
    (:func:`run_scales`): ``by_length[epochs]`` is that length's :class:`AblationResult`."""

    settings: AblationSettings
    by_length: dict[int, AblationResult]

    @property
    def longest(self) -> AblationResult:
        """The sweep at the largest run length (where the verdict is taken)."""
        return self.by_length[max(self.by_length)]


def is_collapsed(separation_ratio: float, perplexity: float) -> bool:
    """The collapse rule: S_min/S_min(0) < 0.05 or perplexity < 1.5 (NaN counts as collapsed)."""
    if not (np.isfinite(separation_ratio) and np.isfinite(perplexity)):
        return True
    return bool(separation_ratio < COLLAPSE_SEPARATION_RATIO or perplexity < COLLAPSE_PERPLEXITY)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------

class JointModel(nn.Module):
    """Token MLP -> one-head DDCL layer (no residual, no norm) -> linear head on ``pooled``."""

    def __init__(self, d_in: int, s: AblationSettings, n_classes: int) -> None:
        super().__init__()
        self.encoder = TokenMLP(d_in, s.hidden, s.dim)
        self.ddcl = DDCLAttention(s.dim, s.num_prototypes, temperature=s.temperature,
                                  residual=False, norm=False)
        self.head = nn.Linear(s.dim, n_classes)

    def forward(self, x: torch.Tensor):
        out = self.ddcl(self.encoder(x))
        return self.head(out.pooled), out


def _optimisers(model: JointModel, s: AblationSettings, eps: float):
    slow = [p for n, p in model.named_parameters() if n != "ddcl.prototypes"]
    fast = [model.ddcl.prototypes]
    make = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}[s.optimiser]
    return make(fast, lr=s.lr_p), make(slow, lr=eps * s.lr_p)


def cosine_factor(step: int, total: int, final: float) -> float:
    """The learning-rate multiplier after ``step`` of ``total`` optimiser steps: one cosine from
    1 at step 0 down to ``final`` at step ``total`` (and ``final`` after it)."""
    if total < 1 or not 0 < final <= 1:
        raise ValueError(f"total, final: expected total >= 1 and 0 < final <= 1, got {total}, "
                         f"{final}")
    progress_ = min(max(step, 0), total) / total
    return final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * progress_))


def _schedulers(optimisers, s: AblationSettings, steps_per_epoch: int):
    """One cosine decay per optimiser over the whole run (the same factor for both, so the
    ratio of the two rates stays eps)."""
    total = s.epochs * steps_per_epoch
    factor = functools.partial(cosine_factor, total=total, final=s.final_lr_fraction)
    return [torch.optim.lr_scheduler.LambdaLR(opt, factor) for opt in optimisers]


#: The per-epoch records of a :class:`RunHistory`, in the order :func:`_measure` takes them.
_MEASURED = ("separation", "v", "l_q", "perplexity", "accuracy")


@torch.no_grad()
def _measure(model: JointModel, x_tr, x_te, y_te, hist: RunHistory) -> None:
    _, out = model(x_tr)
    q = out.assignments[:, 0]
    hist.separation.append(float(protos.separation(model.ddcl.prototypes[0], "min")))
    hist.v.append(float(out.losses.v))
    hist.l_q.append(float(out.losses.l_q))
    hist.perplexity.append(float(protos.perplexity(q)))
    logits, _ = model(x_te)
    hist.accuracy.append(float((logits.argmax(-1) == y_te).float().mean()))


def run_one(tokens: Tokens, s: AblationSettings, eps: float, seed: int,
            run: RunDir | None = None) -> RunHistory:
    """Train one model with ratio ``eps`` from ``seed``; return its per-epoch history.

    One round of :func:`~ddcl_theory.runtime.training.fit` is one epoch; both learning rates
    decay by :func:`cosine_factor` over the ``s.epochs`` epochs; training stops after the first
    epoch whose L_q is not finite. ``run`` keeps the loop's checkpoints.
    """
    gen = profile.seed_everything(seed)
    device = profile.current().device
    x_tr, y_tr = torch.from_numpy(tokens.x_train), torch.from_numpy(tokens.y_train)
    x_te, y_te = torch.from_numpy(tokens.x_test), torch.from_numpy(tokens.y_test)
    n_classes = int(max(y_tr.max(), y_te.max())) + 1
    model = JointModel(x_tr.shape[-1], s, n_classes)     # initialised on the CPU: same weights
    model.to(device)
    x_tr, y_tr, x_te, y_te = (t.to(device) for t in (x_tr, y_tr, x_te, y_te))
    with torch.no_grad():
        model.ddcl.init_prototypes_from(model.encoder(x_tr), generator=gen)
    opt_p, opt_theta = _optimisers(model, s, eps)
    steps_per_epoch = math.ceil(x_tr.shape[0] / s.batch_size)
    schedulers = _schedulers((opt_p, opt_theta), s, steps_per_epoch)
    start = RunHistory(eps=eps, seed=seed)
    _measure(model, x_tr, x_te, y_te, start)              # index 0: before training
    hooks = []

    def batches(_round):
        order = torch.randperm(x_tr.shape[0], generator=gen)
        for i in range(0, x_tr.shape[0], s.batch_size):
            yield order[i:i + s.batch_size].to(device)

    def loss(forward, idx):
        logits, out = forward(x_tr[idx])
        ce = nn.functional.cross_entropy(logits, y_tr[idx])
        if not s.prototypes_see_task:   # prototypes descend lam * L_q only, the encoder all
            grad_p = torch.autograd.grad(s.lam * out.losses.l_q, model.ddcl.prototypes,
                                         retain_graph=True)[0]
            hooks.append(model.ddcl.prototypes.register_hook(lambda _g: grad_p))
        return ce + s.lam * out.losses.l_q

    def remove_hooks():
        while hooks:
            hooks.pop().remove()

    def end_of_round(_round):
        hist = RunHistory(eps=eps, seed=seed)
        _measure(model, x_tr, x_te, y_te, hist)
        return {k: getattr(hist, k)[0] for k in _MEASURED}

    log = fit(model, [opt_p, opt_theta], rounds=s.epochs, batches=batches, loss=loss,
              device=device, run=run, name=f"eps={eps},seed={seed}", generators={"gen": gen},
              schedulers=schedulers,
              after_step=remove_hooks, end_of_round=end_of_round,
              stop_if=lambda m: not np.isfinite(m["l_q"]), desc=f"eps={eps:g} seed={seed}")
    for record in log.metrics:
        for k in _MEASURED:
            getattr(start, k).append(record[k])
    start.train_loss = [float(np.mean(r)) for r in log.losses]
    return start


def run(settings: AblationSettings | None = None) -> AblationResult:
    """The full sweep: every eps in ``settings.eps_values`` times every seed.

    In the paper profile every finished (eps, seed) run is checkpointed (:class:`RunDir`), so
    a killed sweep resumes at the next unfinished run; each run seeds itself, so the resumed sweep
    gives the same numbers as an uninterrupted one.
    """
    s = settings or AblationSettings.from_profile()
    tokens = cifar_tokens(s.n_train_per_class, s.n_test, patch=s.patch, classes=s.classes)
    jobs = [(eps, seed) for eps in s.eps_values for seed in s.seeds]
    ckpt = RunDir("eps_ablation", s)
    histories = [ckpt.unit(f"eps={eps},seed={seed}",
                           functools.partial(run_one, tokens, s, eps, seed, ckpt))
                 for eps, seed in progress(jobs, desc="eps sweep")]
    ckpt.finish()
    return AblationResult(s, histories, tokens.source)


def run_scales(settings: AblationSettings | None = None) -> ScaleSweep:
    """The sweep of ``settings`` at each run length of ``settings.scales``: separate runs, each
    with its own cosine schedule over its own length (not checkpoints of one run)."""
    s = settings or AblationSettings.from_profile()
    return ScaleSweep(s, {epochs: run(s.replace(epochs=epochs)) for epochs in s.scales})


# --------------------------------------------------------------------------------------------
# The linearised model on real tokens (D8)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LinearSettings(Settings):
    """The small coupled model of :mod:`ddcl_theory.theory.coupled_model` on real tokens (the
    same in every profile: it is solved exactly, in float64)."""

    classes: tuple[int, int] = setting((0, 6), ge=0)
    n_per_class: int = setting(8, ge=1)
    patch: int = setting(8, ge=1)
    pca_dim: int = setting(4, ge=1)
    k: int = setting(3, ge=2)
    d: int = setting(2, ge=1)
    hidden: int = setting(6, ge=1)
    tau: float = setting(0.3, gt=0)
    lam: float = setting(1.0, ge=0)
    wd: float = setting(0.05, ge=0)
    seed: int = setting(0, ge=0)
    flow_steps: int = setting(1500, ge=1)
    step: float = setting(0.3, gt=0)
    eps_grid: tuple[float, ...] = setting(tuple(np.logspace(-3, 3, 49).tolist()), gt=0,
                                          nonempty=True)
    eps_fit: tuple[float, ...] = setting(tuple(np.logspace(-5, -2, 7).tolist()), gt=0,
                                         nonempty=True)
    eta_p: tuple[float, ...] = setting((0.25, 0.5, 1.0, 2.0), gt=0, nonempty=True)


@dataclass
class EquilibriumReport:
    """One equilibrium of the coupled model and its game Hessian blocks."""

    name: str
    objective: str
    equilibrium: cm.Equilibrium
    blocks: ts.Blocks
    separation: float
    ce: float
    l_q: float


@dataclass
class LinearResult:
    """Equilibria (``shared`` minimum, ``merged`` saddle, ``split`` two-objective) of the model."""

    settings: LinearSettings
    model: cm.CoupledModel
    reports: dict[str, EquilibriumReport]


def _report(model: cm.CoupledModel, name: str, objective: str,
            eq: cm.Equilibrium) -> EquilibriumReport:
    ce, l_q, _ = model.terms(eq.w)
    sep = float(protos.separation(model.unflatten(eq.w)["P"], "min"))
    return EquilibriumReport(name, objective, eq, model.game_hessian(eq.w, objective), sep,
                             float(ce), float(l_q))


def linear_analysis(s: LinearSettings | None = None) -> LinearResult:
    """Build the model and find three equilibria in float64 (flow, then damped Newton).

    * ``shared``: both blocks descend L = CE + lam L_q + wd/2 ||theta||^2 (flow at eps = 1);
    * ``merged``: the same potential, from the shared minimum with its two closest prototypes
      merged (an invariant set of the flow): a configuration with coincident prototypes;
    * ``split``: prototypes descend lam L_q only (Newton from the shared minimum).
    """
    s = s or LinearSettings()
    tok = cifar_tokens(s.n_per_class, 1, patch=s.patch, classes=s.classes, pca_dim=s.pca_dim)
    model = cm.CoupledModel(torch.from_numpy(tok.x_train).double(),
                            torch.from_numpy(tok.y_train).double(), k=s.k, d=s.d,
                            hidden=s.hidden, tau=s.tau, lam=s.lam, wd=s.wd)
    gen = profile.seed_everything(s.seed)
    w0 = model.init(gen)
    shared = cm.find_equilibrium(model, w0, "shared", eps=1.0, step=s.step,
                                 flow_steps=s.flow_steps)
    reports = {"shared": _report(model, "shared", "shared", shared)}
    w = shared.w.clone()
    p = model.unflatten(w)["P"]
    dist = torch.cdist(p, p) + torch.eye(s.k, dtype=p.dtype) * 1e9
    i, j = divmod(int(dist.argmin()), s.k)
    p[i] = p[j] = 0.5 * (p[i] + p[j])          # views into w: merge the closest pair
    merged = cm.find_equilibrium(model, w, "shared", eps=1.0, step=s.step,
                                 flow_steps=s.flow_steps // 3)
    reports["merged"] = _report(model, "merged", "shared", merged)
    split = cm.find_equilibrium(model, shared.w, "split", flow_steps=0, newton_steps=40)
    reports["split"] = _report(model, "split", "split", split)
    return LinearResult(s, model, reports)
