"""A DDCL readout on a frozen text encoder against [CLS], mean pooling and k-means (claim D14).

Three corpora, each subsampled in the cpu profile (class-balanced draws, the sizes in
:class:`TextReadoutSettings`) and truncated to a maximum number of tokens:

* SST-2 (binary sentiment of movie-review sentences): a draw from the 67,349 training phrases;
  the 872 dev sentences are the test set;
* IMDB (binary sentiment of full reviews, ``<br />`` removed): draws from the 5,000 + 5,000
  reviews of the staged subset;
* 20 Newsgroups (20 topics): draws from the bydate train and test splits, header, quoted lines and
  signature stripped (:func:`ddcl_theory.data.text.clean.strip_newsgroup`).

The frozen encoder's token embeddings come from the cache
(:func:`ddcl_theory.data.text.cache.embed`).
Supervised: logistic-regression probes on [CLS] and on the mean (convex, solved to convergence,
deterministic), and the DDCL readout's ``pooled`` trained with a linear head
(:func:`ddcl_theory.experiments.probes.ddcl_probe`) over several seeds. Unsupervised
(on the test documents, labels only to score): k-means on [CLS] and on the mean, and two DDCL
clusterings - a DDCL layer fitted by L_q on the tokens (each document to its dominant prototype)
and one fitted on the mean-pooled documents - scored by Hungarian ACC, purity, NMI and ARI.

In the paper profile every DDCL training and clustering is a unit of the run directory
(:class:`ddcl_theory.runtime.rundir.RunDir`), so a killed run resumes. The verdict is
:func:`ddcl_theory.ledger.decisions.text_readout.decide_d14` on :func:`comparisons`.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

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
from ddcl_theory.experiments import require_positive_ints
from ddcl_theory.layers import readouts as R
from ddcl_theory.metrics.clustering import ari, clustering_acc, nmi, purity
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir

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


def _pick(cpu, paper, smoke=None):
    return field(default_factory=lambda: profile.current().pick(cpu=cpu, paper=paper, smoke=smoke))


@dataclass(frozen=True)
class TextReadoutSettings:
    """Scale of the text-readout experiment (values from the active profile by default).

    Sizes of 0 mean "all rows of the split". Lengths are in tokens, [CLS] and [SEP] included.
    """

    encoder: str = _pick("minilm", "bert-base-uncased")
    sst2_train: int = _pick(2000, 0, smoke=64)
    sst2_max_length: int = 64
    imdb_train: int = _pick(300, 0, smoke=32)
    imdb_test: int = _pick(300, 0, smoke=32)
    imdb_max_length: int = _pick(128, 512)
    ng_train: int = _pick(800, 0, smoke=64)
    ng_test: int = _pick(400, 0, smoke=32)
    ng_max_length: int = _pick(64, 256)
    seeds: int = _pick(3, 5, smoke=1)
    epochs: int = _pick(10, 30, smoke=1)
    batch_size: int = 128
    lr: float = 3e-3
    probe_c: float = 1.0
    weight_decay: float = 1e-4
    beta: float = 0.01
    head_dim: int = _pick(32, 64)
    temperature_fraction: float = 0.1
    cluster_steps: int = _pick(40, 200, smoke=2)
    cluster_tokens: int = _pick(5000, 200000, smoke=500)
    cluster_temperature_fraction: float = 0.05
    kmeans_restarts: int = _pick(3, 10, smoke=1)
    data_seed: int = 0
    batch_tokens: int = 2048

    def __post_init__(self) -> None:
        require_positive_ints(self, skip=("encoder", "sst2_train", "imdb_train", "imdb_test",
                                          "ng_train", "ng_test", "lr", "probe_c",
                                          "weight_decay", "beta",
                                          "temperature_fraction", "cluster_temperature_fraction",
                                          "data_seed"))
        for name in ("sst2_train", "imdb_train", "imdb_test", "ng_train", "ng_test", "data_seed"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name}: expected an int >= 0 (0 = all rows), got {v!r}")
        for name in ("lr", "probe_c", "temperature_fraction", "cluster_temperature_fraction"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: expected a number > 0, got {getattr(self, name)!r}")

    @classmethod
    def from_profile(cls) -> "TextReadoutSettings":
        """The active profile's values (the same as ``TextReadoutSettings()``)."""
        return cls()

    def train_config(self) -> P.TrainConfig:
        return P.TrainConfig(epochs=self.epochs, batch_size=self.batch_size, lr=self.lr,
                             weight_decay=self.weight_decay, beta=self.beta)


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
        probe: readout name -> test accuracies ("[CLS]", "mean": one deterministic fit;
            "DDCL K=k": one per seed).
        probe_train: the same on the training set.
        ddcl_min_v: smallest V seen while training each DDCL readout (over seeds and steps).
        ddcl_identity: largest |L_q - L_OLS - V| / L_q seen in training (float32 rounding).
        ddcl_used: mean share of prototypes that are some test token's dominant one.
        clusters: the unsupervised scores.
        ddcl_history: (l_q, l_ols, v) per step of the first seed's DDCL readout at K = C.
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
    probe: dict[str, list[float]]
    probe_train: dict[str, list[float]]
    ddcl_min_v: dict[str, float]
    ddcl_identity: dict[str, float]
    ddcl_used: dict[str, float]
    clusters: list[ClusterScore]
    ddcl_history: tuple[list[float], list[float], list[float]]


@dataclass
class TextReadoutResult:
    settings: TextReadoutSettings
    encoder: str
    corpora: dict[str, CorpusResult]


def readout_ks(name: str, num_classes: int) -> list[int]:
    """The prototype / cluster counts examined: the number of classes and the aggregator's K."""
    return sorted({num_classes, AGGREGATOR_K[name]})


def _scores(y: np.ndarray, labels: np.ndarray) -> tuple[float, float, float, float]:
    return (clustering_acc(y, labels), purity(y, labels), nmi(y, labels), ari(y, labels))


def _unit(ckpt: RunDir | None, key: str, compute):
    """``compute(run=..., name=key)`` as a unit of ``ckpt`` (read back when finished; resumed
    from its checkpoint when interrupted); computed directly without a run directory."""
    if ckpt is None:
        return compute(run=None, name=key)
    return ckpt.unit(key, lambda: compute(run=ckpt, name=key))


def run_corpus(name: str, settings: TextReadoutSettings, encoder,
               corpus: Corpus | None = None, *, ckpt: RunDir | None = None) -> CorpusResult:
    """Supervised probes and unsupervised clusterings on one corpus (drawn by
    :func:`load_corpus` unless given); ``ckpt`` keeps the DDCL trainings as units."""
    s = settings
    device = profile.current().device
    corpus = corpus if corpus is not None else load_corpus(name, s)
    if corpus.name != name:
        raise ValueError(f"corpus: expected the {name!r} draw, got {corpus.name!r}")
    train, test = embed_corpus(encoder, corpus)
    y_tr = torch.from_numpy(corpus.train_y).to(device)
    y_te = torch.from_numpy(corpus.test_y).to(device)
    cfg = s.train_config()
    seeds = list(range(s.seeds))
    c = corpus.num_classes
    ks = readout_ks(name, c)

    probe: dict[str, list[float]] = {}
    probe_train: dict[str, list[float]] = {}
    feats = {"[CLS]": (train.cls(), test.cls()), "mean": (train.mean(), test.mean())}
    for label, (f_tr, f_te) in feats.items():          # convex and deterministic: one fit
        log = P.linear_probe(torch.from_numpy(f_tr), y_tr.cpu(), torch.from_numpy(f_te),
                             y_te.cpu(), c=s.probe_c)
        probe[label] = [log.test_acc]
        probe_train[label] = [log.train_acc]

    p_tr, p_te = packed(train, device), packed(test, device)
    min_v, identity, used = {}, {}, {}
    history: tuple[list[float], list[float], list[float]] = ([], [], [])
    for k in ks:
        label = f"DDCL K={k}"
        logs = [_unit(ckpt, f"{name}/probe/K={k}/seed={seed}", functools.partial(
            P.ddcl_probe, p_tr, y_tr, p_te, y_te, num_prototypes=k, config=cfg, seed=seed,
            head_dim=s.head_dim, temperature_fraction=s.temperature_fraction))
            for seed in seeds]
        probe[label] = [log.test_acc for log in logs]
        probe_train[label] = [log.train_acc for log in logs]
        min_v[label] = min(min(log.v) for log in logs)
        identity[label] = max(max(abs(a - b - v) / max(abs(a), 1e-30)
                                  for a, b, v in zip(log.l_q, log.l_ols, log.v)) for log in logs)
        used[label] = float(np.mean([log.fraction_used for log in logs]))
        if k == c:
            history = (logs[0].l_q, logs[0].l_ols, logs[0].v)

    clusters: list[ClusterScore] = []
    y = corpus.test_y
    docs = torch.from_numpy(test.mean()).to(device)
    doc_tokens = R.PackedTokens(docs, torch.arange(len(docs) + 1, device=device))
    for k in ks:
        def ddcl_labels(data: R.PackedTokens, where: str, k: int, seed: int, **kw) -> np.ndarray:
            return _unit(ckpt, f"{name}/clusters/{where}/K={k}/seed={seed}", functools.partial(
                P.ddcl_clusters, data, k, seed=seed, steps=s.cluster_steps,
                temperature_fraction=s.cluster_temperature_fraction, **kw)).labels

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
                        probe, probe_train, min_v, identity, used, clusters, history)


def run(settings: TextReadoutSettings | None = None, *, encoder=None,
        corpora: dict[str, Corpus] | tuple[str, ...] = CORPORA) -> TextReadoutResult:
    """Run :func:`run_corpus` on each corpus (names, or draws from :func:`load_corpus`) with one
    frozen encoder (loaded from the settings unless given)."""
    s = settings or TextReadoutSettings()
    encoder = encoder or load_encoder(s.encoder, device=profile.current().device,
                                      batch_tokens=s.batch_tokens)
    draws = corpora if isinstance(corpora, dict) else {n: None for n in corpora}
    ckpt = RunDir("text_readout", s)
    result = TextReadoutResult(s, encoder.name, {n: run_corpus(n, s, encoder, c, ckpt=ckpt)
                                                 for n, c in draws.items()})
    ckpt.finish({"corpora": list(result.corpora)})
    return result


# ------------------------------------------------------------------------------- comparisons
@dataclass(frozen=True)
class Comparison:
    """DDCL against one baseline on one corpus: mean difference and the margin it must clear.

    ``outcome`` is "better" when diff > margin, "worse" when diff < -margin, else "tie".
    """

    corpus: str
    baseline: str
    ddcl: str
    diff: float
    margin: float

    @property
    def outcome(self) -> str:
        return "better" if self.diff > self.margin else "worse" if self.diff < -self.margin \
            else "tie"


def margin(a: list[float], b: list[float], floor: float = 0.01) -> float:
    """Twice the larger seed standard deviation of two score lists, at least ``floor``."""
    return max(floor, 2.0 * max(float(np.std(a)), float(np.std(b))))


def comparisons(result: TextReadoutResult) -> list[Comparison]:
    """D14's comparisons: the DDCL readout (K = C, supervised) against the [CLS] and mean probes,
    and the better DDCL clustering (K = C) against k-means on [CLS], on every corpus."""
    out = []
    for name, r in result.corpora.items():
        d = f"DDCL K={r.num_classes}"
        for base in ("[CLS]", "mean"):
            out.append(Comparison(name, f"{base} probe", d,
                                  float(np.mean(r.probe[d]) - np.mean(r.probe[base])),
                                  margin(r.probe[d], r.probe[base])))
        at_c = {c.method: c for c in r.clusters if c.k == r.num_classes}
        best = max(("DDCL on tokens", "DDCL on mean"), key=lambda m: np.mean(at_c[m].acc))
        base = at_c["k-means on [CLS]"]
        out.append(Comparison(name, "k-means on [CLS]", best,
                              float(np.mean(at_c[best].acc) - np.mean(base.acc)),
                              margin(at_c[best].acc, base.acc)))
    return out
