"""Two stacked DDCL layers compressing 20 Newsgroups documents (claim D12).

The frozen encoder's token embeddings of a 20 Newsgroups training draw (drawn and cleaned by
:func:`ddcl_theory.experiments.text_readout.load_corpus`, so the cpu draw shares the text-readout
chapter's cache entry) are standardised per feature and, without [CLS]/[SEP], fed to
:class:`~ddcl_theory.models.stacked_ddcl.StackedDDCL` in float64: tokens -> K1 level-1
prototypes -> document summaries -> K2 level-2 prototypes. Both banks are trained jointly by Adam
on L_q^(1) + w L_q^(2) over mini-batches of documents, the learning rate decaying to zero on a
cosine schedule.

One run per (scale, seed): a scale is a fraction of the drawn documents (a random subset per
seed; the whole draw at scale 1). Recorded, per level:

* before training (epoch 0) and after every epoch, on all documents: L_q, L_OLS and V as the
  layer reports them, the identity residual |L_q - L_OLS - V| / L_q, the largest gap between
  those terms and an independent recomputation (:func:`ddcl_theory.functional.loss_terms` from
  the level's inputs, prototypes and assignments), the separations and the usage of the bank;
* at every training step (on the step's mini-batch): the largest identity residual and the
  smallest V / L_q, kept per epoch as the worst over its steps;
* at the start and at the end: the collapse thresholds of the level's own inputs
  (:func:`ddcl_theory.theory.collapse.critical_temperature`: T_c = 2 lambda_max of F and
  4 lambda_max of L_q with q differentiated, the loss the stack trains);
* at the end: the groups of merged prototypes (closer than ``merge_fraction`` of the bank's
  smallest distance at the start) with the collapse threshold of the tokens they dominate, and
  what each level captures (commonest words per level-1 prototype; newsgroups per level-2
  prototype; the level-2 clustering's ACC, purity and NMI).
"""
from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch

from ddcl_theory import functional as F
from ddcl_theory.data.text import embed, load_encoder
from ddcl_theory.experiments.text_readout import NEWSGROUPS, TextReadoutSettings, load_corpus
from ddcl_theory.layers.readouts import PackedTokens, Standardiser
from ddcl_theory.metrics.clustering import clustering_acc, contingency, nmi, purity
from ddcl_theory.metrics.prototypes import separation, usage
from ddcl_theory.models.stacked_ddcl import StackedDDCL
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import (
    CONFIRMATORY_SEED_BASE,
    Settings,
    confirmatory_seeds,
    setting,
)
from ddcl_theory.runtime.training import fit
from ddcl_theory.theory.collapse import critical_temperature

LEVELS = (1, 2)
__all__ = ["StackedSettings", "LevelTrace", "Thresholds", "MergedGroup", "StackedRun",
           "StackedResult", "content_tokens", "merged_groups", "on_host", "run", "NEWSGROUPS",
           "LEVELS"]


@dataclass(frozen=True)
class StackedSettings(Settings):
    """Scale of the stacked-layers experiment (the cpu profile's values first).

    ``documents`` training messages of 20 Newsgroups (0: all), cut at ``max_length`` tokens and
    drawn with ``data_seed`` (in the cpu profile the text-readout chapter's cpu draw; the
    reference profile draws messages of its own); one run per (fraction of them in ``scales``,
    seed in ``seeds``).
    """

    k1: int = setting(32, paper=64, ge=2)
    k2: int = setting(20, ge=2)
    epochs: int = setting(6, reference=12, paper=40, smoke=1, ge=1)
    seeds: tuple[int, ...] = setting(tuple(range(10)), reference=confirmatory_seeds(10),
                                     smoke=(0,), ge=0, nonempty=True)
    scales: tuple[float, ...] = setting((0.125, 0.25), reference=(0.25, 0.5, 1.0),
                                        paper=(1.0,), gt=0, le=1, nonempty=True)
    batch_docs: int = setting(50, ge=1)
    lr: float = setting(0.02, gt=0)
    level2_weight: float = setting(1.0, ge=0)
    fraction1: float = setting(0.05, gt=0)
    fraction2: float = setting(0.05, gt=0)
    merge_fraction: float = setting(0.1, gt=0, lt=1)
    top_words: int = setting(6, ge=1)
    encoder: str = setting("minilm", paper="bert-base-uncased")
    documents: int = setting(800, paper=0, smoke=64, ge=0)
    max_length: int = setting(64, paper=512, ge=2)
    data_seed: int = setting(0, reference=CONFIRMATORY_SEED_BASE, ge=0)
    batch_tokens: int = setting(2048, ge=1)

    def check(self) -> None:
        if list(self.scales) != sorted(set(self.scales)):
            raise ValueError(f"StackedSettings.scales: expected increasing fractions, got "
                             f"{self.scales}")

    def text(self) -> TextReadoutSettings:
        """The text-readout settings whose 20 Newsgroups draw this experiment reads."""
        return TextReadoutSettings(encoder=self.encoder, ng_train=self.documents,
                                   ng_max_length=self.max_length, data_seed=self.data_seed,
                                   batch_tokens=self.batch_tokens)


@dataclass
class LevelTrace:
    """Per-epoch record of one level of one run (index 0 = before training), float64.

    Attributes:
        l_q, l_ols, v: the layer's loss terms on all documents.
        residual: |l_q - l_ols - v| / l_q on all documents.
        recomputed_gap: largest |layer term - loss_terms recomputation| / l_q over the three.
        sep_min, sep_mean, sep_trace: prototype separations; used: fraction of the bank that is
            some input's dominant prototype.
        step_max_residual: largest batch residual over the training steps of the epoch.
        step_min_v_share: smallest batch V / L_q over the training steps of the epoch
            (both nan at epoch 0).
    """

    l_q: list[float] = field(default_factory=list)
    l_ols: list[float] = field(default_factory=list)
    v: list[float] = field(default_factory=list)
    residual: list[float] = field(default_factory=list)
    recomputed_gap: list[float] = field(default_factory=list)
    sep_min: list[float] = field(default_factory=list)
    sep_mean: list[float] = field(default_factory=list)
    sep_trace: list[float] = field(default_factory=list)
    used: list[float] = field(default_factory=list)
    step_max_residual: list[float] = field(default_factory=list)
    step_min_v_share: list[float] = field(default_factory=list)

    @property
    def worst_residual(self) -> float:
        """The largest residual or recomputation gap of the run at this level."""
        return float(np.nanmax(self.residual + self.recomputed_gap + self.step_max_residual))

    @property
    def min_v_share(self) -> float:
        """The smallest V / L_q of the run at this level (all documents and every step)."""
        full = [v / q for v, q in zip(self.v, self.l_q)]
        return float(np.nanmin(full + self.step_min_v_share))


@dataclass(frozen=True)
class Thresholds:
    """Collapse thresholds of one level's inputs (:func:`critical_temperature`) and its tau.

    ``free_energy``: (start, end) of T_c = 2 lambda_max of F; ``quantisation``: (start, end) of
    4 lambda_max, the threshold of L_q with q differentiated (what the stack trains).
    """

    tau: float
    free_energy: tuple[float, float]
    quantisation: tuple[float, float]

    @property
    def ratio(self) -> tuple[float, float]:
        """tau / threshold of the trained loss, (start, end)."""
        return tuple(self.tau / t for t in self.quantisation)


@dataclass(frozen=True)
class MergedGroup:
    """Prototypes of one level closer than the merge distance at the end (single linkage).

    ``members``: their indices; ``tokens``: inputs whose dominant prototype is a member;
    ``share``: that count over all inputs; ``local_tc``: the collapse threshold of L_q
    (4 lambda_max) of those inputs (nan with fewer than two).
    """

    members: tuple[int, ...]
    tokens: int
    share: float
    local_tc: float


@dataclass
class StackedRun:
    """One training run of the stack.

    Attributes:
        scale, seed: the run's fraction of the documents and its seed; n_docs, n_tokens: sizes.
        traces, thresholds: per level.
        merged: per level, the groups of at least two merged prototypes at the end.
        distinct: per level, the number of distinct prototypes at the end (groups of any size).
        merge_distance: per level, the distance under which two prototypes count as merged.
        words: per level-1 prototype, its commonest dominated word pieces.
        level1_share: (K1,) share of tokens dominated by each level-1 prototype.
        groups: (K2, C) documents per level-2 prototype and newsgroup.
        acc, purity, nmi: the level-2 clustering against the newsgroups.
    """

    scale: float
    seed: int
    n_docs: int
    n_tokens: int
    traces: dict[int, LevelTrace]
    thresholds: dict[int, Thresholds]
    merged: dict[int, list[MergedGroup]]
    distinct: dict[int, int]
    merge_distance: dict[int, float]
    words: list[list[str]]
    level1_share: np.ndarray
    groups: np.ndarray
    acc: float
    purity: float
    nmi: float


@dataclass
class StackedResult:
    """Every run, in the order (scale, seed) of the settings."""

    settings: StackedSettings
    runs: list[StackedRun]
    encoder: str

    def at(self, scale: float) -> list[StackedRun]:
        """The runs at ``scale`` (one per seed)."""
        return [r for r in self.runs if r.scale == scale]

    @property
    def largest(self) -> list[StackedRun]:
        """The runs at the largest scale (the ones the claim is decided on)."""
        return self.at(max(self.settings.scales))


def content_tokens(values: np.ndarray, ids: np.ndarray, offsets: np.ndarray,
                   special_ids: frozenset[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Drop special tokens: (values (m, d), ids (m,), offsets (n + 1,)) of the rest. Every
    document must keep at least one token."""
    keep = ~np.isin(ids, np.fromiter(special_ids, dtype=np.int64))
    seg = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    lengths = np.bincount(seg[keep], minlength=offsets.size - 1)
    if (lengths == 0).any():
        raise ValueError(f"ids: {int((lengths == 0).sum())} document(s) have only special tokens")
    return values[keep], ids[keep], np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def merged_groups(prototypes: torch.Tensor, distance: float) -> list[tuple[int, ...]]:
    """Groups of prototypes (K, d) linked by distances below ``distance`` (single linkage),
    each sorted, in order of their smallest member."""
    if not distance > 0:
        raise ValueError(f"distance: expected a positive distance, got {distance!r}")
    p = prototypes.detach().to(torch.float64)
    close = (torch.cdist(p, p) < distance).cpu().numpy()
    k = p.shape[0]
    label = list(range(k))

    def root(i: int) -> int:
        while label[i] != i:
            label[i] = label[label[i]]
            i = label[i]
        return i

    for i in range(k):
        for j in range(i + 1, k):
            if close[i, j]:
                label[max(root(i), root(j))] = min(root(i), root(j))
    members: dict[int, list[int]] = {}
    for i in range(k):
        members.setdefault(root(i), []).append(i)
    return [tuple(m) for _, m in sorted(members.items())]


def _measure(out, inputs: torch.Tensor, prototypes: torch.Tensor) -> dict:
    """The full-data measurements of one level (out: the layer's output on inputs) as a dict of
    :class:`LevelTrace` fields."""
    prototypes = prototypes.detach()
    lq, lols, v = (float(getattr(out.losses, n)) for n in ("l_q", "l_ols", "v"))
    q = out.assignments[:, 0, 0].detach()                               # (m, K)
    ref = F.loss_terms(inputs.detach(), prototypes, q)
    gap = max(abs(a - float(b)) for a, b in zip((lq, lols, v), ref)) / lq
    record = {"l_q": lq, "l_ols": lols, "v": v, "residual": abs(lq - lols - v) / lq,
              "recomputed_gap": gap}
    for kind in ("min", "mean", "trace"):
        record[f"sep_{kind}"] = float(separation(prototypes, kind))
    record["used"] = usage(q).fraction_used
    return record


def _groups(inputs: torch.Tensor, q: torch.Tensor, prototypes: torch.Tensor,
            distance: float) -> tuple[list[MergedGroup], int]:
    """(groups of at least two merged prototypes with their inputs' threshold, number of
    distinct prototypes) of one level at the end."""
    dominant = q.argmax(-1)
    found, merged = merged_groups(prototypes, distance), []
    for members in found:
        if len(members) < 2:
            continue
        mine = torch.isin(dominant, torch.tensor(members, device=dominant.device))
        count = int(mine.sum())
        local = critical_temperature(inputs[mine], "quantisation") if count >= 2 else math.nan
        merged.append(MergedGroup(members, count, count / inputs.shape[0], local))
    return merged, len(found)


def _thresholds(tau: float, start: torch.Tensor, end: torch.Tensor) -> Thresholds:
    return Thresholds(tau, *((critical_temperature(start, kind), critical_temperature(end, kind))
                             for kind in ("free_energy", "quantisation")))


def on_host(model: StackedDDCL) -> StackedDDCL:
    """A copy of ``model`` on the CPU, for the measurements on every token of a run."""
    return copy.deepcopy(model).to("cpu")


def _subset(n: int, scale: float, seed: int) -> torch.Tensor:
    """The documents of a run: all of them at scale 1, else a random subset drawn by seed."""
    if scale >= 1.0:
        return torch.arange(n)
    gen = torch.Generator().manual_seed(seed)
    keep = max(2, round(scale * n))
    return torch.randperm(n, generator=gen)[:keep].sort().values


def _train(s: StackedSettings, values: np.ndarray, ids: np.ndarray, offsets: np.ndarray,
           labels: np.ndarray, scale: float, seed: int, encoder, run_dir: RunDir,
           device) -> StackedRun:
    """One run of the stack on the documents of (scale, seed)."""
    docs = _subset(offsets.size - 1, scale, seed).numpy()
    starts, stops = offsets[docs], offsets[docs + 1]
    rows = np.concatenate([np.arange(a, b) for a, b in zip(starts, stops)])
    sub_offsets = np.concatenate([[0], np.cumsum(stops - starts)]).astype(np.int64)
    # Every token of the run stays on the host in float64: the full-data measurements and the
    # calibration run there, on a host copy of the model (:func:`on_host`), and the device holds
    # the model and one mini-batch of documents at a time (at the paper's scale all tokens in
    # float64 would take tens of GB of device memory).
    data = PackedTokens(torch.from_numpy(values[rows]).to(torch.float64),
                        torch.from_numpy(sub_offsets))
    std = Standardiser.fit(data.values)
    data = PackedTokens(std(data.values).to(torch.float64), data.offsets)
    n = len(data)
    tokens, segments = data.batch(torch.arange(n))

    gen = profile.seed_everything(seed)
    model = StackedDDCL(tokens.shape[1], s.k1, s.k2).to(dtype=torch.float64)
    tau1, tau2 = model.calibrate(tokens, segments, n, s.fraction1, s.fraction2, generator=gen)
    model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=s.lr)
    steps = s.epochs * math.ceil(n / s.batch_docs)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)

    def evaluate() -> tuple[dict[int, dict], object]:
        host = on_host(model)
        with torch.no_grad():
            out = host(tokens, segments, n)
        return {1: _measure(out.level1, tokens, host.level1.prototypes[0]),
                2: _measure(out.level2, out.summaries, host.level2.prototypes[0])}, out

    start, out0 = evaluate()
    start_inputs = {1: tokens, 2: out0.summaries.detach().clone()}
    start_min = {1: float(separation(model.level1.prototypes[0].detach(), "min")),
                 2: float(separation(model.level2.prototypes[0].detach(), "min"))}
    worst: dict[int, dict[str, float]] = {}

    def batches(_epoch: int):
        worst.update({lvl: {"step_max_residual": 0.0, "step_min_v_share": math.inf}
                      for lvl in LEVELS})
        order = torch.randperm(n, generator=gen)
        for i in range(0, n, s.batch_docs):
            yield order[i:i + s.batch_docs]

    def loss(forward, idx):
        batch_tokens, seg = data.batch(idx)
        out = forward(batch_tokens.to(device), seg.to(device), len(idx))
        for lvl, level in ((1, out.level1), (2, out.level2)):
            lq, lols, v = (float(getattr(level.losses, k).detach())
                           for k in ("l_q", "l_ols", "v"))
            w = worst[lvl]
            w["step_max_residual"] = max(w["step_max_residual"], abs(lq - lols - v) / lq)
            w["step_min_v_share"] = min(w["step_min_v_share"], v / lq)
        return out.level1.losses.l_q + s.level2_weight * out.level2.losses.l_q

    def end_of_round(_r: int) -> dict:
        measured, _ = evaluate()
        return {str(lvl): {**measured[lvl], **worst[lvl]} for lvl in LEVELS}

    log = fit(model, opt, rounds=s.epochs, batches=batches, loss=loss, device=device,
              run=run_dir, name=f"stacked-{scale:g}-{seed}", schedulers=[sched],
              generators={"order": gen}, end_of_round=end_of_round, desc="stacked DDCL",
              train_mode=False)
    traces = {lvl: LevelTrace() for lvl in LEVELS}
    for lvl in LEVELS:
        for name, value in {**start[lvl], "step_max_residual": math.nan,
                            "step_min_v_share": math.nan}.items():
            getattr(traces[lvl], name).append(value)
        for record in log.metrics:
            for name, value in record[str(lvl)].items():
                getattr(traces[lvl], name).append(value)

    host = on_host(model)
    with torch.no_grad():
        out = host(tokens, segments, n)
    q1, q2 = out.level1.assignments[:, 0, 0], out.level2.assignments[:, 0, 0]
    end_inputs = {1: tokens, 2: out.summaries}
    banks = {1: host.level1.prototypes[0].detach(), 2: host.level2.prototypes[0].detach()}
    taus = {1: tau1, 2: tau2}
    thresholds = {lvl: _thresholds(taus[lvl], start_inputs[lvl], end_inputs[lvl])
                  for lvl in LEVELS}
    distance = {lvl: s.merge_fraction * start_min[lvl] for lvl in LEVELS}
    merged, distinct = {}, {}
    for lvl, q in ((1, q1), (2, q2)):
        merged[lvl], distinct[lvl] = _groups(end_inputs[lvl], q, banks[lvl], distance[lvl])

    dom1 = q1.argmax(-1).cpu().numpy()
    dom2 = q2.argmax(-1).cpu().numpy()
    ids_run = ids[rows]
    words = []
    for k in range(s.k1):
        counts = Counter(ids_run[dom1 == k].tolist())
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: s.top_words]
        words.append(encoder.tokens([t for t, _ in top]))
    y = labels[docs]
    return StackedRun(
        scale=scale, seed=seed, n_docs=n, n_tokens=int(rows.size), traces=traces,
        thresholds=thresholds, merged=merged, distinct=distinct, merge_distance=distance,
        words=words, level1_share=np.bincount(dom1, minlength=s.k1) / dom1.size,
        groups=contingency(y, dom2, n_classes=len(NEWSGROUPS), n_clusters=s.k2),
        acc=clustering_acc(y, dom2), purity=purity(y, dom2), nmi=nmi(y, dom2))


def run(settings: StackedSettings | None = None, encoder=None,
        run_dir: RunDir | None = None) -> StackedResult:
    """Train the two-level stack once per (scale, seed); see the module docstring.

    The epochs run through :func:`ddcl_theory.runtime.training.fit` with checkpoints in
    ``run_dir`` (default: the experiment's :class:`ddcl_theory.runtime.rundir.RunDir`, enabled
    outside the cpu profile), one state per (scale, seed), so an interrupted run resumes at its
    last finished epoch.
    """
    s = settings or StackedSettings.from_profile()
    run_dir = run_dir if run_dir is not None else RunDir("stacked_layers", s)
    device = profile.current().device
    encoder = encoder or load_encoder(s.encoder, device=device, batch_tokens=s.batch_tokens)
    text = s.text()
    corpus = load_corpus("20ng", text)
    emb = embed(encoder, corpus.train_texts, corpus.max_length,
                checksum="20ng:train:" + corpus.checksum, indices=corpus.train_index,
                desc="encode 20ng train")
    values, ids, offsets = content_tokens(emb.values, emb.ids, emb.offsets, encoder.special_ids)
    labels = np.asarray(corpus.train_y)
    runs = [_train(s, values, ids, offsets, labels, scale, seed, encoder, run_dir, device)
            for scale in s.scales for seed in s.seeds]
    return StackedResult(s, runs, encoder.name)


def objective_gaps(seed: int = 0, tokens: int = 60, dim: int = 6, k: int = 4,
                   tau: float = 2.0) -> tuple[float, float]:
    """Which loss the stack's levels train: the relative gaps between the gradient on the
    level-1 prototypes of the layer's L_q and autograd's gradient of L_q (a) with q
    differentiated through the softmax, (b) with q detached (the free energy's gradient), on
    random float64 tokens (``tokens``, ``dim``) with ``k`` prototypes at temperature ``tau``.
    """
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(tokens, dim, generator=gen, dtype=torch.float64)
    model = StackedDDCL(dim, k, 2, tau1=tau).to(torch.float64)
    with torch.no_grad():
        model.level1.prototypes.copy_(torch.randn(1, k, dim, generator=gen, dtype=torch.float64))
    bank = model.level1.prototypes
    layer = torch.autograd.grad(model(z, torch.zeros(tokens, dtype=torch.long), 1)
                                .level1.losses.l_q, bank)[0][0]
    p = bank.detach()[0].clone().requires_grad_(True)
    q = F.soft_assign(z, p, tau)
    through = torch.autograd.grad(F.loss_terms(z, p, q)[0], p)[0]
    detached = torch.autograd.grad(F.loss_terms(z, p, q.detach())[0], p)[0]
    scale = float(through.norm())
    return float((layer - through).norm()) / scale, float((layer - detached).norm()) / scale
