"""Where cooling ends: the prototype separation at the end of decreasing temperature schedules.

The tokens are those of :mod:`ddcl_theory.experiments.annealing` (CIFAR-10 patches, PCA). Each
start is a k-means++ bank of ``k`` prototypes (seeded by the start's seed). Two kinds of schedule
run from ``start_ratio`` T_c down to ``end_ratio`` T_c (T_c = 2 lambda_max(C), the threshold of
F_tau): linear and exponential in tau, each at every length in ``steps`` (separate runs: the
scale axis), with plain gradient steps eta = ``step_n`` / N on F_tau at the current temperature.
Along every run F_tau and G = F + N tau log K are recorded at every step. The updates are the
theory module's float64 gradient and fixed-point steps (no optimiser, so not
:func:`~ddcl_theory.runtime.training.fit`); each start is a unit of the run directory.

Beside the gradient schedules, the annealed runs of deterministic annealing: a bank of
``anneal.k`` prototypes starts at collapse, and at each of the annealing temperatures it gets a
fresh perturbation (drawn from the start's own generator) and fixed-point steps until it settles
(:class:`~ddcl_theory.experiments.annealing.AnnealingSettings`).

At the end of every run the separations S_min, S_mean (distances) and S_tr (a squared distance)
are recorded, with S_mean at the step where the schedule first falls below T_c.

Exact arithmetic near collapse. Above T_c a gradient schedule contracts the prototypes' deviations
from their centroid geometrically. Carried as coordinates, deviations below about 1e-16 of the
spread are lost to float64 rounding (every distance of a token to the prototypes rounds to one
number), the bank becomes exactly collapsed, and no later temperature can split it: a property of
the arithmetic, not of the dynamics. So a bank whose deviations fall below
:data:`LINEAR_BELOW` x sqrt(tr C) is carried as centroid + r u: the centroid bank (every row the
centroid) by the gradient step itself, the unit zero-sum direction u by the step's linearisation
(a central difference of two gradient steps at centroid +- h u, h = :data:`LINEAR_BELOW` x
sqrt(tr C): relative error of order 1e-10; zero-sum directions are invariant under the
linearisation, by the symmetry of the collapsed bank), and log r summed in floating point, so r
can shrink to 1e-300 and grow back without loss. When r exceeds :data:`LINEAR_ABOVE` x
sqrt(tr C) the bank is coordinates again. Neglected: terms of order r^2, below 1e-10 of the
spread there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ddcl_theory.experiments.annealing import AnnealingSettings, patch_tokens
from ddcl_theory.metrics.prototypes import kmeans_pp_init, separation
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.progress import progress
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, confirmatory_seeds, nested, setting
from ddcl_theory.theory.annealing import exponential_schedule, linear_schedule
from ddcl_theory.theory.collapse import collapsed, critical_temperature, data_covariance
from ddcl_theory.theory.free_energy import em_fixed_point, free_energy, gradient_step

__all__ = ["KINDS", "SEPARATIONS", "LINEAR_BELOW", "LINEAR_ABOVE", "CoolingSettings",
           "CoolingRun", "CoolingResult", "gradient_run", "run"]

#: The kinds of gradient schedule, and the separations recorded at the end of each run.
KINDS = ("linear", "exponential")
SEPARATIONS = ("min", "mean", "trace")
ANNEALED = "annealed"
#: Deviations from the centroid below this x sqrt(tr C) are carried to first order (centroid +
#: r u); above :data:`LINEAR_ABOVE` x sqrt(tr C) they are coordinates again (see the docstring).
LINEAR_BELOW, LINEAR_ABOVE = 1e-6, 1e-5


@dataclass(frozen=True)
class CoolingSettings(Settings):
    """Cooling schedules from many starts: cpu 20 starts at 40 and 400 steps and 3 starts at
    4,000 steps, and 3 annealed starts of at most 300 fixed-point steps per temperature;
    reference 20 starts at every length and 20 annealed starts of at most 2,000 steps, on the
    seeds of a third confirmatory run (the first ran before deviations near collapse were
    carried to first order, the second before the rule read the float64 twins of carried runs;
    their seeds are spent)."""

    title = "cooling schedules from k-means++ starts, and annealed runs from collapse"

    k: int = setting(6, ge=2)
    start_ratio: float = setting(1.5, gt=0)            # tau_0 = start_ratio * T_c
    end_ratio: float = setting(0.05, gt=0)             # last tau = end_ratio * T_c
    steps: tuple[int, ...] = setting((40, 400, 4000), smoke=(3,), ge=1, nonempty=True)
    step_n: float = setting(0.9, gt=0, lt=1)           # eta = step_n / N (< 1/N: F descends)
    seeds: tuple[int, ...] = setting(tuple(range(20)), reference=confirmatory_seeds(20, run=3),
                                     smoke=(0,), ge=0, nonempty=True)
    longest_seeds: int = setting(3, reference=20, ge=1)   # the first ones run the longest
    anneal_seeds: tuple[int, ...] = setting((1, 2, 3), reference=confirmatory_seeds(20, run=3),
                                            ge=0)
    anneal: AnnealingSettings = nested(AnnealingSettings,
                                       max_iters=setting(300, reference=2000, paper=10000,
                                                         smoke=5))

    def check(self) -> None:
        if not self.end_ratio < 1 < self.start_ratio:
            raise ValueError(f"CoolingSettings.start_ratio, end_ratio: expected end_ratio < 1 "
                             f"< start_ratio (the schedule crosses T_c), got {self.start_ratio}, "
                             f"{self.end_ratio}")
        if list(self.steps) != sorted(set(self.steps)):
            raise ValueError(f"CoolingSettings.steps: expected increasing schedule lengths, "
                             f"got {self.steps}")

    def seeds_at(self, length: int) -> tuple[int, ...]:
        """The start seeds that run schedules of ``length`` steps: all of them, but only the
        first ``longest_seeds`` at the longest length."""
        if length not in self.steps:
            raise ValueError(f"length: expected one of {self.steps}, got {length!r}")
        return self.seeds[:self.longest_seeds] if length == self.steps[-1] else self.seeds


@dataclass
class CoolingRun:
    """One run: ``schedule`` (``"linear"``, ``"exponential"`` or ``"annealed"``), ``length``
    (steps; for an annealed run the number of temperatures), the start ``seed``; ``end``: S_min,
    S_mean, S_tr of the final bank; ``mean_at_tc``: S_mean where tau first falls below T_c;
    ``max_f_rise``: the largest one-step rise of F; ``max_g_rise``: that of G, relative to |G|
    at the start (0.0 for an annealed run, whose steps are not gradient steps of one schedule);
    ``last_move``: the largest coordinate move of the last update; ``settled``: an annealed run
    settled at its last temperature (True for gradient runs); ``linear_steps``: the steps at
    which the deviations were carried to first order (0 for an annealed run); ``float64_end``:
    for a run that was carried, S_min, S_mean, S_tr at the end of the same schedule from the
    same start in float64 coordinates throughout (``carry=False``), else None."""

    schedule: str
    length: int
    seed: int
    end: dict
    mean_at_tc: float
    max_f_rise: float
    max_g_rise: float
    last_move: float
    settled: bool
    linear_steps: int = 0
    float64_end: dict | None = None


@dataclass
class CoolingResult:
    """Every run, with the tokens' scale: ``critical_temperature`` (2 lambda_max(C)),
    ``scale`` sqrt(tr C) (separations are divided by it in :meth:`relative`); ``linear_below``:
    :data:`LINEAR_BELOW`, under which deviations were carried to first order."""

    settings: CoolingSettings
    critical_temperature: float
    scale: float
    n_tokens: int
    runs: list
    linear_below: float = LINEAR_BELOW

    def of(self, schedule: str, length: int | None = None) -> list:
        """The runs of ``schedule`` at ``length`` (default the longest), in seed order."""
        if schedule == ANNEALED:
            return [r for r in self.runs if r.schedule == ANNEALED]
        length = self.settings.steps[-1] if length is None else length
        return [r for r in self.runs if r.schedule == schedule and r.length == length]

    def relative(self, schedule: str, kind: str = "min", length: int | None = None) -> np.ndarray:
        """(starts,) S_kind at the end / sqrt(tr C) (S_tr / tr C for ``"trace"``)."""
        if kind not in SEPARATIONS:
            raise ValueError(f"kind: expected one of {SEPARATIONS}, got {kind!r}")
        unit = self.scale ** 2 if kind == "trace" else self.scale
        return np.array([r.end[kind] / unit for r in self.of(schedule, length)])


def _end(p: torch.Tensor) -> dict:
    return {kind: float(separation(p, kind)) for kind in SEPARATIONS}


class _Bank:
    """A prototype bank (K, d) under gradient steps, as coordinates or, near collapse, as
    centroid bank + r u with log r kept apart (see the module docstring)."""

    def __init__(self, p: torch.Tensor, scale: float, carry: bool = True) -> None:
        self.p, self.scale, self.carry = p, scale, carry
        self.log_r: float | None = None      # None: coordinates in self.p
        self.u = torch.zeros_like(p)
        self._maybe_linearise()

    @property
    def linear(self) -> bool:
        return self.log_r is not None

    def _maybe_linearise(self) -> None:
        if not self.carry:
            return
        centre = self.p.mean(0, keepdim=True)
        r = float((self.p - centre).norm())
        if 0 < r < LINEAR_BELOW * self.scale:
            self.u, self.log_r = (self.p - centre) / r, math.log(r)
            self.p = centre.expand_as(self.p).clone()

    def step(self, z: torch.Tensor, tau: float, eta: float) -> float:
        """One gradient step of F_tau; the largest coordinate move it made."""
        if not self.linear:
            nxt = gradient_step(z, self.p, tau, eta)
            move = float((nxt - self.p).abs().max())
            self.p = nxt
            self._maybe_linearise()
            return move
        h = LINEAR_BELOW * self.scale
        plus = gradient_step(z, self.p + h * self.u, tau, eta)
        minus = gradient_step(z, self.p - h * self.u, tau, eta)
        nxt, t = (plus + minus) / 2, (plus - minus) / (2 * h)
        t = t - t.mean(0, keepdim=True)
        grow = float(t.norm())
        move = float((nxt - self.p + math.exp(self.log_r) * (t - self.u)).abs().max())
        self.p = nxt.mean(0, keepdim=True).expand_as(nxt).clone()
        if grow == 0.0:                      # the deviations vanished exactly
            self.log_r, self.u = None, torch.zeros_like(self.p)
            return move
        self.log_r += math.log(grow)
        self.u = t / grow
        if self.log_r > math.log(LINEAR_ABOVE * self.scale):
            self.p = self.p + math.exp(self.log_r) * self.u
            self.log_r = None
        return move

    def separation(self, kind: str) -> float:
        """S_kind of the bank (S_tr a squared distance: r^2 in the linear form)."""
        if not self.linear:
            return float(separation(self.p, kind))
        power = 2 if kind == "trace" else 1
        return float(separation(self.u, kind)) * math.exp(power * self.log_r)

    def end(self) -> dict:
        return {kind: self.separation(kind) for kind in SEPARATIONS}


def gradient_run(z: torch.Tensor, p: torch.Tensor, taus: np.ndarray, step: float,
                 t_c: float, scale: float, *, carry: bool = True
                 ) -> tuple[dict, float, float, float, float, int]:
    """(end separations, S_mean where tau first < T_c, max rise of F, max relative rise of G,
    last move, steps carried to first order) along ``taus`` (steps + 1,), one gradient step
    per temperature after the first; ``scale`` is sqrt(tr C). ``carry=False`` keeps the bank in
    coordinates throughout (what plain float64 gives; see the module docstring)."""
    n, k = z.shape[0], p.shape[0]
    f_prev = float(free_energy(z, p, float(taus[0])))
    g_start = f_prev + n * float(taus[0]) * math.log(k)
    g_prev, f_rise, g_rise, at_tc, move = g_start, -math.inf, -math.inf, math.nan, 0.0
    bank, linear_steps = _Bank(p, scale, carry), 0
    for t in range(1, taus.size):
        tau = float(taus[t])
        move = bank.step(z, tau, step)
        linear_steps += bank.linear
        f = float(free_energy(z, bank.p, tau))       # an r^2 term below float64 resolution
        g = f + n * tau * math.log(k)
        f_rise, g_rise = max(f_rise, f - f_prev), max(g_rise, g - g_prev)
        f_prev, g_prev = f, g
        if math.isnan(at_tc) and tau < t_c:
            at_tc = bank.separation("mean")
    return bank.end(), at_tc, f_rise, g_rise / abs(g_start), move, linear_steps


def _annealed_run(z: torch.Tensor, a: AnnealingSettings, t_c: float, scale: float,
                  seed: int) -> tuple[torch.Tensor, float, bool, float]:
    """(final bank, S_mean at the first temperature below T_c, settled at the last, last move):
    deterministic annealing from collapse with the start's own perturbations."""
    gen = profile.seed_everything(seed)
    taus = np.geomspace(a.start_ratio * t_c, a.end_ratio * t_c, a.n_temperatures)
    p, at_tc, settled, move = collapsed(z, a.k), math.nan, True, 0.0
    for tau in taus:
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float64)
        start = p + a.perturbation * scale * noise
        p, _, settled = em_fixed_point(z, start, float(tau), max_iters=a.max_iters,
                                       tol=a.converged * scale)
        move = float((p - start).abs().max())
        if math.isnan(at_tc) and tau < t_c:
            at_tc = float(separation(p, "mean"))
    return p, at_tc, settled, move


def run(settings: CoolingSettings | None = None) -> CoolingResult:
    """Every gradient schedule of every length from every start, then the annealed runs; see
    the module docstring. Each start's runs are saved as one unit of the run directory, so a
    killed run resumes at the next start with the numbers an uninterrupted run would give."""
    s = settings or CoolingSettings.from_profile()
    a = s.anneal
    z, _ = patch_tokens(a.n_tokens, a.patch, a.dim, a.seed)
    t_c = critical_temperature(z, objective="free_energy")   # gradient steps descend F
    scale = float(torch.sqrt(torch.trace(data_covariance(z))))
    step = s.step_n / z.shape[0]
    schedules = {"linear": linear_schedule, "exponential": exponential_schedule}
    ckpt = RunDir("cooling", s)
    runs: list[CoolingRun] = []
    for seed in progress(s.seeds, desc="cooling starts"):
        def start_runs(seed: int = seed) -> list[CoolingRun]:
            p0 = kmeans_pp_init(z, s.k, generator=profile.seed_everything(seed))
            out = []
            for length in s.steps:
                if seed not in s.seeds_at(length):
                    continue
                for kind in KINDS:
                    taus = schedules[kind](s.start_ratio * t_c, s.end_ratio * t_c, length)
                    end, at_tc, f_rise, g_rise, move, linear = gradient_run(
                        z, p0, taus, step, t_c, scale)
                    plain = (gradient_run(z, p0, taus, step, t_c, scale, carry=False)[0]
                             if linear else None)
                    out.append(CoolingRun(kind, length, seed, end, at_tc, f_rise, g_rise,
                                          move, True, linear, plain))
            return out
        runs.extend(ckpt.unit(f"start-{seed}", start_runs))
    for seed in progress(s.anneal_seeds, desc="annealed starts"):
        def annealed(seed: int = seed) -> list[CoolingRun]:
            p, at_tc, settled, move = _annealed_run(z, a, t_c, scale, seed)
            return [CoolingRun(ANNEALED, a.n_temperatures, seed, _end(p), at_tc, 0.0, 0.0,
                               move, settled)]
        runs.extend(ckpt.unit(f"annealed-{seed}", annealed))
    ckpt.finish()
    return CoolingResult(s, t_c, scale, int(z.shape[0]), runs)
