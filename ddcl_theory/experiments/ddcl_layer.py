"""Experiments of the DDCL-layer chapter (claims D1, D15, D16) on CIFAR-10 patches.

* :func:`run_patch_prototypes`: a projection-free DDCL layer whose prototypes are 4x4x3 colour
  patches, k-means++-initialised and then fitted by minimising L_q; it explains each patch of a
  test image as a mixture of those prototypes (figure of the chapter, D16).
* :func:`run_transformer`: a small Transformer with the multi-head DDCL readout trained end to end
  (D15), against the same encoder with a mean-pool readout, and a third variant that uses the
  DDCL layer (residual + LayerNorm) as a block between the two encoder layers. Each run stops
  early at the lowest cross-entropy on a validation split of training images and tests that
  model once; seed s gives the three variants the same start and batch order; separate runs
  per training-set size make the scale trend.
"""
from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as nnf
from torch import nn

from ddcl_theory.data import image_patches, load_cifar10
from ddcl_theory.layers.ddcl import DDCLAttention
from ddcl_theory.metrics.prototypes import perplexity, usage
from ddcl_theory.models.ddcl_transformer import DDCLTransformer
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import Settings, confirmatory_seeds, setting
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
    if s.n_images > len(data.x_train) or s.n_test > len(data.x_test):
        raise ValueError(f"s: n_images = {s.n_images} and n_test = {s.n_test} must not exceed "
                         f"the {len(data.x_train)} training and {len(data.x_test)} test images")
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
#: Training, validation and test images of the paper smoke test (a few batches).
SMOKE_IMAGES = 200


@dataclass(frozen=True)
class TransformerSettings(Settings):
    """Settings of :func:`run_transformer`.

    ``train_sizes``: the training-set sizes of the scale trend, each a run of its own (the
    claim is decided at the largest, :attr:`n_train`); ``n_val`` validation images are CIFAR-10
    training images that no run trains on (early stopping reads them); ``n_test`` test images
    are evaluated once, by the model of the best validation epoch. The learning rate decays on
    a cosine schedule over all steps of a run. Reference seeds: the D15 rule's, none of them
    used by an exploratory run.
    """

    train_sizes: tuple[int, ...] = setting((200, 400), reference=(250, 1000),
                                           paper=(2500, 5000, 9000), smoke=(SMOKE_IMAGES,),
                                           ge=1, nonempty=True)
    n_val: int = setting(200, reference=500, paper=1000, smoke=SMOKE_IMAGES, ge=1)
    n_test: int = setting(100, reference=1000, paper=1000, smoke=SMOKE_IMAGES, ge=1)
    epochs: int = setting(4, reference=12, paper=30, smoke=1, ge=1)
    seeds: tuple[int, ...] = setting((0, 1, 2), reference=confirmatory_seeds(12),
                                     paper=confirmatory_seeds(12), smoke=(0,), ge=0,
                                     nonempty=True)
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
        if list(self.train_sizes) != sorted(set(self.train_sizes)):
            raise ValueError(f"TransformerSettings.train_sizes: expected distinct sizes in "
                             f"increasing order, got {self.train_sizes!r}")

    @property
    def n_train(self) -> int:
        """The training images of the deciding runs (the largest of :attr:`train_sizes`)."""
        return self.train_sizes[-1]


@dataclass
class TrainLog:
    """One variant's training run (one seed, one training-set size).

    Attributes:
        readout: the variant, one of :data:`VARIANTS`; seed: its seed; n_train: its images.
        train_loss: mean cross-entropy per epoch on the training images.
        val_loss, val_acc: cross-entropy and accuracy on the validation images after each
            epoch (the curve early stopping and the convergence gate read).
        best_epoch: the epoch (1-based) of the lowest validation cross-entropy; the model of
            that epoch is the one tested.
        test_loss, test_acc: cross-entropy and accuracy of that model on the test images.
        test_correct: (n_test,) 1 where that model classifies the test image correctly, else 0.
        l_q, l_ols, v: the DDCL loss terms at every step (of the readout, or of the block;
            empty for the mean readout).
        all_finite: every loss of every step was finite.
        fraction_used, perplexity: DDCL bank usage on the test set by the tested model (per
            head).
    """

    readout: str
    seed: int
    n_train: int
    train_loss: list[float]
    val_loss: list[float]
    val_acc: list[float]
    best_epoch: int
    test_loss: float
    test_acc: float
    test_correct: list[int]
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
    """Every (size, variant, seed) run: ``by_size[n][variant]`` lists the seeds' logs in seed
    order; ``runs`` is ``by_size[settings.n_train]`` (the deciding runs)."""

    settings: TransformerSettings
    by_size: dict[int, dict[str, list[TrainLog]]]
    chance: float
    n_classes: int
    source: str

    @property
    def runs(self) -> dict[str, list[TrainLog]]:
        return self.by_size[self.settings.n_train]

    def per_seed(self, variant: str, field: str, n_train: int | None = None) -> np.ndarray:
        """(n_seeds,) values of ``field`` for ``variant`` at ``n_train`` training images (the
        deciding size when None): a scalar attribute (``test_acc``, ``best_epoch``,
        ``min_v``, ``all_finite``), a per-head tuple averaged over heads, or the last value of
        a per-epoch curve (``train_loss``, ``val_loss``, ``val_acc``)."""
        logs = self.by_size[self.settings.n_train if n_train is None else n_train][variant]
        out = []
        for log in logs:
            value = getattr(log, field)
            if isinstance(value, tuple):
                value = float(np.mean(value))
            elif isinstance(value, list):
                value = value[-1]
            out.append(float(value))
        return np.array(out)

    def per_item(self, variant: str, n_train: int | None = None) -> np.ndarray:
        """(n_seeds, n_test) 0/1 correctness of ``variant``'s tested models on the test images
        (the same images, in the same order, for every seed and variant)."""
        logs = self.by_size[self.settings.n_train if n_train is None else n_train][variant]
        return np.array([log.test_correct for log in logs], dtype=np.int8)


def _standardise(train: torch.Tensor, *others: torch.Tensor) -> list[torch.Tensor]:
    mean = train.mean((0, 1), keepdim=True)
    std = train.std((0, 1), keepdim=True).clamp_min(1e-6)
    return [(t - mean) / std for t in (train, *others)]


def _predict(model: DDCLTransformer, x: torch.Tensor, batch: int = 250) -> torch.Tensor:
    """(N, classes) logits of ``model`` on ``x`` in evaluation mode (training mode after)."""
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(x[i:i + batch]).logits for i in range(0, len(x), batch)])
    model.train()
    return logits


def _evaluate(model: DDCLTransformer, x: torch.Tensor, y: torch.Tensor,
              batch: int = 250) -> tuple[float, float]:
    """(cross-entropy, accuracy) of ``model`` on ``x``, ``y`` (evaluation mode)."""
    logits = _predict(model, x, batch)
    return (float(nnf.cross_entropy(logits, y)),
            float((logits.argmax(-1) == y).float().mean()))


class BestState(nn.Module):
    """The weights of a model at its lowest validation loss so far (early stopping).

    A module, so that the training loop checkpoints it with the model: a resumed run keeps the
    best state and its loss (buffer ``best_loss``, inf before the first offer).
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = copy.deepcopy(model)
        self.register_buffer("best_loss", torch.tensor(float("inf"), dtype=torch.float64))

    @torch.no_grad()
    def offer(self, model: nn.Module, loss: float) -> bool:
        """Keep ``model``'s weights when ``loss`` is lower than the best so far (strictly; a
        NaN never is); True when kept."""
        if not loss < float(self.best_loss):
            return False
        self.model.load_state_dict(model.state_dict())
        self.best_loss.fill_(loss)
        return True


VARIANTS = ("ddcl", "mean", "block")


def train_classifier(s: TransformerSettings, variant: str, data, run: RunDir | None = None,
                     seed: int | None = None) -> TrainLog:
    """Train one :class:`DDCLTransformer` with CE (+ beta * L_q of its DDCL layer) and test the
    model of its best validation epoch.

    ``variant``: "ddcl" (DDCL readout on ``pooled``), "mean" (mean-pool readout), "block"
    (mean-pool readout, DDCL block with residual + LayerNorm after the first encoder layer).
    ``data`` is ``(x_train, y_train, x_val, y_val, x_test, y_test)``; ``seed`` (default the
    first of ``s.seeds``) fixes the initialisation of the encoder and classifier and the batch
    order, the same for every variant (the DDCL banks' k-means++ draws from a generator of its
    own); ``run`` keeps the checkpoints of the loop (:func:`~ddcl_theory.runtime.training.fit`,
    one round per epoch). AdamW with a cosine decay of the learning rate over all steps. The
    test images are used once, after training.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant: expected one of {VARIANTS}, got {variant!r}")
    seed = s.seeds[0] if seed is None else seed
    x_tr, y_tr, x_va, y_va, x_te, y_te = data
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
        model.init_prototypes_from(x_tr[:200], generator=torch.Generator().manual_seed(seed))
    best = BestState(model)
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
        record["val_loss"], record["val_acc"] = _evaluate(model, x_va, y_va)
        best.offer(model, record["val_loss"])
        for values in step.values():
            values.clear()
        finite[0] = True
        return record

    fit_log = fit(model, opt, rounds=s.epochs, batches=batches, loss=loss, device=device,
                  run=run, name=f"n={len(x_tr)},variant={variant},seed={seed}",
                  schedulers=[sched], generators={"gen": gen}, modules={"best": best},
                  end_of_round=end_of_round, desc=f"train {variant} seed {seed}")
    rounds = fit_log.metrics
    val_loss = [r["val_loss"] for r in rounds]
    tested = best.model if math.isfinite(float(best.best_loss)) else model
    logits = _predict(tested, x_te)
    correct = (logits.argmax(-1) == y_te).to(torch.int64)
    log = TrainLog(variant, seed, len(x_tr),
                   [sum(c * n for c, n in zip(r["ce"], r["size"])) / sum(r["size"])
                    for r in rounds],
                   val_loss, [r["val_acc"] for r in rounds],
                   int(np.nanargmin(val_loss)) + 1 if np.isfinite(val_loss).any() else len(rounds),
                   float(nnf.cross_entropy(logits, y_te)), float(correct.float().mean()),
                   correct.cpu().tolist(),
                   *([x for r in rounds for x in r[name]] for name in ("l_q", "l_ols", "v")),
                   all(r["all_finite"] for r in rounds))
    tested.eval()
    with torch.no_grad():
        out = tested(x_te)
        q = out.ddcl.assignments if variant == "ddcl" else \
            out.block.assignments if variant == "block" else None
    if q is not None:                                     # (B, H, T, K) -> per head
        log.fraction_used = tuple(usage(q[:, h]).fraction_used for h in range(q.shape[1]))
        log.perplexity = tuple(float(perplexity(q[:, h])) for h in range(q.shape[1]))
    return log


def transformer_data(s: TransformerSettings, n_train: int | None = None
                     ) -> tuple[tuple[torch.Tensor, ...], str]:
    """``(x_train, y_train, x_val, y_val, x_test, y_test)`` CIFAR-10 patch tokens on the
    profile's device, and the data's source.

    Training: the first ``n_train`` (default :attr:`~TransformerSettings.n_train`) training
    images; validation: the ``s.n_val`` training images after the largest training set (no run
    trains on them); test: the first ``s.n_test`` test images. Standardised with the training
    images' statistics.
    """
    n_train = s.n_train if n_train is None else n_train
    data = load_cifar10()
    stop = s.n_train + s.n_val
    if stop > len(data.x_train):
        raise ValueError(f"s: train_sizes[-1] + n_val = {stop} exceeds the "
                         f"{len(data.x_train)} training images")
    if s.n_test > len(data.x_test):
        raise ValueError(f"s: n_test = {s.n_test} exceeds the {len(data.x_test)} test images")
    x_tr = cifar_patch_tokens(data.x_train[:n_train], s.patch)
    x_va = cifar_patch_tokens(data.x_train[s.n_train:stop], s.patch)
    x_te = cifar_patch_tokens(data.x_test[: s.n_test], s.patch)
    x_tr, x_va, x_te = _standardise(x_tr, x_va, x_te)
    labels = (data.y_train[:n_train], data.y_train[s.n_train:stop], data.y_test[: s.n_test])
    y_tr, y_va, y_te = (torch.from_numpy(np.ascontiguousarray(y)) for y in labels)
    device = profile.current().device
    return tuple(t.to(device) for t in (x_tr, y_tr, x_va, y_va, x_te, y_te)), data.source


def run_transformer(settings: TransformerSettings | None = None) -> TransformerResult:
    """Train the three :data:`VARIANTS` of the Transformer on CIFAR-10 patch tokens, once per
    seed and training-set size (seed s gives every variant the same initialisation of the
    encoder and classifier and the same batch order).

    In the reference and paper profiles each finished (size, variant, seed) run is
    checkpointed (:class:`RunDir`), so a killed run resumes at the next one (each run seeds
    itself: same numbers).
    """
    s = settings or TransformerSettings.from_profile()
    ckpt = RunDir("ddcl_transformer", s)
    by_size: dict[int, dict[str, list[TrainLog]]] = {}
    for n in s.train_sizes:
        tensors, source = transformer_data(s, n)
        by_size[n] = {v: [ckpt.unit(f"n={n},variant={v},seed={seed}",
                                    functools.partial(train_classifier, s, v, tensors, ckpt,
                                                      seed))
                          for seed in s.seeds]
                      for v in VARIANTS}
    ckpt.finish()
    n_classes = int(tensors[1].max()) + 1
    return TransformerResult(s, by_size, 1.0 / n_classes, n_classes, source)


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
