"""The settings of the D17 study (:class:`StudySettings`) and of one readout training run
(:class:`PeerSettings`), with the names they draw from (readouts, starts, encoders, tasks)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ddcl_theory.experiments.probes import DDCLReadoutConfig
from ddcl_theory.experiments.text_readout import ddcl_readout_config
from ddcl_theory.layers.peers import PERCEIVER_SOFTMAX, SLOT_INITS
from ddcl_theory.runtime.settings import Settings, confirmatory_seeds, setting

__all__ = ["READOUTS", "BANK_INITS", "ENCODERS", "SCHEDULES", "TASKS", "DDCL_READOUT",
           "D17_SEEDS", "D17_CONFIRMATORY_RUN", "TEMPERATURE_FIELDS", "PeerSettings",
           "StudySettings"]

READOUTS = ("ddcl", "slot", "perceiver")
BANK_INITS = ("random", "near_equal")
ENCODERS = ("mlp", "linear")
SCHEDULES = ("constant", "cosine")
TASKS = ("sst2", "20ng", "debris")

#: The one DDCL readout configuration of claims D14 and D17 (the text chapter's): K = the number
#: of classes, k-means++ and Lloyd steps on the projected tokens of the first sequences, tau a
#: fixed fraction of T_c of L_q (q differentiated), CE + beta L_q, AdamW. The main runs take its
#: values; where they differ the chapter says why.
DDCL_READOUT: DDCLReadoutConfig = ddcl_readout_config()
if DDCL_READOUT.objective != "quantisation" or DDCL_READOUT.heads != 1:
    raise ValueError(f"DDCL_READOUT: expected one head with tau relative to T_c of L_q "
                     f"(objective 'quantisation'), got {DDCL_READOUT!r}")

_INF = math.inf          # ``lt=_INF``: a finite float (infinity itself is refused)

#: The seeds of the confirmatory run: the registered rule's (``ledger.rules``, claim D17).
D17_SEEDS = 30
#: Which confirmatory run of the D17 rule the reference makes (the rule's ``D17_RUN``): seeds no
#: earlier confirmatory run and no exploratory tuning grid used.
D17_CONFIRMATORY_RUN = 4


@dataclass(frozen=True)
class PeerSettings(Settings):
    """Everything one comparison run depends on. cpu: 8 epochs, width 16, timing lengths up to
    512; paper: 30 epochs, width 64, lengths up to 4096."""

    readouts: tuple[str, ...] = setting(READOUTS, choices=READOUTS, nonempty=True)
    num_slots: int = setting(6, ge=1)              # S: slots, latents and prototypes alike
    dim: int = setting(16, paper=64, ge=1)         # readout width
    hidden: int = setting(32, paper=128, ge=1)     # token-encoder hidden width
    epochs: int = setting(8, paper=30, ge=1)
    batch_size: int = setting(32, ge=1)
    lr: float = setting(3e-3, gt=0, lt=_INF)    # Adam: encoder, projections, classifier
    lr_bank: float = setting(3e-3, gt=0, lt=_INF)   # Adam: prototypes / latents / slots
    bank_init: str = setting("random", choices=BANK_INITS)
    near_equal_noise: float = setting(1e-3, gt=0, lt=_INF)
    # squared-distance scale; T_c = 2 lambda_max ~ 0.4 at init
    ddcl_temperature: float = setting(0.01, gt=0, lt=_INF)
    ddcl_lam: float = setting(0.1, ge=0)
    ddcl_kmeans_init: bool = setting(True)
    # r > 0: tau = r * T_c of the tokens at the start (T_c of the trained loss L_q: 4 lambda_max);
    # 0: use ddcl_temperature
    ddcl_relative_temperature: float = setting(0.0, ge=0, lt=_INF)
    # f > 0: tau = f * mean squared distance of the projected tokens to their mean (the trace)
    ddcl_temperature_fraction: float = setting(0.0, ge=0, lt=_INF)
    ddcl_lloyd_steps: int = setting(0, ge=0)       # Lloyd steps after the k-means++ start
    # > 0: the start (k-means++, Lloyd, T_c or trace) reads the first n training sequences only
    # (0 = all)
    ddcl_init_sequences: int = setting(0, ge=0)
    weight_decay: float = setting(0.0, ge=0, lt=_INF)   # > 0: AdamW (all readouts alike)
    # learning-rate schedule of every readout: "constant" or "cosine" (linear warm-up, then
    # cosine decay to 0)
    schedule: str = setting("constant", choices=SCHEDULES)
    warmup_fraction: float = setting(0.0, ge=0, lt=1)  # share of the steps in the warm-up
    # of the cross-entropy (all readouts alike): gives the training loss a floor above 0, so
    # that a plateau shows
    label_smoothing: float = setting(0.0, ge=0, lt=1)
    encoder: str = setting("mlp", choices=ENCODERS)    # token encoder before the readout
    slot_temperature: float = setting(1.0, gt=0, lt=_INF)
    slot_iterations: int = setting(3, ge=1)
    slot_init: str = setting("gaussian", choices=SLOT_INITS)
    slot_init_std: float = setting(1.0, gt=0, lt=_INF)
    perceiver_temperature: float = setting(1.0, gt=0, lt=_INF)
    perceiver_softmax: str = setting("tokens", choices=PERCEIVER_SOFTMAX)
    perceiver_latent_std: float = setting(1.0, gt=0, lt=_INF)
    seed: int = setting(0, ge=0)
    eval_batch: int = setting(256, ge=1)
    # collapse metrics and train accuracy on the first n training sequences (0 = all of them)
    measure_sequences: int = setting(0, ge=0)
    test_every_epoch: bool = setting(True)         # False: test accuracy after the last epoch
    cost_lengths: tuple[int, ...] = setting((32, 128, 512), paper=(64, 256, 1024, 4096), ge=1,
                                            nonempty=True)
    cost_batch: int = setting(8, paper=32, ge=1)
    cost_repeats: int = setting(7, paper=30, ge=1)
    cost_warmup: int = setting(2, ge=0)


#: The common tuning grid of the attention temperature, as factors of each readout's own
#: default (DDCL: tau / T_c of L_q; Slot Attention and Perceiver: tau dividing the logits after
#: the usual 1/sqrt(dim), default 1). The units differ, the grid of factors is the same.
TEMPERATURE_FIELDS = {"ddcl": "ddcl_relative_temperature", "slot": "slot_temperature",
                      "perceiver": "perceiver_temperature"}


@dataclass(frozen=True)
class StudySettings(Settings):
    """Scale of the D17 study.

    Sizes are numbers of sequences; lengths are in tokens ([CLS] and [SEP] included for text).

    *Tuning* (on ``decide_task``): every readout is trained once (seed ``seeds[0]``) per
    configuration of the common grid ``tune_lrs`` x ``tune_temperature_factors`` (a factor
    multiplies the readout's default temperature: ``ddcl_relative_temperature``,
    ``slot_temperature`` or ``perceiver_temperature``) on the training sequences less a held-out
    ``tune_fraction`` (seed ``data_seed``); each readout then runs at two of the
    configurations whose validation accuracy lies within one binomial standard error of its
    best, the most and the least collapsed by their tuning runs' maps rank
    (``study.choose``): the same number of
    configurations, the same split and the same criterion for each readout.

    *Main runs*: the three readouts at their most collapsed such configurations on all the
    training sequences of ``decide_task``, per schedule of :meth:`scales` (separate runs of
    ``shorter_epochs`` and ``epochs`` epochs, each with its own warm-up and cosine decay): one
    run per seed of ``seeds`` at the longest (the deciding runs), per seed of the first
    ``trend_seeds`` at the shorter ones. Batch ``batch_size``, AdamW
    (``weight_decay``), the bank at the same rate as the rest, cross-entropy with
    ``label_smoothing``. DDCL is the text chapter's readout (:data:`DDCL_READOUT`): K = the
    number of classes, k-means++ plus ``ddcl_lloyd_steps`` Lloyd steps on the first
    ``ddcl_init_sequences`` sequences, tau = its relative temperature times T_c of L_q on the
    same tokens, L_q weight ``ddcl_lam``.

    *Mechanism sweep* (``sweep_*``): its own recipe (constant ``sweep_lr``, Adam, batch
    ``sweep_batch_size``, DDCL at tau = ``sweep_relative_temperature`` T_c of L_q, no Lloyd
    steps) on ``sweep_task``, two seeds per setting.

    Profiles. cpu: three seeds, schedules of 2 and 5 epochs, one configuration per readout (at
    its scale the choice between neighbouring configurations turns on a few validation
    messages), the collapse measures on 128 sequences (a regression run and pilot);
    reference: the rule's seeds (its fourth confirmatory run, from 4000 up) at 20 epochs, five
    of them at 5
    and 10 epochs, the grid of five rates and five temperature factors, 256 sequences
    measured; paper: the full corpus, longer texts, 30 epochs, timing lengths up to 4096.
    """

    seeds: tuple[int, ...] = setting(
        (0, 1, 2), reference=confirmatory_seeds(D17_SEEDS, run=D17_CONFIRMATORY_RUN),
        paper=confirmatory_seeds(D17_SEEDS, run=D17_CONFIRMATORY_RUN), smoke=(0,), ge=0,
        nonempty=True)
    epochs: int = setting(5, reference=20, paper=30, smoke=2, ge=1)     # the deciding schedule
    # the shorter schedules of the scale trend (separate runs, each its own cosine decay), run
    # on the first ``trend_seeds`` seeds
    shorter_epochs: tuple[int, ...] = setting((2,), reference=(5, 10), paper=(8, 15),
                                              smoke=(1,), ge=1)
    trend_seeds: int = setting(3, reference=5, paper=5, smoke=1, ge=1)
    decide_task: str = setting("20ng", choices=TASKS)
    tune_lrs: tuple[float, ...] = setting((1e-2,), reference=(3e-4, 1e-3, 3e-3, 1e-2, 3e-2),
                                          paper=(3e-4, 1e-3, 3e-3, 1e-2, 3e-2), smoke=(1e-2,),
                                          gt=0, lt=_INF, nonempty=True)
    tune_temperature_factors: tuple[float, ...] = setting(
        (1.0,), reference=(0.03, 0.1, 0.3, 1.0, 3.0), paper=(0.03, 0.1, 0.3, 1.0, 3.0),
        smoke=(1.0,), gt=0, lt=_INF, nonempty=True)
    tune_fraction: float = setting(0.2, gt=0, lt=1)
    sweep_task: str = setting("debris", choices=TASKS)
    sweep_seeds: tuple[int, ...] = setting((0, 1), paper=(0, 1, 2), smoke=(0,), ge=0,
                                           nonempty=True)
    sweep_epochs: int = setting(8, paper=30, smoke=1, ge=1)
    encoder: str = setting("minilm", paper="bert-base-uncased")
    # as the text chapter: the embedding cache's key does not hold it, and batching moves
    # float16 roundings
    encoder_batch_tokens: int = setting(2048, ge=1)
    sst2_train: int = setting(1000, paper=20000, smoke=64, ge=1)
    sst2_max_length: int = setting(64, ge=1)
    ng_train: int = setting(800, paper=11314, smoke=64, ge=1)
    ng_test: int = setting(400, paper=7532, smoke=64, ge=1)
    ng_max_length: int = setting(64, paper=256, ge=1)
    debris_train: int = setting(800, paper=8000, smoke=64, ge=1)
    debris_test: int = setting(600, paper=4000, smoke=64, ge=1)
    debris_length: int = setting(24, ge=1)
    data_seed: int = setting(0, ge=0)
    text_dim: int = setting(32, paper=64, ge=1)
    debris_dim: int = setting(16, ge=1)
    hidden: int = setting(32, ge=1)
    sst2_slots: int = setting(2, ge=1)
    ng_slots: int = setting(20, ge=1)
    debris_slots: int = setting(6, ge=1)
    batch_size: int = setting(DDCL_READOUT.batch_size, ge=1)
    lr: float = setting(DDCL_READOUT.lr, gt=0, lt=_INF)     # a main run's rate unless tuned
    weight_decay: float = setting(DDCL_READOUT.weight_decay, ge=0, lt=_INF)
    warmup_fraction: float = setting(0.05, ge=0, lt=1)
    label_smoothing: float = setting(0.1, ge=0, lt=1)
    ddcl_lam: float = setting(DDCL_READOUT.beta, ge=0, lt=_INF)
    ddcl_relative_temperature: float = setting(DDCL_READOUT.relative_temperature, gt=0,
                                               lt=_INF)
    slot_temperature: float = setting(1.0, gt=0, lt=_INF)
    perceiver_temperature: float = setting(1.0, gt=0, lt=_INF)
    ddcl_lloyd_steps: int = setting(DDCL_READOUT.lloyd_steps, ge=0)
    ddcl_init_sequences: int = setting(DDCL_READOUT.init_sequences, ge=0)
    sweep_batch_size: int = setting(64, ge=1)
    sweep_lr: float = setting(3e-3, gt=0, lt=_INF)
    sweep_relative_temperature: float = setting(0.05, gt=0, lt=_INF)
    measure_sequences: int = setting(128, reference=256, paper=1024, ge=1)
    cost_lengths: tuple[int, ...] = setting((32, 128, 512), paper=(64, 256, 1024, 4096),
                                            smoke=(64, 256), ge=1, nonempty=True)
    cost_batch: int = setting(8, paper=32, ge=1)
    repeats: int = setting(7, paper=30, smoke=1, ge=1)
    warmup: int = setting(2, paper=5, smoke=0, ge=0)

    def check(self) -> None:
        if any(e >= self.epochs for e in self.shorter_epochs) \
                or list(self.shorter_epochs) != sorted(set(self.shorter_epochs)):
            raise ValueError(f"StudySettings.shorter_epochs: expected increasing schedules "
                             f"shorter than epochs={self.epochs}, got {self.shorter_epochs}")
        if self.trend_seeds > len(self.seeds):
            raise ValueError(f"StudySettings.trend_seeds: expected at most the {len(self.seeds)} "
                             f"seeds, got {self.trend_seeds}")
        top = max(self.tune_temperature_factors) * self.ddcl_relative_temperature
        if top >= 1:
            raise ValueError(f"StudySettings.tune_temperature_factors: DDCL must start below "
                             f"T_c (tau / T_c < 1), got up to {top:g}")

    def task_shape(self, task: str) -> tuple[int, int]:
        """(width, number of slots) of the readouts on ``task``."""
        if task not in TASKS:
            raise ValueError(f"task: expected one of {TASKS}, got {task!r}")
        return {"sst2": (self.text_dim, self.sst2_slots), "20ng": (self.text_dim, self.ng_slots),
                "debris": (self.debris_dim, self.debris_slots)}[task]

    def scales(self) -> tuple[int, ...]:
        """The schedules of the scale trend, in epochs (separate runs; the last decides)."""
        return tuple(self.shorter_epochs) + (self.epochs,)

    def seeds_at(self, epochs: int) -> tuple[int, ...]:
        """The seeds run at the schedule of ``epochs`` epochs: all of ``seeds`` at the deciding
        one, the first ``trend_seeds`` at the shorter ones."""
        if epochs not in self.scales():
            raise ValueError(f"epochs: expected one of the schedules {self.scales()}, got "
                             f"{epochs!r}")
        return self.seeds if epochs == self.epochs else self.seeds[:self.trend_seeds]

    def configurations(self) -> tuple[tuple[float, float], ...]:
        """The tuning grid: (learning rate, temperature factor) pairs, in order."""
        return tuple((lr, f) for lr in self.tune_lrs for f in self.tune_temperature_factors)

    def temperature(self, kind: str, factor: float = 1.0) -> float:
        """The temperature of readout ``kind`` at ``factor`` times its default (DDCL: tau /
        T_c of L_q at the start)."""
        if kind not in TEMPERATURE_FIELDS:
            raise ValueError(f"kind: expected one of {READOUTS}, got {kind!r}")
        return factor * getattr(self, TEMPERATURE_FIELDS[kind])

    def peer_settings(self, task: str, seed: int, *, sweep: bool = False,
                      **overrides) -> PeerSettings:
        """The :class:`PeerSettings` of one training run on ``task`` (text: a linear map of
        the frozen tokens before the readout; debris: the per-token MLP); ``sweep``: the
        mechanism sweep's recipe. Fields not set here keep their defaults (the cpu values)."""
        dim, slots = self.task_shape(task)
        base = dict(num_slots=slots, dim=dim, hidden=self.hidden,
                    encoder="mlp" if task == "debris" else "linear", seed=seed,
                    ddcl_lam=self.ddcl_lam,
                    measure_sequences=self.measure_sequences, test_every_epoch=False,
                    cost_lengths=self.cost_lengths, cost_batch=self.cost_batch,
                    cost_repeats=self.repeats, cost_warmup=self.warmup)
        if sweep:
            base |= dict(epochs=self.sweep_epochs, batch_size=self.sweep_batch_size,
                         lr=self.sweep_lr, lr_bank=self.sweep_lr,
                         ddcl_relative_temperature=self.sweep_relative_temperature)
        else:
            base |= dict(epochs=self.epochs, batch_size=self.batch_size, lr=self.lr,
                         lr_bank=self.lr, weight_decay=self.weight_decay, schedule="cosine",
                         warmup_fraction=self.warmup_fraction,
                         label_smoothing=self.label_smoothing,
                         ddcl_relative_temperature=self.ddcl_relative_temperature,
                         slot_temperature=self.slot_temperature,
                         perceiver_temperature=self.perceiver_temperature,
                         ddcl_lloyd_steps=self.ddcl_lloyd_steps,
                         ddcl_init_sequences=self.ddcl_init_sequences)
        if "lr" in overrides and "lr_bank" not in overrides:
            overrides = overrides | {"lr_bank": overrides["lr"]}
        return PeerSettings(**(base | overrides))

    def tuned_settings(self, kind: str, seed: int, config: tuple[float, float],
                       epochs: int | None = None) -> PeerSettings:
        """The main-run settings of readout ``kind`` on ``decide_task`` at the tuning
        configuration ``config`` = (learning rate, temperature factor), for ``epochs``
        (default: the deciding schedule)."""
        lr, factor = config
        return self.peer_settings(self.decide_task, seed, lr=lr,
                                  epochs=self.epochs if epochs is None else epochs,
                                  **{TEMPERATURE_FIELDS[kind]: self.temperature(kind, factor)})
