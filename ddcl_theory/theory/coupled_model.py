"""A small concrete coupled model for the two-time-scale analysis (claims D8, D9).

An MLP encoder, K prototypes and a logistic head on the pooled soft centroids, with exact float64
derivatives: :meth:`CoupledModel.game_hessian` feeds the linear algebra of
:mod:`ddcl_theory.theory.timescales`, and :func:`find_equilibrium` locates the equilibria where it
is evaluated. Flat parameter vector w = (P, theta), prototypes (the fast block) first.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ddcl_theory.functional import loss_terms, soft_assign
from ddcl_theory.theory.timescales import Blocks, check_eps

OBJECTIVES = ("shared", "split")


@dataclass
class CoupledModel:
    """Encoder z = tanh(W2 tanh(W1 x + b1) + b2) on tokens, K prototypes, and a logistic head.

    The data are ``x`` (B, T, d_in) token features of B sequences with binary labels ``y`` (B,).
    For token n of sequence b, q = softmax(-||z - p_k||^2 / tau); the pooled vector of sequence b
    is the mean over its tokens of the soft centroid mu = sum_k q_k p_k, and the logit is
    a . pooled + c. The flat parameter vector is w = (P (K*d), theta) with
    theta = (W1 (h*d_in), b1 (h), W2 (d*h), b2 (d), a (d), c (1)).

    Objectives (``objective``):

    * ``"shared"``: both blocks descend one potential
      L = CE + lam * L_q + (wd / 2) ||theta||^2 (plain backpropagation of a total loss);
    * ``"split"``: the encoder descends that L, the prototypes descend lam * L_q only (the task
      gradient into P is cut, as with a detached readout).

    The tanh on the output breaks the rotation and translation symmetry of L_q in z-space, so
    equilibria are isolated (no zero modes).
    """

    x: Tensor
    y: Tensor
    k: int = 3
    d: int = 2
    hidden: int = 6
    tau: float = 1.0
    lam: float = 1.0
    wd: float = 1e-2

    def __post_init__(self) -> None:
        if self.x.dim() != 3:
            raise ValueError(f"x: expected shape (B, T, d_in), got {tuple(self.x.shape)}")
        if self.y.shape != (self.x.shape[0],):
            raise ValueError(f"y: expected shape ({self.x.shape[0]},), got {tuple(self.y.shape)}")
        for name in ("k", "d", "hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected >= 1, got {getattr(self, name)}")
        if self.tau <= 0 or self.lam < 0 or self.wd < 0:
            raise ValueError(f"tau, lam, wd: expected tau > 0, lam >= 0, wd >= 0, got "
                             f"{self.tau}, {self.lam}, {self.wd}")
        self.x = self.x.to(torch.float64)
        self.y = self.y.to(torch.float64)

    @property
    def d_in(self) -> int:
        return self.x.shape[-1]

    @property
    def m(self) -> int:
        """Number of prototype parameters (the fast block)."""
        return self.k * self.d

    @property
    def n(self) -> int:
        """Number of encoder + head parameters (the slow block)."""
        h, d, di = self.hidden, self.d, self.d_in
        return h * di + h + d * h + d + d + 1

    def unflatten(self, w: Tensor) -> dict[str, Tensor]:
        """Views of the flat vector ``w`` (m + n,) as named parameters."""
        if w.shape != (self.m + self.n,):
            raise ValueError(f"w: expected shape ({self.m + self.n},), got {tuple(w.shape)}")
        h, d, di = self.hidden, self.d, self.d_in
        sizes = [("P", (self.k, d)), ("W1", (h, di)), ("b1", (h,)), ("W2", (d, h)), ("b2", (d,)),
                 ("a", (d,)), ("c", ())]
        out, i = {}, 0
        for name, shape in sizes:
            size = int(np.prod(shape)) if shape else 1
            out[name] = w[i:i + size].reshape(shape)
            i += size
        return out

    def init(self, generator: torch.Generator) -> Tensor:
        """A random starting point: small Gaussian weights, prototypes on encoded tokens."""
        h, d, di = self.hidden, self.d, self.d_in
        g = lambda *s, scale: torch.randn(*s, generator=generator, dtype=torch.float64) * scale
        theta = torch.cat([g(h * di, scale=1 / np.sqrt(di)), g(h, scale=0.1),
                           g(d * h, scale=1 / np.sqrt(h)), g(d, scale=0.1), g(d, scale=0.1),
                           torch.zeros(1, dtype=torch.float64)])
        w = torch.cat([torch.zeros(self.m, dtype=torch.float64), theta])
        z = self.encode(w).reshape(-1, d)
        idx = torch.randperm(z.shape[0], generator=generator)[: self.k]
        w[: self.m] = z[idx].reshape(-1).detach()
        return w

    def encode(self, w: Tensor) -> Tensor:
        """Tokens z, shape (B, T, d)."""
        p = self.unflatten(w)
        hid = torch.tanh(self.x @ p["W1"].T + p["b1"])
        return torch.tanh(hid @ p["W2"].T + p["b2"])

    def terms(self, w: Tensor, detach_p_in_task: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """(ce, l_q, reg): task cross-entropy, mean L_q over tokens, (1/2)||theta||^2."""
        p = self.unflatten(w)
        z = self.encode(w)
        b, t, d = z.shape
        flat = z.reshape(b * t, d)
        q = soft_assign(flat, p["P"], self.tau)
        l_q, _, _ = loss_terms(flat, p["P"], q)
        protos = p["P"].detach() if detach_p_in_task else p["P"]
        pooled = (q @ protos).reshape(b, t, d).mean(1)
        logit = pooled @ p["a"] + p["c"]
        ce = torch.nn.functional.binary_cross_entropy_with_logits(logit, self.y)
        reg = 0.5 * (w[self.m:] ** 2).sum()
        return ce, l_q, reg

    def potential(self, w: Tensor) -> Tensor:
        """L = CE + lam L_q + (wd/2)||theta||^2 (the encoder's objective in both variants)."""
        ce, l_q, reg = self.terms(w)
        return ce + self.lam * l_q + self.wd * reg

    def field(self, w: Tensor, objective: str = "shared", create_graph: bool = False) -> Tensor:
        """F(w) = (grad_P L_P, grad_theta L_theta), shape (m + n,)."""
        if objective not in OBJECTIVES:
            raise ValueError(f"objective: expected one of {OBJECTIVES}, got {objective!r}")
        w = w if w.requires_grad else w.detach().requires_grad_(True)
        g_enc = torch.autograd.grad(self.potential(w), w, create_graph=create_graph)[0]
        if objective == "shared":
            return g_enc
        _, l_q, _ = self.terms(w)
        g_p = torch.autograd.grad(self.lam * l_q, w, create_graph=create_graph)[0]
        return torch.cat([g_p[: self.m], g_enc[self.m:]])

    def game_hessian(self, w: Tensor, objective: str = "shared") -> Blocks:
        """G = dF/dw at ``w`` in float64, cut into :class:`Blocks`."""
        g = torch.autograd.functional.jacobian(
            lambda v: self.field(v, objective, create_graph=True), w.detach().clone(),
            vectorize=True)
        return Blocks.split(g.detach().numpy(), self.m)


@dataclass(frozen=True)
class Equilibrium:
    """An equilibrium w* of the coupled flow, with the residual ||F(w*)|| it reached."""

    w: Tensor
    residual: float
    flow_steps: int
    newton_steps: int


def find_equilibrium(model: CoupledModel, w0: Tensor, objective: str = "shared", *,
                     eps: float = 1.0, step: float = 0.2, flow_steps: int = 3000,
                     newton_steps: int = 20, tol: float = 1e-11) -> Equilibrium:
    """Run the coupled flow (explicit Euler, steps ``step`` for P and ``eps*step`` for theta),
    then polish with damped Newton on F(w) = 0 (least-squares step, halved until ||F||
    decreases). Equilibria do not depend on eps; the flow only chooses which one is found, and
    Newton converges to whichever equilibrium is near, stable or not. ``w0`` has shape (m + n,).
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective: expected one of {OBJECTIVES}, got {objective!r}")
    check_eps(eps)
    d = torch.cat([torch.ones(model.m), torch.full((model.n,), eps)]).to(torch.float64)
    w = w0.detach().to(torch.float64).clone()
    for _ in range(flow_steps):
        w = w - step * d * model.field(w, objective).detach()
    residual = float(model.field(w, objective).norm())
    done = 0
    for done in range(1, newton_steps + 1):
        if residual < tol:
            done -= 1
            break
        g = model.game_hessian(w, objective).full()
        f = model.field(w, objective).detach().numpy()
        direction = torch.from_numpy(np.linalg.lstsq(g, f, rcond=None)[0])
        alpha = 1.0
        while True:   # backtracking on ||F||: a damped Newton step
            trial = w - alpha * direction
            trial_res = float(model.field(trial, objective).norm())
            if trial_res < residual or alpha < 1e-6:
                break
            alpha /= 2
        w, residual = trial, trial_res
    return Equilibrium(w.detach(), residual, flow_steps, done)
