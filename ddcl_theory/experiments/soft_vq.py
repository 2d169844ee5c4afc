"""Soft against hard vector quantisation in a small VQ-VAE on CIFAR-10 (claim D11).

One convolutional VQ-VAE (:class:`ddcl_theory.models.vqvae.VQVAE`, 64 codes) is trained with three
bottlenecks (:mod:`ddcl_theory.layers.quantizers`) that share the encoder and decoder (same
initialisation for the same seed), the data order, the optimiser and the budget:

* ``soft``: DDCL soft quantisation (soft centroid at temperature tau, auxiliary loss beta * L_q
  with q differentiated), prototypes seeded by k-means++ on the first batch's tokens, no
  gradient estimator;
* ``ema``: ``vector_quantize_pytorch.VectorQuantize`` with an EMA codebook, k-means
  initialisation on the first batch and dead-code expiry, at a (decay, threshold) chosen by the
  selection below; every expiry (a code replaced by a token of the batch) is counted;
* ``hard``: VQ-VAE nearest-code quantisation with the straight-through estimator, codebook
  uniform in [-1/K, 1/K] (the usual initialisation; the source's 18.8% is about this one).

Temperature. The soft quantiser trains L_q with q differentiated, whose collapsed bank is stable
above ``T_c = 4 lambda_max(Cov z)`` (:func:`critical_temperature` with
``objective="quantisation"``). tau is set once, before training, as ``r * T_c`` of the first
batch's tokens and stays fixed.

Selection (the same budget and criterion for both tuned arms). On a selection seed that is not
one of the deciding seeds, at the largest training size, one epoch, every candidate (each r of
``relative_temperatures`` for the soft quantiser; each (decay, threshold) of ``ema_decays`` x
``ema_thresholds`` for VectorQuantize) is scored on a validation split (the last training
images, disjoint from every training subset). Criterion: the lowest validation MSE after epoch 1
(the VQ-VAE's task); for VectorQuantize only among the settings whose expiry fired in that run
(a setting under which expiry cannot act is not the baseline the rule names).

Deciding runs: for every training size and seed, the three arms for ``epochs`` epochs. After
every epoch: the codebook usage on the held-out test tokens (fraction of the codes that are the
code, for the soft quantiser the argmax of q, of at least one test token), the held-out MSE
beside the mean predictor's, the number of expiries in the epoch; during every epoch: the usage
on the training tokens and the mean training loss (the curve of the plateau rule).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ddcl_theory import data
from ddcl_theory.layers.quantizers import EMAVectorQuantizer, HardVQ, SoftDDCLQuantizer
from ddcl_theory.metrics.convergence import convergence
from ddcl_theory.models.vqvae import VQVAE
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, setting
from ddcl_theory.runtime.threads import num_threads
from ddcl_theory.runtime.training import fit
from ddcl_theory.theory.collapse import critical_temperature

__all__ = [
    "FULL_USAGE",
    "METHODS",
    "OBJECTIVE",
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
    "train_one",
]

METHODS = ("soft", "ema", "hard")
FULL_USAGE = 0.95        # "100% of the codebook": at least 61 of 64 codes (the rule's margin)
#: The objective the soft quantiser trains (L_q with q differentiated): its collapse threshold.
OBJECTIVE = "quantisation"


@dataclass(frozen=True)
class SoftVQSettings(Settings):
    """Scale of the VQ-VAE comparison: cpu three small data scales of 16x16 images and 3 seeds;
    reference three larger scales and 5 seeds; paper 250, 1,500 and 9,000 full-size images, 5
    seeds, 50 epochs (paper smoke test: one scale, one seed, one epoch, one candidate of each
    arm).

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
        relative_temperatures: the soft quantiser's candidates r in tau = r * T_c (quantisation).
        ema_decays, ema_thresholds: VectorQuantize's candidates (decay, threshold_ema_dead_code).
        seeds: the deciding seeds (paired: one run per seed, arm and size).
        selection_seed: the seed of the selection runs (not a deciding seed).
        n_show: test images whose reconstructions are kept for the figure.
        threads: torch threads during the run (None: leave as is).
    """

    n_train: tuple[int, ...] = setting((160, 320, 640), reference=(640, 1280, 2560),
                                       paper=(250, 1500, 9000), smoke=(250,), ge=1,
                                       nonempty=True)
    n_test: int = setting(500, reference=1000, paper=1000, smoke=128, ge=1)
    n_val: int = setting(500, reference=1000, paper=1000, smoke=128, ge=1)
    downsample: int = setting(2, paper=1, ge=1)
    hidden: int = setting(32, paper=128, ge=1)
    latent_dim: int = setting(16, paper=64, ge=1)
    num_codes: int = setting(64, ge=1)
    epochs: int = setting(4, reference=6, paper=50, smoke=1, ge=1)
    batch_size: int = setting(32, paper=128, ge=1)
    lr: float = setting(2e-3, gt=0)
    beta: float = setting(0.25, ge=0)
    relative_temperatures: tuple[float, ...] = setting((0.01, 0.03, 0.1, 0.3, 1.0, 3.0),
                                                       smoke=(0.1,), gt=0, nonempty=True)
    # smoke: one VectorQuantize setting (the selection code still runs)
    ema_decays: tuple[float, ...] = setting((0.8, 0.9, 0.99), smoke=(0.9,), gt=0, lt=1,
                                            nonempty=True)
    ema_thresholds: tuple[float, ...] = setting((1.0, 2.0), smoke=(2.0,), gt=0, nonempty=True)
    seeds: tuple[int, ...] = setting((0, 1, 2), reference=(0, 1, 2, 3, 4),
                                     paper=(0, 1, 2, 3, 4), smoke=(0,), ge=0, nonempty=True)
    selection_seed: int = setting(1000, ge=0)
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


@dataclass(frozen=True)
class Arm:
    """One bottleneck with its setting: ``method`` and, for ``"soft"``, ``r`` (tau = r T_c);
    for ``"ema"``, ``decay`` and ``threshold`` (threshold_ema_dead_code)."""

    method: str
    r: float | None = None
    decay: float | None = None
    threshold: float | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method: expected one of {METHODS}, got {self.method!r}")
        if (self.method == "soft") != (self.r is not None):
            raise ValueError(f"r: the soft quantiser (and only it) takes r, got {self!r}")
        if (self.method == "ema") != (self.decay is not None and self.threshold is not None):
            raise ValueError(f"decay, threshold: VectorQuantize (and only it) takes both, "
                             f"got {self!r}")

    @property
    def label(self) -> str:
        if self.method == "soft":
            return f"soft r={self.r:g}"
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
        first_batch_usage: fraction of the codes used by the tokens of the very first batch.
        usage: fraction of the codes that are some training token's code during each epoch.
        held_out_usage: fraction of the codes used by the held-out tokens after each epoch.
        held_out_mse: held-out reconstruction MSE after each epoch.
        mean_mse: the mean predictor's held-out MSE (every pixel at the training mean).
        loss: mean training loss of each epoch (the plateau rule's curve).
        plateau: :func:`ddcl_theory.metrics.convergence.convergence` of ``loss``.
        expiries: codes replaced by dead-code expiry in each epoch (0 but for ``ema``).
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

    @property
    def rel_mse(self) -> list[float]:
        """held-out MSE / the mean predictor's, per epoch."""
        return [m / self.mean_mse for m in self.held_out_mse]


@dataclass(frozen=True)
class Candidate:
    """One selection run's score: ``arm``, validation usage and MSE / mean predictor's after
    epoch 1, the expiries in the run, whether it may be chosen (``eligible``) and was."""

    arm: Arm
    usage: float
    rel_mse: float
    expiries: int
    eligible: bool
    chosen: bool


@dataclass
class SoftVQResult:
    """The selection and the deciding runs with the facts needed to read them.

    ``soft`` and ``ema`` are the chosen arms; ``test_images`` (n_show, H, W, C) in [0, 1].
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

    def arm(self, method: str) -> Arm:
        return {"soft": self.soft, "ema": self.ema, "hard": Arm("hard")}[method]

    def select(self, method: str, n_train: int | None = None) -> list[VQRun]:
        """The deciding runs of one method at one size (default: the largest), by seed."""
        n = self.settings.n_train[-1] if n_train is None else n_train
        arm = self.arm(method)
        runs = [x for x in self.runs if x.arm == arm and x.n_train == n]
        return sorted(runs, key=lambda x: x.seed)

    def values(self, method: str, name: str, n_train: int | None = None) -> np.ndarray:
        """(seeds, epochs) of a per-epoch field (or (seeds,) of a scalar one), by seed."""
        return np.array([getattr(x, name) for x in self.select(method, n_train)],
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
    profile.seed_everything(seed)     # the same encoder and decoder for every arm of a seed
    return VQVAE(quantizer, in_channels=channels, hidden=settings.hidden,
                 latent_dim=settings.latent_dim)


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


def unit_key(arm: Arm, seed: int, n_train: int, held_out: str = "test") -> str:
    """The run-directory key of one training run, e.g. ``"soft-r0.1-n640-seed0"``."""
    prefix = "select-" if held_out == "validation" else ""
    return f"{prefix}{arm.key}-n{n_train}-seed{seed}"


def train_one(settings: SoftVQSettings, arm: Arm, seed: int, n_train: int, tensors: dict, *,
              epochs: int | None = None, held_out: str = "test",
              run_dir: RunDir | None = None) -> VQRun:
    """Train one VQ-VAE on the first ``n_train`` training images and measure it after every
    epoch on the ``held_out`` split (``"test"`` or ``"validation"``); deterministic given the
    seed on a fixed CPU. The epochs run through :func:`ddcl_theory.runtime.training.fit`; with
    an enabled ``run_dir`` a killed run resumes at its last finished epoch."""
    if held_out not in ("test", "validation"):
        raise ValueError(f"held_out: expected 'test' or 'validation', got {held_out!r}")
    epochs = settings.epochs if epochs is None else epochs
    device = profile.current().device
    x_tr = tensors["train"][:n_train].to(device)
    x_ho = tensors["test" if held_out == "test" else "val"].to(device)
    model = _build(settings, arm, x_tr.shape[1], seed).to(device)
    gen = torch.Generator().manual_seed(seed)
    first_order = torch.randperm(len(x_tr), generator=gen)
    k = settings.num_codes
    tau = None
    if arm.method == "soft":
        with torch.no_grad():
            first = model.encode(x_tr[first_order[: settings.batch_size].to(device)])
            # the loss trained is L_q with q differentiated: its threshold is T_c = 4 lambda_max
            tau = arm.r * critical_temperature(_flat(first), objective=OBJECTIVE)
            model.quantizer.layer.temperature.set(tau)
            model.quantizer.layer.init_prototypes_from(first, generator=gen)
    opt = torch.optim.Adam(model.parameters(), lr=settings.lr)
    steps = math.ceil(len(x_tr) / settings.batch_size)
    tally = {"counts": torch.zeros(k, dtype=torch.float64), "first_batch_usage": None,
             "expiries": 0}
    count_expiries(model, tally)

    def batches(epoch: int):
        order = first_order if epoch == 0 else torch.randperm(len(x_tr), generator=gen)
        tally["counts"] = torch.zeros(k, dtype=torch.float64)
        tally["expiries"] = 0
        for i in range(steps):
            yield x_tr[order[i * settings.batch_size:(i + 1) * settings.batch_size].to(device)]

    def loss(forward, xb):
        out = forward(xb)
        batch_counts = torch.bincount(out.quantized.codes.detach().reshape(-1).cpu(),
                                      minlength=k).double()
        if tally["first_batch_usage"] is None:
            tally["first_batch_usage"] = float((batch_counts > 0).double().mean())
        tally["counts"] += batch_counts
        return ((out.reconstruction - xb) ** 2).mean() + out.quantized.loss

    def end_of_round(epoch: int) -> dict:
        ev = _evaluate(model, x_ho)
        return {"usage": float((tally["counts"] > 0).double().mean()),
                "held_out_usage": ev["usage"], "held_out_mse": ev["mse"],
                "expiries": int(tally["expiries"]),
                "first_batch_usage": tally["first_batch_usage"]}

    log = fit(model, opt, rounds=epochs, batches=batches, loss=loss, device=device,
              run=run_dir, name=unit_key(arm, seed, n_train, held_out),
              generators={"order": gen}, end_of_round=end_of_round,
              desc=f"VQ-VAE {arm.label} n={n_train} seed {seed}")
    history = {name: [m[name] for m in log.metrics]
               for name in ("usage", "held_out_usage", "held_out_mse", "expiries")}
    curve = [float(np.mean(x)) for x in log.losses]
    final = _evaluate(model, x_ho)
    n_show = min(settings.n_show, len(x_ho))
    recon = (final["reconstruction"][:n_show] + tensors["mean"].to(device)).clamp(0, 1)
    return VQRun(arm=arm, seed=seed, n_train=n_train, temperature=tau, held_out=held_out,
                 first_batch_usage=float(log.metrics[0]["first_batch_usage"]), **history,
                 mean_mse=mean_predictor_mse(x_tr.cpu(), x_ho.cpu()), loss=curve,
                 plateau=convergence(curve).plateau, mse_codes=final["mse_codes"],
                 mean_top_q=final["top"],
                 reconstructions=recon.permute(0, 2, 3, 1).cpu().numpy())


def candidates(settings: SoftVQSettings) -> tuple[list[Arm], list[Arm]]:
    """(soft candidates, VectorQuantize candidates): the two selection grids, of equal size
    when the settings give both the same number of settings."""
    soft = [Arm("soft", r=r) for r in settings.relative_temperatures]
    ema = [Arm("ema", decay=d, threshold=t) for d in settings.ema_decays
           for t in settings.ema_thresholds]
    return soft, ema


def choose(runs: list[VQRun]) -> list[Candidate]:
    """Score selection runs (one per candidate, same seed and size) by the criterion: the lowest
    validation MSE after epoch 1, per method; VectorQuantize only among the settings whose
    expiry fired in the run (when none fired, among all, and the comparison is void). Returns
    one :class:`Candidate` per run, in order, exactly one ``chosen`` per method."""
    rows = []
    for x in runs:
        eligible = x.arm.method != "ema" or sum(x.expiries) > 0
        rows.append([x, eligible])
    for method in {x.arm.method for x in runs}:
        mine = [row for row in rows if row[0].arm.method == method]
        if not any(eligible for _, eligible in mine):
            for row in mine:
                row[1] = True
    chosen = {}
    for x, eligible in rows:
        best = chosen.get(x.arm.method)
        if eligible and (best is None or x.rel_mse[0] < best.rel_mse[0]):
            chosen[x.arm.method] = x
    return [Candidate(x.arm, x.held_out_usage[0], x.rel_mse[0], int(sum(x.expiries)),
                      bool(eligible) and (x.arm.method != "ema" or sum(x.expiries) > 0),
                      chosen[x.arm.method] is x) for x, eligible in rows]


def run(settings: SoftVQSettings | None = None) -> SoftVQResult:
    """The selection, then every (size, seed, arm) of ``settings`` on the CIFAR-10 subset.

    In the reference and paper profiles every finished run is kept in the run directory
    (:class:`ddcl_theory.runtime.rundir.RunDir`) and an unfinished one resumes from its last
    epoch.
    """
    s = settings or SoftVQSettings.from_profile()
    run_dir = RunDir("soft_vq", s)
    n = s.n_train[-1]
    with num_threads(s.threads):
        tensors = prepare_images(s)
        soft_arms, ema_arms = candidates(s)
        trials = [run_dir.unit(unit_key(arm, s.selection_seed, n, "validation"),
                               lambda arm=arm: train_one(s, arm, s.selection_seed, n, tensors,
                                                         epochs=1, held_out="validation",
                                                         run_dir=run_dir))
                  for arm in soft_arms + ema_arms]
        selection = choose(trials)
        soft = next(c.arm for c in selection if c.chosen and c.arm.method == "soft")
        ema = next(c.arm for c in selection if c.chosen and c.arm.method == "ema")
        trained = []
        for size in s.n_train:
            for seed in s.seeds:
                for arm in (soft, ema, Arm("hard")):
                    trained.append(run_dir.unit(
                        unit_key(arm, seed, size),
                        lambda arm=arm, seed=seed, size=size: train_one(
                            s, arm, seed, size, tensors, run_dir=run_dir)))
    run_dir.finish()
    x_te = tensors["test"]
    n_show = min(s.n_show, len(x_te))
    shown = (x_te[:n_show] + tensors["mean"]).clamp(0, 1).permute(0, 2, 3, 1).numpy()
    # the dead-code threshold against a code's moving count at initialisation
    tokens_per_batch = s.batch_size * (x_te.shape[-2] // 4) * (x_te.shape[-1] // 4)
    return SoftVQResult(s, selection, soft, ema, trained, shown, int(x_te.shape[-1]),
                        (x_te.shape[-2] // 4) * (x_te.shape[-1] // 4), tensors["source"],
                        threshold_at_init=tokens_per_batch / s.num_codes)


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
