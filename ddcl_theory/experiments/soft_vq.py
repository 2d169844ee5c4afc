"""Soft against hard vector quantisation in a small VQ-VAE on CIFAR-10 (claim D11).

One convolutional VQ-VAE (:class:`ddcl_theory.models.vqvae.VQVAE`, 64 codes) is trained three
ways with the same encoder, decoder, optimiser and budget, differing only in the bottleneck
(:mod:`ddcl_theory.layers.quantizers`):

* ``soft``: DDCL soft quantisation (soft centroid at temperature tau, auxiliary loss beta * L_q),
  prototypes seeded by k-means++ on the first batch's tokens, no gradient estimator;
* ``hard``: VQ-VAE nearest-code quantisation with the straight-through estimator and the
  codebook + commitment loss, codebook uniform in [-1/K, 1/K] (the usual initialisation);
* ``ema``: ``vector_quantize_pytorch.VectorQuantize`` with an EMA codebook, k-means
  initialisation and dead-code expiry.

Temperature. Squared distances scale with the tokens, and the tokens' scale is whatever the
encoder's initialisation gives, so a bare number for tau means nothing. The soft quantiser's tau
is set once, at initialisation, as ``r * T_c`` with ``T_c = 2 lambda_max(Cov z)`` of the first
batch's tokens: the critical temperature above which the collapsed bank (every prototype at the
token mean) is a stable minimum of the free energy (chapter ``free_energy``). The sweep runs
several ``r``; tau then stays fixed while the encoder trains.

Measured from the first batch on, per epoch: the fraction of codes that are the code (for the soft
quantiser: the argmax of q) of at least one training token during the epoch ("usage"), the
perplexity of that epoch's code histogram, for the soft quantiser also the perplexity of the mean
q; after every epoch the mean squared reconstruction error on held-out images beside the trivial
reconstruction (every pixel at the training mean). For the soft quantiser the final
reconstruction is also decoded from its argmax codes alone, which tells a discrete code from a
continuous channel.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ddcl_theory import data
from ddcl_theory.experiments import require_positive_ints
from ddcl_theory.experiments.laplacian_vit import num_threads
from ddcl_theory.layers.quantizers import make_quantizer
from ddcl_theory.metrics.prototypes import perplexity
from ddcl_theory.models.vqvae import VQVAE
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.training import fit
from ddcl_theory.theory.collapse import critical_temperature

__all__ = [
    "FULL_USAGE",
    "METHODS",
    "RECONSTRUCTS",
    "EncoderGradients",
    "SoftVQResult",
    "SoftVQSettings",
    "VQRun",
    "encoder_gradients",
    "first_epoch_at",
    "prepare_images",
    "run",
    "temperature_table",
    "train_one",
    "unit_key",
    "usage_after_first_epoch",
]

METHODS = ("soft", "hard", "ema")
FULL_USAGE = 0.95        # "100% of the codebook": at least 61 of 64 codes (one dead code allowed)
RECONSTRUCTS = 0.8       # a reconstruction counts when its error is below 80% of the trivial one


@dataclass(frozen=True)
class SoftVQSettings:
    """Scale of the VQ-VAE comparison; :meth:`from_profile` picks it from the active profile.

    Attributes:
        n_train, n_test: training and held-out images (first images of the CIFAR-10 subset).
        downsample: average-pool the images by this factor first (2: 32x32 -> 16x16).
        hidden, latent_dim: convolution channels and token size D.
        num_codes: codebook size K (64 in the claim).
        epochs, batch_size, lr: Adam on reconstruction MSE + the quantiser's auxiliary loss.
        beta: weight of L_q (soft) and of the commitment loss (hard, ema).
        relative_temperatures: the sweep of r in tau = r * T_c (soft quantiser).
        main_temperature: the r shown as "the" soft quantiser (one of the sweep).
        seeds: one training run per seed, method and temperature.
        n_show: test images whose reconstructions are kept for the figure.
        threads: torch threads during the run (None: leave as is).
    """

    n_train: int
    n_test: int
    downsample: int
    hidden: int
    latent_dim: int
    num_codes: int
    epochs: int
    batch_size: int
    lr: float
    beta: float
    relative_temperatures: tuple[float, ...]
    main_temperature: float
    seeds: tuple[int, ...]
    n_show: int = 6
    threads: int | None = 1

    @classmethod
    def from_profile(cls) -> SoftVQSettings:
        p = profile.current()
        return cls(n_train=p.pick(cpu=640, paper=10000, smoke=256),
                   n_test=p.pick(cpu=500, paper=1000, smoke=128),
                   downsample=p.pick(cpu=2, paper=1), hidden=p.pick(cpu=32, paper=128),
                   latent_dim=p.pick(cpu=16, paper=64), num_codes=64,
                   epochs=p.pick(cpu=6, paper=50, smoke=2), batch_size=p.pick(cpu=32, paper=128),
                   lr=2e-3, beta=0.25,
                   relative_temperatures=p.pick(cpu=(0.01, 0.1, 1.0),
                                                paper=(0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0),
                                                smoke=(0.1, 1.0)),
                   main_temperature=0.1, seeds=p.pick(cpu=(0, 1, 2), paper=(0, 1, 2), smoke=(0,)),
                   threads=p.pick(cpu=1, paper=None))

    def __post_init__(self) -> None:
        require_positive_ints(self, skip=("lr", "beta", "relative_temperatures",
                                          "main_temperature", "seeds", "threads"))
        if not self.seeds:
            raise ValueError("seeds: expected at least one seed")
        if not self.relative_temperatures or any(
                not (isinstance(r, (int, float)) and r > 0) for r in self.relative_temperatures):
            raise ValueError(f"relative_temperatures: expected positive numbers, "
                             f"got {self.relative_temperatures!r}")
        if self.main_temperature not in self.relative_temperatures:
            raise ValueError(f"main_temperature: expected one of {self.relative_temperatures}, "
                             f"got {self.main_temperature!r}")
        if not (self.lr > 0 and self.beta >= 0):
            raise ValueError(f"lr, beta: expected lr > 0 and beta >= 0, got {self.lr}, {self.beta}")


@dataclass
class VQRun:
    """One training run.

    Attributes:
        method: one of :data:`METHODS`; seed; relative_temperature r and temperature tau (soft
            quantiser only, else None).
        first_batch_usage: fraction of codes used by the tokens of the very first batch.
        usage: (epochs,) fraction of codes used by the training tokens during each epoch.
        perplexity: (epochs,) perplexity of each epoch's code histogram (hard codes / argmax).
        soft_perplexity: (epochs,) perplexity of the epoch's mean assignment q (equal to
            ``perplexity`` for the hard quantisers).
        test_mse: (epochs,) reconstruction MSE on the held-out images after each epoch.
        test_mse_codes: final held-out MSE when the decoder gets the code vectors of the hard
            codes (for the soft quantiser: of the argmax codes instead of the soft centroids).
        test_usage: final fraction of codes used on the held-out images.
        mean_top_q: final mean largest assignment on the held-out tokens (1 for hard codes).
        token_spread: final 2 lambda_max(Cov z) of the held-out tokens divided by tau (soft only):
            above 1 the bank sits below its critical temperature.
        reconstructions: (n_show, H, W, C) final reconstructions of the first test images.
    """

    method: str
    seed: int
    relative_temperature: float | None
    temperature: float | None
    first_batch_usage: float
    usage: list[float]
    perplexity: list[float]
    soft_perplexity: list[float]
    test_mse: list[float]
    test_mse_codes: float
    test_usage: float
    mean_top_q: float
    token_spread: float | None
    reconstructions: np.ndarray


@dataclass
class SoftVQResult:
    """All runs with the facts needed to read them.

    ``trivial_mse`` is the held-out MSE of the reconstruction that puts every pixel at the
    training mean (per channel); ``test_images`` (n_show, H, W, C) in [0, 1].
    """

    settings: SoftVQSettings
    runs: list[VQRun]
    trivial_mse: float
    test_images: np.ndarray
    image_size: int
    tokens_per_image: int
    source: str

    def select(self, method: str, r: float | None = None) -> list[VQRun]:
        """The runs of one method (and, for ``"soft"``, one relative temperature), all seeds."""
        if method not in METHODS:
            raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
        if method == "soft" and r is None:
            r = self.settings.main_temperature
        return [x for x in self.runs if x.method == method
                and (method != "soft" or x.relative_temperature == r)]

    def curve(self, method: str, name: str,
              r: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(mean, std) over seeds of a per-epoch field, each of shape (epochs,)."""
        values = np.array([getattr(x, name) for x in self.select(method, r)], dtype=np.float64)
        return values.mean(0), values.std(0)

    def final(self, method: str, name: str, r: float | None = None) -> tuple[float, float]:
        """(mean, std) over seeds of a field's final value (last epoch for per-epoch fields)."""
        vals = [getattr(x, name) for x in self.select(method, r)]
        arr = np.array([v[-1] if isinstance(v, list) else v for v in vals], dtype=np.float64)
        return float(arr.mean()), float(arr.std())

    def usage(self, method: str, r: float | None = None) -> np.ndarray:
        """(seeds, epochs) the per-epoch codebook usage of one method's runs."""
        return np.array([x.usage for x in self.select(method, r)], dtype=np.float64)

    def usage_later(self, method: str, r: float | None = None) -> tuple[float, float]:
        """(mean, std) over seeds of the usage after the first epoch
        (:func:`usage_after_first_epoch`)."""
        return usage_after_first_epoch(self.select(method, r))


def prepare_images(settings: SoftVQSettings) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                        str]:
    """(train (N, C, H, W), test (M, C, H, W), channel mean (1, C, 1, 1), source).

    Images in [0, 1], average-pooled by ``settings.downsample`` when they stay at least 8 pixels
    wide (the 8x8 fallback digits are left as they are), then centred by the training mean.
    """
    d = data.load_cifar10()
    x_tr = torch.from_numpy(d.x_train[: settings.n_train]).permute(0, 3, 1, 2).contiguous()
    x_te = torch.from_numpy(d.x_test[: settings.n_test]).permute(0, 3, 1, 2).contiguous()
    f = settings.downsample
    if f > 1 and x_tr.shape[-1] // f >= 8 and x_tr.shape[-1] % f == 0:
        x_tr = torch.nn.functional.avg_pool2d(x_tr, f)
        x_te = torch.nn.functional.avg_pool2d(x_te, f)
    mean = x_tr.mean((0, 2, 3), keepdim=True)
    return x_tr - mean, x_te - mean, mean, d.source


def _flat(tokens: torch.Tensor) -> torch.Tensor:
    """Tokens (B, T, D) -> (B T, D), the layout of the critical temperature's tokens."""
    return tokens.reshape(-1, tokens.shape[-1])


def _build(settings: SoftVQSettings, method: str, channels: int, seed: int) -> VQVAE:
    profile.seed_everything(seed)
    quantizer = make_quantizer(method, settings.latent_dim, settings.num_codes,
                               beta=settings.beta)
    return VQVAE(quantizer, in_channels=channels, hidden=settings.hidden,
                 latent_dim=settings.latent_dim)


@torch.no_grad()
def _evaluate(model: VQVAE, x: torch.Tensor, batch: int = 250) -> dict:
    model.eval()
    sq, sq_codes, codes, tops, toks, recons = 0.0, 0.0, [], [], [], []
    grid = (x.shape[-2] // 4, x.shape[-1] // 4)
    for i in range(0, len(x), batch):
        xb = x[i:i + batch]
        out = model(xb)
        sq += float(((out.reconstruction - xb) ** 2).sum())
        from_codes = model.decode(model.quantizer.lookup(out.quantized.codes), grid)
        sq_codes += float(((from_codes - xb) ** 2).sum())
        codes.append(out.quantized.codes.reshape(-1))
        tops.append(out.quantized.assignments.max(-1).values.reshape(-1))
        toks.append(out.tokens.reshape(-1, out.tokens.shape[-1]))
        recons.append(out.reconstruction)
    model.train()
    k = model.quantizer.num_codes
    used = torch.bincount(torch.cat(codes), minlength=k) > 0
    return {"mse": sq / x.numel(), "mse_codes": sq_codes / x.numel(),
            "usage": float(used.double().mean()), "top": float(torch.cat(tops).double().mean()),
            "tokens": torch.cat(toks), "reconstruction": torch.cat(recons)}


def unit_key(method: str, seed: int, relative_temperature: float | None = None) -> str:
    """The run-directory key of one training run, e.g. ``"soft-r0.1-seed0"``."""
    return f"{method}-r{relative_temperature:g}-seed{seed}" if method == "soft" \
        else f"{method}-seed{seed}"


def train_one(settings: SoftVQSettings, method: str, seed: int, tensors: tuple,
              relative_temperature: float | None = None,
              run_dir: RunDir | None = None) -> VQRun:
    """Train one VQ-VAE and measure it (deterministic given the seed on a fixed CPU).

    The epochs run through :func:`ddcl_theory.runtime.training.fit`; with an enabled
    ``run_dir`` a killed run resumes at its last finished epoch.
    """
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    x_tr, x_te, mean = tensors
    device = profile.current().device
    x_tr, x_te = x_tr.to(device), x_te.to(device)
    model = _build(settings, method, x_tr.shape[1], seed).to(device)
    gen = torch.Generator().manual_seed(seed)
    first_order = torch.randperm(len(x_tr), generator=gen)
    k = settings.num_codes
    tau = None
    if method == "soft":
        if relative_temperature is None:
            raise ValueError("relative_temperature: the soft quantiser needs one")
        with torch.no_grad():
            first = model.encode(x_tr[first_order[: settings.batch_size].to(device)])
            # trains MSE + beta L_q with q differentiated; T_c here is F's (2 lambda_max), not
            # L_q's (4 lambda_max): a mismatch kept this round (issue 14)
            tau = relative_temperature * critical_temperature(_flat(first), objective="free_energy")
            model.quantizer.layer.set_temperature(tau)
            model.quantizer.layer.init_prototypes_from(first, generator=gen)
    opt = torch.optim.Adam(model.parameters(), lr=settings.lr)
    steps = math.ceil(len(x_tr) / settings.batch_size)
    tally = {"counts": torch.zeros(k, dtype=torch.float64),
             "mass": torch.zeros(k, dtype=torch.float64), "first_batch_usage": None}

    def batches(epoch: int):
        order = first_order if epoch == 0 else torch.randperm(len(x_tr), generator=gen)
        tally["counts"] = torch.zeros(k, dtype=torch.float64)
        tally["mass"] = torch.zeros(k, dtype=torch.float64)
        for i in range(steps):
            yield x_tr[order[i * settings.batch_size:(i + 1) * settings.batch_size].to(device)]

    def loss(forward, xb):
        out = forward(xb)
        batch_counts = torch.bincount(out.quantized.codes.detach().reshape(-1).cpu(),
                                      minlength=k).double()
        if tally["first_batch_usage"] is None:
            tally["first_batch_usage"] = float((batch_counts > 0).double().mean())
        tally["counts"] += batch_counts
        tally["mass"] += out.quantized.assignments.detach().reshape(-1, k).double().sum(0).cpu()
        return ((out.reconstruction - xb) ** 2).mean() + out.quantized.loss

    def end_of_round(epoch: int) -> dict:
        counts, mass = tally["counts"], tally["mass"]
        return {"usage": float((counts > 0).double().mean()),
                "perplexity": float(perplexity(counts[None] / counts.sum())),
                "soft_perplexity": float(perplexity(mass[None] / mass.sum())),
                "test_mse": _evaluate(model, x_te)["mse"],
                "first_batch_usage": tally["first_batch_usage"]}

    log = fit(model, opt, rounds=settings.epochs, batches=batches, loss=loss, device=device,
              run=run_dir, name=unit_key(method, seed, relative_temperature),
              generators={"order": gen}, end_of_round=end_of_round,
              desc=f"VQ-VAE {method} seed {seed}")
    history = {name: [m[name] for m in log.metrics]
               for name in ("usage", "perplexity", "soft_perplexity", "test_mse")}
    final = _evaluate(model, x_te)
    spread = (critical_temperature(final["tokens"], objective="free_energy") / tau
              if tau is not None else None)  # F's T_c / tau (the trained L_q's is twice it)
    n_show = min(settings.n_show, len(x_te))
    recon = (final["reconstruction"][:n_show] + mean.to(device)).clamp(0, 1)
    return VQRun(method=method, seed=seed,
                 relative_temperature=relative_temperature if method == "soft" else None,
                 temperature=tau, first_batch_usage=float(log.metrics[0]["first_batch_usage"]),
                 **history, test_mse_codes=final["mse_codes"], test_usage=final["usage"],
                 mean_top_q=final["top"], token_spread=spread,
                 reconstructions=recon.permute(0, 2, 3, 1).cpu().numpy())


def run(settings: SoftVQSettings | None = None) -> SoftVQResult:
    """Train every (method, temperature, seed) of ``settings`` on the CIFAR-10 subset.

    In the paper profile every finished run is kept in the run directory
    (:class:`ddcl_theory.runtime.rundir.RunDir`) and an unfinished one resumes from its last epoch.
    """
    s = settings or SoftVQSettings.from_profile()
    run_dir = RunDir("soft_vq", s)
    with num_threads(s.threads):
        x_tr, x_te, mean, source = prepare_images(s)
        tensors = (x_tr, x_te, mean)
        jobs = []
        for seed in s.seeds:
            jobs += [("soft", seed, r) for r in s.relative_temperatures]
            jobs += [(method, seed, None) for method in ("hard", "ema")]
        trained = [run_dir.unit(unit_key(m, seed, r),
                                lambda m=m, seed=seed, r=r: train_one(s, m, seed, tensors, r,
                                                                      run_dir))
                   for m, seed, r in jobs]
    run_dir.finish()
    trivial = float((x_te ** 2).mean())
    n_show = min(s.n_show, len(x_te))
    shown = (x_te[:n_show] + mean).clamp(0, 1).permute(0, 2, 3, 1).numpy()
    return SoftVQResult(s, trained, trivial, shown, int(x_tr.shape[-1]),
                        (x_tr.shape[-2] // 4) * (x_tr.shape[-1] // 4), source)


# ------------------------------------------------------------------------- no estimator needed
@dataclass(frozen=True)
class EncoderGradients:
    """Norm of the gradient of the reconstruction loss alone (no auxiliary loss) with respect to
    the encoder's parameters, per quantiser."""

    soft: float
    hard_straight_through: float
    hard_without_estimator: float


def encoder_gradients(images: torch.Tensor, *, num_codes: int = 64, latent_dim: int = 16,
                      hidden: int = 32, seed: int = 0) -> EncoderGradients:
    """Reconstruction-loss gradient reaching the encoder through each quantiser.

    ``images`` (B, C, H, W), centred. The soft quantiser (tau = 0.1 T_c, k-means++ bank on these
    tokens) passes a gradient by plain autograd; the hard one only with the straight-through
    estimator, and exactly none without it.
    """
    from ddcl_theory.layers.quantizers import HardVQ, SoftDDCLQuantizer

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
                quantizer.layer.set_temperature(  # F's T_c; below both thresholds anyway
                    0.1 * critical_temperature(_flat(tokens), objective="free_energy"))
                quantizer.layer.init_prototypes_from(tokens, generator=gen)
        out = model(images)
        loss = ((out.reconstruction - images) ** 2).mean()
        grads = torch.autograd.grad(loss, list(model.encoder.parameters()), allow_unused=True)
        squares = sum((g.double() ** 2).sum() for g in grads if g is not None)
        norms[name] = float(torch.sqrt(squares + torch.zeros((), dtype=torch.float64)))
    return EncoderGradients(**norms)


# ------------------------------------------------------------------------- analysis
def first_epoch_at(values: np.ndarray, level: float) -> int | None:
    """The first epoch (1-based) at which ``values`` (epochs,) reach ``level``; None if never."""
    hits = np.flatnonzero(values >= level)
    return int(hits[0]) + 1 if hits.size else None


def usage_after_first_epoch(runs: list[VQRun]) -> tuple[float, float]:
    """(mean, std) over seeds of each run's mean usage over epochs 2..E (epoch 1 when E = 1).

    Epoch 1 reflects how the codebook was seeded; the later epochs show what training keeps.
    """
    per_run = [float(np.mean(x.usage[1:] if len(x.usage) > 1 else x.usage)) for x in runs]
    return float(np.mean(per_run)), float(np.std(per_run))


def temperature_table(result: SoftVQResult) -> list[dict]:
    """Per relative temperature r (soft quantiser): seed means and spreads of what D11 needs.

    Keys: r, usage_first (epoch-1 usage), usage_min (lowest epoch usage over epochs and seeds),
    usage_later (:func:`usage_after_first_epoch`), usage_last, rel_mse (final held-out MSE /
    trivial; mean, std), rel_mse_codes (from argmax codes), soft_perplexity (last epoch), top_q,
    spread (2 lambda_max / tau), sustained (usage >= FULL_USAGE at every epoch of every seed),
    reconstructs (rel_mse + std < RECONSTRUCTS, and the
    same for the argmax codes), collapsed (rel_mse - std > RECONSTRUCTS).
    """
    rows = []
    for r in result.settings.relative_temperatures:
        runs = result.select("soft", r)
        usage = np.array([x.usage for x in runs])
        rel = np.array([x.test_mse[-1] for x in runs]) / result.trivial_mse
        rel_codes = np.array([x.test_mse_codes for x in runs]) / result.trivial_mse
        rows.append({
            "r": r,
            "usage_first": (float(usage[:, 0].mean()), float(usage[:, 0].std())),
            "usage_min": float(usage.min()),
            "usage_later": usage_after_first_epoch(runs),
            "usage_last": (float(usage[:, -1].mean()), float(usage[:, -1].std())),
            "rel_mse": (float(rel.mean()), float(rel.std())),
            "rel_mse_codes": (float(rel_codes.mean()), float(rel_codes.std())),
            "soft_perplexity": float(np.mean([x.soft_perplexity[-1] for x in runs])),
            "top_q": float(np.mean([x.mean_top_q for x in runs])),
            "spread": float(np.mean([x.token_spread for x in runs])),
            "sustained": bool(usage.min() >= FULL_USAGE),
            "reconstructs": bool(rel.mean() + rel.std() < RECONSTRUCTS
                                 and rel_codes.mean() + rel_codes.std() < RECONSTRUCTS),
            "collapsed": bool(rel.mean() - rel.std() > RECONSTRUCTS),
        })
    return rows
