"""A DDCL readout on a frozen text encoder against [CLS], mean pooling and k-means (claim D14).

Three corpora, each a class-balanced draw (the sizes in :class:`TextReadoutSettings`),
truncated to a maximum number of tokens (in the reference profile the encoder's own maximum,
:func:`encoder_max_length`):

* SST-2 (binary sentiment of movie-review sentences): a draw from the 67,349 training phrases;
  the 872 dev sentences are the test set;
* IMDB (binary sentiment of full reviews, ``<br />`` removed): draws from the 5,000 + 5,000
  reviews of the staged subset;
* 20 Newsgroups (20 topics): draws from the bydate train and test splits, header, quoted lines and
  signature stripped (:func:`ddcl_theory.data.text.clean.strip_newsgroup`).

The frozen encoder's token embeddings come from the cache
(:func:`ddcl_theory.data.text.cache.embed`): computed once per (corpus, draw, maximum length) and
reused by every seed and readout.

**The DDCL readout configuration** (one for claims D14 and D17): :data:`DDCL_READOUT`, returned
by :func:`ddcl_readout_config` - a :class:`ddcl_theory.experiments.probes.DDCLReadoutConfig`
named "DDCL readout v2": one head of width 32, K prototypes (K = the number of classes here)
seeded by k-means++ and 10 Lloyd steps on the projected tokens, tau = 0.25 T_c with T_c the
critical temperature of L_q with q differentiated (``critical_temperature(z,
objective="quantisation")`` on the projected seed tokens), loss CE + 0.01 L_q, AdamW (lr 3e-3,
weight decay 1e-4, batches of 64 sequences), trained until the validation loss (a stratified 20%
of the training split) plateaus or passes its optimum (at most 40 epochs); the epoch of least
validation loss is the reported model (:func:`ddcl_theory.experiments.probes.ddcl_readout_fit`).
Use ``ddcl_readout_config()`` (optionally ``dataclasses.replace`` on run-length fields, stated).

Supervised (the evidence of D14): for each seed, a stratified validation split of the training
draw (seeded), the DDCL readout trained on the rest (:func:`~ddcl_theory.experiments.probes.
ddcl_readout_fit`; seeds vary the split, the initialisation and the batch order) and scored on
the test set after every epoch (the readout-step scales) and at its selected epoch; logistic
regression probes on [CLS] and on the mean with C chosen by cross-validation on the whole
training draw (:func:`~ddcl_theory.experiments.probes.linear_probe_cv`; convex and solved to
convergence, so fitted once per corpus and paired with every seed). Unsupervised, shown beside
(on the test documents, labels only to score): k-means on [CLS] and on the mean, and two DDCL
clusterings - a DDCL layer fitted by L_q on the tokens (each document to its dominant prototype)
and one fitted on the mean-pooled documents - scored by Hungarian ACC, purity, NMI and ARI.

Every DDCL training and clustering is a unit of the run directory
(:class:`ddcl_theory.runtime.rundir.RunDir`), so a killed run resumes. The verdict is
:func:`ddcl_theory.ledger.decisions.text_readout.decide_d14` on its ``intervals``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from ddcl_theory.data import FILES, load_20newsgroups, load_imdb, load_sst2
from ddcl_theory.data.text import (
    TokenEmbeddings,
    clean_imdb,
    embed,
    load_encoder,
    strip_newsgroup,
)
from ddcl_theory.experiments import probes as P
from ddcl_theory.layers import readouts as R
from ddcl_theory.metrics.clustering import ari, clustering_acc, nmi, purity
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, setting

CORPORA = ("sst2", "imdb", "20ng")
TITLES = {"sst2": "SST-2", "imdb": "IMDB", "20ng": "20 Newsgroups"}
# The K that the aggregator quotes beside each ACC (none given for 20NG: the number of classes).
AGGREGATOR_K = {"sst2": 2, "imdb": 4, "20ng": 20}
AGGREGATOR_ACC = {"sst2": 86.7, "imdb": 91.3, "20ng": 17.5}
SST2_NAMES = ("negative", "positive")
IMDB_NAMES = ("negative", "positive")
NEWSGROUPS = ("alt.atheism", "comp.graphics", "comp.os.ms-windows.misc",
              "comp.sys.ibm.pc.hardware", "comp.sys.mac.hardware", "comp.windows.x",
              "misc.forsale", "rec.autos", "rec.motorcycles", "rec.sport.baseball",
              "rec.sport.hockey", "sci.crypt", "sci.electronics", "sci.med", "sci.space",
              "soc.religion.christian", "talk.politics.guns", "talk.politics.mideast",
              "talk.politics.misc", "talk.religion.misc")


#: THE DDCL readout configuration of claims D14 and D17 (see the module docstring).
DDCL_READOUT = P.DDCLReadoutConfig(name="DDCL readout v2", heads=1, head_dim=32,
                                   relative_temperature=0.25, objective="quantisation",
                                   beta=0.01, lr=3e-3, weight_decay=1e-4, batch_size=64,
                                   max_epochs=40, min_epochs=6, plateau_rel=0.01,
                                   plateau_window=3, patience=5, validation_fraction=0.2)


def ddcl_readout_config() -> P.DDCLReadoutConfig:
    """The one DDCL readout configuration (:data:`DDCL_READOUT`) shared by D14 and D17."""
    return DDCL_READOUT


#: The readout-step scales of the trend: test accuracy after these epochs ...
STEP_EPOCHS = (1, 3)
#: ... and at the epoch the validation split selects (the largest scale, the deciding one).
SELECTED = "selected epoch"
SCALES = tuple(f"epoch {e}" for e in STEP_EPOCHS) + (SELECTED,)


def encoder_max_length(encoder) -> int:
    """The encoder's own maximum input length in tokens: the Sentence-Transformers
    ``max_seq_length`` when the model folder has a ``sentence_bert_config.json`` (256 for
    all-MiniLM-L6-v2, the length it was trained and is served with), else the smaller of the
    tokenizer's ``model_max_length`` and the model's ``max_position_embeddings`` (512 for
    BERT-base)."""
    import json
    from pathlib import Path

    config = Path(str(getattr(encoder, "source", ""))) / "sentence_bert_config.json"
    if config.is_file():
        return int(json.loads(config.read_text())["max_seq_length"])
    limits = [int(encoder.tokenizer.model_max_length),
              int(encoder.config.max_position_embeddings)]
    return min(x for x in limits if x > 0)


def _smoke_readout():
    from dataclasses import replace
    return replace(DDCL_READOUT, max_epochs=2, min_epochs=1)


@dataclass(frozen=True)
class TextReadoutSettings(Settings):
    """Scale of the text-readout experiment.

    Sizes of 0 mean "all rows of the split". Lengths are in tokens, [CLS] and [SEP] included.
    cpu: small draws (SST-2 as in the reference profile), cut at 64 / 128 / 64 tokens, 3
    seeds, shorter clusterings (20 Adam steps on 2,500 tokens) (a regression value);
    reference: a smaller 20 Newsgroups draw, all cut at the encoder's own maximum (256 for
    MiniLM), the rule's 10 seeds, clusterings of 40 steps on 5,000 tokens; paper: every row,
    BERT-base, cut at 512.
    """

    encoder: str = setting("minilm", paper="bert-base-uncased")
    sst2_train: int = setting(1000, paper=0, smoke=64, ge=0)
    sst2_max_length: int = setting(64, reference=256, paper=512, ge=1)
    imdb_train: int = setting(300, paper=0, smoke=32, ge=0)
    imdb_test: int = setting(300, paper=0, smoke=32, ge=0)
    imdb_max_length: int = setting(128, reference=256, paper=512, ge=1)
    ng_train: int = setting(800, reference=600, paper=0, smoke=64, ge=0)
    ng_test: int = setting(400, reference=300, paper=0, smoke=32, ge=0)
    ng_max_length: int = setting(64, reference=256, paper=512, ge=1)
    seeds: int = setting(3, reference=10, paper=10, smoke=1, ge=1)
    readout: P.DDCLReadoutConfig = setting(DDCL_READOUT, smoke=_smoke_readout())
    probe_cs: tuple[float, ...] = setting(P.PROBE_CS, gt=0, nonempty=True)
    probe_folds: int = setting(5, ge=2)
    cluster_seeds: int = setting(3, paper=5, smoke=1, ge=1)
    cluster_steps: int = setting(20, reference=40, paper=200, smoke=2, ge=1)
    cluster_tokens: int = setting(2500, reference=5000, paper=200000, smoke=500, ge=1)
    cluster_temperature_fraction: float = setting(0.05, gt=0)
    kmeans_restarts: int = setting(3, paper=10, smoke=1, ge=1)
    data_seed: int = setting(0, ge=0)
    batch_tokens: int = setting(2048, ge=1)


# ----------------------------------------------------------------------------------- corpora
@dataclass
class Corpus:
    """A labelled train/test draw of one corpus, texts cleaned.

    Attributes:
        name: a key of :data:`CORPORA`; label_names: class names in label order.
        train_texts, test_texts: cleaned texts; train_y, test_y: (N,) int64 labels.
        train_index, test_index: rows of the loader's split that were drawn (sorted).
        full_train, full_test: sizes of the splits drawn from (texts that the clean-up leaves
            empty are never drawn).
        checksum: sha256 of the data file (part of the embedding cache key).
        max_length: truncation length for the encoder.
    """

    name: str
    label_names: tuple[str, ...]
    train_texts: list[str]
    train_y: np.ndarray
    train_index: np.ndarray
    test_texts: list[str]
    test_y: np.ndarray
    test_index: np.ndarray
    full_train: int
    full_test: int
    checksum: str
    max_length: int

    @property
    def num_classes(self) -> int:
        return len(self.label_names)


def balanced_draw(labels: np.ndarray, n: int, generator: torch.Generator,
                  usable=None) -> np.ndarray:
    """Sorted indices of a class-balanced random draw of ``n`` rows (all usable rows when ``n``
    is 0 or at least their number). Each class gets ``n // C`` rows, the first ``n % C`` classes
    one more; a class with too few rows gives all it has and the rest comes from the others.
    ``usable(i) -> bool`` (optional) rules rows out; it is called only on rows the draw reaches.
    """
    labels = np.asarray(labels)
    ok = (lambda i: True) if usable is None else usable
    classes = np.unique(labels)
    pools = {c: np.flatnonzero(labels == c) for c in classes}
    if 0 < n < len(labels):
        pools = {c: p[torch.randperm(len(p), generator=generator).numpy()]
                 for c, p in pools.items()}
        want = {c: n // len(classes) + (i < n % len(classes)) for i, c in enumerate(classes)}
    else:
        want = {c: len(p) for c, p in pools.items()}
    taken: dict = {c: [] for c in classes}
    cursor = {c: 0 for c in classes}

    def fill(c, count: int) -> None:
        while len(taken[c]) < count and cursor[c] < len(pools[c]):
            i = int(pools[c][cursor[c]])
            cursor[c] += 1
            if ok(i):
                taken[c].append(i)

    for c in classes:
        fill(c, want[c])
    short = sum(want.values()) - sum(len(t) for t in taken.values())
    for c in classes:                               # refill from classes with rows to spare
        if short <= 0:
            break
        before = len(taken[c])
        fill(c, before + short)
        short -= len(taken[c]) - before
    return np.sort(np.array([i for c in classes for i in taken[c]], dtype=np.int64))


def load_corpus(name: str, settings: TextReadoutSettings) -> Corpus:
    """Draw and clean the train/test texts of corpus ``name`` at the settings' sizes."""
    if name not in CORPORA:
        raise ValueError(f"name: expected one of {CORPORA}, got {name!r}")
    s = settings
    gen = profile.seed_everything(s.data_seed)
    if name == "sst2":
        tr_x, tr_y = load_sst2("train")
        te_x, te_y = load_sst2("dev")
        sizes, clean, key, names, max_len = (s.sst2_train, 0), str, "sst2_train", SST2_NAMES, \
            s.sst2_max_length
    elif name == "imdb":
        tr_x, tr_y = load_imdb("train")
        te_x, te_y = load_imdb("test")
        sizes, clean, key, names, max_len = (s.imdb_train, s.imdb_test), clean_imdb, "imdb", \
            IMDB_NAMES, s.imdb_max_length
    else:
        tr_x, tr_y = load_20newsgroups("train")
        te_x, te_y = load_20newsgroups("test")
        sizes, clean, key, names, max_len = (s.ng_train, s.ng_test), strip_newsgroup, \
            "20newsgroups", NEWSGROUPS, s.ng_max_length
    # texts that the clean-up leaves empty (20 Newsgroups messages that are all header or
    # quote) are never drawn; the clean-up runs only on the rows the draw reaches
    cleaned: dict[tuple[int, int], str] = {}

    def usable(split: int, texts: list[str]):
        def check(i: int) -> bool:
            cleaned[split, i] = clean(texts[i])
            return bool(cleaned[split, i].strip())
        return check

    tr_i = balanced_draw(tr_y, sizes[0], gen, usable(0, tr_x))
    te_i = balanced_draw(te_y, sizes[1], gen, usable(1, te_x))
    return Corpus(name, names, [cleaned[0, i] for i in tr_i], tr_y[tr_i], tr_i,
                  [cleaned[1, i] for i in te_i], te_y[te_i], te_i, len(tr_y), len(te_y),
                  FILES[key].sha256 if name != "sst2" else
                  FILES["sst2_train"].sha256 + FILES["sst2_dev"].sha256, max_len)


def embed_corpus(encoder, corpus: Corpus) -> tuple[TokenEmbeddings, TokenEmbeddings]:
    """Token embeddings of the train and test texts (from the cache when there)."""
    tag = f"{corpus.name}:"
    train = embed(encoder, corpus.train_texts, corpus.max_length,
                  checksum=tag + "train:" + corpus.checksum, indices=corpus.train_index,
                  desc=f"encode {corpus.name} train")
    test = embed(encoder, corpus.test_texts, corpus.max_length,
                 checksum=tag + "test:" + corpus.checksum, indices=corpus.test_index,
                 desc=f"encode {corpus.name} test")
    return train, test


def packed(emb: TokenEmbeddings, device: str = "cpu") -> R.PackedTokens:
    """The embeddings as float32 :class:`~ddcl_theory.layers.readouts.PackedTokens` on
    ``device``."""
    return R.PackedTokens(torch.from_numpy(emb.values).float().to(device),
                          torch.from_numpy(emb.offsets).to(device))


# ----------------------------------------------------------------------------------- results
@dataclass
class ClusterScore:
    """One unsupervised clustering of the test documents.

    Attributes:
        method: e.g. "k-means on [CLS]"; k: number of clusters;
        acc, purity, nmi, ari: (seeds,) scores (Hungarian ACC, many-to-one purity, NMI, ARI).
    """

    method: str
    k: int
    acc: list[float]
    purity: list[float]
    nmi: list[float]
    ari: list[float]


@dataclass
class CorpusResult:
    """Everything measured on one corpus.

    Attributes:
        name, num_classes, n_train, n_test, full_train, full_test, max_length: the data.
        truncated: share of train+test texts cut at ``max_length``; mean_tokens: mean length.
        n_fit, n_val: training sequences the DDCL readout fits on and validates on (per seed).
        probes: "[CLS]" and "mean" -> the cross-validated logistic-regression probe (one fit).
        runs: the DDCL readout of each seed (:class:`~ddcl_theory.experiments.probes.
            ReadoutRun`).
        clusters: the unsupervised scores (shown beside).
    """

    name: str
    num_classes: int
    n_train: int
    n_test: int
    full_train: int
    full_test: int
    max_length: int
    truncated: float
    mean_tokens: float
    n_fit: int
    n_val: int
    probes: dict[str, P.ProbeLog]
    runs: list[P.ReadoutRun]
    clusters: list[ClusterScore]

    @property
    def ddcl(self) -> list[float]:
        """Test accuracy of each seed's DDCL readout at its selected epoch."""
        return [r.selected_test_acc for r in self.runs]

    def ddcl_at(self, scale: str) -> list[float]:
        """Test accuracy of each seed's DDCL readout at a scale of :data:`SCALES`."""
        if scale == SELECTED:
            return self.ddcl
        if scale not in SCALES:
            raise ValueError(f"scale: expected one of {SCALES}, got {scale!r}")
        epoch = STEP_EPOCHS[SCALES.index(scale)]
        return [r.test_acc_at(epoch) for r in self.runs]

    @property
    def accuracy(self) -> dict[str, list[float]]:
        """Test accuracies: "[CLS]" and "mean" (one fit each) and "DDCL" (one per seed)."""
        return {"[CLS]": [self.probes["[CLS]"].test_acc], "mean": [self.probes["mean"].test_acc],
                "DDCL": self.ddcl}

    @property
    def min_v(self) -> float:
        """Smallest V of the DDCL readouts over every training step of every seed."""
        return min(min(r.v) for r in self.runs)

    @property
    def identity(self) -> float:
        """Largest |L_q - L_OLS - V| / L_q over every step of every seed (float32 rounding)."""
        return max(max(abs(a - b - v) / max(abs(a), 1e-30)
                       for a, b, v in zip(r.l_q, r.l_ols, r.v)) for r in self.runs)

    @property
    def finished(self) -> int:
        """Seeds whose DDCL readout reached its validation plateau or passed its optimum."""
        return sum(r.finished for r in self.runs)


@dataclass
class TextReadoutResult:
    settings: TextReadoutSettings
    encoder: str
    corpora: dict[str, CorpusResult]


def cluster_ks(name: str, num_classes: int) -> list[int]:
    """The cluster counts examined: the number of classes and the aggregator's K."""
    return sorted({num_classes, AGGREGATOR_K[name]})


def _scores(y: np.ndarray, labels: np.ndarray) -> tuple[float, float, float, float]:
    return (clustering_acc(y, labels), purity(y, labels), nmi(y, labels), ari(y, labels))


def _unit(ckpt: RunDir | None, key: str, compute):
    """``compute()`` as a unit of ``ckpt`` (read back when finished); computed directly without
    a run directory."""
    if ckpt is None:
        return compute()
    return ckpt.unit(key, compute)


def _readout_run(emb_train, y_train: np.ndarray, emb_test, y_test: np.ndarray, *, k: int,
                 config: P.DDCLReadoutConfig, seed: int, device: str) -> P.ReadoutRun:
    fit_rows, val_rows = P.validation_split(y_train, config.validation_fraction, seed)
    y_tr = torch.from_numpy(y_train).to(device)
    return P.ddcl_readout_fit(
        packed(emb_train.subset(fit_rows), device), y_tr[torch.from_numpy(fit_rows).to(device)],
        packed(emb_train.subset(val_rows), device), y_tr[torch.from_numpy(val_rows).to(device)],
        packed(emb_test, device), torch.from_numpy(y_test).to(device), num_prototypes=k,
        config=config, seed=seed, num_classes=k)


def run_corpus(name: str, settings: TextReadoutSettings, encoder,
               corpus: Corpus | None = None, *, ckpt: RunDir | None = None) -> CorpusResult:
    """Supervised probes and readouts, and the unsupervised clusterings, on one corpus (drawn by
    :func:`load_corpus` unless given); ``ckpt`` keeps every DDCL training as a unit."""
    s = settings
    device = profile.current().device
    corpus = corpus if corpus is not None else load_corpus(name, s)
    if corpus.name != name:
        raise ValueError(f"corpus: expected the {name!r} draw, got {corpus.name!r}")
    train, test = embed_corpus(encoder, corpus)
    c = corpus.num_classes

    probes = {label: P.linear_probe_cv(torch.from_numpy(f_tr), torch.from_numpy(corpus.train_y),
                                       torch.from_numpy(f_te), torch.from_numpy(corpus.test_y),
                                       cs=s.probe_cs, folds=s.probe_folds, seed=s.data_seed)
              for label, (f_tr, f_te) in {"[CLS]": (train.cls(), test.cls()),
                                          "mean": (train.mean(), test.mean())}.items()}
    runs = [_unit(ckpt, f"{name}/readout/seed={seed}", functools.partial(
        _readout_run, train, corpus.train_y, test, corpus.test_y, k=c, config=s.readout,
        seed=seed, device=device)) for seed in range(s.seeds)]
    n_fit, n_val = (len(x) for x in P.validation_split(corpus.train_y,
                                                       s.readout.validation_fraction, 0))

    clusters: list[ClusterScore] = []
    y = corpus.test_y
    p_te = packed(test, device)
    docs = torch.from_numpy(test.mean()).to(device)
    doc_tokens = R.PackedTokens(docs, torch.arange(len(docs) + 1, device=device))
    seeds = range(s.cluster_seeds)
    for k in cluster_ks(name, c):
        def ddcl_labels(data: R.PackedTokens, where: str, k: int, seed: int, **kw) -> np.ndarray:
            key = f"{name}/clusters/{where}/K={k}/seed={seed}"
            return _unit(ckpt, key, lambda: P.ddcl_clusters(
                data, k, seed=seed, steps=s.cluster_steps,
                temperature_fraction=s.cluster_temperature_fraction, run=ckpt, name=key,
                **kw).labels)

        labelings_of = {
            "k-means on [CLS]": [P.kmeans_clusters(test.cls(), k, seed, s.kmeans_restarts)
                                 for seed in seeds],
            "k-means on mean": [P.kmeans_clusters(test.mean(), k, seed, s.kmeans_restarts)
                                for seed in seeds],
            "DDCL on tokens": [ddcl_labels(p_te, "tokens", k, seed, max_tokens=s.cluster_tokens)
                               for seed in seeds],
            "DDCL on mean": [ddcl_labels(doc_tokens, "mean", k, seed) for seed in seeds],
        }
        for method, labelings in labelings_of.items():
            sc = np.array([_scores(y, lab) for lab in labelings])           # (seeds, 4)
            clusters.append(ClusterScore(method, k, *(sc[:, j].tolist() for j in range(4))))

    lengths = np.concatenate([train.lengths, test.lengths])
    return CorpusResult(name, c, len(corpus.train_y), len(corpus.test_y), corpus.full_train,
                        corpus.full_test, corpus.max_length,
                        float((lengths >= corpus.max_length).mean()), float(lengths.mean()),
                        n_fit, n_val, probes, runs, clusters)


def run(settings: TextReadoutSettings | None = None, *, encoder=None,
        corpora: dict[str, Corpus] | tuple[str, ...] = CORPORA) -> TextReadoutResult:
    """Run :func:`run_corpus` on each corpus (names, or draws from :func:`load_corpus`) with one
    frozen encoder (loaded from the settings unless given)."""
    s = settings or TextReadoutSettings.from_profile()
    encoder = encoder or load_encoder(s.encoder, device=profile.current().device,
                                      batch_tokens=s.batch_tokens)
    draws = corpora if isinstance(corpora, dict) else {n: None for n in corpora}
    ckpt = RunDir("text_readout", s)
    result = TextReadoutResult(s, encoder.name, {n: run_corpus(n, s, encoder, c, ckpt=ckpt)
                                                 for n, c in draws.items()})
    ckpt.finish({"corpora": list(result.corpora)})
    return result
