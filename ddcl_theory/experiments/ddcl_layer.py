"""Experiments of the DDCL-layer chapter (claims D1, D15, D16) on CIFAR-10 patches.

* :func:`run_patch_prototypes`: a projection-free DDCL layer whose prototypes are 4x4x3 colour
  patches, k-means++-initialised and then fitted by minimising L_q; it explains each patch of a
  test image as a mixture of those prototypes (figure of the chapter, D16).
* :func:`run_transformer`: a small Transformer with the multi-head DDCL readout trained end to end
  (D15), against the same encoder with a mean-pool readout, and a third variant that uses the
  DDCL layer (residual + LayerNorm) as a block between the two encoder layers.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as nnf

from ddcl_theory.data import image_patches, load_cifar10
from ddcl_theory.layers.ddcl import DDCLAttention
from ddcl_theory.metrics.prototypes import perplexity, usage
from ddcl_theory.models.ddcl_transformer import DDCLTransformer
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, setting
from ddcl_theory.runtime.training import fit


def cifar_patch_tokens(images: np.ndarray, patch: int = 4) -> torch.Tensor:
    """(N, H, W, C) images in [0, 1] -> (N, (H/p)(W/p), p*p*C) float32 tokens."""
    return torch.from_numpy(np.ascontiguousarray(image_patches(images, patch)))


# ------------------------------------------------------------------------- patch prototypes (D16)
@dataclass(frozen=True)
class PatchSettings(Settings):
    """Settings of :func:`run_patch_prototypes`: cpu 200 training and 200 test images, 100
    steps; paper 5,000 and 1,000 images, 1,000 steps (paper smoke test: 2 steps)."""

    n_images: int = setting(200, paper=5000, ge=1)
    n_test: int = setting(200, paper=1000, ge=1)
    patch: int = setting(4, ge=1)
    num_prototypes: int = setting(16, ge=1)
    temperature: float = setting(0.1, gt=0)
    steps: int = setting(100, paper=1000, smoke=2, ge=1)
    lr: float = setting(0.01, gt=0)
    seed: int = setting(0, ge=0)


@dataclass
class PatchResult:
    """Fitted patch prototypes and what they explain on held-out test images.

    Attributes:
        layer: the fitted projection-free layer (dim = p*p*C, one head, no residual, no norm).
        prototypes: (K, p, p, C) the prototypes as image patches (clipped to [0, 1]).
        test_images: (n_test, H, W, C); test_labels: (n_test,).
        assignments: (n_test, T, K) soft assignments of the test patches.
        reconstruction: (n_test, H, W, C) every patch replaced by its soft centroid.
        r2: 1 - L_OLS / total patch variance on the test patches (variance explained).
        r2_hard: the same with each patch replaced by its nearest prototype (hard VQ).
        mean_top1, mean_top2: mean over test patches of the largest and the two largest q_nk.
        fraction_used, perplexity: bank usage on the test patches.
        l_q, l_ols, v: per-step training losses (lists).
    """

    layer: DDCLAttention
    prototypes: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    assignments: np.ndarray
    reconstruction: np.ndarray
    r2: float
    r2_hard: float
    mean_top1: float
    mean_top2: float
    fraction_used: float
    perplexity: float
    l_q: list[float]
    l_ols: list[float]
    v: list[float]
    source: str


def _unpatch(tokens: np.ndarray, size: int, patch: int, channels: int) -> np.ndarray:
    """Inverse of image_patches: (N, T, p*p*C) -> (N, H, W, C)."""
    n, g = tokens.shape[0], size // patch
    x = tokens.reshape(n, g, g, patch, patch, channels).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(n, size, size, channels)


def run_patch_prototypes(settings: PatchSettings | None = None) -> PatchResult:
    """Fit K patch prototypes by k-means++ then Adam on L_q; explain test patches with them.

    In the paper profile the fit is checkpointed (:class:`RunDir`): mid-fit by
    :func:`~ddcl_theory.runtime.training.fit`, and the finished result as a unit.
    """
    s = settings or PatchSettings.from_profile()
    ckpt = RunDir("patch_prototypes", s)
    result = ckpt.unit("run", lambda: _fit_patches(s, ckpt))
    ckpt.finish()
    return result


def _fit_patches(s: PatchSettings, run: RunDir | None = None) -> PatchResult:
    """The fit of :func:`run_patch_prototypes` on the profile's device (result on the CPU).

    One round of :func:`fit` is one full-batch Adam step on L_q; ``run`` keeps its checkpoints.
    """
    device = profile.current().device
    gen = profile.seed_everything(s.seed)
    data = load_cifar10()
    train = cifar_patch_tokens(data.x_train[: s.n_images], s.patch).to(device)  # (N, T, D)
    test_images = data.x_test[: s.n_test]
    test = cifar_patch_tokens(test_images, s.patch).to(device)
    dim = train.shape[-1]
    layer = DDCLAttention(dim, s.num_prototypes, heads=1, temperature=s.temperature,
                          residual=False, norm=False, projections=False).to(device)
    layer.init_prototypes_from(train, generator=gen)
    opt = torch.optim.Adam([layer.prototypes], lr=s.lr)
    terms: dict[str, float] = {}

    def l_q(forward, batch):                 # the layer's losses stay a float32 island
        losses = forward(batch).losses
        terms.update(l_ols=float(losses.l_ols.detach()), v=float(losses.v.detach()))
        return losses.l_q

    log = fit(layer, opt, rounds=s.steps, batches=lambda _r: [train], loss=l_q, device=device,
              run=run, name="fit", generators={"gen": gen},
              end_of_round=lambda _r: dict(terms), checkpoint_every=max(1, s.steps // 10),
              desc="patch prototypes", compile=False, train_mode=False)
    hist = {"l_q": log.step_losses, "l_ols": [m["l_ols"] for m in log.metrics],
            "v": [m["v"] for m in log.metrics]}
    with torch.no_grad():
        out = layer(test)
        q = out.assignments[:, 0]                                               # (n, T, K)
        z = test.reshape(-1, dim)
        total = float(((z - z.mean(0)) ** 2).sum(-1).mean())
        r2 = 1.0 - float(out.losses.l_ols) / total
        bank = layer.prototypes[0]
        hard = bank[q.reshape(-1, s.num_prototypes).argmax(-1)]
        r2_hard = 1.0 - float(((z - hard) ** 2).sum(-1).mean()) / total
        top = q.reshape(-1, s.num_prototypes).topk(2, dim=-1).values
        use = usage(q)
        size, channels = test_images.shape[1], test_images.shape[-1]
        recon = _unpatch(out.centroids[:, 0].cpu().numpy(), size, s.patch, channels)
        protos = bank.cpu().numpy().reshape(s.num_prototypes, s.patch, s.patch, channels)
    return PatchResult(layer.cpu(), np.clip(protos, 0, 1), test_images, data.y_test[: s.n_test],
                       q.cpu().numpy(), np.clip(recon, 0, 1), r2, r2_hard, float(top[:, 0].mean()),
                       float(top.sum(-1).mean()), use.fraction_used, float(perplexity(q)),
                       hist["l_q"], hist["l_ols"], hist["v"], data.source)


# ------------------------------------------------------------------------- Transformer (D15)
#: Training and test images of the paper smoke test (a few batches).
SMOKE_IMAGES = 200


@dataclass(frozen=True)
class TransformerSettings(Settings):
    """Settings of :func:`run_transformer`.

    cpu: 3 seeds, 400 training images, 4 epochs (a regression run; fewer seeds than the D15
    rule, so its word is at best inconclusive); reference: the rule's 5 seeds, 1,000 images,
    12 epochs; paper: 5 seeds, 10,000 images, 30 epochs. The learning rate decays on a cosine
    schedule over all steps of the run, so the last epochs are the run's finish.
    """

    n_train: int = setting(400, reference=1000, paper=10000, smoke=SMOKE_IMAGES, ge=1)
    n_test: int = setting(500, reference=1000, paper=1000, smoke=SMOKE_IMAGES, ge=1)
    epochs: int = setting(4, reference=12, paper=30, smoke=1, ge=1)
    seeds: tuple[int, ...] = setting((0, 1, 2), reference=(0, 1, 2, 3, 4),
                                     paper=(0, 1, 2, 3, 4), smoke=(0,), ge=0, nonempty=True)
    batch_size: int = setting(50, ge=1)
    lr: float = setting(2e-3, gt=0)
    patch: int = setting(4, ge=1)
    dim: int = setting(64, ge=1)
    depth: int = setting(2, ge=1)
    attn_heads: int = setting(4, ge=1)
    num_prototypes: int = setting(16, ge=1)
    ddcl_heads: int = setting(2, ge=1)
    temperature: float = setting(1.0, gt=0)
    beta: float = setting(0.01, ge=0)

    def check(self) -> None:
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"TransformerSettings.seeds: expected distinct seeds, "
                             f"got {self.seeds!r}")

    @property
    def scales(self) -> tuple[int, ...]:
        """The epochs at which the scale trend reads the runs (about a quarter, a half and all
        of the run; fewer when the run is shorter than four epochs)."""
        return tuple(sorted({max(1, self.epochs // 4), max(1, self.epochs // 2), self.epochs}))


@dataclass
class TrainLog:
    """One readout's training run (one seed).

    Attributes:
        readout: the variant, one of :data:`VARIANTS`; seed: its seed.
        train_loss: mean cross-entropy per epoch (the curve of the plateau rule);
        test_loss, test_acc: cross-entropy and accuracy on the test images after each epoch.
        l_q, l_ols, v: the DDCL loss terms at every step (of the readout, or of the block;
            empty for the mean readout).
        all_finite: every loss of every step was finite.
        fraction_used, perplexity: DDCL bank usage on the test set after training (per head).
    """

    readout: str
    seed: int
    train_loss: list[float]
    test_loss: list[float]
    test_acc: list[float]
    l_q: list[float]
    l_ols: list[float]
    v: list[float]
    all_finite: bool
    fraction_used: tuple[float, ...] = ()
    perplexity: tuple[float, ...] = ()

    @property
    def min_v(self) -> float:
        """The smallest V of any step (NaN for the mean readout, which has no DDCL layer)."""
        return min(self.v) if self.v else float("nan")


@dataclass
class TransformerResult:
    """Every (variant, seed) run: ``runs[variant]`` lists the seeds' logs in seed order."""

    settings: TransformerSettings
    runs: dict[str, list[TrainLog]]
    chance: float
    n_classes: int
    source: str

    def per_seed(self, variant: str, field: str, epoch: int | None = None) -> np.ndarray:
        """(n_seeds,) values of ``field`` for ``variant``: a per-epoch list read after
        ``epoch`` (1-based; the last when None), a per-head tuple averaged over heads, or a
        scalar attribute (``min_v``, ``all_finite``)."""
        out = []
        for log in self.runs[variant]:
            value = getattr(log, field)
            if field in ("train_loss", "test_loss", "test_acc"):
                value = value[-1 if epoch is None else epoch - 1]
            elif isinstance(value, tuple):
                value = float(np.mean(value))
            out.append(float(value))
        return np.array(out)


def _standardise(train: torch.Tensor, *others: torch.Tensor) -> list[torch.Tensor]:
    mean = train.mean((0, 1), keepdim=True)
    std = train.std((0, 1), keepdim=True).clamp_min(1e-6)
    return [(t - mean) / std for t in (train, *others)]


def _evaluate(model: DDCLTransformer, x: torch.Tensor, y: torch.Tensor,
              batch: int) -> tuple[float, float]:
    """(cross-entropy, accuracy) of ``model`` on ``x``, ``y`` (evaluation mode)."""
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(x[i:i + batch]).logits for i in range(0, len(x), batch)])
    model.train()
    return (float(nnf.cross_entropy(logits, y)),
            float((logits.argmax(-1) == y).float().mean()))


VARIANTS = ("ddcl", "mean", "block")


def train_classifier(s: TransformerSettings, variant: str, data, run: RunDir | None = None,
                     seed: int | None = None) -> TrainLog:
    """Train one :class:`DDCLTransformer` with CE (+ beta * L_q of its DDCL layer).

    ``variant``: "ddcl" (DDCL readout on ``pooled``), "mean" (mean-pool readout), "block"
    (mean-pool readout, DDCL block with residual + LayerNorm after the first encoder layer).
    ``data`` is ``(x_train, y_train, x_test, y_test)``; ``seed`` (default the first of
    ``s.seeds``) fixes the initialisation and the batch order, the same for every variant;
    ``run`` keeps the checkpoints of the loop (:func:`~ddcl_theory.runtime.training.fit`, one
    round per epoch). AdamW with a cosine decay of the learning rate over all steps.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant: expected one of {VARIANTS}, got {variant!r}")
    seed = s.seeds[0] if seed is None else seed
    x_tr, y_tr, x_te, y_te = data
    device = x_tr.device
    gen = profile.seed_everything(seed)
    n_classes = int(y_tr.max()) + 1
    model = DDCLTransformer(n_classes, x_tr.shape[1], input_dim=x_tr.shape[-1], dim=s.dim,
                            depth=s.depth, attn_heads=s.attn_heads,
                            num_prototypes=s.num_prototypes, ddcl_heads=s.ddcl_heads,
                            temperature=s.temperature,
                            readout="ddcl" if variant == "ddcl" else "mean",
                            ddcl_block_after=0 if variant == "block" else None).to(device)
    if variant != "mean":
        model.init_prototypes_from(x_tr[:200], generator=gen)
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, weight_decay=0.0)
    total = s.epochs * math.ceil(len(x_tr) / s.batch_size)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda k: 0.5 * (1 + math.cos(math.pi * min(k, total) / total)))
    step: dict[str, list[float]] = {"l_q": [], "l_ols": [], "v": [], "ce": [], "size": []}
    finite = [True]

    def batches(_round):
        order = torch.randperm(len(x_tr), generator=gen)
        for i in range(0, len(order), s.batch_size):
            yield order[i:i + s.batch_size].to(device)

    def loss(forward, idx):
        out = forward(x_tr[idx])
        ce = nnf.cross_entropy(out.logits, y_tr[idx])
        total = ce
        ddcl_out = out.ddcl if out.ddcl is not None else out.block
        if ddcl_out is not None:
            lq = ddcl_out.losses              # float32 island of the layer
            total = ce + s.beta * lq.l_q
            for name in ("l_q", "l_ols", "v"):
                step[name].append(float(getattr(lq, name).detach()))
        finite[0] &= bool(torch.isfinite(total.detach()))
        step["ce"].append(float(ce.detach()))
        step["size"].append(len(idx))
        return total

    def end_of_round(_round):
        record = {name: list(values) for name, values in step.items()}
        record["all_finite"] = finite[0]
        record["test_loss"], record["test_acc"] = _evaluate(model, x_te, y_te, 250)
        for values in step.values():
            values.clear()
        finite[0] = True
        return record

    fit_log = fit(model, opt, rounds=s.epochs, batches=batches, loss=loss, device=device,
                  run=run, name=f"variant={variant},seed={seed}", schedulers=[sched],
                  generators={"gen": gen}, end_of_round=end_of_round,
                  desc=f"train {variant} seed {seed}")
    rounds = fit_log.metrics
    log = TrainLog(variant, seed,
                   [sum(c * n for c, n in zip(r["ce"], r["size"])) / sum(r["size"])
                    for r in rounds],
                   [r["test_loss"] for r in rounds], [r["test_acc"] for r in rounds],
                   *([x for r in rounds for x in r[name]] for name in ("l_q", "l_ols", "v")),
                   all(r["all_finite"] for r in rounds))
    model.eval()
    with torch.no_grad():
        if variant == "ddcl":
            q = model(x_te).ddcl.assignments
        elif variant == "block":
            q = model(x_te).block.assignments
        else:
            q = None
    if q is not None:                                     # (B, H, T, K) -> per head
        log.fraction_used = tuple(usage(q[:, h]).fraction_used for h in range(q.shape[1]))
        log.perplexity = tuple(float(perplexity(q[:, h])) for h in range(q.shape[1]))
    return log


def transformer_data(s: TransformerSettings) -> tuple[torch.Tensor, ...]:
    """``(x_train, y_train, x_test, y_test)`` CIFAR-10 patch tokens standardised with training
    statistics, on the profile's device; and the data's source."""
    data = load_cifar10()
    x_tr = cifar_patch_tokens(data.x_train[: s.n_train], s.patch)
    x_te = cifar_patch_tokens(data.x_test[: s.n_test], s.patch)
    x_tr, x_te = _standardise(x_tr, x_te)
    y_tr = torch.from_numpy(data.y_train[: s.n_train])
    y_te = torch.from_numpy(data.y_test[: s.n_test])
    device = profile.current().device
    return tuple(t.to(device) for t in (x_tr, y_tr, x_te, y_te)), data.source


def run_transformer(settings: TransformerSettings | None = None) -> TransformerResult:
    """Train the three :data:`VARIANTS` of the Transformer on CIFAR-10 patch tokens, once per
    seed (seed s gives every variant the same initialisation stream and batch order).

    In the reference and paper profiles each finished (variant, seed) run is checkpointed
    (:class:`RunDir`), so a killed run resumes at the next one (each run seeds itself: same
    numbers).
    """
    s = settings or TransformerSettings.from_profile()
    tensors, source = transformer_data(s)
    ckpt = RunDir("ddcl_transformer", s)
    runs = {v: [ckpt.unit(f"variant={v},seed={seed}",
                          functools.partial(train_classifier, s, v, tensors, ckpt, seed))
                for seed in s.seeds]
            for v in VARIANTS}
    ckpt.finish()
    n_classes = int(tensors[1].max()) + 1
    return TransformerResult(s, runs, 1.0 / n_classes, n_classes, source)


# ------------------------------------------------------------------------- operation counts
@dataclass
class OperationCounts:
    """Floating-point operations of one forward pass (one sequence), counted by torch's
    ``FlopCounterMode`` (matrix products only), beside the closed forms.

    DDCL (losses included): 4 T dim H d_h + 2 dim H d_h + 2 T K H (2 d_h + 1)
    + H (2 T K^2 + 2 K^2 d_h): token maps, the pooled summary's map, distances + centroids + L_q
    (shared by output and losses), and V's pairwise form; self-attention
    (nn.MultiheadAttention, weights path): 8 T dim^2 + 4 T^2 dim.
    """

    seq_lens: list[int]
    ddcl: list[int]
    attention: list[int]
    ddcl_formula: list[int]
    attention_formula: list[int]


def operation_counts(seq_lens: list[int], dim: int = 64, num_prototypes: int = 16,
                     heads: int = 2, attn_heads: int = 4) -> OperationCounts:
    """Count the matmul FLOPs of a DDCL layer and of multi-head self-attention at each length."""
    from torch.utils.flop_counter import FlopCounterMode

    layer = DDCLAttention(dim, num_prototypes, heads=heads)
    attn = torch.nn.MultiheadAttention(dim, attn_heads, batch_first=True)
    hd = layer.head_dim
    res = OperationCounts(list(seq_lens), [], [], [], [])
    with torch.no_grad():
        for t in seq_lens:
            x = torch.zeros(1, t, dim)
            with FlopCounterMode(display=False) as fc:
                layer(x)
            res.ddcl.append(int(fc.get_total_flops()))
            with FlopCounterMode(display=False) as fc:
                attn(x, x, x, need_weights=True)
            res.attention.append(int(fc.get_total_flops()))
            k = num_prototypes
            res.ddcl_formula.append(4 * t * dim * heads * hd + 2 * dim * heads * hd
                                    + 2 * t * k * heads * (2 * hd + 1)
                                    + heads * (2 * t * k * k + 2 * k * k * hd))
            res.attention_formula.append(8 * t * dim * dim + 4 * t * t * dim)
    return res
