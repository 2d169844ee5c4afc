"""DDCL-Attention against its peers, Slot Attention and a Perceiver-style readout (claim D17).

One model, three interchangeable readouts: a per-token MLP encoder, then a readout
(:class:`~ddcl_theory.layers.peers.DDCLReadoutAdapter`,
:class:`~ddcl_theory.layers.peers.SlotAttentionReadout` or
:class:`~ddcl_theory.layers.peers.PerceiverReadout`, all with S slots/latents/prototypes),
then a linear classifier on the readout's ``pooled`` (B, dim). Loss = cross-entropy
+ ``ddcl_lam`` * L_q for DDCL (the peers have no auxiliary loss). Two Adam optimisers: the
*bank* (the prototypes, the latent array, the initial slots or the slot mean and log-std) with
``lr_bank``, everything else with ``lr``.

Collapse is measured on the training set before training (epoch 0) and after every epoch, for
every readout alike (:mod:`ddcl_theory.readout_metrics`):

* ``vectors``: the slot/latent/prototype vectors (final slots per sequence for Slot Attention; the
  learned bank for DDCL and Perceiver) - min/mean pairwise distance, effective rank;
* ``states``: the per-slot output states (B, S, dim) - same metrics;
* ``maps``: the attention rows (B, S, T) as S vectors in R^T - two slots that read the same
  tokens have the same row;
* ``usage``: fraction of the S that win at least one token, the perplexity of the mean
  normalised assignment (balance) and the per-token perplexity (S when tokens are shared equally,
  i.e. no competition).

Starts (``bank_init``): ``"random"`` (each readout's own initialisation; DDCL's prototypes by
k-means++ on the encoded tokens when ``ddcl_kmeans_init``) or ``"near_equal"``: every learned bank
starts at one vector plus ``near_equal_noise`` * N(0, 1) per entry, the collapsed state slightly
perturbed. Whether the perturbation then grows or shrinks is a property of the mechanism. (For
Slot Attention with ``slot_init="gaussian"`` there is no per-slot bank; its near-equal start is a
small ``slot_init_std``.)

:func:`inference_cost` times the three readouts (eval mode, no gradient, identical sizes) at
several sequence lengths in one run, interleaved, and returns time ratios to DDCL. Timings are
reported, never asserted.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields

import numpy as np
import torch
from torch import Tensor, nn

from .. import profile
from .. import readout_metrics as rm
from ..layers.peers import (PERCEIVER_SOFTMAX, SLOT_INITS, DDCLReadoutAdapter,
                            PerceiverReadout, ReadoutOutput, SlotAttentionReadout, check_tokens)
from ..models.encoders import TokenMLP
from ..progress import progress

READOUTS = ("ddcl", "slot", "perceiver")
BANK_INITS = ("random", "near_equal")

__all__ = ["READOUTS", "BANK_INITS", "PeerSettings", "TokenSet", "CollapseRecord",
           "ReadoutHistory", "PeerResult", "CostResult", "synthetic_tokens", "build_readout",
           "bank_parameters", "ReadoutClassifier", "train_readout", "run", "inference_cost"]


# --------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PeerSettings:
    """Everything the comparison depends on (values per profile in :meth:`from_profile`)."""

    readouts: tuple[str, ...] = READOUTS
    num_slots: int = 6                 # S: slots, latents and prototypes alike
    dim: int = 16                      # readout width
    hidden: int = 32                   # token-encoder hidden width
    epochs: int = 8
    batch_size: int = 32
    lr: float = 3e-3                   # Adam: encoder, readout projections, classifier
    lr_bank: float = 3e-3              # Adam: prototypes / latents / initial slots
    bank_init: str = "random"
    near_equal_noise: float = 1e-3
    ddcl_temperature: float = 0.01     # squared-distance scale; T_c = 2 lambda_max ~ 0.4 at init
    ddcl_lam: float = 0.1
    ddcl_kmeans_init: bool = True
    slot_temperature: float = 1.0
    slot_iterations: int = 3
    slot_init: str = "gaussian"
    slot_init_std: float = 1.0
    perceiver_temperature: float = 1.0
    perceiver_softmax: str = "tokens"
    perceiver_latent_std: float = 1.0
    seed: int = 0
    eval_batch: int = 256
    cost_lengths: tuple[int, ...] = (32, 128, 512)
    cost_batch: int = 8
    cost_repeats: int = 7
    cost_warmup: int = 2

    def __post_init__(self) -> None:
        if not self.readouts or any(r not in READOUTS for r in self.readouts):
            raise ValueError(f"readouts: expected a non-empty tuple drawn from {READOUTS}, "
                             f"got {self.readouts!r}")
        for name in ("num_slots", "dim", "hidden", "epochs", "batch_size", "slot_iterations",
                     "eval_batch", "cost_batch", "cost_repeats"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {v!r}")
        if isinstance(self.cost_warmup, bool) or not isinstance(self.cost_warmup, int) \
                or self.cost_warmup < 0:
            raise ValueError(f"cost_warmup: expected an int >= 0, got {self.cost_warmup!r}")
        for name in ("lr", "lr_bank", "near_equal_noise", "ddcl_temperature", "slot_temperature",
                     "slot_init_std", "perceiver_temperature", "perceiver_latent_std"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name}: expected a finite float > 0, got {v!r}")
        if not (isinstance(self.ddcl_lam, (int, float)) and self.ddcl_lam >= 0):
            raise ValueError(f"ddcl_lam: expected a float >= 0, got {self.ddcl_lam!r}")
        if self.bank_init not in BANK_INITS:
            raise ValueError(f"bank_init: expected one of {BANK_INITS}, got {self.bank_init!r}")
        if self.slot_init not in SLOT_INITS:
            raise ValueError(f"slot_init: expected one of {SLOT_INITS}, got {self.slot_init!r}")
        if self.perceiver_softmax not in PERCEIVER_SOFTMAX:
            raise ValueError(f"perceiver_softmax: expected one of {PERCEIVER_SOFTMAX}, "
                             f"got {self.perceiver_softmax!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed: expected an int >= 0, got {self.seed!r}")
        if not self.cost_lengths or any(not isinstance(t, int) or t < 1
                                        for t in self.cost_lengths):
            raise ValueError(f"cost_lengths: expected ints >= 1, got {self.cost_lengths!r}")

    @classmethod
    def from_profile(cls, **overrides) -> "PeerSettings":
        """cpu: 8 epochs, lengths up to 512; paper: 30 epochs, width 64, lengths up to 4096.
        ``overrides`` replace single fields (e.g. ``perceiver_temperature=0.05``)."""
        prof = profile.current()
        base = dict(
            epochs=prof.pick(cpu=8, paper=30),
            dim=prof.pick(cpu=16, paper=64),
            hidden=prof.pick(cpu=32, paper=128),
            cost_lengths=prof.pick(cpu=(32, 128, 512), paper=(64, 256, 1024, 4096)),
            cost_batch=prof.pick(cpu=8, paper=32),
            cost_repeats=prof.pick(cpu=7, paper=30),
        )
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ValueError(f"overrides: unknown settings {unknown}")
        return cls(**(base | overrides))


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TokenSet:
    """Padded token sequences: tokens (N, T, d) float32, mask (N, T) bool, labels (N,) int64."""

    tokens: Tensor
    mask: Tensor
    labels: Tensor

    def __post_init__(self) -> None:
        _check_data(self.tokens, self.mask, self.labels)


def _check_data(tokens: Tensor, mask: Tensor, labels: Tensor) -> None:
    if not isinstance(tokens, Tensor) or tokens.dim() != 3 or not tokens.is_floating_point():
        raise ValueError(f"tokens: expected a float tensor of shape (N, T, d), got "
                         f"{getattr(tokens, 'dtype', None)} {tuple(getattr(tokens, 'shape', ()))}")
    if mask is None:
        raise ValueError("mask: expected a bool tensor (N, T), got None")
    check_tokens(tokens, mask, tokens.shape[-1])
    if not isinstance(labels, Tensor) or labels.shape != tokens.shape[:1] \
            or labels.dtype != torch.long:
        raise ValueError(f"labels: expected an int64 tensor of shape ({tokens.shape[0]},), got "
                         f"{getattr(labels, 'dtype', None)} {tuple(getattr(labels, 'shape', ()))}")
    if tokens.shape[0] < 1 or bool((labels < 0).any()):
        raise ValueError("labels: expected at least one sequence and labels >= 0")


def synthetic_tokens(n: int, seq_len: int, in_dim: int = 8, classes: int = 3,
                     clusters: int = 6, noise: float = 0.3, seed: int = 0,
                     task_seed: int = 0) -> TokenSet:
    """A small set-classification task with padding, for tests and quick trials.

    ``clusters`` centres in R^in_dim (unit normal); sequence i has label c = i mod ``classes``,
    a length drawn uniformly in [seq_len // 2, seq_len], and tokens drawn from cluster c (a
    quarter of them, at least one) and from the clusters >= ``classes`` (the rest), each plus
    ``noise`` * N(0, I). The task is to find the class cluster among the distractors.
    ``task_seed`` draws the centres (keep it fixed for a train/test pair), ``seed`` the samples.
    """
    for name, v in (("n", n), ("seq_len", seq_len), ("in_dim", in_dim), ("classes", classes)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: expected an int >= 1, got {v!r}")
    if isinstance(clusters, bool) or not isinstance(clusters, int) or clusters <= classes:
        raise ValueError(f"clusters: expected an int > classes={classes}, got {clusters!r}")
    centres = torch.randn(clusters, in_dim, generator=torch.Generator().manual_seed(task_seed))
    gen = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % classes
    lengths = torch.randint(max(1, seq_len // 2), seq_len + 1, (n,), generator=gen)
    mask = torch.arange(seq_len)[None, :] < lengths[:, None]
    distractor = torch.randint(classes, clusters, (n, seq_len), generator=gen)
    signal = torch.rand(n, seq_len, generator=gen) < 0.25
    signal[:, 0] = True
    ids = torch.where(signal, labels[:, None], distractor)
    tokens = centres[ids] + noise * torch.randn(n, seq_len, in_dim, generator=gen)
    tokens = torch.where(mask[..., None], tokens, torch.zeros(()))
    return TokenSet(tokens.float(), mask, labels.long())


# --------------------------------------------------------------------------------------------
# Readouts, model, optimisers
# --------------------------------------------------------------------------------------------

def build_readout(kind: str, s: PeerSettings) -> nn.Module:
    """The readout ``kind`` ("ddcl", "slot" or "perceiver") of width ``s.dim`` with S slots."""
    if kind == "ddcl":
        return DDCLReadoutAdapter(s.dim, s.num_slots, temperature=s.ddcl_temperature,
                                  residual=False, norm=False)
    if kind == "slot":
        return SlotAttentionReadout(s.dim, s.num_slots, iterations=s.slot_iterations,
                                    temperature=s.slot_temperature, init=s.slot_init,
                                    init_std=s.slot_init_std)
    if kind == "perceiver":
        return PerceiverReadout(s.dim, s.num_slots, temperature=s.perceiver_temperature,
                                softmax_over=s.perceiver_softmax, latent_std=s.perceiver_latent_std)
    raise ValueError(f"kind: expected one of {READOUTS}, got {kind!r}")


def bank_parameters(readout: nn.Module) -> list[nn.Parameter]:
    """The readout's bank: DDCL prototypes, Perceiver latents, Slot initial slots (or mean and
    log-std of the Gaussian)."""
    if isinstance(readout, DDCLReadoutAdapter):
        return [readout.layer.prototypes]
    if isinstance(readout, PerceiverReadout):
        return [readout.latents]
    if isinstance(readout, SlotAttentionReadout):
        if readout.init == "learned":
            return [readout.initial_slots]
        return [readout.slot_mu, readout.slot_log_sigma]
    raise ValueError(f"readout: expected a readout of ddcl_theory.layers.peers, "
                     f"got {type(readout).__name__}")


class ReadoutClassifier(nn.Module):
    """Token MLP encoder (d_in -> dim) -> readout -> linear classifier on ``pooled``."""

    def __init__(self, d_in: int, readout: nn.Module, dim: int, hidden: int,
                 n_classes: int) -> None:
        super().__init__()
        self.encoder = TokenMLP(d_in, hidden, dim)
        self.readout = readout
        self.head = nn.Linear(dim, n_classes)

    def forward(self, x: Tensor, mask: Tensor,
                generator: torch.Generator | None = None) -> tuple[Tensor, ReadoutOutput]:
        z = self.encoder(x)
        if isinstance(self.readout, SlotAttentionReadout):
            out = self.readout(z, mask, generator=generator)
        else:
            out = self.readout(z, mask)
        return self.head(out.pooled), out


def _near_equal(bank: nn.Parameter, noise: float, gen: torch.Generator) -> None:
    with torch.no_grad():
        flat = bank.view(-1, bank.shape[-1])
        jitter = torch.randn(flat.shape, generator=gen, dtype=flat.dtype) * noise
        flat.copy_(flat[:1].expand_as(flat) + jitter.to(flat.device))


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CollapseRecord:
    """Measurements of one readout at one epoch (epoch 0 = before training)."""

    epoch: int
    loss: float                        # mean training cross-entropy of the epoch (nan at 0)
    train_acc: float
    test_acc: float                    # nan without a test set
    vectors: rm.CollapseMetrics
    states: rm.CollapseMetrics
    maps: rm.CollapseMetrics
    fraction_used: float
    perplexity: float
    token_perplexity: float


@dataclass
class ReadoutHistory:
    """Per-epoch records of one readout trained from ``settings.seed``."""

    kind: str
    records: list[CollapseRecord] = field(default_factory=list)

    def series(self, name: str) -> np.ndarray:
        """One number per epoch: a field (``"test_acc"``) or a metric (``"vectors.effective_rank"``,
        ``"maps.relative_min_distance"``, ...)."""
        out = []
        for rec in self.records:
            value = rec
            for part in name.split("."):
                if not hasattr(value, part):
                    raise ValueError(f"name: {name!r} is not a field of CollapseRecord")
                value = getattr(value, part)
            out.append(float(value))
        return np.array(out)

    @property
    def final(self) -> CollapseRecord:
        return self.records[-1]


@dataclass
class PeerResult:
    """The histories of every readout of ``settings.readouts`` (same data, same seed)."""

    settings: PeerSettings
    histories: dict[str, ReadoutHistory]


@torch.no_grad()
def _measure(model: ReadoutClassifier, data: TokenSet, test: TokenSet | None, epoch: int,
             loss: float, s: PeerSettings) -> CollapseRecord:
    model.eval()
    gen_seed = s.seed + 10_007                                          # fixed noise for eval

    def evaluate(d: TokenSet):
        gen = torch.Generator(device=d.tokens.device).manual_seed(gen_seed)
        logits, outs = [], []
        for start in range(0, d.tokens.shape[0], s.eval_batch):
            sl = slice(start, start + s.eval_batch)
            lg, out = model(d.tokens[sl], d.mask[sl], generator=gen)
            logits.append(lg)
            outs.append(out)
        acc = float((torch.cat(logits).argmax(-1) == d.labels).double().mean())
        return acc, outs

    train_acc, outs = evaluate(data)
    test_acc = evaluate(test)[0] if test is not None else float("nan")
    rows = data.mask.any(1)
    cat = lambda name: torch.cat([getattr(o, name) for o in outs])[rows]
    attention = cat("attention")
    use = rm.map_usage(attention, data.mask[rows])
    model.train()
    return CollapseRecord(epoch, loss, train_acc, test_acc, rm.collapse_metrics(cat("vectors")),
                          rm.collapse_metrics(cat("states")), rm.collapse_metrics(attention),
                          use.fraction_used, use.perplexity, use.token_perplexity)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------

def train_readout(kind: str, data: TokenSet, settings: PeerSettings | None = None,
                  test: TokenSet | None = None) -> ReadoutHistory:
    """Train encoder + readout ``kind`` + classifier on ``data``; record collapse per epoch."""
    s = settings or PeerSettings.from_profile()
    if kind not in READOUTS:
        raise ValueError(f"kind: expected one of {READOUTS}, got {kind!r}")
    if not isinstance(data, TokenSet) or (test is not None and not isinstance(test, TokenSet)):
        raise ValueError("data, test: expected TokenSet instances (see synthetic_tokens)")
    gen = profile.seed_everything(s.seed)
    device = profile.current().device
    n_classes = int(data.labels.max()) + 1
    if test is not None:
        n_classes = max(n_classes, int(test.labels.max()) + 1)
        if test.tokens.shape[-1] != data.tokens.shape[-1]:
            raise ValueError(f"test: expected feature size {data.tokens.shape[-1]}, "
                             f"got {test.tokens.shape[-1]}")
    model = ReadoutClassifier(data.tokens.shape[-1], build_readout(kind, s), s.dim, s.hidden,
                              n_classes)
    if kind == "ddcl" and s.ddcl_kmeans_init:
        with torch.no_grad():
            z = model.encoder(data.tokens)
            model.readout.layer.init_prototypes_from(z, data.mask, generator=gen)
    if s.bank_init == "near_equal":
        for bank in bank_parameters(model.readout):
            if bank.dim() >= 2 and bank.shape[-2] > 1:
                _near_equal(bank, s.near_equal_noise, gen)
    model.to(device)
    move = lambda d: None if d is None else TokenSet(d.tokens.to(device), d.mask.to(device),
                                                     d.labels.to(device))
    data, test = move(data), move(test)
    bank = bank_parameters(model.readout)
    bank_ids = {id(p) for p in bank}
    rest = [p for p in model.parameters() if id(p) not in bank_ids]
    opt_bank = torch.optim.Adam(bank, lr=s.lr_bank)
    opt_rest = torch.optim.Adam(rest, lr=s.lr)
    hist = ReadoutHistory(kind)
    hist.records.append(_measure(model, data, test, 0, float("nan"), s))
    n = data.tokens.shape[0]
    for epoch in range(1, s.epochs + 1):
        order = torch.randperm(n, generator=gen).to(device)
        losses = []
        for start in range(0, n, s.batch_size):
            idx = order[start:start + s.batch_size]
            logits, out = model(data.tokens[idx], data.mask[idx])
            ce = nn.functional.cross_entropy(logits, data.labels[idx])
            loss = ce + s.ddcl_lam * out.aux_loss if kind == "ddcl" else ce
            opt_bank.zero_grad()
            opt_rest.zero_grad()
            loss.backward()
            opt_bank.step()
            opt_rest.step()
            losses.append(float(ce.detach()))
        hist.records.append(_measure(model, data, test, epoch, float(np.mean(losses)), s))
        if not np.isfinite(losses[-1]):
            break
    return hist


def run(data: TokenSet, settings: PeerSettings | None = None,
        test: TokenSet | None = None) -> PeerResult:
    """Train every readout of ``settings.readouts`` on ``data`` from the same seed."""
    s = settings or PeerSettings.from_profile()
    histories = {kind: train_readout(kind, data, s, test)
                 for kind in progress(s.readouts, desc="readouts")}
    return PeerResult(s, histories)


# --------------------------------------------------------------------------------------------
# Inference cost
# --------------------------------------------------------------------------------------------

@dataclass
class CostResult:
    """Forward times of the readouts at each sequence length, measured interleaved in one run."""

    settings: PeerSettings
    lengths: tuple[int, ...]
    times: dict[str, dict[int, list[float]]]         # kind -> T -> seconds per repeat
    params: dict[str, int]

    def ratio(self, kind: str, length: int) -> float:
        """Median over repeats of t(kind) / t(ddcl), both timed in the same repeat."""
        return float(np.median(np.array(self.times[kind][length])
                               / np.array(self.times["ddcl"][length])))

    def ratios(self) -> dict[str, list[float]]:
        """kind -> [ratio at each length of ``lengths``] (DDCL's is 1)."""
        return {k: [self.ratio(k, t) for t in self.lengths] for k in self.times}


def inference_cost(settings: PeerSettings | None = None) -> CostResult:
    """Time one eval forward pass of each readout (no encoder, no gradient) at every length of
    ``settings.cost_lengths``; the readouts run in a rotating order within each repeat.

    Slot Attention runs its ``slot_iterations`` rounds (with a fixed generator for the initial
    noise). Never asserted: the ratios depend on the host.
    """
    s = settings or PeerSettings.from_profile()
    profile.seed_everything(s.seed)
    device = profile.current().device
    kinds = tuple(dict.fromkeys(("ddcl",) + tuple(s.readouts)))
    layers = {k: build_readout(k, s).to(device).eval() for k in kinds}
    params = {k: sum(p.numel() for p in m.parameters()) for k, m in layers.items()}
    times = {k: {t: [] for t in s.cost_lengths} for k in kinds}

    def call(kind: str, x: Tensor, mask: Tensor) -> float:
        gen = torch.Generator(device=x.device).manual_seed(s.seed) if kind == "slot" else None
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        if gen is not None:
            layers[kind](x, mask, generator=gen)
        else:
            layers[kind](x, mask)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    with torch.no_grad():
        for t in s.cost_lengths:
            x = torch.randn(s.cost_batch, t, s.dim, device=device)
            mask = torch.ones(s.cost_batch, t, dtype=torch.bool, device=device)
            for _ in range(s.cost_warmup):
                for k in kinds:
                    call(k, x, mask)
            for r in range(s.cost_repeats):
                order = kinds[r % len(kinds):] + kinds[:r % len(kinds)]
                for k in order:
                    times[k][t].append(call(k, x, mask))
    return CostResult(s, tuple(s.cost_lengths), times, params)
