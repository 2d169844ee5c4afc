"""Training one readout (:func:`train_readout`) through the one training loop
(:func:`ddcl_theory.runtime.training.fit`), and every readout on one data set
(:func:`compare_readouts`)."""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from ddcl_theory.experiments.peer_readouts.data import TokenSet
from ddcl_theory.experiments.peer_readouts.model import (
    ReadoutClassifier,
    bank_parameters,
    build_readout,
    ddcl_critical_temperature,
    ddcl_trace_temperature,
    near_equal_,
    trim_padding,
)
from ddcl_theory.experiments.peer_readouts.records import (
    PeerResult,
    ReadoutHistory,
    measure_readout,
)
from ddcl_theory.experiments.peer_readouts.settings import READOUTS, PeerSettings
from ddcl_theory.layers.readouts import lloyd
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.progress import progress
from ddcl_theory.runtime.training import fit


def _initial_model(kind: str, data: TokenSet, s: PeerSettings, n_classes: int,
                   gen: torch.Generator) -> ReadoutClassifier:
    """The model before training: DDCL's prototypes from k-means++ (and ``ddcl_lloyd_steps``
    Lloyd steps) on the encoded tokens (of the first ``ddcl_init_sequences`` sequences when
    set) and its temperature relative to T_c of the trained L_q or to the tokens' trace (when
    the settings ask, on the same tokens), near-equal banks (when asked)."""
    model = ReadoutClassifier(data.tokens.shape[-1], build_readout(kind, s), s.dim, s.hidden,
                              n_classes, encoder=s.encoder)
    first = data
    if 0 < s.ddcl_init_sequences < data.tokens.shape[0]:
        sl = slice(0, s.ddcl_init_sequences)
        first = TokenSet(data.tokens[sl], data.mask[sl], data.labels[sl])
    if kind == "ddcl" and s.ddcl_kmeans_init:
        with torch.no_grad():
            layer = model.readout.layer
            z = model.encoder(first.tokens)
            layer.init_prototypes_from(z, first.mask, generator=gen)
            if s.ddcl_lloyd_steps:
                tokens = layer.in_proj(z[first.mask])
                layer.prototypes[0].copy_(lloyd(tokens, layer.prototypes[0],
                                                s.ddcl_lloyd_steps))
    if kind == "ddcl" and s.ddcl_relative_temperature > 0:
        t_c = ddcl_critical_temperature(model, first)          # the trained L_q's 4 lambda_max
        model.readout.layer.temperature.set(max(s.ddcl_relative_temperature * t_c, 1e-12))
    elif kind == "ddcl" and s.ddcl_temperature_fraction > 0:
        model.readout.layer.temperature.set(
            ddcl_trace_temperature(model, first, s.ddcl_temperature_fraction))
    if s.bank_init == "near_equal":
        for bank in bank_parameters(model.readout):
            if bank.dim() >= 2 and bank.shape[-2] > 1:
                near_equal_(bank, s.near_equal_noise, gen)
    return model


def _optimizers(bank: list, rest: list, s: PeerSettings) -> list[torch.optim.Optimizer]:
    """Adam (AdamW when ``weight_decay`` > 0): the bank at ``lr_bank``, the rest at ``lr``."""
    if s.weight_decay > 0:
        return [torch.optim.AdamW(bank, lr=s.lr_bank, weight_decay=s.weight_decay),
                torch.optim.AdamW(rest, lr=s.lr, weight_decay=s.weight_decay)]
    return [torch.optim.Adam(bank, lr=s.lr_bank), torch.optim.Adam(rest, lr=s.lr)]


def _schedule(s: PeerSettings, steps: int):
    """The learning-rate factor at each optimiser step: 1 (``"constant"``), or a linear warm-up
    over ``warmup_fraction`` of the ``steps`` then a cosine decay to 0 (``"cosine"``)."""
    if s.schedule == "constant":
        return lambda step: 1.0
    warm = int(round(s.warmup_fraction * steps))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        done = min(step - warm, steps - warm) / max(steps - warm, 1)
        return 0.5 * (1.0 + math.cos(math.pi * done))
    return factor


def train_readout(kind: str, data: TokenSet, settings: PeerSettings | None = None,
                  test: TokenSet | None = None, *, run: RunDir | None = None,
                  name: str = "state") -> ReadoutHistory:
    """Train encoder + readout ``kind`` + classifier on ``data``; record collapse per epoch.

    Two Adam optimisers (the bank at ``lr_bank``, the rest at ``lr``), cross-entropy
    (+ ``ddcl_lam`` * L_q for DDCL), one epoch per round of
    :func:`~ddcl_theory.runtime.training.fit`; ``run`` and ``name`` keep its checkpoints (a
    killed run resumes at its last epoch). Training stops after an epoch whose last loss is
    not finite.
    """
    s = settings or PeerSettings.from_profile()
    if kind not in READOUTS:
        raise ValueError(f"kind: expected one of {READOUTS}, got {kind!r}")
    if not isinstance(data, TokenSet) or (test is not None and not isinstance(test, TokenSet)):
        raise ValueError("data, test: expected TokenSet instances (see synthetic_tokens)")
    gen = profile.seed_everything(s.seed)
    device = profile.current().device
    n_classes = int(data.labels.max()) + 1
    if test is not None:
        n_classes = max(n_classes, int(test.labels.max()) + 1)
        if test.tokens.shape[-1] != data.tokens.shape[-1]:
            raise ValueError(f"test: expected feature size {data.tokens.shape[-1]}, "
                             f"got {test.tokens.shape[-1]}")
    model = _initial_model(kind, data, s, n_classes, gen)
    model.to(device)
    move = lambda d: None if d is None else TokenSet(d.tokens.to(device), d.mask.to(device),
                                                     d.labels.to(device))
    data, test = move(data), move(test)
    bank = bank_parameters(model.readout)
    bank_ids = {id(p) for p in bank}
    rest = [p for p in model.parameters() if id(p) not in bank_ids]
    optimizers = _optimizers(bank, rest, s)
    steps = s.epochs * -(-data.tokens.shape[0] // s.batch_size)
    schedulers = [torch.optim.lr_scheduler.LambdaLR(o, _schedule(s, steps)) for o in optimizers]
    hist = ReadoutHistory(kind)
    hist.records.append(measure_readout(model, data, test, 0, float("nan"), s))
    n = data.tokens.shape[0]
    ce_losses: list[float] = []                     # this epoch's cross-entropies

    def batches(_epoch: int):
        ce_losses.clear()
        order = torch.randperm(n, generator=gen).to(device)
        return [order[start:start + s.batch_size] for start in range(0, n, s.batch_size)]

    def loss(forward, idx):
        x, m = trim_padding(data.tokens[idx], data.mask[idx])
        logits, out = forward(x, m)
        ce = nn.functional.cross_entropy(logits, data.labels[idx],
                                         label_smoothing=s.label_smoothing)
        ce_losses.append(float(ce.detach()))
        return ce + s.ddcl_lam * out.aux_loss if kind == "ddcl" else ce

    def end_of_round(r: int) -> dict:
        stop = not np.isfinite(ce_losses[-1])
        record = measure_readout(model, data, test, r + 1, float(np.mean(ce_losses)), s,
                          final=stop or r + 1 == s.epochs)
        return {"record": record, "stop": stop}

    log = fit(model, optimizers, rounds=s.epochs, batches=batches, loss=loss, device=device,
              run=run, name=name, schedulers=schedulers, generators={"gen": gen},
              end_of_round=end_of_round,
              stop_if=lambda metrics: metrics["stop"], desc=f"{kind} epochs")
    hist.records += [m["record"] for m in log.metrics]         # also the epochs resumed past
    return hist


def compare_readouts(data: TokenSet, settings: PeerSettings | None = None,
                     test: TokenSet | None = None) -> PeerResult:
    """Train every readout of ``settings.readouts`` on ``data`` from the same seed."""
    s = settings or PeerSettings.from_profile()
    histories = {kind: train_readout(kind, data, s, test)
                 for kind in progress(s.readouts, desc="readouts")}
    return PeerResult(s, histories)
