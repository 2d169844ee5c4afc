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
every readout alike (:mod:`ddcl_theory.metrics.readouts`):

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
reported, never asserted; :func:`flop_counts` counts the matrix-product FLOPs of the same
forward passes (deterministic, so usable in a verdict).

The D17 study (:func:`run`, the chapter's and the smoke test's entry) tunes each readout's
learning rate and attention temperature on one common grid (:func:`tune`, validation accuracy on
a held-out share of the training sequences), then trains the three readouts at their chosen
configurations over several seeds and schedules on one real task (:func:`load_task`: 20
Newsgroups through the frozen text encoder and the token-embedding cache of the text chapter),
and runs a mechanism sweep (:data:`SWEEP`: temperature, number of slots, learning rates,
near-equal starts) on sets of orbital-debris objects (:func:`debris_sets`). :func:`sweep_rows`
and :func:`tuning_rows` summarise it; the verdict is
:func:`ddcl_theory.ledger.decisions.peer_readouts.decide_d17`. The collapse rule is
:meth:`CollapseRecord.collapsed` on the attention rows. DDCL runs at a temperature relative to
the critical temperature T_c = 4 lambda_max of the L_q it trains, on its projected tokens
(``ddcl_relative_temperature``; :func:`ddcl_theory.theory.collapse.critical_temperature`);
every record carries tau / T_c of the *current* tokens.

Modules: :mod:`.settings` (the study's and one run's settings), :mod:`.data` (token sets and
tasks), :mod:`.model` (readouts and the classifier), :mod:`.records` (what is measured per
epoch), :mod:`.training` (one run, on :func:`ddcl_theory.runtime.training.fit`), :mod:`.cost`
(timings and FLOPs), :mod:`.study` (the D17 study) and :mod:`.summaries` (its tables).
"""
from __future__ import annotations

from ddcl_theory.experiments.peer_readouts import study
from ddcl_theory.experiments.peer_readouts.cost import (
    CostResult,
    flop_counts,
    inference_cost,
)
from ddcl_theory.experiments.peer_readouts.data import (
    DEBRIS_SUBSETS,
    TASK_TITLES,
    TaskData,
    TokenSet,
    debris_features,
    debris_sets,
    load_task,
    synthetic_tokens,
    text_sets,
)
from ddcl_theory.experiments.peer_readouts.model import (
    ReadoutClassifier,
    bank_parameters,
    build_readout,
    critical_ratio,
    ddcl_critical_temperature,
    ddcl_tokens,
)
from ddcl_theory.experiments.peer_readouts.records import (
    CollapseRecord,
    PeerResult,
    ReadoutHistory,
    collapse_readings,
    first_choice_perplexity,
)
from ddcl_theory.experiments.peer_readouts.settings import (
    BANK_INITS,
    D17_CONFIRMATORY_RUN,
    D17_SEEDS,
    DDCL_READOUT,
    ENCODERS,
    READOUTS,
    TASKS,
    TEMPERATURE_FIELDS,
    PeerSettings,
    StudySettings,
)
from ddcl_theory.experiments.peer_readouts.study import (
    SELECTIONS,
    SWEEP,
    Config,
    StudyResult,
    SweepRun,
    Variant,
    choose,
    cost_settings,
    equivalence_line,
    equivalent,
    held_out_count,
    run,
    tune,
    tuning_ranks,
    validation_scores,
    validation_split,
)
from ddcl_theory.experiments.peer_readouts.summaries import (
    SweepRow,
    TuningRow,
    accuracy,
    series,
    sweep_rows,
    tuning_rows,
)
from ddcl_theory.experiments.peer_readouts.training import (
    compare_readouts,
    train_readout,
)

__all__ = [
    "BANK_INITS",
    "D17_CONFIRMATORY_RUN",
    "D17_SEEDS",
    "DDCL_READOUT",
    "DEBRIS_SUBSETS",
    "ENCODERS",
    "READOUTS",
    "SELECTIONS",
    "SWEEP",
    "TASKS",
    "TASK_TITLES",
    "TEMPERATURE_FIELDS",
    "CollapseRecord",
    "Config",
    "CostResult",
    "PeerResult",
    "PeerSettings",
    "ReadoutClassifier",
    "ReadoutHistory",
    "StudyResult",
    "StudySettings",
    "SweepRow",
    "SweepRun",
    "TaskData",
    "TokenSet",
    "TuningRow",
    "Variant",
    "accuracy",
    "bank_parameters",
    "build_readout",
    "choose",
    "collapse_readings",
    "compare_readouts",
    "cost_settings",
    "critical_ratio",
    "ddcl_critical_temperature",
    "ddcl_tokens",
    "debris_features",
    "debris_sets",
    "equivalence_line",
    "equivalent",
    "first_choice_perplexity",
    "flop_counts",
    "held_out_count",
    "inference_cost",
    "load_task",
    "run",
    "series",
    "study",
    "sweep_rows",
    "synthetic_tokens",
    "text_sets",
    "train_readout",
    "tune",
    "tuning_ranks",
    "tuning_rows",
    "validation_scores",
    "validation_split",
]
