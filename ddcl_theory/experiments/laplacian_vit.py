"""Laplacian-head sweep on a small ViT (claims L6, L7, L8 of Zhang & Papyan 2026).

For every head setting (number of Laplacian heads per layer: none, one, half, all) and seed, a
ViT (:class:`ddcl_theory.models.vit.ViT`, mean pooling) is trained on the CIFAR-10 subset
(:func:`ddcl_theory.data.load_cifar10`) and evaluated on the test images: accuracy, the ANOVA
split of the last layer's token representations, Neural Collapse metrics of their sequence means
and the spectral decay k99 of the tokens.

"Last-layer token representations" are the outputs of the final LayerNorm (B, T, d): what the
classifier reads (its input is their sequence mean). The within-sequence share and k99 are also
recorded on the residual stream before that LayerNorm (fields ``*_stream``).
"""
from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ddcl_theory import data
from ddcl_theory.experiments import require_positive_ints
from ddcl_theory.metrics import geometry as metrics
from ddcl_theory.models.transformer import value_output_maps
from ddcl_theory.models.vit import ViT
from ddcl_theory.runtime import profile, runs
from ddcl_theory.runtime.progress import progress

__all__ = ["HEAD_SETTINGS", "laplacian_count", "ViTSettings", "ViTRun", "ViTSweep", "run",
           "summarise", "compare", "Verdict", "verdict_l6", "verdict_l7", "num_threads",
           "head_sign_balances"]

HEAD_SETTINGS = ("0", "1", "half", "all")
#: Training and test images of the paper smoke test (one batch of the paper's size each).
SMOKE_IMAGES = 128
#: Head settings of the paper smoke test: no, some and only Laplacian heads (every code path).
SMOKE_HEAD_SETTINGS = ("0", "half", "all")


def laplacian_count(setting: str, heads: int) -> int:
    """Laplacian heads per layer for a setting name: ``"half"``, ``"all"`` or a digit string
    ``"k"`` with ``0 <= k <= heads`` (e.g. ``"0"``, ``"1"``, ``"5"``)."""
    counts = {"half": heads // 2, "all": heads}
    if setting in counts:
        return counts[setting]
    if isinstance(setting, str) and setting.isdigit() and int(setting) <= heads:
        return int(setting)
    raise ValueError(f"setting: expected 'half', 'all' or a count in [0, {heads}] as a string, "
                     f"got {setting!r}")


@contextlib.contextmanager
def num_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)`` (None: leave as is); restore after."""
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def summarise(runs: Sequence, field: str, settings: Sequence[str] = HEAD_SETTINGS
              ) -> dict[str, tuple[float, float]]:
    """``{setting: (mean, std)}`` of ``field`` over seeds (population std, ddof=0).

    Runs where the field is ``None`` are skipped; a setting with no value is left out.
    """
    out = {}
    for s in settings:
        values = np.array([v for r in runs if r.setting == s
                           if (v := getattr(r, field)) is not None], dtype=np.float64)
        if values.size:
            out[s] = (float(values.mean()), float(values.std()))
    return out


def compare(summary: dict[str, tuple[float, float]], a: str, b: str) -> int:
    """+1 if setting ``a``'s mean is above ``b``'s by more than the spread, -1 if below, else 0.

    The margin is ``sqrt(std_a^2 + std_b^2)`` (the spread of the difference of two single runs),
    so a difference inside the seed-to-seed noise counts as no difference.
    """
    (ma, sa), (mb, sb) = summary[a], summary[b]
    margin = math.hypot(sa, sb)
    if ma - mb > margin:
        return 1
    if mb - ma > margin:
        return -1
    return 0


def _fmt(summary: dict[str, tuple[float, float]], digits: int = 3) -> str:
    return ", ".join(f"{k}: {m:.{digits}g} +- {s:.2g}" for k, (m, s) in summary.items())


@dataclass(frozen=True)
class Verdict:
    """A verdict word with its evidence sentence and our headline value."""

    verdict: str
    evidence: str
    our_value: str


@dataclass(frozen=True)
class ViTSettings:
    """Scale of the ViT sweep; :meth:`from_profile` picks it from the active profile."""

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
    head_settings: tuple[str, ...] = HEAD_SETTINGS
    threads: int | None = 1

    @classmethod
    def from_profile(cls) -> "ViTSettings":
        """cpu and paper scales; the paper smoke test keeps the paper model and shrinks the
        budget: one epoch over :data:`SMOKE_IMAGES` training images, one seed, three head
        settings (none, some, all Laplacian)."""
        p = profile.current()
        return cls(n_train=p.pick(cpu=3000, paper=10000, smoke=SMOKE_IMAGES),
                   n_test=p.pick(cpu=1000, paper=1000, smoke=SMOKE_IMAGES),
                   patch=p.pick(cpu=8, paper=4), dim=p.pick(cpu=32, paper=192),
                   depth=p.pick(cpu=2, paper=6), heads=p.pick(cpu=4, paper=6),
                   mlp_ratio=p.pick(cpu=2, paper=4), batch_size=p.pick(cpu=128, paper=128),
                   epochs=p.pick(cpu=4, paper=60, smoke=1), lr=p.pick(cpu=3e-3, paper=1e-3),
                   weight_decay=p.pick(cpu=0.0, paper=0.05),
                   seeds=p.pick(cpu=(0, 1, 2), paper=(0, 1, 2), smoke=(0,)),
                   head_settings=p.pick(cpu=HEAD_SETTINGS, paper=HEAD_SETTINGS,
                                        smoke=SMOKE_HEAD_SETTINGS),
                   threads=p.pick(cpu=1, paper=None))

    def __post_init__(self) -> None:
        require_positive_ints(self, skip=("lr", "weight_decay", "seeds", "head_settings", "threads"))
        if not self.seeds:
            raise ValueError("seeds: expected at least one seed")
        for s in self.head_settings:
            laplacian_count(s, self.heads)


@dataclass(frozen=True)
class ViTRun:
    """One trained ViT: its head setting, seed and measurements on the test images."""

    setting: str
    laplacian_heads: int
    seed: int
    train_loss: float          # mean cross-entropy over the last epoch
    test_acc: float
    within_seq: float          # ANOVA fractions of the total token variance
    between_seq: float
    within_class: float
    between_class: float
    nc1: float
    equinorm: float
    cos_mean: float
    k99: int
    within_seq_stream: float   # the same two measures on the residual stream before the final
    k99_stream: int            # LayerNorm (a robustness check of the choice of representation)
    attn_sign_balance: float | None   # mean metrics.sign_balance of M_h = W_V,h W_O,h over the
    lap_sign_balance: float | None    # ordinary / Laplacian heads (None when there are none)


@dataclass
class ViTSweep:
    """All runs of a sweep with the data facts needed to read them."""

    settings: ViTSettings
    runs: list[ViTRun]
    source: str
    num_classes: int
    tokens: int

    def summary(self, field: str) -> dict[str, tuple[float, float]]:
        return summarise(self.runs, field, self.settings.head_settings)


def _prepare(settings: ViTSettings) -> tuple[torch.Tensor, ...]:
    d = data.load_cifar10()
    size = d.x_train.shape[1]
    # the fallback digits are 8x8: use 2x2 patches there (16 tokens) instead of one token
    patch = settings.patch if size % settings.patch == 0 and size >= 2 * settings.patch \
        else max(1, size // 4)
    x_tr, y_tr = d.x_train[: settings.n_train], d.y_train[: settings.n_train]
    x_te, y_te = d.x_test[: settings.n_test], d.y_test[: settings.n_test]
    mean = x_tr.mean(axis=(0, 1, 2), keepdims=True)
    std = x_tr.std(axis=(0, 1, 2), keepdims=True) + 1e-6
    p_tr = data.image_patches((x_tr - mean) / std, patch)
    p_te = data.image_patches((x_te - mean) / std, patch)
    return (torch.from_numpy(np.ascontiguousarray(p_tr, dtype=np.float32)),
            torch.from_numpy(y_tr), torch.from_numpy(np.ascontiguousarray(p_te, dtype=np.float32)),
            torch.from_numpy(y_te), d.source, len(d.label_names))


def head_sign_balances(model: torch.nn.Module) -> tuple[float | None, float | None]:
    """Mean :func:`metrics.sign_balance` of the value-output maps of the ordinary and of the
    Laplacian heads of every block in ``model.stack`` (None for a kind with no head)."""
    ordinary, laplacian = [], []
    for block in model.stack.blocks:
        maps = value_output_maps(block.attn)
        for h in range(block.attn.heads):
            target = laplacian if h >= block.attn.attention_heads else ordinary
            target.append(metrics.sign_balance(maps[h]))
    return (float(np.mean(ordinary)) if ordinary else None,
            float(np.mean(laplacian)) if laplacian else None)


def train_one(settings: ViTSettings, setting: str, seed: int, tensors: tuple, num_classes: int,
              device: str) -> ViTRun:
    """Train one ViT and measure it; deterministic given the seed (CPU, fixed threads)."""
    p_tr, y_tr, p_te, y_te = (t.to(device) for t in tensors)
    gen = profile.seed_everything(seed)
    n_lap = laplacian_count(setting, settings.heads)
    model = ViT(p_tr.shape[1], p_tr.shape[2], num_classes, dim=settings.dim,
                depth=settings.depth, heads=settings.heads, laplacian_heads=n_lap,
                mlp_ratio=settings.mlp_ratio, pool="mean").to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr,
                            weight_decay=settings.weight_decay)
    n = p_tr.shape[0]
    steps_per_epoch = math.ceil(n / settings.batch_size)
    total = settings.epochs * steps_per_epoch
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: 0.5 * (1 + math.cos(math.pi * min(step, total) / total)))
    forward = runs.maybe_compile(model)          # the model itself unless DDCL_COMPILE=1
    last_losses: list[float] = []
    model.train()
    for epoch in progress(range(settings.epochs), desc=f"ViT {setting} seed {seed}"):
        order = torch.randperm(n, generator=gen).to(device)
        last_losses = []
        for i in range(steps_per_epoch):
            idx = order[i * settings.batch_size:(i + 1) * settings.batch_size]
            with runs.autocast(device):              # bf16 on CUDA (paper), no-op on CPU
                loss = F.cross_entropy(forward(p_tr[idx]), y_tr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            last_losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        logits, states = model(p_te, return_hidden=True)
        tokens = model.norm(states[-1])                           # (N, T, d)
    stream = states[-1].double().cpu().numpy()
    attn_balance, lap_balance = head_sign_balances(model)
    acc = float((logits.argmax(-1) == y_te).float().mean())
    tok = tokens.double().cpu().numpy()
    labels = y_te.cpu().numpy()
    fr = metrics.anova_split(tok, labels).fractions()
    nc = metrics.neural_collapse(tok.mean(axis=1), labels)
    return ViTRun(setting=setting, laplacian_heads=n_lap, seed=seed,
                  train_loss=float(np.mean(last_losses)), test_acc=acc,
                  within_seq=fr["within_sequence"], between_seq=fr["between_sequence"],
                  within_class=fr["within_class"], between_class=fr["between_class"],
                  nc1=nc.nc1, equinorm=nc.equinorm, cos_mean=nc.cos_mean,
                  k99=metrics.k99(tok.reshape(-1, tok.shape[-1])),
                  within_seq_stream=metrics.anova_split(stream).fractions()["within_sequence"],
                  k99_stream=metrics.k99(stream.reshape(-1, stream.shape[-1])),
                  attn_sign_balance=attn_balance, lap_sign_balance=lap_balance)


def run(settings: ViTSettings | None = None) -> ViTSweep:
    """Train and measure every (head setting, seed) pair of ``settings``.

    In the paper profile every finished (setting, seed) run is checkpointed
    (:class:`runs.RunDir`), so a killed sweep resumes at the next unfinished run.
    """
    settings = settings or ViTSettings.from_profile()
    device = profile.current().device
    ckpt = runs.RunDir("laplacian_vit", settings)
    with num_threads(settings.threads):
        *tensors, source, num_classes = _prepare(settings)
        done = [ckpt.unit(f"setting={s},seed={seed}",
                          functools.partial(train_one, settings, s, seed, tuple(tensors),
                                            num_classes, device))
                for s in settings.head_settings for seed in settings.seeds]
    ckpt.finish()
    return ViTSweep(settings, done, source, num_classes, tokens=int(tensors[0].shape[1]))


def verdict_l6(sweep: ViTSweep) -> Verdict:
    """L6: accuracy improves (almost) monotonically with the number of Laplacian heads.

    ``reproduced`` when all-Laplacian beats no-Laplacian beyond the seed spread and no step up
    the sweep loses accuracy beyond the spread; ``qualified`` when some Laplacian setting beats
    the baseline but not that way; ``not reproduced`` otherwise.
    """
    acc = sweep.summary("test_acc")
    order = list(sweep.settings.head_settings)
    lap = [s for s in order if s != "0"]
    gain_all = compare(acc, "all", "0")
    drops = [b for a, b in zip(order, order[1:]) if compare(acc, b, a) < 0]
    better = [s for s in lap if compare(acc, s, "0") > 0]
    if gain_all > 0 and not drops:
        verdict = "reproduced"
    elif better:
        verdict = "qualified"
    else:
        verdict = "not reproduced"
    delta = 100 * (acc["all"][0] - acc["0"][0])
    evidence = (f"ViT (d={sweep.settings.dim}, {sweep.settings.depth} layers, "
                f"{sweep.settings.heads} heads) on {sweep.settings.n_train} {sweep.source} "
                f"images, {len(sweep.settings.seeds)} seeds; test accuracy by Laplacian heads "
                f"per layer: {_fmt(acc)}. Clearly above the 0-head baseline: "
                f"{better or 'none'}; drops along the sweep: {drops or 'none'}.")
    return Verdict(verdict, evidence, f"all vs 0 heads: {delta:+.2g} points "
                   f"({100 * acc['all'][0]:.3g}% vs {100 * acc['0'][0]:.3g}%)")


def verdict_l7(sweep: ViTSweep) -> Verdict:
    """L7: with all heads Laplacian, lower within-sequence variance share, higher between-class
    share (ANOVA) and stronger Neural Collapse (lower NC1), each beyond the seed spread.

    ``reproduced`` when all three hold, ``qualified`` when two do, ``not reproduced`` when at
    most one does (the evidence also names the parts that go clearly the other way).
    """
    within = sweep.summary("within_seq")
    between = sweep.summary("between_class")
    nc1 = sweep.summary("nc1")
    signs = {"lower within-sequence share": -compare(within, "all", "0"),
             "higher between-class share": compare(between, "all", "0"),
             "lower NC1": -compare(nc1, "all", "0")}
    held = [k for k, v in signs.items() if v > 0]
    reversed_ = [k for k, v in signs.items() if v < 0]
    verdict = ("reproduced" if len(held) == 3 else "qualified" if len(held) == 2
               else "not reproduced")
    evidence = (f"Last-layer token representations of the ViT on {sweep.source} test images "
                f"(shares of the total variance). Within-sequence: {_fmt(within)}; "
                f"between-class: {_fmt(between)}; NC1 of sequence means: {_fmt(nc1)}. "
                f"Holding beyond the seed spread (all vs 0 heads): {held or 'none'}; "
                f"clearly reversed: {reversed_ or 'none'}.")
    our = (f"within-seq {within['0'][0]:.3g} -> {within['all'][0]:.3g}, between-class "
           f"{between['0'][0]:.3g} -> {between['all'][0]:.3g}, NC1 {nc1['0'][0]:.3g} -> "
           f"{nc1['all'][0]:.3g}")
    return Verdict(verdict, evidence, our)
