"""Optimiser steps and encoded documents of the text, language-model, debris and timing entries.

:data:`STEPS` maps a registry entry's name (:attr:`ddcl_theory.experiments.registry.Experiment.
name`) to a pure function ``settings -> int``: the optimiser steps that the entry's run function
takes through :func:`ddcl_theory.runtime.training.fit` on a fresh run (nothing resumed from a run
directory), counted as ``fit`` counts them (:func:`~ddcl_theory.runtime.training.steps_taken`: one
per batch, whatever the number of seeds stacked into that batch), in every process (a run that
spreads its units over worker processes counts them all here, while ``steps_taken`` of the parent
sees only its own). Where a loop can stop early the count is its planned maximum. :data:`ENCODED`
maps the entries that run the frozen text encoder to ``settings -> (documents, max tokens per
document)``, the documents encoded with an empty embedding cache (upper bound of tokens = their
product). :data:`EXAMPLES` maps every entry of :data:`STEPS` to ``settings -> {model class
name: examples}``: the training examples those steps see, per class of the module passed to
``fit`` (``type(model).__name__``, as :func:`~ddcl_theory.runtime.training.counting_flops`
records ``totals["models"]``), summed over every step as
:func:`~ddcl_theory.runtime.training.batch_examples` counts them: a batch with integer tensors
counts the elements of the largest one (an epoch of index batches its fit rows, the ragged last
batch at its real size; the language model's stacked (seeds, batch, block) character windows
seeds x batch x block), a float batch alone its first dimension (a full-batch DDCL fit on one
(1, tokens, features) sequence: 1 per step). A class appears only where it takes steps (``{}``
for an entry that trains nothing); planned maximum, as ``STEPS``. Draw sizes of
0 mean "all rows of the split": those take the split's published size (the constants below), an
upper bound where the clean-up leaves texts empty (20 Newsgroups: 41 of the training and 36 of
the test messages are never drawn).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ddcl_theory.experiments.peer_readouts.settings import READOUTS
from ddcl_theory.experiments.peer_readouts.study import SWEEP
from ddcl_theory.experiments import text_readout as T

__all__ = ["STEPS", "EXAMPLES", "ENCODED", "SST2_TRAIN", "SST2_DEV", "IMDB_SUBSET_TRAIN",
           "IMDB_SUBSET_TEST", "IMDB_FULL_TRAIN", "IMDB_FULL_TEST", "NG_TRAIN", "NG_TEST"]

#: SST-2 (GLUE): training phrases and dev sentences (the dev set is the text chapter's test set).
SST2_TRAIN, SST2_DEV = 67_349, 872
#: The staged IMDB subset that :func:`ddcl_theory.data.load_imdb` reads (not the full 25,000 +
#: 25,000 of :func:`ddcl_theory.data.paper.load_imdb_full`): 5,000 reviews per split.
IMDB_SUBSET_TRAIN, IMDB_SUBSET_TEST = 5_000, 5_000
#: Every labelled IMDB review (``imdb_source="full"``, the paper profile's).
IMDB_FULL_TRAIN, IMDB_FULL_TEST = 25_000, 25_000
#: 20 Newsgroups, bydate split.
NG_TRAIN, NG_TEST = 11_314, 7_532
_CLASSES = {"sst2": len(T.SST2_NAMES), "imdb": len(T.IMDB_NAMES), "20ng": len(T.NEWSGROUPS)}


def _imdb_sizes(s: Any) -> tuple[int, int]:
    """IMDB's (train, test) split sizes under the settings' ``imdb_source``."""
    if s.imdb_source == "full":
        return IMDB_FULL_TRAIN, IMDB_FULL_TEST
    return IMDB_SUBSET_TRAIN, IMDB_SUBSET_TEST


def _text_full(s: Any, name: str) -> int:
    """The training split a corpus draws from."""
    return {"sst2": SST2_TRAIN, "imdb": _imdb_sizes(s)[0], "20ng": NG_TRAIN}[name]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _drawn(n: int, full: int) -> int:
    """Rows of a class-balanced draw of ``n`` from a split of ``full`` (0 or more: all)."""
    return n if 0 < n < full else full


def _held_out(n: int, classes: int, fraction: float) -> int:
    """Validation rows of :func:`ddcl_theory.experiments.probes.validation_split` (sklearn:
    ceil(fraction n), at least one per class)."""
    return max(math.ceil(fraction * n), classes)


def _used(examples: dict[str, int]) -> dict[str, int]:
    """The classes that train at all (``counting_flops`` records a class at its first step)."""
    return {cls: n for cls, n in examples.items() if n > 0}


# ---------------------------------------------------------------------------- the entries
def laplacian_lm(s: Any) -> int:
    """Arms run (none and ``laplacian_heads``, or the latter alone) x training lengths x
    stacks: a length's seeds train as stacked models of at most ``stack_size`` seeds (one stack
    when None), each ``rounds`` rounds of ``steps // rounds`` stacked batches (seeds not
    multiplied)."""
    def stacks(steps: int) -> int:
        n = len(s.seeds_at(steps))
        return -(-n // (s.stack_size or n))
    return len(s.arms_run) * sum(stacks(steps) * s.rounds * (steps // s.rounds)
                                 for steps in s.steps)


def laplacian_lm_examples(s: Any) -> dict[str, int]:
    """``StackedModels[d=dim]``: each stacked step's (input, target) batch is two
    (seeds_at(length), ``batch_size``, ``block_size``) token-id tensors: seeds x batch x block
    per step."""
    per_step = len(s.arms_run) * s.batch_size * s.block_size
    return _used({f"StackedModels[d={s.dim}]": per_step * sum(
        s.rounds * (steps // s.rounds) * len(s.seeds_at(steps)) for steps in s.steps)})


def _debris_fits(s: Any) -> tuple[int, int]:
    """(DDCL head fits, DDCL readout fits) of a ``DebrisSettings``: ``starts`` heads on every
    overlapping catalogue (all seeds at ``n_objects``, the first ``trend_seeds`` at each of
    ``trend_objects``), and on the largest for the first ``beside_seeds`` seeds the other
    temperatures of ``temperature_sweep``, the SGD head and the readout."""
    catalogues = len(s.seeds) + len(s.trend_objects) * len(s.seeds[:s.trend_seeds])
    beside = len(s.seeds[:s.beside_seeds])
    others = sum(r != s.relative_temperature for r in s.temperature_sweep)
    return s.starts * catalogues + beside * (others + 1), beside


def orbital_debris(s: Any) -> int:
    """``epochs`` full-batch steps per DDCL head and readout fit (:func:`_debris_fits`;
    k-means, the GMM and the overlap-free catalogues train nothing)."""
    return s.epochs * sum(_debris_fits(s))


def orbital_debris_examples(s: Any) -> dict[str, int]:
    """Per epoch a ``DDCLAttention`` head sees its catalogue as one (1, N, F) float sequence (1
    example), the ``QuantizedMLPAutoencoder`` readout the ``n_objects`` rows (N, F) of the
    largest catalogue (:func:`_debris_fits`)."""
    heads, readouts = _debris_fits(s)
    return _used({"DDCLAttention": s.epochs * heads,
                  "QuantizedMLPAutoencoder": s.epochs * readouts * s.n_objects})


def _text_corpora(s: Any) -> dict[str, tuple[int, int, int]]:
    """corpus -> (training draw, test draw, max length) of a ``TextReadoutSettings``."""
    return {"sst2": (_drawn(s.sst2_train, SST2_TRAIN), SST2_DEV, s.sst2_max_length),
            "imdb": (_drawn(s.imdb_train, _imdb_sizes(s)[0]),
                     _drawn(s.imdb_test, _imdb_sizes(s)[1]), s.imdb_max_length),
            "20ng": (_drawn(s.ng_train, NG_TRAIN), _drawn(s.ng_test, NG_TEST), s.ng_max_length)}


def _text_fits(s: Any, name: str, n: int, full: int) -> list[tuple[int, int]]:
    """(fit rows, runs) of the DDCL readouts on one corpus of ``n`` training rows drawn from
    ``full``: each tuning fold's rows for the ``grid_size`` configurations, each scale's rows
    less its validation split for the ``seeds``."""
    c, f = _CLASSES[name], s.readout.validation_fraction
    k = round(1 / f)
    if n < full and n // c < k:         # a draw too small for k folds: validation splits
        folds = [n - _held_out(n, c, f)] * s.tuning_folds
    else:                               # StratifiedKFold(k): fold i holds rows i, i + k, ...
        folds = [n - _ceil_div(n - i, k) for i in range(s.tuning_folds)]
    shares = [n if share >= 1 else math.floor(share * n) for share in s.scales]
    return ([(rows, s.grid_size) for rows in folds]
            + [(m - _held_out(m, c, f), len(s.seeds)) for m in shares])


def _text_cluster_steps(s: Any, name: str) -> int:
    """Full-batch steps of the two DDCL clusterings x ``cluster_seeds`` x cluster counts."""
    return 2 * s.cluster_steps * s.cluster_seeds * len(T.cluster_ks(name, _CLASSES[name]))


def _text_corpus_steps(s: Any, name: str, n: int, full: int) -> int:
    """Steps on one corpus of ``n`` training rows drawn from ``full`` (see :func:`text_readout`)."""
    r = s.readout
    fits = sum(runs * _ceil_div(rows, r.batch_size) for rows, runs in _text_fits(s, name, n, full))
    return r.max_epochs * fits + _text_cluster_steps(s, name)


def _text_readout_rows(s: Any, name: str, n: int, full: int) -> int:
    """Fit rows of every readout epoch on one corpus (see :func:`text_readout_examples`)."""
    return s.readout.max_epochs * sum(runs * rows for rows, runs in _text_fits(s, name, n, full))


def text_readout(s: Any) -> int:
    """Per corpus: at most ``readout.max_epochs`` epochs of ceil(fit rows / batch) steps (the
    readouts stop at their validation plateau or optimum: the planned maximum) for the
    ``grid_size`` configurations x ``tuning_folds`` tuning runs and the ``seeds`` x ``scales``
    confirmatory runs, plus ``cluster_steps`` full-batch steps for the two DDCL clusterings
    (tokens, mean) x ``cluster_seeds`` x cluster counts (the probes and k-means train nothing).
    Draw sizes of 0 take the published sizes (an upper bound for 20 Newsgroups)."""
    return sum(_text_corpus_steps(s, name, train, _text_full(s, name))
               for name, (train, _, _) in _text_corpora(s).items())


def text_readout_examples(s: Any) -> dict[str, int]:
    """Summed over the corpora: ``DDCLPooledReadout``, ``readout.max_epochs`` epochs (planned
    maximum) of every fit row of each readout run (index batches); ``DDCLAttention``, 1 per
    DDCL clustering step (one (1, tokens, F) float sequence). Draw sizes of 0 take the published
    sizes (an upper bound for 20 Newsgroups)."""
    corpora = _text_corpora(s)
    return _used({
        "DDCLPooledReadout": sum(_text_readout_rows(s, name, train, _text_full(s, name))
                                 for name, (train, _, _) in corpora.items()),
        "DDCLAttention": sum(_text_cluster_steps(s, name) for name in corpora)})


def text_readout_encoded(s: Any) -> tuple[int, int]:
    """The training and test draws of the three corpora (SST-2: its whole dev set; IMDB: from
    the settings' ``imdb_source``, the paper profile's all 25,000 + 25,000), and the longest
    truncation."""
    corpora = _text_corpora(s).values()
    return sum(tr + te for tr, te, _ in corpora), max(m for _, _, m in corpora)


def _stacked_docs(s: Any) -> int:
    return _drawn(s.documents, NG_TRAIN)


def _stacked_runs(s: Any) -> list[int]:
    """Documents of each scale's runs: the 20 Newsgroups training draw at scale 1, else
    max(2, round(scale x draw))."""
    n = _stacked_docs(s)
    return [n if scale >= 1 else max(2, round(scale * n)) for scale in s.scales]


def stacked_layers(s: Any) -> int:
    """``scales`` x ``seeds`` runs of ``epochs`` epochs of ceil(documents of the run /
    ``batch_docs``) steps (:func:`_stacked_runs`). ``documents`` = 0 takes the published 11,314
    (bound)."""
    per_seed = sum(_ceil_div(docs, s.batch_docs) for docs in _stacked_runs(s))
    return s.epochs * len(s.seeds) * per_seed


def stacked_layers_examples(s: Any) -> dict[str, int]:
    """``StackedDDCL``: every document of each run once per epoch (index batches), for every
    seed."""
    return _used({"StackedDDCL": s.epochs * len(s.seeds) * sum(_stacked_runs(s))})


def stacked_layers_encoded(s: Any) -> tuple[int, int]:
    """The 20 Newsgroups training draw at ``max_length`` (the text-readout chapter's cache entry
    when its draw, length and encoder are the same: then nothing is encoded)."""
    return _stacked_docs(s), s.max_length


def _peer_task(s: Any, task: str) -> tuple[int, int, int]:
    """(training sequences, test sequences, max length) of a D17 task."""
    return {"sst2": (_drawn(s.sst2_train, SST2_TRAIN), SST2_DEV, s.sst2_max_length),
            "20ng": (_drawn(s.ng_train, NG_TRAIN), _drawn(s.ng_test, NG_TEST), s.ng_max_length),
            "debris": (s.debris_train, s.debris_test, s.debris_length)}[task]


def _peer_count(s: Any, per_epoch: Callable[[int, int], int]) -> int:
    """Sum over every training run of ``epochs x per_epoch(rows, batch size)`` (see
    :func:`peer_readouts`)."""
    n = _peer_task(s, s.decide_task)[0]
    fit_rows = n - max(1, int(round(s.tune_fraction * n)))
    tuning = len(s.configurations()) * s.epochs * per_epoch(fit_rows, s.batch_size)
    # the least collapsed configuration's runs: none where the grid holds one configuration
    least = s.epochs * len(s.seeds) if len(s.configurations()) > 1 else 0
    main = per_epoch(n, s.batch_size) * (sum(e * len(s.seeds_at(e)) for e in s.scales())
                                         + least)
    m = _peer_task(s, s.sweep_task)[0]
    sweep = sum(dict(v.overrides).get("epochs", s.sweep_epochs)
                * per_epoch(m, dict(v.overrides).get("batch_size", s.sweep_batch_size))
                for v in SWEEP)
    return len(READOUTS) * (tuning + main) + len(s.sweep_seeds) * sweep


def peer_readouts(s: Any) -> int:
    """The three readouts x ``epochs`` epochs of ceil(fit rows / ``batch_size``) steps for each
    tuning configuration (fit rows: the training set less round(``tune_fraction`` n)), x
    ceil(n / ``batch_size``) steps per epoch for every schedule of ``scales()`` times its
    seeds and once more for the least collapsed configuration at the deciding schedule (none
    when the grid holds one configuration; a planned maximum, since it can be the most
    collapsed one); plus the sweep variants x ``sweep_seeds`` x ``sweep_epochs`` epochs of ceil(debris
    sets / ``sweep_batch_size``) steps. Runs stop early only on a non-finite loss (planned
    maximum); the timings and FLOP counts train nothing."""
    return _peer_count(s, _ceil_div)


def peer_readouts_examples(s: Any) -> dict[str, int]:
    """``ReadoutClassifier`` (every readout kind and sweep variant): the runs of
    :func:`peer_readouts`, each epoch seeing every row it fits (index batches); planned
    maximum."""
    return _used({"ReadoutClassifier": _peer_count(s, lambda rows, _batch: rows)})


def peer_readouts_encoded(s: Any) -> tuple[int, int]:
    """Training and test sequences of the text tasks among ``decide_task`` and ``sweep_task``
    (debris sets are generated, not encoded), and their longest truncation."""
    text = [_peer_task(s, t) for t in dict.fromkeys((s.decide_task, s.sweep_task))
            if t != "debris"]
    return sum(tr + te for tr, te, _ in text), max((m for _, _, m in text), default=0)


def scaling(_s: Any) -> int:
    """0: timed forward passes of a DDCL layer and self-attention per sequence length."""
    return 0


def annealing(_s: Any) -> int:
    """0: fixed-point (EM) steps per temperature of deterministic annealing, no optimiser."""
    return 0


def cooling(_s: Any) -> int:
    """0: float64 gradient and fixed-point steps of the theory module, no optimiser."""
    return 0


def overhead(_s: Any) -> int:
    """0: timed forward passes of attention with 0, half and all heads Laplacian."""
    return 0


def linear_analysis(_s: Any) -> int:
    """0: an exact float64 computation (flow, then damped Newton to three equilibria)."""
    return 0


def no_examples(_s: Any) -> dict[str, int]:
    """{}: no ``fit`` step, so no model class sees an example."""
    return {}


STEPS: dict[str, Callable[[Any], int]] = {
    "laplacian_lm.run": laplacian_lm,
    "orbital_debris.run": orbital_debris,
    "text_readout.run": text_readout,
    "stacked_layers.run": stacked_layers,
    "peer_readouts.run": peer_readouts,
    "scaling.run": scaling,
    "annealing.run": annealing,
    "cooling.run": cooling,
    "overhead.run": overhead,
    "eps_ablation.linear_analysis": linear_analysis,
}

#: Registry entry name -> ``settings -> {model class: training examples through fit}``.
EXAMPLES: dict[str, Callable[[Any], dict[str, int]]] = {
    "laplacian_lm.run": laplacian_lm_examples,
    "orbital_debris.run": orbital_debris_examples,
    "text_readout.run": text_readout_examples,
    "stacked_layers.run": stacked_layers_examples,
    "peer_readouts.run": peer_readouts_examples,
    "scaling.run": no_examples,
    "annealing.run": no_examples,
    "cooling.run": no_examples,
    "overhead.run": no_examples,
    "eps_ablation.linear_analysis": no_examples,
}

ENCODED: dict[str, Callable[[Any], tuple[int, int]]] = {
    "text_readout.run": text_readout_encoded,
    "stacked_layers.run": stacked_layers_encoded,
    "peer_readouts.run": peer_readouts_encoded,
}
