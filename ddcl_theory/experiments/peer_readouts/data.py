"""The data of the D17 study: padded token sets, a synthetic task, debris sets, text tasks.

:class:`TokenSet` holds padded sequences; :func:`synthetic_tokens` is a small task for tests;
:func:`debris_sets` builds sets of orbital-debris objects labelled by the orbit classes they
contain; :func:`text_sets` and :func:`load_task` draw the text chapter's corpora through the
frozen encoder and the embedding cache.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ddcl_theory.experiments.peer_readouts.settings import TASKS, StudySettings
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.validate import valid_tokens


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
    valid_tokens(tokens, mask, tokens.shape[-1])
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
# Real tasks: frozen-encoder text (SST-2, 20 Newsgroups) and sets of orbital-debris objects
# --------------------------------------------------------------------------------------------

#: The non-empty subsets of the four orbit classes, in a fixed order: label i of
#: :func:`debris_sets` is the subset ``DEBRIS_SUBSETS[i]`` (tuples of class indices).
DEBRIS_SUBSETS: tuple[tuple[int, ...], ...] = tuple(
    tuple(c for c in range(4) if mask >> c & 1) for mask in range(1, 16))


def debris_features(features: np.ndarray) -> np.ndarray:
    """The five observed columns of a catalogue (N, 5) as token features (N, 5): perigee and
    apogee altitude and period on a log10 scale (they span two decades), eccentricity and
    inclination as they are; then column z-scores over the catalogue."""
    f = np.asarray(features, dtype=np.float64)
    if f.ndim != 2 or f.shape[1] != 5:
        raise ValueError(f"features: expected shape (N, 5), got {f.shape}")
    x = np.stack([np.log10(f[:, 0]), np.log10(f[:, 1]), f[:, 2], f[:, 3], np.log10(f[:, 4])], 1)
    std = x.std(0)
    return (x - x.mean(0)) / np.where(std > 0, std, 1.0)


def debris_sets(n: int, seq_len: int, *, seed: int, catalogue: int = 4000) -> TokenSet:
    """Sets of tracked objects labelled by *which orbit classes they contain* (claim D17).

    One catalogue of ``catalogue`` objects is drawn by
    :func:`ddcl_theory.data.debris.generate` with ``seed``. Set i has label
    i mod 15 (balanced, then shuffled), i.e. the class subset ``DEBRIS_SUBSETS[label]``, a
    length L uniform in [seq_len // 2, seq_len] (at least the subset's size), one object of
    every class of the subset and the other L - |subset| objects from classes of the subset
    chosen uniformly; objects are drawn with replacement from the catalogue's class pools, in
    random order. Tokens are :func:`debris_features` (5 per object). To name the label a
    readout has to report the presence of up to four kinds of object, however few of them
    there are: one summary of all tokens can do it only if the encoder spreads the classes
    apart, several slots or prototypes can each take a class.
    """
    for name, v in (("n", n), ("seq_len", seq_len), ("catalogue", catalogue)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: expected an int >= 1, got {v!r}")
    if seq_len < 4:
        raise ValueError(f"seq_len: expected an int >= 4 (room for four classes), got {seq_len}")
    if catalogue < 100:
        raise ValueError(f"catalogue: expected at least 100 objects, got {catalogue}")
    from ddcl_theory.data import debris
    cat = debris.generate(catalogue, seed=seed)
    feats = debris_features(cat.features)
    pools = [np.flatnonzero(cat.labels == c) for c in range(4)]
    rng = np.random.default_rng(seed + 1_000_003)
    labels = rng.permutation(np.arange(n) % len(DEBRIS_SUBSETS))
    tokens = np.zeros((n, seq_len, 5), dtype=np.float32)
    mask = np.zeros((n, seq_len), dtype=bool)
    for i, lab in enumerate(labels):
        subset = DEBRIS_SUBSETS[lab]
        length = int(rng.integers(max(seq_len // 2, len(subset)), seq_len + 1))
        classes = np.concatenate([np.array(subset),
                                  rng.choice(subset, size=length - len(subset))])
        rows = [rng.choice(pools[c]) for c in classes]
        order = rng.permutation(length)
        tokens[i, :length] = feats[np.array(rows)[order]]
        mask[i, :length] = True
    return TokenSet(torch.from_numpy(tokens), torch.from_numpy(mask),
                    torch.from_numpy(labels.astype(np.int64)))


def text_sets(train, test, train_y: np.ndarray, test_y: np.ndarray) -> tuple[TokenSet, TokenSet]:
    """Padded :class:`TokenSet` pairs from cached token embeddings
    (:class:`ddcl_theory.data.text.TokenEmbeddings`), standardised per feature with the mean and
    standard deviation of the training tokens (as the text chapter does)."""
    from ddcl_theory.layers.readouts import Standardiser

    std = Standardiser.fit(torch.from_numpy(train.values).float())
    out = []
    for emb, y in ((train, train_y), (test, test_y)):
        x, mask, _ = emb.padded(dtype=torch.float32)
        out.append(TokenSet(std(x, mask), mask, torch.as_tensor(np.asarray(y), dtype=torch.long)))
    return out[0], out[1]


TASK_TITLES = {"sst2": "SST-2", "20ng": "20 Newsgroups", "debris": "debris sets"}


@dataclass(frozen=True)
class TaskData:
    """One task's train and test sets, with a description of what was drawn.

    Attributes:
        name: a key of :data:`TASKS`; num_classes: C.
        train, test: :class:`TokenSet` (tokens standardised as described in :func:`load_task`).
        full_train, full_test: sizes of the splits drawn from (the debris sets are generated).
        max_length: the longest sequence allowed (truncation for text, set size for debris).
        truncated: share of the train + test sequences that reach ``max_length``.
        mean_length: mean number of tokens per sequence.
        cache_hits: for text, whether the train and test embeddings came from the cache.
    """

    name: str
    num_classes: int
    train: TokenSet
    test: TokenSet
    full_train: int
    full_test: int
    max_length: int
    truncated: float
    mean_length: float
    cache_hits: tuple[bool, ...] = ()


def _lengths(*sets: TokenSet) -> np.ndarray:
    return torch.cat([d.mask.sum(1) for d in sets]).numpy()


def load_task(name: str, settings: StudySettings, encoder=None) -> TaskData:
    """Draw task ``name`` at the sizes of ``settings``.

    * ``"sst2"`` / ``"20ng"``: the text chapter's corpora (:func:`ddcl_theory.experiments.
      text_readout.load_corpus`: class-balanced draws, seed ``data_seed``, the same clean-up),
      encoded by the frozen ``encoder`` through the embedding cache, standardised per feature
      with the training tokens' statistics.
    * ``"debris"``: :func:`debris_sets` from the catalogue of seed ``data_seed`` (train) and
      of seed ``data_seed + 1`` (test, a fresh catalogue).
    """
    s = settings
    if name not in TASKS:
        raise ValueError(f"name: expected one of {TASKS}, got {name!r}")
    if name == "debris":
        train = debris_sets(s.debris_train, s.debris_length, seed=s.data_seed)
        test = debris_sets(s.debris_test, s.debris_length, seed=s.data_seed + 1)
        lengths = _lengths(train, test)
        return TaskData(name, len(DEBRIS_SUBSETS), train, test, s.debris_train, s.debris_test,
                        s.debris_length, float((lengths >= s.debris_length).mean()),
                        float(lengths.mean()))
    from ddcl_theory.data.text import load_encoder
    from ddcl_theory.experiments import text_readout as tx

    text = tx.TextReadoutSettings(encoder=s.encoder, sst2_train=s.sst2_train,
                                  sst2_max_length=s.sst2_max_length, ng_train=s.ng_train,
                                  ng_test=s.ng_test, ng_max_length=s.ng_max_length,
                                  data_seed=s.data_seed)
    corpus = tx.load_corpus(name, text)
    encoder = encoder or load_encoder(s.encoder, device=profile.current().device,
                                      batch_tokens=s.encoder_batch_tokens)
    emb_train, emb_test = tx.embed_corpus(encoder, corpus)
    train, test = text_sets(emb_train, emb_test, corpus.train_y, corpus.test_y)
    lengths = _lengths(train, test)
    return TaskData(name, corpus.num_classes, train, test, corpus.full_train, corpus.full_test,
                    corpus.max_length, float((lengths >= corpus.max_length).mean()),
                    float(lengths.mean()), (emb_train.hit, emb_test.hit))
