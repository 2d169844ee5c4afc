"""Claim D11 (soft against hard vector quantisation): :func:`decide_d11`.

Reads a :class:`ddcl_theory.experiments.soft_vq.SoftVQResult` (its ``settings``, ``source``,
``image_size``, ``tokens_per_image`` and the methods ``select``, ``usage``, ``usage_later``), the
gradient check (``soft``, ``hard_without_estimator``) and the per-temperature table of
:func:`ddcl_theory.experiments.soft_vq.temperature_table`.
"""
from __future__ import annotations

import math

import numpy as np

from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict

#: How far the numbers of the evidence may move between machines.
TOLERANCE = Tolerance(abs=0.15, rel=0.5, reason="seed means of short VQ-VAE trainings, chaotic "
                      "at cold temperatures")

RULE = ("reproduced: the soft quantiser passes the reconstruction gradient without an estimator "
        "and at some temperature keeps its usage >= full at every epoch of every seed while it "
        "reconstructs; qualified: no estimator needed and, at a reconstructing temperature, its "
        "usage after epoch 1 exceeds the hard VQ's by more than the hypot of the seed spreads; "
        "not reproduced otherwise")


def _first_epoch_at(values: np.ndarray, level: float) -> int | None:
    hits = np.flatnonzero(values >= level)
    return int(hits[0]) + 1 if hits.size else None


def decide_d11(result, grads, table: list[dict], *, full_usage: float,
               reconstructs: float) -> Verdict:
    """D11 from the runs, the gradient check and the temperature table.

    * ``reproduced``: ``grads.soft > 0`` and ``grads.hard_without_estimator == 0`` (no
      estimator needed), and some row is ``reconstructs`` and ``sustained`` (usage >=
      ``full_usage`` at every epoch of every seed).
    * ``qualified``: no estimator needed, and at some reconstructing row the usage after the
      first epoch (``usage_later``) is above the hard VQ's by more than the hypot of the two
      seed spreads.
    * ``not reproduced``: neither; the evidence says which part fails.

    ``full_usage`` and ``reconstructs`` are the thresholds the table was built with (for the
    evidence text).
    """
    no_estimator = grads.soft > 0 and grads.hard_without_estimator == 0
    hard_later = result.usage_later("hard")
    good = [row for row in table if row["reconstructs"]]
    sustained_good = [row for row in good if row["sustained"]]
    ahead_good = [row for row in good if row["usage_later"][0] - hard_later[0]
                  > math.hypot(row["usage_later"][1], hard_later[1])]
    if no_estimator and sustained_good:
        word = "reproduced"
    elif no_estimator and ahead_good:
        word = "qualified"
    else:
        word = "not reproduced"
    hard_u, ema_u = result.usage("hard"), result.usage("ema")
    hard_reach = _first_epoch_at(hard_u.mean(0), full_usage)
    s = result.settings

    def fmt_row(row):
        return (f"r={row['r']:g}: usage epoch 1 {row['usage_first'][0]:.2f}, epochs 2-{s.epochs} "
                f"{row['usage_later'][0]:.2f} +- {row['usage_later'][1]:.2f}, held-out "
                f"MSE/trivial {row['rel_mse'][0]:.2f} "
                f"(argmax codes {row['rel_mse_codes'][0]:.2f})")

    evidence = (
        f"VQ-VAE with {s.num_codes} codes on {s.n_train} {result.source} images "
        f"({result.image_size}x{result.image_size}, {result.tokens_per_image} tokens each), "
        f"{s.epochs} epochs, {len(s.seeds)} seeds; usage = fraction of the codebook that is some "
        f"training token's (argmax) code during an epoch, full = at least {full_usage:g}, "
        f"reconstructs = held-out error below {reconstructs:g} x the trivial one. No estimator "
        f"needed: the reconstruction gradient reaches the encoder through the soft quantiser "
        f"(norm {grads.soft:.2g}) and not through hard VQ without straight-through (exactly "
        f"{grads.hard_without_estimator:g}). Soft quantiser (tau = r T_c): "
        + "; ".join(fmt_row(row) for row in table)
        + f". Hard VQ with straight-through: usage epoch 1 {hard_u[:, 0].mean():.2f} "
        f"+- {hard_u[:, 0].std():.2f}, epochs 2-{s.epochs} {hard_later[0]:.2f} "
        f"+- {hard_later[1]:.2f}, last {hard_u[:, -1].mean():.2f}, "
        + (f"full at epoch {hard_reach}" if hard_reach else f"never full in {s.epochs} epochs")
        + f". VectorQuantize (EMA, k-means init, dead-code expiry): epoch 1 "
        f"{ema_u[:, 0].mean():.2f}, last {ema_u[:, -1].mean():.2f}.")
    main = next(row for row in table if row["r"] == s.main_temperature)
    our = (f"soft (r={main['r']:g}) usage {main['usage_first'][0]:.2f} -> "
           f"{main['usage_last'][0]:.2f}; hard {hard_u[:, 0].mean():.2f} -> "
           f"{hard_u[:, -1].mean():.2f} over {s.epochs} epochs")
    numbers = {"no_estimator": bool(no_estimator),
               "hard_usage_later": list(hard_later),
               "sustained_and_reconstructing": [row["r"] for row in sustained_good],
               "ahead_and_reconstructing": [row["r"] for row in ahead_good]}
    return Verdict("D11", word, evidence, our_value=our, numbers=numbers, rule=RULE,
                   n_seeds=len(s.seeds), tolerance=TOLERANCE)
