"""Summaries of a study for the chapter: sweep rows, accuracies, per-epoch series."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ddcl_theory.experiments.peer_readouts.study import StudyResult, Variant


@dataclass(frozen=True)
class SweepRow:
    """The runs of one sweep variant, summarised (means over its seeds, final epoch).

    Attributes:
        variant: the :class:`Variant`; seeds: number of runs.
        collapsed: runs whose attention maps collapsed (:meth:`CollapseRecord.collapsed`).
        bank_collapsed: runs whose vectors (slots, latents, prototypes) collapsed.
        maps_rank_start, maps_rank_end: effective rank of the maps before and after training.
        maps_distance_end: relative min distance of the maps after training.
        token_perplexity: per-token perplexity after training (S = every token shared equally).
        fraction_used: share of the S that win at least one token.
        test_acc, test_std: test accuracy, mean and standard deviation over the runs.
        critical_ratio_end: DDCL's tau / T_c of its tokens after training (nan for peers).
        critical_ratio_start: the same before training.
    """

    variant: Variant
    seeds: int
    collapsed: int
    bank_collapsed: int
    maps_rank_start: float
    maps_rank_end: float
    maps_distance_end: float
    token_perplexity: float
    fraction_used: float
    test_acc: float
    test_std: float
    critical_ratio_start: float
    critical_ratio_end: float

    @property
    def outcome(self) -> str:
        """"collapsed" (every run), "avoided" (no run) or "mixed"."""
        return ("collapsed" if self.collapsed == self.seeds else
                "avoided" if self.collapsed == 0 else "mixed")


def sweep_rows(result: StudyResult) -> list[SweepRow]:
    """One :class:`SweepRow` per variant of the sweep, in :data:`SWEEP` order."""
    rows = []
    for v in dict.fromkeys(r.variant for r in result.sweep):
        hs = [r.history for r in result.sweep if r.variant == v]
        fin = [h.final for h in hs]
        mean = lambda xs: float(np.mean(xs))
        rows.append(SweepRow(
            v, len(hs), sum(f.collapsed("maps") for f in fin),
            sum(f.collapsed("vectors") for f in fin),
            mean([h.records[0].maps.effective_rank for h in hs]),
            mean([f.maps.effective_rank for f in fin]),
            mean([f.maps.relative_min_distance for f in fin]),
            mean([f.token_perplexity for f in fin]), mean([f.fraction_used for f in fin]),
            mean([f.test_acc for f in fin]), float(np.std([f.test_acc for f in fin])),
            mean([h.records[0].critical_ratio for h in hs]),
            mean([f.critical_ratio for f in fin])))
    return rows


def accuracy(result: StudyResult, kind: str, epochs: int | None = None) -> np.ndarray:
    """(seeds,) final test accuracy of ``kind``'s main runs of ``epochs`` epochs (default: the
    deciding schedule)."""
    e = result.settings.epochs if epochs is None else epochs
    return np.array([h.final.test_acc for h in result.main[e][kind]])


def series(result: StudyResult, kind: str, name: str, epochs: int | None = None) -> np.ndarray:
    """(seeds, epochs + 1) of one per-epoch quantity of ``kind``'s main runs of ``epochs``
    epochs (default: the deciding schedule; see :meth:`ReadoutHistory.series`)."""
    e = result.settings.epochs if epochs is None else epochs
    return np.stack([h.series(name) for h in result.main[e][kind]])


@dataclass(frozen=True)
class TuningRow:
    """One tuning run: readout, configuration, validation accuracy and cross-entropy and, on
    the training sequences it measured, the two collapse readings at its end (both / S) and DDCL's
    tau / T_c at its start and end (nan for the peers)."""

    kind: str
    lr: float
    factor: float
    temperature: float
    validation_acc: float
    validation_loss: float
    maps_rank: float
    usage: float
    ratio_start: float
    ratio_end: float


def tuning_rows(result: StudyResult) -> list[TuningRow]:
    """One :class:`TuningRow` per readout and configuration, in grid order."""
    s = result.settings
    rows = []
    for kind, runs in result.tuning.items():
        for (lr, factor), h in runs.items():
            f = h.final
            rows.append(TuningRow(kind, lr, factor, s.temperature(kind, factor),
                                  float(f.test_acc), float(f.test_loss), f.maps_rank,
                                  f.normalised_usage, h.records[0].critical_ratio,
                                  f.critical_ratio))
    return rows
