"""Slow deterministic annealing of a prototype bank on real tokens: the successive splits.

Tokens are CIFAR-10 image patches (non-overlapping ``patch`` x ``patch`` x 3), centred and
projected on their first ``dim`` principal components. A bank of K prototypes starts at the
data mean above the critical temperature T_c = 2 lambda_max(C); the temperature falls
geometrically and, at each temperature, the bank gets a tiny fresh perturbation and then
fixed-point (EM) steps until it stops moving (at most ``max_iters``); no EM step increases
F_tau. The record shows when the bank splits into 2, 3, ... distinct groups. The state is
checkpointed after every temperature (no optimiser: EM steps, not :func:`fit`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ddcl_theory.data import image_patches, load_cifar10
from ddcl_theory.metrics.prototypes import separation
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.progress import progress
from ddcl_theory.runtime.settings import Settings, setting
from ddcl_theory.theory.collapse import (
    collapsed,
    count_clusters,
    critical_temperature,
    data_covariance,
)
from ddcl_theory.theory.free_energy import em_fixed_point, free_energy


@dataclass(frozen=True)
class AnnealingSettings(Settings):
    """Scale of the annealing run: cpu 1,000 tokens, K = 8, 40 temperatures of at most 2,000 EM
    steps; paper 20,000 tokens, K = 16, 120 temperatures of at most 10,000 steps (paper smoke
    test: 3 temperatures of at most 5 steps). The ratios are relative to T_c, the tolerances to
    sqrt(tr C)."""

    n_tokens: int = setting(1000, paper=20000, ge=2)
    patch: int = setting(4, ge=1)
    dim: int = setting(4, ge=1)
    k: int = setting(8, paper=16, ge=1)
    start_ratio: float = setting(1.6, gt=0)        # tau_0 = start_ratio * T_c
    end_ratio: float = setting(0.03, gt=0)         # last tau = end_ratio * T_c
    n_temperatures: int = setting(40, paper=120, smoke=3, ge=1)
    max_iters: int = setting(2000, paper=10000, smoke=5, ge=1)
    converged: float = setting(1e-9, gt=0)         # stop when no prototype moves more
    perturbation: float = setting(1e-6, ge=0)
    merge_tol: float = setting(1e-2, gt=0)
    seed: int = setting(0, ge=0)

    def check(self) -> None:
        if not self.end_ratio < self.start_ratio:
            raise ValueError(f"AnnealingSettings.end_ratio: expected < start_ratio "
                             f"{self.start_ratio}, got {self.end_ratio}")


@dataclass
class AnnealingResult:
    """What the run recorded, one row per temperature (after the updates at that temperature).

    Attributes:
        tokens: (N, dim) the tokens used (float64).
        critical_temperature: predicted T_c = 2 lambda_max(C).
        temperatures: (M,) falling temperatures.
        prototypes: (M, K, dim).
        n_clusters: (M,) number of distinct groups of prototypes.
        separation_min, separation_mean: (M,) S(P) with kind "min" and "mean".
        free_energy: (M,) F_tau at each recorded state.
        settled: (M,) True where the bank stopped moving before ``max_iters`` (near a transition
            it may not have: the relevant Hessian eigenvalue is close to zero).
        source: name of the data set actually used.
    """

    tokens: torch.Tensor
    critical_temperature: float
    temperatures: np.ndarray
    prototypes: np.ndarray
    n_clusters: np.ndarray
    separation_min: np.ndarray
    separation_mean: np.ndarray
    free_energy: np.ndarray
    settled: np.ndarray
    source: str

    def first_split_temperature(self) -> float:
        """The highest recorded temperature at which the bank has at least two groups."""
        split = np.flatnonzero(self.n_clusters >= 2)
        if split.size == 0:
            raise ValueError("the bank never split in this run")
        return float(self.temperatures[split[0]])


def patch_tokens(n_tokens: int, patch: int, dim: int, seed: int) -> tuple[torch.Tensor, str]:
    """(tokens (n_tokens, dim) float64, source): random CIFAR-10 patches, PCA-projected."""
    if n_tokens < 2 or dim < 1:
        raise ValueError(f"n_tokens, dim: expected n_tokens >= 2 and dim >= 1, got {n_tokens}, "
                         f"{dim}")
    data = load_cifar10()
    patches = image_patches(data.x_train, patch).reshape(-1, patch * patch * data.x_train.shape[-1])
    rng = np.random.default_rng(seed)
    rows = rng.choice(patches.shape[0], size=n_tokens, replace=False)
    x = torch.from_numpy(patches[rows].astype(np.float64))
    x = x - x.mean(0, keepdim=True)
    _, vectors = torch.linalg.eigh(data_covariance(x))
    basis = vectors[:, -dim:].flip(-1)               # leading principal directions first
    return x @ basis, data.source


def run(settings: AnnealingSettings | None = None) -> AnnealingResult:
    """Anneal a bank of ``settings.k`` prototypes from above T_c; see the module docstring.

    In the paper profile the state (bank, records, generator) is checkpointed after every
    temperature (:class:`RunDir`), so a killed run resumes at the next temperature with the
    numbers an uninterrupted run would give.
    """
    s = settings or AnnealingSettings.from_profile()
    gen = profile.seed_everything(s.seed)
    z, source = patch_tokens(s.n_tokens, s.patch, s.dim, s.seed)
    t_c = critical_temperature(z, objective="free_energy")  # EM steps descend F: it matches
    scale = float(torch.sqrt(torch.trace(data_covariance(z))))
    taus = np.geomspace(s.start_ratio * t_c, s.end_ratio * t_c, s.n_temperatures)
    p = collapsed(z, s.k)
    rec_p, rec_n, rec_min, rec_mean, rec_f, rec_ok = [], [], [], [], [], []
    ckpt = RunDir("annealing", s)
    first = 0
    if (saved := ckpt.load_state(generators={"gen": gen})) is not None:
        first, (p, rec_p, rec_n, rec_min, rec_mean, rec_f, rec_ok) = saved
    for i in progress(range(first, len(taus)), desc="annealing"):
        tau = taus[i]
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float64)
        p = p + s.perturbation * scale * noise
        p, _, settled = em_fixed_point(z, p, float(tau), max_iters=s.max_iters,
                                       tol=s.converged * scale)
        rec_ok.append(settled)
        rec_p.append(p.clone())
        rec_n.append(count_clusters(p, s.merge_tol * scale))
        rec_min.append(float(separation(p, "min")))
        rec_mean.append(float(separation(p, "mean")))
        rec_f.append(float(free_energy(z, p, float(tau))))
        ckpt.save_state(position=i + 1, generators={"gen": gen},
                        extra=(p, rec_p, rec_n, rec_min, rec_mean, rec_f, rec_ok))
    ckpt.finish()
    return AnnealingResult(z, t_c, taus, torch.stack(rec_p).numpy(), np.array(rec_n),
                           np.array(rec_min), np.array(rec_mean), np.array(rec_f), np.array(rec_ok),
                           source)
