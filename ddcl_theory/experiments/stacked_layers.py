"""Two stacked DDCL layers compressing 20 Newsgroups documents (claim D12).

The frozen encoder's token embeddings of the 20 Newsgroups training draw of the text-readout
chapter (:mod:`ddcl_theory.experiments.text_readout`, same settings, so the same cache entry)
are standardised per feature and, without [CLS]/[SEP], fed to
:class:`~ddcl_theory.models.stacked_ddcl.StackedDDCL` in float64: tokens -> K1 level-1
prototypes -> document summaries -> K2 level-2 prototypes. Both banks are trained jointly by Adam
on L_q^(1) + w L_q^(2) over mini-batches of documents.

Recorded before training (epoch 0) and after every epoch, on all documents: each level's L_q,
L_OLS and V as the layer reports them, the identity residual |L_q - L_OLS - V| / L_q, the same
three terms recomputed independently by :func:`ddcl_theory.functional.loss_terms` from the
level's inputs, prototypes and assignments (at the start, the end and every few epochs), the
separations (min, mean, trace) and the usage of
each bank. At every training step: the smallest V of each level. After training: what each level
captures - the commonest words among the tokens each level-1 prototype dominates, and the
newsgroups of the documents each level-2 prototype dominates.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch

from ddcl_theory import functional as F
from ddcl_theory.data.text import embed, load_encoder
from ddcl_theory.experiments.text_readout import (
    NEWSGROUPS,
    TextReadoutSettings,
    load_corpus,
)
from ddcl_theory.layers.readouts import PackedTokens, Standardiser
from ddcl_theory.metrics.clustering import clustering_acc, contingency, nmi, purity
from ddcl_theory.metrics.prototypes import separation, usage
from ddcl_theory.models.stacked_ddcl import StackedDDCL
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, nested, setting
from ddcl_theory.runtime.training import fit

LEVELS = (1, 2)


@dataclass(frozen=True)
class StackedSettings(Settings):
    """Scale of the stacked-layers experiment: cpu K1 = 32 and 10 epochs, paper K1 = 64 and 40
    epochs (paper smoke test: one epoch).

    ``text`` fixes the 20 Newsgroups draw and the encoder (those of the text-readout chapter).
    """

    k1: int = setting(32, paper=64, ge=1)
    k2: int = setting(20, ge=1)
    epochs: int = setting(10, paper=40, smoke=1, ge=1)
    recompute_every: int = setting(5, ge=1)
    batch_docs: int = setting(100, ge=1)
    lr: float = setting(0.02, gt=0)
    level2_weight: float = setting(1.0, ge=0)
    fraction1: float = setting(0.05, gt=0)
    fraction2: float = setting(0.05, gt=0)
    seed: int = setting(0, ge=0)
    top_words: int = setting(6, ge=1)
    text: TextReadoutSettings = nested(TextReadoutSettings)


@dataclass
class LevelTrace:
    """Per-epoch record of one level (index 0 = before training), all float64 on all documents.

    Attributes:
        l_q, l_ols, v: the layer's loss terms.
        residual: |l_q - l_ols - v| / l_q.
        recomputed_gap: largest |layer term - loss_terms recomputation| / l_q over the three
            (every ``recompute_every`` epochs, at the start and at the end; nan otherwise).
        sep_min, sep_mean, sep_trace: prototype separations; used: fraction of the bank that is
            some input's dominant prototype.
        step_min_v: smallest V over the training steps of each epoch (nan at epoch 0).
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
    step_min_v: list[float] = field(default_factory=list)


@dataclass
class StackedResult:
    """Traces of both levels and what each level captures.

    Attributes:
        traces: level (1 or 2) -> :class:`LevelTrace`.
        tau: level -> temperature.
        n_docs, n_tokens: documents and (content) tokens; encoder: the encoder's name.
        words: per level-1 prototype, its commonest dominated words (most frequent first) and
            the share of all tokens it dominates.
        level1_share: (K1,) share of tokens dominated by each level-1 prototype.
        groups: (K2, C) counts of documents per level-2 prototype and newsgroup.
        doc_labels: (n,) level-2 dominant prototype of each document; labels: (n,) newsgroups.
        nearest_doc: per level-2 prototype, the index of the document nearest to it (or -1).
        texts: the cleaned texts of the documents (for showing the nearest ones).
        acc, purity, nmi: of the level-2 clustering against the newsgroups.
    """

    settings: StackedSettings
    traces: dict[int, LevelTrace]
    tau: dict[int, float]
    n_docs: int
    n_tokens: int
    encoder: str
    words: list[list[str]]
    level1_share: np.ndarray
    groups: np.ndarray
    doc_labels: np.ndarray
    labels: np.ndarray
    nearest_doc: list[int]
    texts: list[str]
    acc: float
    purity: float
    nmi: float


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


def _measure(out, inputs: torch.Tensor, prototypes: torch.Tensor, recompute: bool) -> dict:
    """The full-data measurements of one level (out: the layer's output on inputs) as a dict of
    :class:`LevelTrace` fields; ``recompute``: also recompute the three terms with
    :func:`ddcl_theory.functional.loss_terms` (nan otherwise)."""
    prototypes = prototypes.detach()
    lq, lols, v = (float(getattr(out.losses, n)) for n in ("l_q", "l_ols", "v"))
    q = out.assignments[:, 0, 0]                                        # (m, K)
    gap = float("nan")
    if recompute:
        ref = F.loss_terms(inputs.detach(), prototypes, q.detach())
        gap = max(abs(a - float(b)) for a, b in zip((lq, lols, v), ref)) / lq
    record = {"l_q": lq, "l_ols": lols, "v": v, "residual": abs(lq - lols - v) / lq,
              "recomputed_gap": gap}
    for kind in ("min", "mean", "trace"):
        record[f"sep_{kind}"] = float(separation(prototypes, kind))
    record["used"] = usage(q).fraction_used
    return record


def _append(trace: LevelTrace, record: dict) -> None:
    for name, value in record.items():
        getattr(trace, name).append(value)


def run(settings: StackedSettings | None = None, encoder=None,
        run_dir: RunDir | None = None) -> StackedResult:
    """Train the two-level model on the 20 Newsgroups draw; see the module docstring.

    The epochs run through :func:`ddcl_theory.runtime.training.fit` with checkpoints in
    ``run_dir`` (default: the experiment's :class:`ddcl_theory.runtime.rundir.RunDir`, enabled in
    the paper profile), so an interrupted run resumes at its last finished epoch.
    """
    s = settings or StackedSettings.from_profile()
    run_dir = run_dir if run_dir is not None else RunDir("stacked_layers", s)
    device = profile.current().device
    encoder = encoder or load_encoder(s.text.encoder, device=device,
                                      batch_tokens=s.text.batch_tokens)
    corpus = load_corpus("20ng", s.text)
    emb = embed(encoder, corpus.train_texts, corpus.max_length,
                checksum="20ng:train:" + corpus.checksum, indices=corpus.train_index,
                desc="encode 20ng train")
    values, ids, offsets = content_tokens(emb.values, emb.ids, emb.offsets, encoder.special_ids)
    data = PackedTokens(torch.from_numpy(values).to(torch.float64).to(device),
                        torch.from_numpy(offsets).to(device))
    std = Standardiser.fit(data.values)
    data = PackedTokens(std(data.values).to(torch.float64), data.offsets)
    n = len(data)
    all_tokens, all_seg = data.batch(torch.arange(n, device=device))

    gen = profile.seed_everything(s.seed)
    model = StackedDDCL(data.values.shape[1], s.k1, s.k2).to(device=device, dtype=torch.float64)
    tau1, tau2 = model.calibrate(all_tokens, all_seg, n, s.fraction1, s.fraction2, generator=gen)
    opt = torch.optim.Adam(model.parameters(), lr=s.lr)

    def evaluate(recompute: bool) -> dict[int, dict]:
        with torch.no_grad():
            out = model(all_tokens, all_seg, n)
        return {1: _measure(out.level1, all_tokens, model.level1.prototypes[0], recompute),
                2: _measure(out.level2, out.summaries, model.level2.prototypes[0], recompute)}

    start = evaluate(recompute=True)
    step_v: dict[int, float] = {}

    def batches(_epoch: int):
        step_v.update({1: float("inf"), 2: float("inf")})
        order = torch.randperm(n, generator=gen)
        for i in range(0, n, s.batch_docs):
            yield order[i:i + s.batch_docs]

    def loss(forward, idx):
        tokens, seg = data.batch(idx)
        out = forward(tokens, seg, len(idx))
        step_v[1] = min(step_v[1], float(out.level1.losses.v.detach()))
        step_v[2] = min(step_v[2], float(out.level2.losses.v.detach()))
        return out.level1.losses.l_q + s.level2_weight * out.level2.losses.l_q

    def end_of_round(r: int) -> dict:
        epoch = r + 1
        measured = evaluate(recompute=epoch % s.recompute_every == 0 or epoch == s.epochs)
        return {str(lvl): {**measured[lvl], "step_min_v": step_v[lvl]} for lvl in LEVELS}

    log = fit(model, opt, rounds=s.epochs, batches=batches, loss=loss, device=device,
              run=run_dir, name="stacked", generators={"order": gen}, end_of_round=end_of_round,
              desc="stacked DDCL", train_mode=False)
    traces = {lvl: LevelTrace() for lvl in LEVELS}
    for lvl in LEVELS:
        _append(traces[lvl], {**start[lvl], "step_min_v": float("nan")})
        for record in log.metrics:
            _append(traces[lvl], record[str(lvl)])

    with torch.no_grad():
        out = model(all_tokens, all_seg, n)
        dom1 = out.level1.assignments[:, 0, 0].argmax(-1).cpu().numpy()      # (m,)
        q2 = out.level2.assignments[:, 0, 0]                                 # (n, K2)
        dom2 = q2.argmax(-1).cpu().numpy()
        d2 = torch.cdist(out.summaries, model.level2.prototypes[0])          # (n, K2)
    words = []
    for k in range(s.k1):
        counts = Counter(ids[dom1 == k].tolist())
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: s.top_words]
        words.append(encoder.tokens([t for t, _ in top]))
    share1 = np.bincount(dom1, minlength=s.k1) / dom1.size
    y = corpus.train_y
    groups = contingency(y, dom2, n_classes=len(NEWSGROUPS), n_clusters=s.k2)
    nearest = [int(torch.where(torch.from_numpy(dom2 == k), d2[:, k].cpu(),
                               torch.tensor(float("inf"), dtype=d2.dtype)).argmin())
               if (dom2 == k).any() else -1 for k in range(s.k2)]
    return StackedResult(s, traces, {1: tau1, 2: tau2}, n, int(values.shape[0]), encoder.name,
                         words, share1, groups, dom2, y, nearest, corpus.train_texts,
                         clustering_acc(y, dom2), purity(y, dom2), nmi(y, dom2))
