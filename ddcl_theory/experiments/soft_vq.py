"""Soft against hard vector quantisation in a small VQ-VAE on CIFAR-10 (claim D11).

One convolutional VQ-VAE (:class:`ddcl_theory.models.vqvae.VQVAE`, 64 codes) is trained with
four bottlenecks (:mod:`ddcl_theory.layers.quantizers`) that share the encoder and decoder (same
initialisation for the same seed), the data order, the optimiser and the budget:

* ``soft_uniform``: DDCL soft quantisation (soft centroid at temperature tau, auxiliary loss
  beta * L_q with q differentiated, no gradient estimator), its bank started at the hard
  VQ-VAE's codebook (uniform in [-1/K, 1/K], the same codes for the same seed);
* ``soft_data``: the same quantiser with its bank seeded by k-means++ on the first batch's
  tokens (a data start, like VectorQuantize's);
* ``hard``: VQ-VAE nearest-code quantisation with the straight-through estimator from the
  uniform codebook (the usual start; the source's 18.8% is about this one);
* ``ema``: ``vector_quantize_pytorch.VectorQuantize`` with an EMA codebook, k-means
  initialisation on the first batch and dead-code expiry, at a (decay, threshold) chosen by the
  selection below; every expiry (a code replaced by a token of the batch) is counted.

Temperature. The soft quantiser trains L_q with q differentiated, whose collapsed bank is stable
above ``T_c = 4 lambda_max(Cov z)`` (:func:`critical_temperature` with
``objective="quantisation"``). tau is set once, before training, as ``r * T_c`` of the first
batch's tokens and stays fixed; T_c of the same images' tokens is measured again at the end.

Selection (the same budget and criterion for every tuned arm). On a selection seed that decides
nothing, at the largest training size, one epoch, every candidate (each r of
``relative_temperatures`` for each start of the soft quantiser; each (decay, threshold) of
``ema_decays`` x ``ema_thresholds`` for VectorQuantize) is scored on a validation split (the last
training images, disjoint from every training subset). Criterion: the lowest validation MSE after
epoch 1 (the VQ-VAE's task); for VectorQuantize only among the settings whose expiry fired.

Deciding runs: for every training size and seed, the four arms for ``epochs`` epochs; the hard
VQ-VAE again for ``long_epochs`` at the largest size on the first ``long_seeds`` seeds. Per
epoch: the codebook usage of the training tokens during the epoch (fraction of the codes that
are the code, for the soft quantiser the argmax of q, of at least one token the epoch trained
on), the usage of the held-out tokens after the epoch, the held-out MSE beside the mean
predictor's, the expiries, the mean training loss, and the gradient norm reaching the codes that
no token of the batch picks beside the codes that some token picks (gradient-trained banks).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ddcl_theory import data
from ddcl_theory.layers.quantizers import (EMAVectorQuantizer, HardVQ, SoftDDCLQuantizer,
                                           uniform_codebook)
from ddcl_theory.metrics.convergence import convergence
from ddcl_theory.models.vqvae import VQVAE
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, confirmatory_seeds, setting
from ddcl_theory.runtime.threads import num_threads
from ddcl_theory.runtime.training import fit
from ddcl_theory.theory.collapse import critical_temperature

__all__ = [
    "ARMS",
    "CONFIRMATORY_SEEDS",
    "FULL_USAGE",
    "METHODS",
    "OBJECTIVE",
    "STARTS",
    "Arm",
    "Candidate",
    "EncoderGradients",
    "SoftVQResult",
    "SoftVQSettings",
    "VQRun",
    "candidates",
    "choose",
    "encoder_gradients",
    "prepare_images",
    "run",
    "steps_until_expiry",
    "train_one",
]

METHODS = ("soft", "ema", "hard")
#: How a bank starts: ``"uniform"`` (codes uniform in [-1/K, 1/K], the VQ-VAE's start) or
#: ``"data"`` (seeded from the first batch's tokens: k-means++ for the soft quantiser, k-means
#: for VectorQuantize).
STARTS = ("uniform", "data")
#: The four deciding arms of a result, by name.
ARMS = ("soft_uniform", "soft_data", "hard", "ema")
FULL_USAGE = 0.95        # "100% of the codebook": at least 61 of 64 codes (the rule's margin)
#: The objective the soft quantiser trains (L_q with q differentiated): its collapse threshold.
OBJECTIVE = "quantisation"
#: Seeds of the confirmatory (reference) run: the registered rule's n_seeds.
CONFIRMATORY_SEEDS = 10


@dataclass(frozen=True)
class SoftVQSettings(Settings):
    """Scale of the VQ-VAE comparison: cpu three small data scales of 16x16 images and 3 seeds
    (a pilot); reference three larger scales on the rule's 10 confirmatory seeds; paper 250,
    1,500 and 9,000 full-size images, 50 epochs (paper smoke test: one scale, one seed, one
    epoch, one candidate of each arm).

    Attributes:
        n_train: training-set sizes (first images of the CIFAR-10 subset), ascending: the data
            scales; the decision is taken at the last.
        n_test: held-out test images (first images of the test split).
        n_val: validation images for the selection (the last training images).
        downsample: average-pool the images by this factor first (2: 32x32 -> 16x16).
        hidden, latent_dim: convolution channels and token size D.
        num_codes: codebook size K (64 in the claim).
        epochs, batch_size, lr: Adam on reconstruction MSE + the quantiser's auxiliary loss.
        beta: weight of L_q (soft) and of the commitment loss (hard, ema).
        relative_temperatures: the soft quantiser's candidates r in tau = r * T_c (quantisation),
            for each start.
        ema_decays, ema_thresholds: VectorQuantize's candidates (decay, threshold_ema_dead_code).
        seeds: the deciding seeds (paired: one run per seed, arm and size).
        selection_seed: the seed of the selection runs (not a deciding seed).
        long_epochs, long_seeds: the long hard VQ-VAE runs (largest size, first seeds).
        n_show: test images whose reconstructions are kept for the figure.
        threads: torch threads during the run (None: leave as is).
    """

    n_train: tuple[int, ...] = setting((320, 640, 1280), reference=(1280, 2560, 5120),
                                       paper=(250, 1500, 9000), smoke=(250,), ge=1,
                                       nonempty=True)
    n_test: int = setting(500, reference=1000, paper=1000, smoke=128, ge=1)
    n_val: int = setting(500, reference=1000, paper=1000, smoke=128, ge=1)
    downsample: int = setting(2, paper=1, ge=1)
    hidden: int = setting(32, paper=128, ge=1)
    latent_dim: int = setting(16, paper=64, ge=1)
    num_codes: int = setting(64, ge=1)
    epochs: int = setting(3, reference=5, paper=50, smoke=1, ge=1)
    batch_size: int = setting(32, paper=128, ge=1)
    lr: float = setting(2e-3, gt=0)
    beta: float = setting(0.25, ge=0)
    relative_temperatures: tuple[float, ...] = setting((0.001, 0.003, 0.01, 0.03, 0.1, 0.3),
                                                       smoke=(0.01,), gt=0, nonempty=True)
    # smoke: one VectorQuantize setting (the selection code still runs)
    ema_decays: tuple[float, ...] = setting((0.8, 0.9, 0.99), smoke=(0.9,), gt=0, lt=1,
                                            nonempty=True)
    ema_thresholds: tuple[float, ...] = setting((1.0, 2.0), smoke=(2.0,), gt=0, nonempty=True)
    seeds: tuple[int, ...] = setting((0, 1, 2),
                                     reference=confirmatory_seeds(CONFIRMATORY_SEEDS),
                                     paper=confirmatory_seeds(CONFIRMATORY_SEEDS), smoke=(0,),
                                     ge=0, nonempty=True)
    selection_seed: int = setting(999, reference=1999, paper=1999, ge=0)
    long_epochs: int = setting(20, reference=50, paper=50, smoke=1, ge=1)
    long_seeds: int = setting(1, reference=5, paper=1, ge=1)
    n_show: int = setting(6, ge=1)
    threads: int | None = setting(1, paper=None, ge=1)

    def check(self) -> None:
        if list(self.n_train) != sorted(set(self.n_train)) or any(
                n < self.batch_size for n in self.n_train):
            raise ValueError(f"SoftVQSettings.n_train: expected ascending distinct ints >= "
                             f"batch_size {self.batch_size}, got {self.n_train!r}")
        if self.selection_seed in self.seeds:
            raise ValueError(f"SoftVQSettings.selection_seed: expected a seed that does not "
                             f"decide, got {self.selection_seed!r}")
        if self.long_seeds > len(self.seeds):
            raise ValueError(f"SoftVQSettings.long_seeds: expected at most the {len(self.seeds)} "
                             f"seeds, got {self.long_seeds!r}")


@dataclass(frozen=True)
class Arm:
    """One bottleneck with its setting: ``method`` and, for ``"soft"``, ``r`` (tau = r T_c)
    and ``start`` (one of :data:`STARTS`, default ``"data"``); for ``"ema"``, ``decay`` and
    ``threshold`` (threshold_ema_dead_code). The hard VQ-VAE starts uniform, VectorQuantize
    from the data (:attr:`bank`)."""

    method: str
    r: float | None = None
    decay: float | None = None
    threshold: float | None = None
    start: str | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method: expected one of {METHODS}, got {self.method!r}")
        if (self.method == "soft") != (self.r is not None):
            raise ValueError(f"r: the soft quantiser (and only it) takes r, got {self!r}")
        if (self.method == "ema") != (self.decay is not None and self.threshold is not None):
            raise ValueError(f"decay, threshold: VectorQuantize (and only it) takes both, "
                             f"got {self!r}")
        if self.start is not None and (self.method != "soft" or self.start not in STARTS):
            raise ValueError(f"start: the soft quantiser (and only it) takes a start among "
                             f"{STARTS}, got {self!r}")

    @property
    def bank(self) -> str:
        """How the bank starts: one of :data:`STARTS`."""
        if self.method == "soft":
            return self.start or "data"
        return "uniform" if self.method == "hard" else "data"

    @property
    def name(self) -> str:
        """The arm's name among :data:`ARMS`."""
        return f"soft_{self.bank}" if self.method == "soft" else self.method

    @property
    def label(self) -> str:
        if self.method == "soft":
            return f"soft {self.bank} r={self.r:g}"
        if self.method == "ema":
            return f"ema decay={self.decay:g} threshold={self.threshold:g}"
        return "hard"

    @property
    def key(self) -> str:
        return self.label.replace(" ", "-").replace("=", "")


@dataclass
class VQRun:
    """One training run (``epochs`` entries per list; entry e is after / during epoch e + 1).

    Attributes:
        arm, seed, n_train: what was trained; temperature: tau (soft only, else None).
        held_out: "test" for deciding runs, "validation" for selection runs.
        first_batch_usage: fraction of the codes used by the tokens of the very first batch,
            before any step.
        usage: fraction of the codes that are some training token's code during each epoch.
        held_out_usage: fraction of the codes used by the held-out tokens after each epoch.
        held_out_mse: held-out reconstruction MSE after each epoch.
        mean_mse: the mean predictor's held-out MSE (every pixel at the training mean).
        loss: mean training loss of each epoch (the plateau rule's curve).
        plateau: :func:`ddcl_theory.metrics.convergence.convergence` of ``loss``.
        expiries: codes replaced by dead-code expiry in each epoch (0 but for ``ema``).
        grad_unused, grad_used: mean over the epoch's steps of the mean gradient norm of a code
            that no token of the batch picks / that some token picks (NaN for the EMA codebook,
            which no gradient trains, and for a step with no such code).
        t_c_start, t_c_end: T_c = 4 lambda_max of the first batch's tokens before training and
            with the trained encoder.
        mse_codes: final held-out MSE decoded from the hard (argmax) codes.
        mean_top_q: final mean largest assignment on the held-out tokens (1 for hard codes).
        reconstructions: (n_show, H, W, C) final reconstructions of the first held-out images.
    """

    arm: Arm
    seed: int
    n_train: int
    temperature: float | None
    held_out: str
    first_batch_usage: float
    usage: list[float]
    held_out_usage: list[float]
    held_out_mse: list[float]
    mean_mse: float
    loss: list[float]
    plateau: bool
    expiries: list[int]
    mse_codes: float
    mean_top_q: float
    reconstructions: np.ndarray = field(repr=False)
    grad_unused: list[float] = field(default_factory=list)
    grad_used: list[float] = field(default_factory=list)
    t_c_start: float = math.nan
    t_c_end: float = math.nan

    @property
    def rel_mse(self) -> list[float]:
        """held-out MSE / the mean predictor's, per epoch."""
        return [m / self.mean_mse for m in self.held_out_mse]

    @property
    def tau_over_tc(self) -> tuple[float, float]:
        """(tau / T_c before training, tau / T_c with the trained encoder); NaN but for the
        soft quantiser, inf when the encoder maps the images to one token."""
        if self.temperature is None:
            return math.nan, math.nan
        return tuple(self.temperature / t if t > 0 else math.inf       # tokens all equal
                     for t in (self.t_c_start, self.t_c_end))

    @property
    def grad_ratio(self) -> list[float]:
        """Per epoch: gradient norm reaching an unused code / reaching a used one."""
        return [u / v if v > 0 else math.nan for u, v in zip(self.grad_unused, self.grad_used)]


@dataclass(frozen=True)
class Candidate:
    """One selection run's score: ``arm``, validation usage and MSE / mean predictor's after
    epoch 1, the training-token usage of epoch 1, the expiries in the run, whether it may be
    chosen (``eligible``) and was."""

    arm: Arm
    usage: float
    rel_mse: float
    expiries: int
    eligible: bool
    chosen: bool
    train_usage: float = math.nan


@dataclass
class SoftVQResult:
    """The selection and the deciding runs with the facts needed to read them.

    ``soft`` (uniform start), ``soft_data`` and ``ema`` are the chosen arms; ``long_runs`` the
    long hard VQ-VAE runs; ``test_images`` (n_show, H, W, C) in [0, 1].
    """

    settings: SoftVQSettings
    selection: list[Candidate]
    soft: Arm
    ema: Arm
    runs: list[VQRun]
    test_images: np.ndarray
    image_size: int
    tokens_per_image: int
    source: str
    threshold_at_init: float = math.nan
    soft_data: Arm | None = None
    long_runs: list[VQRun] = field(default_factory=list)

    def arm(self, name: str) -> Arm:
        """The deciding arm ``name`` (one of :data:`ARMS`; ``"soft"`` is ``"soft_uniform"``)."""
        arms = {"soft": self.soft, "soft_uniform": self.soft, "soft_data": self.soft_data,
                "ema": self.ema, "hard": Arm("hard")}
        if name not in arms or arms[name] is None:
            raise ValueError(f"name: expected one of {ARMS}, got {name!r}")
        return arms[name]

    def select(self, name: str, n_train: int | None = None) -> list[VQRun]:
        """The deciding runs of one arm at one size (default: the largest), by seed."""
        n = self.settings.n_train[-1] if n_train is None else n_train
        arm = self.arm(name)
        runs = [x for x in self.runs if x.arm == arm and x.n_train == n]
        return sorted(runs, key=lambda x: x.seed)

    def values(self, name: str, attribute: str, n_train: int | None = None) -> np.ndarray:
        """(seeds, epochs) of a per-epoch attribute (or (seeds,) of a scalar one), by seed."""
        return np.array([getattr(x, attribute) for x in self.select(name, n_train)],
                        dtype=np.float64)


def prepare_images(settings: SoftVQSettings) -> dict:
    """The tensors of the experiment, images (N, C, H, W) in [0, 1] average-pooled by
    ``settings.downsample`` (when they stay at least 8 pixels wide), centred by the mean of the
    largest training subset: ``train`` (max(n_train) images), ``val`` (the last ``n_val``
    training images), ``test`` (``n_test``), ``mean`` (1, C, 1, 1) and ``source``."""
    d = data.load_cifar10()
    n = settings.n_train[-1]
    if n + settings.n_val > len(d.x_train):
        raise ValueError(f"n_train, n_val: {n} + {settings.n_val} exceed the "
                         f"{len(d.x_train)} training images")

    def tensor(x):
        x = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()
        f = settings.downsample
        if f > 1 and x.shape[-1] // f >= 8 and x.shape[-1] % f == 0:
            x = torch.nn.functional.avg_pool2d(x, f)
        return x

    x_tr = tensor(d.x_train[:n])
    x_val = tensor(d.x_train[len(d.x_train) - settings.n_val:])
    x_te = tensor(d.x_test[: settings.n_test])
    mean = x_tr.mean((0, 2, 3), keepdim=True)
    return {"train": x_tr - mean, "val": x_val - mean, "test": x_te - mean, "mean": mean,
            "source": d.source}


def _flat(tokens: torch.Tensor) -> torch.Tensor:
    """Tokens (B, T, D) -> (B T, D), the layout of the critical temperature's tokens."""
    return tokens.reshape(-1, tokens.shape[-1])


def _quantizer(settings: SoftVQSettings, arm: Arm):
    d, k = settings.latent_dim, settings.num_codes
    if arm.method == "soft":
        return SoftDDCLQuantizer(d, k, beta=settings.beta)
    if arm.method == "ema":
        return EMAVectorQuantizer(d, k, decay=arm.decay, commitment_weight=settings.beta,
                                  kmeans_init=True, threshold_ema_dead_code=arm.threshold)
    return HardVQ(d, k, beta=settings.beta)


def _build(settings: SoftVQSettings, arm: Arm, channels: int, seed: int) -> VQVAE:
    profile.seed_everything(seed)
    quantizer = _quantizer(settings, arm)
    if arm.method == "soft" and arm.bank == "uniform":
        profile.seed_everything(seed)   # the hard VQ-VAE's codebook of this seed, code for code
        quantizer.set_codebook(uniform_codebook(settings.num_codes, settings.latent_dim))
    profile.seed_everything(seed)     # the same encoder and decoder for every arm of a seed
    return VQVAE(quantizer, in_channels=channels, hidden=settings.hidden,
                 latent_dim=settings.latent_dim)


def _codebook_parameter(model: VQVAE) -> torch.nn.Parameter | None:
    """The gradient-trained bank of the model's quantiser (None for the EMA codebook)."""
    q = model.quantizer
    if isinstance(q, SoftDDCLQuantizer):
        return q.layer.prototypes
    if isinstance(q, HardVQ):
        return q.embedding
    return None


def count_expiries(model: VQVAE, tally: dict) -> None:
    """Count every code that VectorQuantize's dead-code expiry replaces into
    ``tally["expiries"]`` (wraps the codebook's ``replace``; a no-op for other quantisers)."""
    vq = getattr(model.quantizer, "vq", None)
    if vq is None:
        return
    codebook = vq._codebook
    replace = codebook.replace

    def counted(batch_samples, batch_mask, seq_mask=None):
        before = codebook.embed.detach().clone()
        replace(batch_samples, batch_mask, seq_mask=seq_mask)
        tally["expiries"] += int((codebook.embed.detach() != before).any(-1).sum())

    codebook.replace = counted


def track_code_gradients(model: VQVAE, tally: dict) -> None:
    """After every backward pass, append to ``tally["grad_unused"]`` / ``tally["grad_used"]``
    the mean gradient norm of the codes that ``tally["batch_used"]`` (K,) bool marks unused /
    used in that batch (a hook on the bank; a no-op for the EMA codebook)."""
    param = _codebook_parameter(model)
    if param is None:
        return
    k = model.quantizer.num_codes

    def hook(grad: torch.Tensor) -> None:
        norms = grad.detach().reshape(k, -1).double().norm(dim=-1).cpu()
        used = tally["batch_used"]
        if used.any():
            tally["grad_used"].append(float(norms[used].mean()))
        if (~used).any():
            tally["grad_unused"].append(float(norms[~used].mean()))

    param.register_hook(hook)


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan


@torch.no_grad()
def _evaluate(model: VQVAE, x: torch.Tensor, batch: int = 250) -> dict:
    model.eval()
    sq, sq_codes, codes, tops, recons = 0.0, 0.0, [], [], []
    grid = (x.shape[-2] // 4, x.shape[-1] // 4)
    for i in range(0, len(x), batch):
        xb = x[i:i + batch]
        out = model(xb)
        sq += float(((out.reconstruction - xb) ** 2).sum())
        from_codes = model.decode(model.quantizer.lookup(out.quantized.codes), grid)
        sq_codes += float(((from_codes - xb) ** 2).sum())
        codes.append(out.quantized.codes.reshape(-1))
        tops.append(out.quantized.assignments.max(-1).values.reshape(-1))
        recons.append(out.reconstruction)
    model.train()
    k = model.quantizer.num_codes
    used = torch.bincount(torch.cat(codes), minlength=k) > 0
    return {"mse": sq / x.numel(), "mse_codes": sq_codes / x.numel(),
            "usage": float(used.double().mean()), "top": float(torch.cat(tops).double().mean()),
            "reconstruction": torch.cat(recons)}


def mean_predictor_mse(x_train: torch.Tensor, x_held: torch.Tensor) -> float:
    """Held-out MSE of the reconstruction that puts every pixel at the training images'
    per-channel mean."""
    return float(((x_held - x_train.mean((0, 2, 3), keepdim=True)) ** 2).mean())


def unit_key(arm: Arm, seed: int, n_train: int, held_out: str = "test",
             epochs: int | None = None) -> str:
    """The run-directory key of one training run, e.g. ``"soft-uniform-r0.1-n640-seed0"``
    (``epochs`` names a run longer than the deciding ones)."""
    prefix = "select-" if held_out == "validation" else ""
    suffix = f"-e{epochs}" if epochs is not None else ""
    return f"{prefix}{arm.key}-n{n_train}-seed{seed}{suffix}"


def _critical(model: VQVAE, images: torch.Tensor) -> float:
    with torch.no_grad():
        return critical_temperature(_flat(model.encode(images)), objective=OBJECTIVE)


def train_one(settings: SoftVQSettings, arm: Arm, seed: int, n_train: int, tensors: dict, *,
              epochs: int | None = None, held_out: str = "test",
              run_dir: RunDir | None = None) -> VQRun:
    """Train one VQ-VAE on the first ``n_train`` training images and measure it after every
    epoch on the ``held_out`` split (``"test"`` or ``"validation"``); deterministic given the
    seed on a fixed CPU. The epochs run through :func:`ddcl_theory.runtime.training.fit`; with
    an enabled ``run_dir`` a killed run resumes at its last finished epoch."""
    if held_out not in ("test", "validation"):
        raise ValueError(f"held_out: expected 'test' or 'validation', got {held_out!r}")
    long = epochs is not None and epochs != settings.epochs
    epochs = settings.epochs if epochs is None else epochs
    device = profile.current().device
    x_tr = tensors["train"][:n_train].to(device)
    x_ho = tensors["test" if held_out == "test" else "val"].to(device)
    model = _build(settings, arm, x_tr.shape[1], seed).to(device)
    gen = torch.Generator().manual_seed(seed)
    first_order = torch.randperm(len(x_tr), generator=gen)
    first_images = x_tr[first_order[: settings.batch_size].to(device)]
    k = settings.num_codes
    t_c_start = _critical(model, first_images)
    tau = None
    if arm.method == "soft":
        # the loss trained is L_q with q differentiated: its threshold is T_c = 4 lambda_max
        tau = arm.r * t_c_start
        model.quantizer.layer.temperature.set(tau)
        if arm.bank == "data":
            with torch.no_grad():
                model.quantizer.layer.init_prototypes_from(model.encode(first_images),
                                                           generator=gen)
    opt = torch.optim.Adam(model.parameters(), lr=settings.lr)
    steps = math.ceil(len(x_tr) / settings.batch_size)
    tally = {"counts": torch.zeros(k, dtype=torch.float64), "first_batch_usage": None,
             "expiries": 0, "batch_used": torch.zeros(k, dtype=torch.bool), "grad_used": [],
             "grad_unused": []}
    count_expiries(model, tally)
    track_code_gradients(model, tally)

    def batches(epoch: int):
        order = first_order if epoch == 0 else torch.randperm(len(x_tr), generator=gen)
        tally.update(counts=torch.zeros(k, dtype=torch.float64), expiries=0, grad_used=[],
                     grad_unused=[])
        for i in range(steps):
            yield x_tr[order[i * settings.batch_size:(i + 1) * settings.batch_size].to(device)]

    def loss(forward, xb):
        out = forward(xb)
        batch_counts = torch.bincount(out.quantized.codes.detach().reshape(-1).cpu(),
                                      minlength=k).double()
        if tally["first_batch_usage"] is None:
            tally["first_batch_usage"] = float((batch_counts > 0).double().mean())
        tally["counts"] += batch_counts
        tally["batch_used"] = batch_counts > 0
        return ((out.reconstruction - xb) ** 2).mean() + out.quantized.loss

    def end_of_round(epoch: int) -> dict:
        ev = _evaluate(model, x_ho)
        return {"usage": float((tally["counts"] > 0).double().mean()),
                "held_out_usage": ev["usage"], "held_out_mse": ev["mse"],
                "expiries": int(tally["expiries"]),
                "grad_unused": _mean(tally["grad_unused"]),
                "grad_used": _mean(tally["grad_used"]),
                "first_batch_usage": tally["first_batch_usage"]}

    log = fit(model, opt, rounds=epochs, batches=batches, loss=loss, device=device,
              run=run_dir, name=unit_key(arm, seed, n_train, held_out, epochs if long else None),
              generators={"order": gen}, end_of_round=end_of_round,
              desc=f"VQ-VAE {arm.label} n={n_train} seed {seed}")
    history = {name: [m[name] for m in log.metrics]
               for name in ("usage", "held_out_usage", "held_out_mse", "expiries",
                            "grad_unused", "grad_used")}
    curve = [float(np.mean(x)) for x in log.losses]
    final = _evaluate(model, x_ho)
    n_show = min(settings.n_show, len(x_ho))
    recon = (final["reconstruction"][:n_show] + tensors["mean"].to(device)).clamp(0, 1)
    return VQRun(arm=arm, seed=seed, n_train=n_train, temperature=tau, held_out=held_out,
                 first_batch_usage=float(log.metrics[0]["first_batch_usage"]), **history,
                 mean_mse=mean_predictor_mse(x_tr.cpu(), x_ho.cpu()), loss=curve,
                 plateau=convergence(curve).plateau, mse_codes=final["mse_codes"],
                 mean_top_q=final["top"],
                 reconstructions=recon.permute(0, 2, 3, 1).cpu().numpy(),
                 t_c_start=t_c_start, t_c_end=_critical(model, first_images))


def candidates(settings: SoftVQSettings) -> tuple[list[Arm], list[Arm], list[Arm]]:
    """(soft candidates from the uniform start, from the data start, VectorQuantize
    candidates): the selection grids, of equal size when the settings give each the same
    number of settings."""
    soft = [Arm("soft", r=r, start="uniform") for r in settings.relative_temperatures]
    soft_data = [Arm("soft", r=r, start="data") for r in settings.relative_temperatures]
    ema = [Arm("ema", decay=d, threshold=t) for d in settings.ema_decays
           for t in settings.ema_thresholds]
    return soft, soft_data, ema


def choose(runs: list[VQRun]) -> list[Candidate]:
    """Score selection runs (one per candidate, same seed and size) by the criterion: the lowest
    validation MSE after epoch 1, per arm (:attr:`Arm.name`); VectorQuantize only among the
    settings whose expiry fired in the run (when none fired, among all, and the comparison is
    void). Returns one :class:`Candidate` per run, in order, exactly one ``chosen`` per arm."""
    rows = []
    for x in runs:
        eligible = x.arm.method != "ema" or sum(x.expiries) > 0
        rows.append([x, eligible])
    for name in {x.arm.name for x in runs}:
        mine = [row for row in rows if row[0].arm.name == name]
        if not any(eligible for _, eligible in mine):
            for row in mine:
                row[1] = True
    chosen = {}
    for x, eligible in rows:
        best = chosen.get(x.arm.name)
        if eligible and (best is None or x.rel_mse[0] < best.rel_mse[0]):
            chosen[x.arm.name] = x
    return [Candidate(x.arm, x.held_out_usage[0], x.rel_mse[0], int(sum(x.expiries)),
                      bool(eligible) and (x.arm.method != "ema" or sum(x.expiries) > 0),
                      chosen[x.arm.name] is x, x.usage[0]) for x, eligible in rows]


def run(settings: SoftVQSettings | None = None) -> SoftVQResult:
    """The selection, then every (size, seed, arm) of ``settings`` on the CIFAR-10 subset, then
    the long hard VQ-VAE runs.

    In the reference and paper profiles every finished run is kept in the run directory
    (:class:`ddcl_theory.runtime.rundir.RunDir`) and an unfinished one resumes from its last
    epoch.
    """
    s = settings or SoftVQSettings.from_profile()
    run_dir = RunDir("soft_vq", s)
    n = s.n_train[-1]
    with num_threads(s.threads):
        tensors = prepare_images(s)
        trials = [run_dir.unit(unit_key(arm, s.selection_seed, n, "validation"),
                               lambda arm=arm: train_one(s, arm, s.selection_seed, n, tensors,
                                                         epochs=1, held_out="validation",
                                                         run_dir=run_dir))
                  for grid in candidates(s) for arm in grid]
        selection = choose(trials)
        chosen = {c.arm.name: c.arm for c in selection if c.chosen}
        arms = [chosen["soft_uniform"], chosen["soft_data"], Arm("hard"), chosen["ema"]]
        trained = []
        for size in s.n_train:
            for seed in s.seeds:
                for arm in arms:
                    trained.append(run_dir.unit(
                        unit_key(arm, seed, size),
                        lambda arm=arm, seed=seed, size=size: train_one(
                            s, arm, seed, size, tensors, run_dir=run_dir)))
        long_runs = [run_dir.unit(unit_key(Arm("hard"), seed, n, epochs=s.long_epochs),
                                  lambda seed=seed: train_one(s, Arm("hard"), seed, n, tensors,
                                                              epochs=s.long_epochs,
                                                              run_dir=run_dir))
                     for seed in s.seeds[: s.long_seeds]]
    run_dir.finish()
    x_te = tensors["test"]
    n_show = min(s.n_show, len(x_te))
    shown = (x_te[:n_show] + tensors["mean"]).clamp(0, 1).permute(0, 2, 3, 1).numpy()
    # the dead-code threshold against a code's moving count at initialisation
    tokens_per_batch = s.batch_size * (x_te.shape[-2] // 4) * (x_te.shape[-1] // 4)
    return SoftVQResult(s, selection, chosen["soft_uniform"], chosen["ema"], trained, shown,
                        int(x_te.shape[-1]), (x_te.shape[-2] // 4) * (x_te.shape[-1] // 4),
                        tensors["source"], threshold_at_init=tokens_per_batch / s.num_codes,
                        soft_data=chosen["soft_data"], long_runs=long_runs)


def steps_until_expiry(start_count: float, decay: float, threshold: float) -> int:
    """Steps after which a code that no token picks any more falls below the dead-code
    threshold: the least n with ``start_count * decay**n < threshold`` (0 when already below).
    """
    if start_count < threshold:
        return 0
    return int(math.floor(math.log(threshold / start_count) / math.log(decay))) + 1


# ------------------------------------------------------------------------- no estimator needed
@dataclass(frozen=True)
class EncoderGradients:
    """Norm of the gradient of the reconstruction loss alone (no auxiliary loss) with respect to
    the encoder's parameters, per quantiser."""

    soft: float
    hard_straight_through: float
    hard_without_estimator: float


def encoder_gradients(images: torch.Tensor, *, relative_temperature: float = 0.1,
                      num_codes: int = 64, latent_dim: int = 16, hidden: int = 32,
                      seed: int = 0) -> EncoderGradients:
    """Reconstruction-loss gradient reaching the encoder through each quantiser.

    ``images`` (B, C, H, W), centred. The soft quantiser (tau = r T_c of the quantisation
    objective, k-means++ bank on these tokens) passes a gradient by plain autograd; the hard one
    only with the straight-through estimator, and exactly none without it.
    """
    norms = {}
    for name in ("soft", "hard_straight_through", "hard_without_estimator"):
        gen = profile.seed_everything(seed)
        if name == "soft":
            quantizer = SoftDDCLQuantizer(latent_dim, num_codes)
        else:
            quantizer = HardVQ(latent_dim, num_codes,
                               straight_through=name == "hard_straight_through")
        model = VQVAE(quantizer, in_channels=images.shape[1], hidden=hidden,
                      latent_dim=latent_dim)
        if name == "soft":
            with torch.no_grad():
                tokens = model.encode(images)
                quantizer.layer.temperature.set(
                    relative_temperature * critical_temperature(_flat(tokens),
                                                                objective=OBJECTIVE))
                quantizer.layer.init_prototypes_from(tokens, generator=gen)
        out = model(images)
        loss = ((out.reconstruction - images) ** 2).mean()
        grads = torch.autograd.grad(loss, list(model.encoder.parameters()), allow_unused=True)
        squares = sum((g.double() ** 2).sum() for g in grads if g is not None)
        norms[name] = float(torch.sqrt(squares + torch.zeros((), dtype=torch.float64)))
    return EncoderGradients(**norms)
