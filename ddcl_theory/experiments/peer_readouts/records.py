"""What is measured of a readout at each epoch: collapse metrics, usage, accuracies, tau / T_c."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from ddcl_theory.experiments.peer_readouts.data import TokenSet
from ddcl_theory.experiments.peer_readouts.model import (
    ReadoutClassifier,
    critical_ratio,
    trim_padding,
)
from ddcl_theory.experiments.peer_readouts.settings import PeerSettings
from ddcl_theory.layers.peers import DDCLReadoutAdapter
from ddcl_theory.metrics import readouts as rm


@dataclass(frozen=True)
class CollapseRecord:
    """Measurements of one readout at one epoch (epoch 0 = before training)."""

    epoch: int
    loss: float                        # mean training cross-entropy of the epoch (nan at 0)
    train_acc: float
    test_acc: float                    # nan without a test set
    vectors: rm.CollapseMetrics
    states: rm.CollapseMetrics
    maps: rm.CollapseMetrics
    fraction_used: float
    perplexity: float
    token_perplexity: float
    critical_ratio: float = float("nan")   # DDCL: tau / T_c of its current tokens (nan: peers),
                                           # T_c of the trained L_q (4 lambda_max)
    usage_perplexity: float = float("nan")  # exp(H(histogram of the tokens' first choices)), in
                                            # [1, S]: the codebook-usage perplexity
    # the last record of a run: the effective rank of each measured sequence's S attention
    # maps / S, in sequence order (their mean is maps.effective_rank / S); () before
    maps_rank_items: tuple[float, ...] = ()
    test_loss: float = float("nan")    # mean cross-entropy on the test set (nan with test_acc)

    @property
    def maps_rank(self) -> float:
        """D17's first reading: the effective rank of the S attention maps / S, a mean over
        the measured sequences, in [0, 1] (1: the S vectors read S different mixtures of the
        tokens; 1/S: they read one)."""
        return self.maps.effective_rank / self.maps.count

    @property
    def normalised_usage(self) -> float:
        """D17's statistic: :attr:`usage_perplexity` / S, in [1/S, 1] (1: the tokens' first
        choices spread evenly over all S slots/latents/prototypes; 1/S: one takes them all)."""
        return self.usage_perplexity / self.vectors.count

    def collapsed(self, part: str = "maps") -> bool:
        """The stated collapse rule (:meth:`CollapseMetrics.collapsed`) on ``part``: "maps"
        (the S attention rows: do the slots read different tokens?), "states" or "vectors"."""
        if part not in ("maps", "states", "vectors"):
            raise ValueError(f"part: expected 'maps', 'states' or 'vectors', got {part!r}")
        return getattr(self, part).collapsed()


@dataclass
class ReadoutHistory:
    """Per-epoch records of one readout trained from ``settings.seed``."""

    kind: str
    records: list[CollapseRecord] = field(default_factory=list)

    def series(self, name: str) -> np.ndarray:
        """One number per epoch: a field (``"test_acc"``) or a metric (``"vectors.effective_rank"``,
        ``"maps.relative_min_distance"``, ...)."""
        out = []
        for rec in self.records:
            value = rec
            for part in name.split("."):
                if not hasattr(value, part):
                    raise ValueError(f"name: {name!r} is not a field of CollapseRecord")
                value = getattr(value, part)
            out.append(float(value))
        return np.array(out)

    @property
    def final(self) -> CollapseRecord:
        return self.records[-1]


@dataclass
class PeerResult:
    """The histories of every readout of ``settings.readouts`` (same data, same seed)."""

    settings: PeerSettings
    histories: dict[str, ReadoutHistory]


@torch.no_grad()
def measure_readout(model: ReadoutClassifier, data: TokenSet, test: TokenSet | None,
                    epoch: int, loss: float, s: PeerSettings,
                    final: bool = False) -> CollapseRecord:
    """The :class:`CollapseRecord` of ``model`` after ``epoch`` epochs (mean training loss
    ``loss``): accuracies on ``data`` (its first ``s.measure_sequences`` sequences) and on
    ``test`` (every epoch, or only when ``final`` unless ``s.test_every_epoch``), collapse
    metrics and usage of the readout on ``data``, tau / T_c for DDCL, and (``final``) the
    per-sequence effective rank of the maps. Leaves ``model`` in training mode."""
    model.eval()
    gen_seed = s.seed + 10_007                                          # fixed noise for eval

    def evaluate(d: TokenSet, keep: bool):
        gen = torch.Generator(device=d.tokens.device).manual_seed(gen_seed)
        correct, nll, outs = 0, 0.0, []
        for start in range(0, d.tokens.shape[0], s.eval_batch):
            sl = slice(start, start + s.eval_batch)
            x, m = trim_padding(d.tokens[sl], d.mask[sl])
            lg, out = model(x, m, generator=gen)
            correct += int((lg.argmax(-1) == d.labels[sl]).sum())
            nll += float(F.cross_entropy(lg.double(), d.labels[sl], reduction="sum"))
            if keep:
                rows = m.any(1)
                outs.append((out, m, rows))
        n = d.tokens.shape[0]
        return correct / n, nll / n, outs

    if 0 < s.measure_sequences < data.tokens.shape[0]:
        sl = slice(0, s.measure_sequences)
        data = TokenSet(data.tokens[sl], data.mask[sl], data.labels[sl])
    train_acc, _, outs = evaluate(data, True)
    test_acc = test_loss = float("nan")
    if test is not None and (s.test_every_epoch or final):
        test_acc, test_loss, _ = evaluate(test, False)
    # metrics batch by batch (a batch's maps are (b, S, T_batch)), then token/sequence means
    parts: dict[str, list[tuple[rm.CollapseMetrics, int]]] = {"vectors": [], "states": [],
                                                              "maps": []}
    cols, items = [], []
    for out, m, rows in outs:
        if not bool(rows.any()):
            continue
        n = int(rows.sum())
        for name, field_ in (("vectors", "vectors"), ("states", "states"), ("maps", "attention")):
            parts[name].append((rm.collapse_metrics(getattr(out, field_)[rows]), n))
        attn = out.attention[rows].transpose(1, 2)[m[rows]]            # (tokens, S)
        cols.append(attn)
        if final:
            s_count = out.attention.shape[1]
            items += (rm.effective_rank(out.attention[rows]) / s_count).tolist()
    use = rm.map_usage(torch.cat(cols).T[None], None)
    ratio = float("nan")
    if isinstance(model.readout, DDCLReadoutAdapter):
        ratio = critical_ratio(model, data)
    model.train()
    hard = first_choice_perplexity(use.histogram)
    return CollapseRecord(epoch, loss, train_acc, test_acc, *(_mean_metrics(parts[k]) for k in
                                                             ("vectors", "states", "maps")),
                          use.fraction_used, use.perplexity, use.token_perplexity, ratio, hard,
                          tuple(items), test_loss)


def first_choice_perplexity(histogram: torch.Tensor) -> float:
    """exp(H(histogram)) of the shares (S,) of the tokens whose first choice is each of the S
    vectors: the codebook-usage perplexity, in [1, S]."""
    h = histogram.detach().to(torch.float64)
    return float(torch.exp(-torch.special.xlogy(h, h).sum()))


def collapse_readings(attention: torch.Tensor, mask: torch.Tensor | None = None
                      ) -> tuple[float, float]:
    """D17's two readings of attention maps (B, S, T) >= 0 with ``mask`` (B, T) bool: (the
    mean over sequences of the effective rank of the S maps / S, the usage perplexity of the
    valid tokens' first choices / S). Both in [0, 1]; 1 when the S vectors read S different
    parts of the tokens."""
    s = attention.shape[1]
    rank = rm.effective_rank(attention).mean() / s
    return float(rank), first_choice_perplexity(rm.map_usage(attention, mask).histogram) / s


def _mean_metrics(parts: list[tuple[rm.CollapseMetrics, int]]) -> rm.CollapseMetrics:
    """Sequence-weighted means of per-batch :class:`CollapseMetrics` (each a batch mean)."""
    w = np.array([n for _, n in parts], dtype=np.float64)
    mean = lambda name: float(np.dot(w, [getattr(c, name) for c, _ in parts]) / w.sum())
    return rm.CollapseMetrics(mean("min_distance"), mean("mean_distance"),
                              mean("effective_rank"), mean("scale"),
                              mean("relative_min_distance"), parts[0][0].count)
