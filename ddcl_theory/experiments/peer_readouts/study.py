"""The D17 study: the three readouts on real tasks over seeds, a mechanism sweep, inference cost."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ddcl_theory.experiments.peer_readouts.cost import (
    CostResult,
    flop_counts,
    inference_cost,
)
from ddcl_theory.experiments.peer_readouts.data import TaskData, TokenSet, load_task
from ddcl_theory.experiments.peer_readouts.records import ReadoutHistory
from ddcl_theory.experiments.peer_readouts.settings import (
    READOUTS,
    PeerSettings,
    StudySettings,
)
from ddcl_theory.experiments.peer_readouts.training import train_readout
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.progress import progress
from ddcl_theory.runtime.rundir import RunDir


@dataclass(frozen=True)
class Variant:
    """One setting of the mechanism sweep.

    Attributes:
        readout: a key of :data:`READOUTS`.
        label: what differs from the readout's default, in words.
        overrides: (field, value) pairs replacing :class:`PeerSettings` fields.
    """

    readout: str
    label: str
    overrides: tuple[tuple[str, object], ...] = ()

    @property
    def near_equal(self) -> bool:
        """Whether the run starts from (nearly) coincident slots/latents/prototypes."""
        o = dict(self.overrides)
        return o.get("bank_init") == "near_equal" or o.get("slot_init_std", 1.0) < 0.01


def _variant(readout: str, label: str, **overrides) -> Variant:
    return Variant(readout, label, tuple(sorted(overrides.items())))


#: The mechanism sweep: for each readout the knobs that the sources and the theory name
#: (temperature, number of slots, learning rates, where the bank starts), each tried in a
#: direction that should favour collapse and one that should prevent it. DDCL's temperatures are
#: relative to T_c of the loss it trains (L_q with q differentiated, 4 lambda_max): the sweep's
#: default tau = 0.05 T_c is 0.2 lambda_max.
SWEEP: tuple[Variant, ...] = (
    _variant("slot", "default (Gaussian slots, tau = 1)"),
    _variant("slot", "tau = 30 (soft competition)", slot_temperature=30.0),
    _variant("slot", "learned slots, tau = 0.3", slot_init="learned", slot_temperature=0.3),
    _variant("slot", "12 slots", num_slots=12),
    _variant("slot", "bank lr x10", lr_bank=0.03),
    _variant("slot", "near-equal (sigma = 1e-3)", slot_init_std=1e-3),
    _variant("slot", "near-equal learned, tau = 0.1", slot_init="learned",
             bank_init="near_equal", slot_temperature=0.1),
    _variant("slot", "near-equal learned, bank lr x10", slot_init="learned",
             bank_init="near_equal", lr_bank=0.03),
    _variant("perceiver", "default (softmax over tokens, tau = 1)"),
    _variant("perceiver", "tau = 10", perceiver_temperature=10.0),
    _variant("perceiver", "12 latents", num_slots=12),
    _variant("perceiver", "inverted (softmax over latents)", perceiver_softmax="latents"),
    _variant("perceiver", "near-equal", bank_init="near_equal"),
    _variant("perceiver", "near-equal, bank lr x10", bank_init="near_equal", lr_bank=0.03),
    _variant("perceiver", "near-equal, inverted", bank_init="near_equal",
             perceiver_softmax="latents"),
    _variant("ddcl", "default (tau = 0.05 T_c, lambda = 0.01)"),
    _variant("ddcl", "lambda = 0.1", ddcl_lam=0.1),
    _variant("ddcl", "tau = 1.5 T_c, lambda = 0.1", ddcl_relative_temperature=1.5, ddcl_lam=0.1),
    _variant("ddcl", "tau = 1.5 T_c", ddcl_relative_temperature=1.5),
    _variant("ddcl", "12 prototypes", num_slots=12),
    _variant("ddcl", "near-equal", bank_init="near_equal"),
    _variant("ddcl", "near-equal, lambda = 0.1", bank_init="near_equal", ddcl_lam=0.1),
    _variant("ddcl", "near-equal, bank lr x10", bank_init="near_equal", lr_bank=0.03),
    _variant("ddcl", "near-equal, tau = 0.005 T_c", bank_init="near_equal",
             ddcl_relative_temperature=0.005),
    _variant("ddcl", "near-equal, tau = 1.5 T_c, bank lr x10", bank_init="near_equal",
             ddcl_relative_temperature=1.5, lr_bank=0.03),
)


@dataclass
class SweepRun:
    """One (variant, seed) run of the mechanism sweep."""

    variant: Variant
    seed: int
    history: ReadoutHistory


#: A tuning configuration: (learning rate, temperature factor).
Config = tuple[float, float]
#: The two configurations each readout runs at, both among its *equivalent* configurations
#: (validation accuracy within one binomial standard error of its best, :func:`equivalent`):
#: the most collapsed (lowest maps rank / S in its tuning run; the deciding runs: the worst a
#: user who tunes by validation accuracy can get) and the least collapsed (the highest; the
#: readout at its best, beside).
SELECTIONS = ("most collapsed", "least collapsed")


@dataclass
class StudyResult:
    """Everything the D17 chapter shows.

    Attributes:
        settings: the study's settings.
        tasks: name -> :class:`TaskData` (the deciding task and the sweep's).
        tuning: readout -> configuration (lr, temperature factor) -> the history of its
            tuning run (``test_acc``: accuracy on the held-out validation split).
        main: schedule (epochs) -> readout -> one :class:`ReadoutHistory` per seed of
            ``settings.seeds_at(epochs)``, at the readout's most collapsed equivalent
            configuration (the deciding runs at the longest schedule).
        least: readout -> one :class:`ReadoutHistory` per seed of ``settings.seeds`` at the
            deciding schedule and the readout's least collapsed equivalent configuration (the
            same runs as ``main``'s where the two configurations coincide).
        sweep: the :class:`SweepRun` of every variant of :data:`SWEEP` and sweep seed.
        flops: readout -> FLOPs per sequence at each of ``settings.cost_lengths``
            (:func:`flop_counts`, at the width and slot count of the deciding task).
        cost: forward times of the same readouts (:func:`inference_cost`), or None.
    """

    settings: StudySettings
    tasks: dict[str, TaskData]
    tuning: dict[str, dict[Config, ReadoutHistory]]
    main: dict[int, dict[str, list[ReadoutHistory]]]
    least: dict[str, list[ReadoutHistory]]
    sweep: list[SweepRun]
    flops: dict[str, list[int]]
    cost: CostResult | None

    def validation_scores(self, kind: str) -> dict[Config, tuple[float, float]]:
        """configuration -> (validation accuracy, validation cross-entropy) of ``kind``'s
        tuning run."""
        return validation_scores(self.tuning[kind])

    @property
    def held_out(self) -> int:
        """The number of held-out sequences the tuning's validation accuracies are read on."""
        task = self.tasks[self.settings.decide_task]
        return held_out_count(len(task.train.labels), self.settings.tune_fraction)

    def equivalent(self, kind: str) -> tuple[Config, ...]:
        """``kind``'s equivalent configurations (:func:`equivalent`), in grid order."""
        return equivalent(self.validation_scores(kind), self.held_out)

    def equivalence_line(self, kind: str) -> float:
        """The lowest validation accuracy among ``kind``'s equivalent configurations may have
        (:func:`equivalence_line`)."""
        return equivalence_line(self.validation_scores(kind), self.held_out)

    def chosen(self, kind: str, selection: str = SELECTIONS[0]) -> Config:
        """The configuration of ``kind``'s runs of ``selection`` (one of :data:`SELECTIONS`;
        :func:`choose`)."""
        return choose(self.validation_scores(kind), tuning_ranks(self.tuning[kind]),
                      self.held_out, selection)

    def deciding(self, kind: str, selection: str = SELECTIONS[0]) -> list[ReadoutHistory]:
        """``kind``'s runs at the deciding (longest) schedule and the configuration of
        ``selection``, in seed order."""
        if selection not in SELECTIONS:
            raise ValueError(f"selection: expected one of {SELECTIONS}, got {selection!r}")
        if selection == SELECTIONS[1]:
            return self.least[kind]
        return self.main[self.settings.epochs][kind]

    @property
    def slot_iterations(self) -> int:
        """Slot Attention's rounds per call in the readouts counted and timed."""
        return cost_settings(self.settings).slot_iterations


def cost_settings(s: StudySettings) -> PeerSettings:
    """The readouts timed and counted: width and slot count of the deciding task, every
    other field at its default."""
    return s.peer_settings(s.decide_task, 0)


def _unit(ckpt: RunDir, key: str, kind: str, train: TokenSet, test: TokenSet,
          ps: PeerSettings) -> ReadoutHistory:
    """One training run as a unit of the run directory: read back when finished, else trained
    (resuming from its last epoch's checkpoint when one is there)."""
    return ckpt.unit(key, functools.partial(train_readout, kind, train, ps, test,
                                            run=ckpt, name=key))


def held_out_count(n: int, fraction: float) -> int:
    """How many of ``n`` sequences :func:`validation_split` holds out at ``fraction``."""
    return max(1, int(round(fraction * n)))


def equivalent(scores: dict[Config, tuple[float, float]], held_out: int) -> tuple[Config, ...]:
    """The configurations of ``scores`` (configuration -> (accuracy, cross-entropy)) whose
    validation accuracy lies within one binomial standard error, sqrt(a (1 - a) / n), of the
    best accuracy a on ``held_out`` = n sequences: the one-standard-error rule. A validation
    split of n sequences cannot tell them apart, so any of them is a configuration a user who
    tunes by validation accuracy may keep."""
    if not scores:
        raise ValueError("scores: expected at least one configuration")
    if any(not isinstance(v, tuple) or len(v) != 2 for v in scores.values()):
        raise ValueError("scores: expected (accuracy, cross-entropy) pairs")
    if held_out < 1:
        raise ValueError(f"held_out: expected at least one sequence, got {held_out!r}")
    floor = equivalence_line(scores, held_out)
    return tuple(c for c, (acc, _) in scores.items() if acc >= floor)


def equivalence_line(scores: dict[Config, tuple[float, float]], held_out: int) -> float:
    """The lowest validation accuracy :func:`equivalent` keeps: the best accuracy a of
    ``scores`` less one binomial standard error, sqrt(a (1 - a) / n), on n = ``held_out``."""
    if not scores:
        raise ValueError("scores: expected at least one configuration")
    if held_out < 1:
        raise ValueError(f"held_out: expected at least one sequence, got {held_out!r}")
    best = max(acc for acc, _ in scores.values())
    return best - (best * (1 - best) / held_out) ** 0.5


def choose(scores: dict[Config, tuple[float, float]], ranks: dict[Config, float],
           held_out: int, selection: str = SELECTIONS[0]) -> Config:
    """Among the :func:`equivalent` configurations of ``scores`` (configuration -> (accuracy,
    cross-entropy) on ``held_out`` sequences), the most or least collapsed (``selection``, one
    of :data:`SELECTIONS`): the lowest or highest ``ranks`` (configuration -> maps rank / S of
    its tuning run); among equal ranks the lowest validation cross-entropy, then the first in
    grid order."""
    if selection not in SELECTIONS:
        raise ValueError(f"selection: expected one of {SELECTIONS}, got {selection!r}")
    pool = equivalent(scores, held_out)
    missing = [c for c in pool if c not in ranks]
    if missing:
        raise ValueError(f"ranks: no maps rank for configuration(s) {missing}")
    sign = 1.0 if selection == SELECTIONS[0] else -1.0
    return min(pool, key=lambda c: (sign * ranks[c], scores[c][1]))


def tuning_ranks(runs: dict[Config, ReadoutHistory]) -> dict[Config, float]:
    """configuration -> maps rank / S at the end of its tuning run (on its training
    sequences)."""
    return {c: float(h.final.maps_rank) for c, h in runs.items()}


def validation_scores(runs: dict[Config, ReadoutHistory]) -> dict[Config, tuple[float, float]]:
    """configuration -> (accuracy, cross-entropy) of its tuning run on the validation split."""
    return {c: (float(h.final.test_acc), float(h.final.test_loss)) for c, h in runs.items()}


def validation_split(data: TokenSet, fraction: float, seed: int) -> tuple[TokenSet, TokenSet]:
    """(fit, validation): a seeded random ``fraction`` of the sequences of ``data`` held out."""
    n = data.tokens.shape[0]
    held = held_out_count(n, fraction)
    if held >= n:
        raise ValueError(f"fraction: leaves no training sequence out of {n}")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    pick = lambda idx: TokenSet(data.tokens[idx], data.mask[idx], data.labels[idx])
    return pick(order[held:].sort().values), pick(order[:held].sort().values)


def tune(s: StudySettings, task: TaskData, ckpt: RunDir | None = None
         ) -> dict[str, dict[Config, ReadoutHistory]]:
    """readout -> configuration -> tuning run: each readout of :data:`READOUTS` trained once
    (seed ``s.seeds[0]``, the deciding schedule) per configuration of
    :meth:`StudySettings.configurations` on the training sequences of ``task`` less a held-out
    ``s.tune_fraction`` (seed ``s.data_seed``), its accuracy on the held-out part recorded as
    ``test_acc``. The same grid, split and budget for every readout."""
    fit_set, val_set = validation_split(task.train, s.tune_fraction, s.data_seed)
    ckpt = ckpt or RunDir("peer_readouts", s)
    out: dict[str, dict[Config, ReadoutHistory]] = {}
    for kind in READOUTS:
        out[kind] = {}
        for config in progress(s.configurations(), desc=f"tuning {kind}"):
            lr, factor = config
            key = f"tune/{task.name}/{kind}/lr={lr:g}/factor={factor:g}"
            ps = s.tuned_settings(kind, s.seeds[0], config)
            out[kind][config] = _unit(ckpt, key, kind, fit_set, val_set, ps)
    return out


def run(settings: StudySettings | None = None, *, encoder=None,
        tasks: dict[str, TaskData] | None = None, timing: bool = True) -> StudyResult:
    """Tune the three readouts on ``settings.decide_task``; train each at its most collapsed
    equivalent configuration over ``settings.seeds`` at every schedule of ``settings.scales()``
    and at its least collapsed one at the deciding schedule (:func:`choose`); run the
    mechanism sweep on ``settings.sweep_task``, count FLOPs and (``timing``) time the forward
    passes.

    ``tasks`` (name -> :class:`TaskData`) replaces loading; ``encoder`` is the frozen text
    encoder (loaded from the settings when a text task needs it). Every finished training run
    is a unit of the run directory (:class:`ddcl_theory.runtime.rundir.RunDir`).
    """
    s = settings or StudySettings.from_profile()
    data = dict(tasks or {})
    for name in dict.fromkeys((s.decide_task, s.sweep_task)):
        if name not in data:
            if name != "debris" and encoder is None:
                from ddcl_theory.data.text import load_encoder
                encoder = load_encoder(s.encoder, device=profile.current().device,
                                       batch_tokens=s.encoder_batch_tokens)
            data[name] = load_task(name, s, encoder)
    ckpt = RunDir("peer_readouts", s)
    d = data[s.decide_task]
    tuning = tune(s, d, ckpt)
    held = held_out_count(len(d.train.labels), s.tune_fraction)
    chosen = {(k, sel): choose(validation_scores(tuning[k]), tuning_ranks(tuning[k]), held, sel)
              for k in READOUTS for sel in SELECTIONS}

    def runs(kind: str, config: Config, epochs: int, seeds) -> list[ReadoutHistory]:
        lr, factor = config
        return [_unit(ckpt, f"main/{d.name}/{kind}/lr={lr:g}/factor={factor:g}/"
                            f"epochs={epochs}/seed={seed}", kind, d.train, d.test,
                      s.tuned_settings(kind, seed, config, epochs)) for seed in seeds]

    main: dict[int, dict[str, list[ReadoutHistory]]] = {}
    for epochs in progress(s.scales(), desc="schedules"):
        main[epochs] = {kind: runs(kind, chosen[kind, SELECTIONS[0]], epochs,
                                   s.seeds_at(epochs)) for kind in READOUTS}
    # Where both picks are one configuration, the least collapsed runs are the deciding ones.
    least = {kind: main[s.epochs][kind]
             if chosen[kind, SELECTIONS[1]] == chosen[kind, SELECTIONS[0]]
             else runs(kind, chosen[kind, SELECTIONS[1]], s.epochs, s.seeds)
             for kind in progress(READOUTS, desc="least collapsed")}
    d = data[s.sweep_task]
    sweep = []
    for v in progress(SWEEP, desc="sweep"):
        for seed in s.sweep_seeds:
            ps = s.peer_settings(s.sweep_task, seed, sweep=True, **dict(v.overrides))
            hist = _unit(ckpt, f"sweep/{v.readout}/{v.label}/seed={seed}", v.readout,
                         d.train, d.test, ps)
            sweep.append(SweepRun(v, seed, hist))
    cs = cost_settings(s)
    flops = flop_counts(cs)
    cost = inference_cost(cs) if timing else None
    ckpt.finish({"schedules": list(s.scales()), "sweep_runs": len(sweep)})
    return StudyResult(s, data, tuning, main, least, sweep, flops, cost)
