"""A DDCL readout on a small ViT with and without Laplacian heads (claim X2, ours).

Question: Laplacian heads smooth the token representations within a sequence (chapter 06); does
that help the prototypes of a DDCL readout on top? For each head setting (``"0"``: no Laplacian
head, ``"all"``: every head Laplacian) and seed, a :class:`ddcl_theory.models.vit_readout.ViTDDCL`
(the chapter-06 ViT encoder, the chapter-01 DDCL readout with residual and LayerNorm, a linear
classifier on ``pooled``) is trained on CIFAR-10 patches with cross-entropy + beta L_q, the banks
seeded by k-means++ on the tokens that reach them. Measured: test accuracy; on the test tokens the
bank usage (fraction of prototypes that are some token's argmax) and perplexity, averaged over
the readout's heads; the prototype separation (min and mean pairwise distance, trace) per epoch;
the within-sequence share of the variance of the tokens that reach the readout (ANOVA of
:func:`ddcl_theory.metrics.geometry.anova_split`), to confirm that the Laplacian encoder does smooth them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ddcl_theory import data
from ddcl_theory.experiments import require_positive_ints
from ddcl_theory.experiments.laplacian_vit import compare, laplacian_count, num_threads
from ddcl_theory.metrics import geometry as metrics
from ddcl_theory.metrics.prototypes import SEPARATION_KINDS, perplexity, separation, usage
from ddcl_theory.models.vit_readout import ViTDDCL
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.progress import progress

__all__ = ["SETTINGS", "ReadoutSettings", "ReadoutRun", "ReadoutSweep", "run", "train_one",
           "summarise", "Verdict", "verdict_x2", "MEASURES"]

SETTINGS = ("0", "all")
SMOKE_IMAGES = 128
# (field, name, larger is better) compared between the two encoders for the verdict
MEASURES = (("fraction_used", "bank usage", True), ("perplexity", "bank perplexity", True),
            ("separation_min", "separation S_min", True), ("test_acc", "test accuracy", True))


@dataclass(frozen=True)
class ReadoutSettings:
    """Scale of the X2 experiment; :meth:`from_profile` picks it from the active profile."""

    n_train: int
    n_test: int
    patch: int
    dim: int
    depth: int
    heads: int
    mlp_ratio: int
    batch_size: int
    epochs: int
    lr: float
    weight_decay: float
    seeds: tuple[int, ...]
    num_prototypes: int = 16
    ddcl_heads: int = 2
    temperature: float = 1.0
    beta: float = 0.01
    head_settings: tuple[str, ...] = SETTINGS
    threads: int | None = 1

    @classmethod
    def from_profile(cls) -> "ReadoutSettings":
        p = profile.current()
        return cls(n_train=p.pick(cpu=3000, paper=10000, smoke=SMOKE_IMAGES),
                   n_test=p.pick(cpu=1000, paper=1000, smoke=SMOKE_IMAGES),
                   patch=p.pick(cpu=8, paper=4), dim=p.pick(cpu=32, paper=192),
                   depth=p.pick(cpu=2, paper=6), heads=p.pick(cpu=4, paper=6),
                   mlp_ratio=p.pick(cpu=2, paper=4), batch_size=128,
                   epochs=p.pick(cpu=10, paper=60, smoke=1), lr=p.pick(cpu=3e-3, paper=1e-3),
                   weight_decay=p.pick(cpu=0.0, paper=0.05),
                   seeds=p.pick(cpu=(0, 1, 2), paper=(0, 1, 2), smoke=(0, 1)),
                   threads=p.pick(cpu=1, paper=None))

    def __post_init__(self) -> None:
        require_positive_ints(self, skip=("lr", "weight_decay", "seeds", "temperature", "beta",
                                          "head_settings", "threads"))
        if len(self.seeds) < 2:
            raise ValueError(f"seeds: expected at least two seeds (for a spread), got {self.seeds!r}")
        if not (self.lr > 0 and self.temperature > 0 and self.beta >= 0):
            raise ValueError("lr, temperature, beta: expected lr > 0, temperature > 0, beta >= 0")
        for s in self.head_settings:
            laplacian_count(s, self.heads)


@dataclass(frozen=True)
class ReadoutRun:
    """One trained model, measured on the test images.

    ``separation_*`` are means over the readout's heads; ``separation_path`` is {kind: (epochs + 1,)}
    (before training, then after every epoch, S_min mean over heads etc.).
    """

    setting: str
    laplacian_heads: int
    seed: int
    test_acc: float
    fraction_used: float
    perplexity: float
    separation_min: float
    separation_mean: float
    separation_trace: float
    separation_path: dict
    within_seq: float
    l_q: float
    v: float


@dataclass
class ReadoutSweep:
    settings: ReadoutSettings
    runs: list[ReadoutRun]
    source: str
    num_classes: int
    tokens: int

    def summary(self, field: str) -> dict[str, tuple[float, float]]:
        return summarise(self.runs, field, self.settings.head_settings)


def summarise(runs, field: str, settings=SETTINGS) -> dict[str, tuple[float, float]]:
    """{setting: (mean, population std)} of ``field`` over seeds."""
    out = {}
    for s in settings:
        values = np.array([getattr(r, field) for r in runs if r.setting == s], dtype=np.float64)
        if values.size:
            out[s] = (float(values.mean()), float(values.std()))
    return out


def _prepare(s: ReadoutSettings):
    d = data.load_cifar10()
    size = d.x_train.shape[1]
    patch = s.patch if size % s.patch == 0 and size >= 2 * s.patch else max(1, size // 4)
    x_tr, y_tr = d.x_train[: s.n_train], d.y_train[: s.n_train]
    x_te, y_te = d.x_test[: s.n_test], d.y_test[: s.n_test]
    mean = x_tr.mean(axis=(0, 1, 2), keepdims=True)
    std = x_tr.std(axis=(0, 1, 2), keepdims=True) + 1e-6
    p_tr = data.image_patches((x_tr - mean) / std, patch)
    p_te = data.image_patches((x_te - mean) / std, patch)
    return (torch.from_numpy(np.ascontiguousarray(p_tr, dtype=np.float32)), torch.from_numpy(y_tr),
            torch.from_numpy(np.ascontiguousarray(p_te, dtype=np.float32)), torch.from_numpy(y_te),
            d.source, len(d.label_names))


def _separations(model: ViTDDCL) -> dict[str, float]:
    bank = model.readout.prototypes.detach()                      # (H, K, d)
    return {k: float(separation(bank, k).mean()) for k in SEPARATION_KINDS}


def train_one(s: ReadoutSettings, setting: str, seed: int, tensors: tuple, num_classes: int,
              device: str) -> ReadoutRun:
    """Train one ViT + DDCL readout and measure it (deterministic given the seed on CPU)."""
    p_tr, y_tr, p_te, y_te = (t.to(device) for t in tensors)
    gen = profile.seed_everything(seed)
    n_lap = laplacian_count(setting, s.heads)
    model = ViTDDCL(p_tr.shape[1], p_tr.shape[2], num_classes, dim=s.dim, depth=s.depth,
                    heads=s.heads, laplacian_heads=n_lap, mlp_ratio=s.mlp_ratio,
                    num_prototypes=s.num_prototypes, ddcl_heads=s.ddcl_heads,
                    temperature=s.temperature).to(device)
    model.init_prototypes_from(p_tr[:200], generator=gen)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=s.lr,
                            weight_decay=s.weight_decay)
    n = p_tr.shape[0]
    steps = math.ceil(n / s.batch_size)
    total = s.epochs * steps
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: 0.5 * (1 + math.cos(math.pi * min(step, total) / total)))
    path = {k: [v] for k, v in _separations(model).items()}
    model.train()
    for _ in progress(range(s.epochs), desc=f"ViT+DDCL {setting} seed {seed}"):
        order = torch.randperm(n, generator=gen).to(device)
        for i in range(steps):
            idx = order[i * s.batch_size:(i + 1) * s.batch_size]
            out = model(p_tr[idx])
            loss = F.cross_entropy(out.logits, y_tr[idx]) + s.beta * out.readout.losses.l_q
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
        for k, v in _separations(model).items():
            path[k].append(v)
    model.eval()
    with torch.no_grad():
        out = model(p_te)
    q = out.readout.assignments                                   # (B, H, T, K)
    heads = q.shape[1]
    used = float(np.mean([usage(q[:, h]).fraction_used for h in range(heads)]))
    ppl = float(np.mean([float(perplexity(q[:, h])) for h in range(heads)]))
    tok = out.tokens.double().cpu().numpy()
    sep = _separations(model)
    return ReadoutRun(setting=setting, laplacian_heads=n_lap, seed=seed,
                      test_acc=float((out.logits.argmax(-1) == y_te).float().mean()),
                      fraction_used=used, perplexity=ppl, separation_min=sep["min"],
                      separation_mean=sep["mean"], separation_trace=sep["trace"],
                      separation_path={k: np.array(v) for k, v in path.items()},
                      within_seq=metrics.anova_split(tok).fractions()["within_sequence"],
                      l_q=float(out.readout.losses.l_q), v=float(out.readout.losses.v))


def run(settings: ReadoutSettings | None = None) -> ReadoutSweep:
    """Train and measure every (head setting, seed)."""
    s = settings or ReadoutSettings.from_profile()
    device = profile.current().device
    with num_threads(s.threads):
        *tensors, source, num_classes = _prepare(s)
        runs = [train_one(s, setting, seed, tuple(tensors), num_classes, device)
                for setting in s.head_settings for seed in s.seeds]
    return ReadoutSweep(s, runs, source, num_classes, tokens=int(tensors[0].shape[1]))


@dataclass(frozen=True)
class Verdict:
    verdict: str
    evidence: str
    our_value: str
    signs: dict


def verdict_x2(sweep: ReadoutSweep, a: str = "all", b: str = "0") -> Verdict:
    """X2: does the Laplacian encoder (setting ``a``) help the DDCL readout against ``b``?

    Each of :data:`MEASURES` is compared with :func:`laplacian_vit.compare` (a difference beyond
    the hypot of the seed spreads counts). ``confirmed`` when some measure is clearly better with
    Laplacian heads and none clearly worse; ``refuted`` when some is clearly worse and none
    clearly better; ``qualified`` when the measures disagree; ``not reproduced`` when none
    differs beyond the spread (the conjectured help does not show at this scale).
    """
    signs = {}
    for field, name, larger_better in MEASURES:
        c = compare(sweep.summary(field), a, b)
        signs[name] = c if larger_better else -c
    helps = [k for k, v in signs.items() if v > 0]
    hurts = [k for k, v in signs.items() if v < 0]
    verdict = ("confirmed" if helps and not hurts else "refuted" if hurts and not helps
               else "qualified" if helps and hurts else "not reproduced")
    st = sweep.settings

    def fmt(field):
        sm = sweep.summary(field)
        return f"{sm[a][0]:.3g} +- {sm[a][1]:.2g} vs {sm[b][0]:.3g} +- {sm[b][1]:.2g}"

    within = sweep.summary("within_seq")
    evidence = (
        f"ViT (d={st.dim}, {st.depth} layers, {st.heads} heads) + DDCL readout (K = "
        f"{st.num_prototypes}, {st.ddcl_heads} heads, tau = {st.temperature:g}, beta = {st.beta:g}) "
        f"on {st.n_train} {sweep.source} images, {st.epochs} epochs, {len(st.seeds)} seeds; "
        f"all heads Laplacian vs none. Within-sequence share of the tokens reaching the readout "
        f"{within[a][0]:.3g} vs {within[b][0]:.3g}. "
        + "; ".join(f"{name} {fmt(field)}" for field, name, _ in MEASURES)
        + f". Better with Laplacian heads beyond the spread: {helps or 'none'}; worse: "
        f"{hurts or 'none'}.")
    acc = sweep.summary("test_acc")
    use = sweep.summary("fraction_used")
    our = (f"usage {use[a][0]:.2f} vs {use[b][0]:.2f}, accuracy {acc[a][0]:.3f} vs "
           f"{acc[b][0]:.3f} (Laplacian vs none)")
    return Verdict(verdict, evidence, our, signs)
