"""A DDCL readout on a frozen text encoder against [CLS], mean pooling and k-means (claim D14).

Three corpora, each a class-balanced draw (the sizes in :class:`TextReadoutSettings`),
truncated to a maximum number of tokens (in the reference profile the encoder's own maximum,
:func:`encoder_max_length`):

* SST-2 (binary sentiment of movie-review sentences): a draw from the 67,349 training phrases;
  the 872 dev sentences are the test set;
* IMDB (binary sentiment of full reviews, ``<br />`` removed): draws from the 5,000 + 5,000
  reviews of the staged subset (the paper profile: all 25,000 + 25,000, :func:`load_imdb_splits`);
* 20 Newsgroups (20 topics): draws from the bydate train and test splits, header, quoted lines and
  signature stripped (:func:`ddcl_theory.data.text.clean.strip_newsgroup`).

The frozen encoder's token embeddings come from the cache
(:func:`ddcl_theory.data.text.cache.embed`): computed once per (corpus, draw, maximum length) and
reused by every seed and readout.

**The DDCL readout configuration** shared with claim D17: :data:`DDCL_READOUT`, returned by
:func:`ddcl_readout_config` - a :class:`ddcl_theory.experiments.probes.DDCLReadoutConfig` named
"DDCL readout v2": one head of width 32, K prototypes seeded by k-means++ and 10 Lloyd steps on
the projected tokens, tau = 0.25 T_c with T_c the critical temperature of L_q with q
differentiated, loss CE + 0.01 L_q, AdamW (lr 3e-3, weight decay 1e-4, batches of 64
sequences), trained until the validation loss plateaus or passes its optimum (at most 40
epochs); the epoch of least validation loss is the reported model. Here it is the base of a
tuning grid (:func:`ddcl_grid`): K, heads, learning rate and tau fraction vary, the rest stays.

Supervised (the evidence of D14), per corpus:

1. **Tuning, equal budgets.** The same validation folds of the training draw
   (:func:`~ddcl_theory.experiments.probes.tuning_folds`) score every configuration of both
   arms: the DDCL readout's grid and as many values of C for each logistic-regression probe
   ([CLS], mean). Each arm keeps its best configuration (validation accuracy, ties by
   validation cross-entropy); the stronger probe on validation is named before any test item
   is scored.
2. **Confirmatory seeds.** Each seed draws its own stratified validation split of the training
   draw (at each scale: a quarter, a half, all of it); the chosen DDCL configuration trains on
   the rest and stops on that split; each probe, at its chosen C, fits on the same rows. Every
   seed is scored on its own part of the test draw (a stratified partition, one part per seed),
   so test items are nested in seeds: the per-item correctness of each arm is kept for the
   two-stage bootstrap over seeds and items.

Unsupervised, shown beside (on the test documents, labels only to score): k-means on [CLS] and
on the mean, and two DDCL clusterings - a DDCL layer fitted by L_q on the tokens (each document
to its dominant prototype) and one fitted on the mean-pooled documents - scored by Hungarian
ACC, purity, NMI and ARI.

Every DDCL training and clustering is a unit of the run directory
(:class:`ddcl_theory.runtime.rundir.RunDir`), so a killed run resumes. The verdict is
:func:`ddcl_theory.ledger.decisions.text_readout.decide_d14`.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np
import torch

from ddcl_theory.data import FILES, load_20newsgroups, load_imdb, load_sst2, paper_files
from ddcl_theory.data.paper import load_imdb_full
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
from ddcl_theory.runtime.settings import Settings, confirmatory_seeds, setting

CORPORA = ("sst2", "imdb", "20ng")
TITLES = {"sst2": "SST-2", "imdb": "IMDB", "20ng": "20 Newsgroups"}
# The K that the aggregator quotes beside each ACC (none given for 20NG: the number of classes).
AGGREGATOR_K = {"sst2": 2, "imdb": 4, "20ng": 20}
AGGREGATOR_ACC = {"sst2": 86.7, "imdb": 91.3, "20ng": 17.5}
SST2_NAMES = ("negative", "positive")
IMDB_NAMES = ("negative", "positive")
#: Where IMDB's reviews come from (:func:`load_imdb_splits`).
IMDB_SOURCES = ("subset", "full")
NEWSGROUPS = ("alt.atheism", "comp.graphics", "comp.os.ms-windows.misc",
              "comp.sys.ibm.pc.hardware", "comp.sys.mac.hardware", "comp.windows.x",
              "misc.forsale", "rec.autos", "rec.motorcycles", "rec.sport.baseball",
              "rec.sport.hockey", "sci.crypt", "sci.electronics", "sci.med", "sci.space",
              "soc.religion.christian", "talk.politics.guns", "talk.politics.mideast",
              "talk.politics.misc", "talk.religion.misc")
#: The probes the DDCL readout is compared with, in the order of the D14 rule's tests.
BASELINES = ("mean", "[CLS]")


#: THE DDCL readout configuration of claims D14 and D17 (see the module docstring).
DDCL_READOUT = P.DDCLReadoutConfig(name="DDCL readout v2", heads=1, head_dim=32,
                                   relative_temperature=0.25, objective="quantisation",
                                   beta=0.01, lr=3e-3, weight_decay=1e-4, batch_size=64,
                                   max_epochs=40, min_epochs=6, plateau_rel=0.01,
                                   plateau_window=3, patience=5, validation_fraction=0.2)


def ddcl_readout_config() -> P.DDCLReadoutConfig:
    """The one DDCL readout configuration (:data:`DDCL_READOUT`) shared by D14 and D17."""
    return DDCL_READOUT


#: The probes' grid of C in the reference profile: 32 log-spaced values from 1e-6 to 10, as
#: many configurations as the DDCL readout's grid there.
PROBE_CS = tuple(float(f"{c:.3g}") for c in np.logspace(-6, 1, 32))


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
    return replace(DDCL_READOUT, max_epochs=2, min_epochs=1)


@dataclass(frozen=True)
class TextReadoutSettings(Settings):
    """Scale of the text-readout experiment.

    Sizes of 0 mean "all rows of the split". Lengths are in tokens, [CLS] and [SEP] included.
    cpu: small draws cut at 64 / 128 / 64 tokens, 3 seeds, a grid of 4 configurations per arm
    on one tuning fold, two scales, shorter clusterings (a regression value and pilot);
    reference: larger draws cut at the encoder's own maximum (256 for MiniLM), 10 confirmatory
    seeds, 32 configurations per arm, three scales; paper: every row (all 25,000 + 25,000 IMDB
    reviews), BERT-base, cut at 512.

    The DDCL grid: K in {the number of classes C} + {the second K, when ``grid_second_k``} +
    ``grid_ks`` (:func:`prototype_counts`), times ``grid_heads`` x ``grid_lrs`` x
    ``grid_taus`` (tau as a fraction of T_c); the probes' grid: ``probe_cs``, as many values.
    ``scales``: shares of the training draw, each a run of its own, the last 1 (the whole).
    """

    encoder: str = setting("minilm", paper="bert-base-uncased")
    sst2_train: int = setting(1000, reference=5000, paper=0, smoke=64, ge=0)
    sst2_max_length: int = setting(64, reference=256, paper=512, ge=1)
    imdb_train: int = setting(300, reference=1000, paper=0, smoke=32, ge=0)
    imdb_test: int = setting(300, reference=2000, paper=0, smoke=32, ge=0)
    imdb_max_length: int = setting(128, reference=256, paper=512, ge=1)
    #: ``subset``: the staged 5,000 + 5,000 reviews; ``full``: all 25,000 + 25,000
    imdb_source: str = setting("subset", paper="full", choices=IMDB_SOURCES)
    ng_train: int = setting(800, reference=1000, paper=0, smoke=64, ge=0)
    ng_test: int = setting(400, reference=1000, paper=0, smoke=32, ge=0)
    ng_max_length: int = setting(64, reference=256, paper=512, ge=1)
    seeds: tuple[int, ...] = setting((0, 1, 2), reference=confirmatory_seeds(10),
                                     paper=confirmatory_seeds(10), smoke=(1000,), ge=0,
                                     nonempty=True)
    readout: P.DDCLReadoutConfig = setting(DDCL_READOUT, smoke=_smoke_readout())
    # the grids (the paper profile's smoke test: one configuration per arm)
    grid_second_k: bool = setting(False, reference=True, paper=True, smoke=False)
    grid_ks: tuple[int, ...] = setting((16,), reference=(16, 64), paper=(16, 64), smoke=(),
                                       ge=1)
    grid_heads: tuple[int, ...] = setting((1, 4), smoke=(1,), ge=1, nonempty=True)
    grid_lrs: tuple[float, ...] = setting((3e-3,), reference=(1e-3, 3e-3), paper=(1e-3, 3e-3),
                                          smoke=(3e-3,), gt=0, nonempty=True)
    grid_taus: tuple[float, ...] = setting((0.25,), reference=(0.125, 0.5),
                                           paper=(0.125, 0.5), smoke=(0.25,), gt=0, lt=1,
                                           nonempty=True)
    probe_cs: tuple[float, ...] = setting((1e-4, 1e-3, 1e-2, 1e-1), reference=PROBE_CS,
                                          paper=PROBE_CS, smoke=(1e-2,), gt=0, nonempty=True)
    tuning_folds: int = setting(1, ge=1)
    scales: tuple[float, ...] = setting((0.5, 1.0), reference=(0.25, 0.5, 1.0),
                                        paper=(0.25, 0.5, 1.0), smoke=(1.0,), gt=0, le=1,
                                        nonempty=True)
    cluster_seeds: int = setting(3, paper=5, smoke=1, ge=1)
    cluster_steps: int = setting(20, reference=40, paper=200, smoke=2, ge=1)
    cluster_tokens: int = setting(2500, reference=5000, paper=200000, smoke=500, ge=1)
    cluster_temperature_fraction: float = setting(0.05, gt=0)
    kmeans_restarts: int = setting(3, paper=10, smoke=1, ge=1)
    data_seed: int = setting(0, ge=0)
    batch_tokens: int = setting(2048, ge=1)

    @property
    def grid_size(self) -> int:
        """Configurations in the DDCL readout's grid (and in the probes')."""
        return (1 + self.grid_second_k + len(self.grid_ks)) * len(self.grid_heads) \
            * len(self.grid_lrs) * len(self.grid_taus)

    def check(self) -> None:
        if len(self.probe_cs) != self.grid_size:
            raise ValueError(f"TextReadoutSettings.probe_cs: expected {self.grid_size} values "
                             f"(the DDCL grid's size: equal tuning budgets), got "
                             f"{len(self.probe_cs)}")
        if list(self.scales) != sorted(set(self.scales)) or self.scales[-1] != 1.0:
            raise ValueError(f"TextReadoutSettings.scales: expected increasing shares ending at "
                             f"1, got {self.scales!r}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"TextReadoutSettings.seeds: expected distinct seeds, got "
                             f"{self.seeds!r}")


# ------------------------------------------------------------------------------------- grid
@dataclass(frozen=True)
class GridPoint:
    """One configuration of the DDCL readout's tuning grid: K prototypes per head, heads,
    learning rate, tau as a fraction of T_c; the other fields are the base configuration's."""

    k: int
    heads: int
    lr: float
    tau: float

    def config(self, base: P.DDCLReadoutConfig) -> P.DDCLReadoutConfig:
        return replace(base, heads=self.heads, lr=self.lr, relative_temperature=self.tau)

    @property
    def label(self) -> str:
        return f"K={self.k}, H={self.heads}, lr={self.lr:g}, tau={self.tau:g} T_c"


def second_k(name: str, num_classes: int) -> int:
    """The second K of the grid: the aggregator's K where it differs from the number of
    classes (IMDB: 4), else twice the number of classes."""
    k = AGGREGATOR_K[name]
    return k if k != num_classes else 2 * num_classes


def prototype_counts(name: str, num_classes: int, settings: TextReadoutSettings) -> tuple[int, ...]:
    """The K of the DDCL grid on corpus ``name``: C, the second K (when the settings ask for
    it), then the settings' fixed values; ``ValueError`` when two coincide."""
    ks = (num_classes,) + ((second_k(name, num_classes),) if settings.grid_second_k else ()) \
        + tuple(settings.grid_ks)
    if len(set(ks)) != len(ks):
        raise ValueError(f"grid_ks: the K of {name!r} must differ, got {ks}")
    return ks


def ddcl_grid(name: str, num_classes: int, settings: TextReadoutSettings) -> list[GridPoint]:
    """Every configuration of the DDCL readout's grid on corpus ``name``, K slowest."""
    return [GridPoint(k, h, lr, tau) for k in prototype_counts(name, num_classes, settings)
            for h in settings.grid_heads for lr in settings.grid_lrs for tau in settings.grid_taus]


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
        checksum: the digest of the data (part of the embedding cache key).
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
        sizes, clean, names, max_len = (s.sst2_train, 0), str, SST2_NAMES, s.sst2_max_length
        checksum = FILES["sst2_train"].sha256 + FILES["sst2_dev"].sha256
    elif name == "imdb":
        (tr_x, tr_y), (te_x, te_y), checksum = load_imdb_splits(s.imdb_source)
        sizes, clean, names, max_len = (s.imdb_train, s.imdb_test), clean_imdb, IMDB_NAMES, \
            s.imdb_max_length
    else:
        tr_x, tr_y = load_20newsgroups("train")
        te_x, te_y = load_20newsgroups("test")
        sizes, clean, names, max_len = (s.ng_train, s.ng_test), strip_newsgroup, NEWSGROUPS, \
            s.ng_max_length
        checksum = FILES["20newsgroups"].sha256
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
                  [cleaned[1, i] for i in te_i], te_y[te_i], te_i, len(tr_y), len(te_y), checksum,
                  max_len)


def load_imdb_splits(source: str) -> tuple[tuple[list[str], np.ndarray],
                                          tuple[list[str], np.ndarray], str]:
    """IMDB's (train texts, labels) and (test texts, labels) from ``source``, and the digest
    that keys their embeddings: ``subset``, the staged 5,000 + 5,000 reviews
    (:func:`ddcl_theory.data.load_imdb`); ``full``, all 25,000 + 25,000
    (:func:`ddcl_theory.data.paper.load_imdb_full`; the paper profile's smoke run reads the
    subset in its place, with a notice, where it is not fetched)."""
    if source not in IMDB_SOURCES:
        raise ValueError(f"source: expected one of {IMDB_SOURCES}, got {source!r}")
    if source == "full":
        try:
            train, test = load_imdb_full("train"), load_imdb_full("test")
        except FileNotFoundError as err:
            if not profile.current().smoke:
                raise
            print(f"NOTICE: {err}\nNOTICE: the smoke run reads the staged IMDB subset in its "
                  "place")
        else:
            record = paper_files.read_record("imdb_full", paper_files.find("imdb_full"))
            return train, test, "imdb_full:" + record["content"]
    return load_imdb("train"), load_imdb("test"), FILES["imdb"].sha256


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
class Tuning:
    """Both arms' tuning on one corpus: every configuration scored on the same folds.

    Attributes:
        grid: the DDCL configurations; ddcl: their :class:`~ddcl_theory.experiments.probes.
            Score` (validation accuracy and cross-entropy of the early-stopped readout, per
            fold); ddcl_finished: per configuration, the tuning runs that stopped by the rule.
        cs: the probes' values of C; probes: baseline -> one Score per C.
        n_fit, n_val: rows fitted on and scored on per fold.
    """

    grid: list[GridPoint]
    ddcl: list[P.Score]
    ddcl_finished: list[int]
    cs: tuple[float, ...]
    probes: dict[str, list[P.Score]]
    n_fit: int
    n_val: int

    @property
    def chosen(self) -> GridPoint:
        """The DDCL configuration of best validation score."""
        return self.grid[P.best(self.ddcl)]

    def chosen_c(self, baseline: str) -> float:
        """The C of best validation score of the ``baseline`` probe."""
        return self.cs[P.best(self.probes[baseline])]

    def best_score(self, arm: str) -> P.Score:
        """The validation score of an arm's chosen configuration ("DDCL" or a baseline)."""
        scores = self.ddcl if arm == "DDCL" else self.probes[arm]
        return scores[P.best(scores)]

    @property
    def stronger(self) -> str:
        """The probe of better validation score (exact ties: mean pooling, the encoder's own
        readout), named before the test set is scored."""
        return min(BASELINES, key=lambda b: self.best_score(b).key())


@dataclass
class SeedRun:
    """Both arms on one seed at one scale.

    Attributes:
        seed; scale: share of the training draw; n_fit, n_val: rows fitted on / validated on.
        test_rows: the seed's part of the test draw (indices into it).
        ddcl: the chosen DDCL configuration's run
            (:class:`~ddcl_theory.experiments.probes.ReadoutRun`, ``test_correct`` on
            ``test_rows``); probes: baseline -> its fit at the chosen C
            (:class:`~ddcl_theory.experiments.probes.ProbeFit`) on the same rows and items.
    """

    seed: int
    scale: float
    n_fit: int
    n_val: int
    test_rows: np.ndarray
    ddcl: P.ReadoutRun
    probes: dict[str, P.ProbeFit]

    def paired(self, baseline: str) -> np.ndarray:
        """(items,) DDCL correct - probe correct on the seed's test items (-1, 0 or 1)."""
        return self.ddcl.test_correct.astype(np.int64) \
            - self.probes[baseline].test_correct.astype(np.int64)


@dataclass
class CorpusResult:
    """Everything measured on one corpus.

    Attributes:
        name, num_classes, n_train, n_test, full_train, full_test, max_length: the data.
        truncated: share of train+test texts cut at ``max_length``; mean_tokens: mean length.
        tuning: both arms' tuning (:class:`Tuning`).
        scales: share of the training draw -> one :class:`SeedRun` per seed.
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
    tuning: Tuning
    scales: dict[float, list[SeedRun]]
    clusters: list[ClusterScore]

    @property
    def seeds(self) -> list[SeedRun]:
        """The seed runs at the largest scale (the whole training draw)."""
        return self.scales[max(self.scales)]

    @property
    def runs(self) -> list[P.ReadoutRun]:
        """The DDCL runs at the largest scale."""
        return [s.ddcl for s in self.seeds]

    def accuracy(self, arm: str, scale: float | None = None) -> list[float]:
        """Per-seed test accuracy of ``arm`` ("DDCL" or a baseline) on the seed's test part."""
        runs = self.scales[max(self.scales) if scale is None else scale]
        if arm == "DDCL":
            return [s.ddcl.selected_test_acc for s in runs]
        return [s.probes[arm].test_acc for s in runs]

    @property
    def all_runs(self) -> list[P.ReadoutRun]:
        """The DDCL runs of every seed and scale."""
        return [s.ddcl for runs in self.scales.values() for s in runs]

    @property
    def min_v(self) -> float:
        """Smallest V of the DDCL readouts over every training step of every seed and scale."""
        return min(min(r.v) for r in self.all_runs)

    @property
    def identity(self) -> float:
        """Largest |L_q - L_OLS - V| / L_q over every step of every seed and scale."""
        return max(max(abs(a - b - v) / max(abs(a), 1e-30)
                       for a, b, v in zip(r.l_q, r.l_ols, r.v)) for r in self.all_runs)


@dataclass
class TextReadoutResult:
    settings: TextReadoutSettings
    encoder: str
    corpora: dict[str, CorpusResult]


def cluster_ks(name: str, num_classes: int) -> list[int]:
    """The cluster counts examined: the number of classes and the aggregator's K."""
    return sorted({num_classes, AGGREGATOR_K[name]})


def test_parts(y_test: np.ndarray, n: int, seed: int) -> list[np.ndarray]:
    """A stratified partition of the test draw into ``n`` parts (sorted indices), one per
    seed: the test folds of a shuffled stratified ``n``-fold split; the whole draw for n = 1."""
    from sklearn.model_selection import StratifiedKFold

    y_test = np.asarray(y_test)
    if n == 1:
        return [np.arange(len(y_test))]
    smallest = int(np.bincount(y_test).min())
    if smallest < n:
        raise ValueError(f"y_test: every class needs >= {n} test rows for {n} seeds' parts, "
                         f"the smallest has {smallest}")
    split = StratifiedKFold(n, shuffle=True, random_state=seed).split(np.zeros(len(y_test)),
                                                                       y_test)
    return [np.sort(b) for _, b in split]


def scale_rows(y: np.ndarray, share: float, seed: int) -> np.ndarray:
    """Sorted rows of a stratified random ``share`` of the training draw (all rows at 1)."""
    from sklearn.model_selection import train_test_split

    rows = np.arange(len(y))
    if share >= 1:
        return rows
    kept, _ = train_test_split(rows, train_size=share, random_state=seed, stratify=y)
    return np.sort(kept)


def _scores(y: np.ndarray, labels: np.ndarray) -> tuple[float, float, float, float]:
    return (clustering_acc(y, labels), purity(y, labels), nmi(y, labels), ari(y, labels))


def _unit(ckpt: RunDir | None, key: str, compute):
    """``compute()`` as a unit of ``ckpt`` (read back when finished); computed directly without
    a run directory."""
    if ckpt is None:
        return compute()
    return ckpt.unit(key, compute)


def _readout(emb_train: TokenEmbeddings, y_train: np.ndarray, fit_rows: np.ndarray,
             val_rows: np.ndarray, point: GridPoint, base: P.DDCLReadoutConfig, *, seed: int,
             num_classes: int, device: str, emb_test: TokenEmbeddings | None = None,
             y_test: np.ndarray | None = None) -> P.ReadoutRun:
    """The DDCL readout of ``point`` trained on ``fit_rows``, stopped on ``val_rows`` and
    scored on the test texts when given."""
    y = torch.from_numpy(y_train).to(device)
    test = {} if emb_test is None else {
        "test": packed(emb_test, device), "y_test": torch.from_numpy(y_test).to(device)}
    return P.ddcl_readout_fit(
        packed(emb_train.subset(fit_rows), device), y[torch.from_numpy(fit_rows).to(device)],
        packed(emb_train.subset(val_rows), device), y[torch.from_numpy(val_rows).to(device)],
        **test, num_prototypes=point.k, config=point.config(base), seed=seed,
        num_classes=num_classes)


def _tuning_run(*args, **kwargs) -> P.ReadoutRun:
    """A tuning run without its per-step loss terms (kept small in the run directory)."""
    return replace(_readout(*args, **kwargs), l_q=[], l_ols=[], v=[])


def tune(name: str, s: TextReadoutSettings, train: TokenEmbeddings, y_train: np.ndarray,
         num_classes: int, device: str, ckpt: RunDir | None = None) -> Tuning:
    """Both arms' grids scored on the same tuning folds of the training draw."""
    folds = P.tuning_folds(y_train, s.readout.validation_fraction, s.tuning_folds, s.data_seed)
    grid = ddcl_grid(name, num_classes, s)
    scores, finished = [], []
    for point in grid:
        runs = [_unit(ckpt, f"{name}/tune/{point.label}/fold={i}", functools.partial(
            _tuning_run, train, y_train, fit, val, point, s.readout, seed=s.data_seed + i,
            num_classes=num_classes, device=device)) for i, (fit, val) in enumerate(folds)]
        scores.append(P.Score(tuple(r.val.acc[0] for r in runs),
                              tuple(r.val.loss[0] for r in runs)))
        finished.append(sum(r.finished for r in runs))
    features = {"[CLS]": train.cls(), "mean": train.mean()}
    probes = {b: P.probe_scores(features[b], y_train, folds, s.probe_cs) for b in BASELINES}
    return Tuning(grid, scores, finished, tuple(s.probe_cs), probes, len(folds[0][0]),
                  len(folds[0][1]))


def run_corpus(name: str, settings: TextReadoutSettings, encoder,
               corpus: Corpus | None = None, *, ckpt: RunDir | None = None) -> CorpusResult:
    """Tuning, confirmatory seeds at every scale, and the unsupervised clusterings, on one
    corpus (drawn by :func:`load_corpus` unless given); ``ckpt`` keeps every DDCL training as
    a unit."""
    s = settings
    device = profile.current().device
    corpus = corpus if corpus is not None else load_corpus(name, s)
    if corpus.name != name:
        raise ValueError(f"corpus: expected the {name!r} draw, got {corpus.name!r}")
    train, test = embed_corpus(encoder, corpus)
    c = corpus.num_classes
    y_tr, y_te = corpus.train_y, corpus.test_y

    tuning = tune(name, s, train, y_tr, c, device, ckpt)
    point = tuning.chosen
    features = {"[CLS]": (train.cls(), test.cls()), "mean": (train.mean(), test.mean())}
    parts = test_parts(y_te, len(s.seeds), s.data_seed)
    scales: dict[float, list[SeedRun]] = {}
    for share in s.scales:
        scales[share] = []
        for seed, part in zip(s.seeds, parts):
            rows = scale_rows(y_tr, share, seed)
            fit, val = (rows[i] for i in P.validation_split(y_tr[rows],
                                                            s.readout.validation_fraction, seed))
            ddcl = _unit(ckpt, f"{name}/share={share:g}/seed={seed}", functools.partial(
                _readout, train, y_tr, fit, val, point, s.readout, seed=seed, num_classes=c,
                device=device, emb_test=test.subset(part), y_test=y_te[part]))
            fits = {b: P.probe_fit(features[b][0], y_tr, fit, val, features[b][1][part],
                                   y_te[part], tuning.chosen_c(b)) for b in BASELINES}
            scales[share].append(SeedRun(seed, share, len(fit), len(val), part, ddcl, fits))

    clusters: list[ClusterScore] = []
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
            sc = np.array([_scores(y_te, lab) for lab in labelings])           # (seeds, 4)
            clusters.append(ClusterScore(method, k, *(sc[:, j].tolist() for j in range(4))))

    lengths = np.concatenate([train.lengths, test.lengths])
    return CorpusResult(name, c, len(y_tr), len(y_te), corpus.full_train, corpus.full_test,
                        corpus.max_length, float((lengths >= corpus.max_length).mean()),
                        float(lengths.mean()), tuning, scales, clusters)


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
