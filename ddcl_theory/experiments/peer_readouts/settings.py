"""The settings of one readout training run (:class:`PeerSettings`) and the readout names."""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

from ddcl_theory.layers.peers import PERCEIVER_SOFTMAX, SLOT_INITS
from ddcl_theory.runtime import profile

READOUTS = ("ddcl", "slot", "perceiver")
BANK_INITS = ("random", "near_equal")
ENCODERS = ("mlp", "linear")
SCHEDULES = ("constant", "cosine")


@dataclass(frozen=True)
class PeerSettings:
    """Everything the comparison depends on (values per profile in :meth:`from_profile`)."""

    readouts: tuple[str, ...] = READOUTS
    num_slots: int = 6                 # S: slots, latents and prototypes alike
    dim: int = 16                      # readout width
    hidden: int = 32                   # token-encoder hidden width
    epochs: int = 8
    batch_size: int = 32
    lr: float = 3e-3                   # Adam: encoder, readout projections, classifier
    lr_bank: float = 3e-3              # Adam: prototypes / latents / initial slots
    bank_init: str = "random"
    near_equal_noise: float = 1e-3
    ddcl_temperature: float = 0.01     # squared-distance scale; T_c = 2 lambda_max ~ 0.4 at init
    ddcl_lam: float = 0.1
    ddcl_kmeans_init: bool = True
    ddcl_relative_temperature: float = 0.0   # r > 0: tau = r * T_c of the tokens at the start
                                             # (T_c of the trained loss L_q: 4 lambda_max)
    ddcl_temperature_fraction: float = 0.0   # f > 0: tau = f * mean squared distance of the
                                             # projected tokens to their mean (the trace)
    ddcl_lloyd_steps: int = 0          # Lloyd steps after the k-means++ start of the prototypes
    ddcl_init_sequences: int = 0       # > 0: the start (k-means++, Lloyd, T_c or trace) reads
                                       # the first n training sequences only (0 = all)
    weight_decay: float = 0.0          # > 0: AdamW with this decay (all readouts alike)
    schedule: str = "constant"         # learning-rate schedule of every readout: "constant" or
                                       # "cosine" (linear warm-up, then cosine decay to 0)
    warmup_fraction: float = 0.0       # share of the steps spent in the linear warm-up
    label_smoothing: float = 0.0       # of the cross-entropy (all readouts alike): gives the
                                       # training loss a floor above 0, so that a plateau shows
    encoder: str = "mlp"               # token encoder before the readout: "mlp" or "linear"
    slot_temperature: float = 1.0
    slot_iterations: int = 3
    slot_init: str = "gaussian"
    slot_init_std: float = 1.0
    perceiver_temperature: float = 1.0
    perceiver_softmax: str = "tokens"
    perceiver_latent_std: float = 1.0
    seed: int = 0
    eval_batch: int = 256
    measure_sequences: int = 0         # collapse metrics and train accuracy on the first n
                                       # training sequences (0 = all of them)
    test_every_epoch: bool = True      # False: test accuracy after the last epoch only
    cost_lengths: tuple[int, ...] = (32, 128, 512)
    cost_batch: int = 8
    cost_repeats: int = 7
    cost_warmup: int = 2

    def __post_init__(self) -> None:
        if not self.readouts or any(r not in READOUTS for r in self.readouts):
            raise ValueError(f"readouts: expected a non-empty tuple drawn from {READOUTS}, "
                             f"got {self.readouts!r}")
        if isinstance(self.measure_sequences, bool) or not isinstance(self.measure_sequences, int) \
                or self.measure_sequences < 0:
            raise ValueError(f"measure_sequences: expected an int >= 0 (0 = all), got "
                             f"{self.measure_sequences!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule: expected one of {SCHEDULES}, got {self.schedule!r}")
        for name in ("ddcl_temperature_fraction", "weight_decay"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{name}: expected a finite float >= 0, got {v!r}")
        if not (isinstance(self.label_smoothing, (int, float)) and 0 <= self.label_smoothing < 1):
            raise ValueError(f"label_smoothing: expected a float in [0, 1), got "
                             f"{self.label_smoothing!r}")
        if not (isinstance(self.warmup_fraction, (int, float)) and 0 <= self.warmup_fraction < 1):
            raise ValueError(f"warmup_fraction: expected a float in [0, 1), got "
                             f"{self.warmup_fraction!r}")
        for name in ("ddcl_lloyd_steps", "ddcl_init_sequences"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name}: expected an int >= 0, got {v!r}")
        for name in ("num_slots", "dim", "hidden", "epochs", "batch_size", "slot_iterations",
                     "eval_batch", "cost_batch", "cost_repeats"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {v!r}")
        if isinstance(self.cost_warmup, bool) or not isinstance(self.cost_warmup, int) \
                or self.cost_warmup < 0:
            raise ValueError(f"cost_warmup: expected an int >= 0, got {self.cost_warmup!r}")
        for name in ("lr", "lr_bank", "near_equal_noise", "ddcl_temperature", "slot_temperature",
                     "slot_init_std", "perceiver_temperature", "perceiver_latent_std"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name}: expected a finite float > 0, got {v!r}")
        if not (isinstance(self.ddcl_lam, (int, float)) and self.ddcl_lam >= 0):
            raise ValueError(f"ddcl_lam: expected a float >= 0, got {self.ddcl_lam!r}")
        if not (isinstance(self.ddcl_relative_temperature, (int, float))
                and math.isfinite(self.ddcl_relative_temperature)
                and self.ddcl_relative_temperature >= 0):
            raise ValueError(f"ddcl_relative_temperature: expected a finite float >= 0 (0 = use "
                             f"ddcl_temperature), got {self.ddcl_relative_temperature!r}")
        if self.encoder not in ENCODERS:
            raise ValueError(f"encoder: expected one of {ENCODERS}, got {self.encoder!r}")
        if self.bank_init not in BANK_INITS:
            raise ValueError(f"bank_init: expected one of {BANK_INITS}, got {self.bank_init!r}")
        if self.slot_init not in SLOT_INITS:
            raise ValueError(f"slot_init: expected one of {SLOT_INITS}, got {self.slot_init!r}")
        if self.perceiver_softmax not in PERCEIVER_SOFTMAX:
            raise ValueError(f"perceiver_softmax: expected one of {PERCEIVER_SOFTMAX}, "
                             f"got {self.perceiver_softmax!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed: expected an int >= 0, got {self.seed!r}")
        if not self.cost_lengths or any(not isinstance(t, int) or t < 1
                                        for t in self.cost_lengths):
            raise ValueError(f"cost_lengths: expected ints >= 1, got {self.cost_lengths!r}")

    @classmethod
    def from_profile(cls, **overrides) -> PeerSettings:
        """cpu: 8 epochs, lengths up to 512; paper: 30 epochs, width 64, lengths up to 4096.
        ``overrides`` replace single fields (e.g. ``perceiver_temperature=0.05``)."""
        prof = profile.current()
        base = dict(
            epochs=prof.pick(cpu=8, paper=30),
            dim=prof.pick(cpu=16, paper=64),
            hidden=prof.pick(cpu=32, paper=128),
            cost_lengths=prof.pick(cpu=(32, 128, 512), paper=(64, 256, 1024, 4096)),
            cost_batch=prof.pick(cpu=8, paper=32),
            cost_repeats=prof.pick(cpu=7, paper=30),
        )
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ValueError(f"overrides: unknown settings {unknown}")
        return cls(**(base | overrides))
