"""Two stacked DDCL layers that compress documents: tokens -> level-1 -> level-2 prototypes.

Level 1 is a projection-free one-head :class:`DDCLAttention` on the (frozen) token embeddings of
all documents: every token z_t is replaced by its soft centroid mu_t = sum_k q_tk p_k over K1
level-1 prototypes. A document is then summarised by the mean of its tokens' soft centroids,

    s_n = (1/T_n) sum_{t in n} mu_t = sum_k qbar_nk p_k,   qbar_n = mean_t q_t (on the simplex),

which lies in the convex hull of the level-1 prototypes ("bag of prototypes"). Level 2 is a second
projection-free DDCL layer on the document summaries s_n with K2 prototypes. Each level has its own
L_q^(l) = L_OLS^(l) + V^(l) on its own inputs (tokens for level 1, summaries for level 2); the
training loss is L_q^(1) + ``level2_weight`` * L_q^(2), and the level-2 term also moves the level-1
prototypes through s_n.

Everything runs in the dtype of the inputs (the chapter uses float64, so that the identity can be
checked to float64 rounding at every level).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ddcl_theory.layers.ddcl import DDCLAttention, DDCLOutput
from ddcl_theory.layers.readouts import lloyd, segment_mean
from ddcl_theory.runtime.validate import check_positive_float, check_shape


@dataclass
class StackedOutput:
    """What :meth:`StackedDDCL.forward` returns.

    Attributes:
        level1: level-1 output on the tokens as (m, 1, d) length-one sequences (q, mu, losses).
        level2: level-2 output on the summaries as (n, 1, d).
        summaries: (n, d) the document summaries s_n (inputs of level 2).
        shares: (n, K1) mean level-1 assignment of each document (rows on the simplex).
    """

    level1: DDCLOutput
    level2: DDCLOutput
    summaries: Tensor
    shares: Tensor


class StackedDDCL(nn.Module):
    """Two projection-free DDCL levels; see the module docstring.

    Args:
        dim: token width d; k1, k2: prototypes at level 1 and level 2;
        tau1, tau2: temperatures (set them from the data with :meth:`calibrate`).
    """

    def __init__(self, dim: int, k1: int, k2: int, tau1: float = 1.0, tau2: float = 1.0) -> None:
        super().__init__()
        self.level1 = DDCLAttention(dim, k1, heads=1, temperature=tau1, residual=False,
                                    norm=False, projections=False)
        self.level2 = DDCLAttention(dim, k2, heads=1, temperature=tau2, residual=False,
                                    norm=False, projections=False)

    def forward(self, tokens: Tensor, segments: Tensor, n: int) -> StackedOutput:
        """tokens (m, d) of n documents, segments (m,) document id of each token in [0, n)."""
        check_shape(tokens, "tokens", ("m", "d"))
        check_shape(segments, "segments", (tokens.shape[0],))
        out1 = self.level1(tokens.unsqueeze(1))
        summaries = segment_mean(out1.output[:, 0], segments, n)                 # (n, d)
        shares = segment_mean(out1.assignments[:, 0, 0], segments, n)            # (n, K1)
        out2 = self.level2(summaries.unsqueeze(1))
        return StackedOutput(out1, out2, summaries, shares)

    @torch.no_grad()
    def calibrate(self, tokens: Tensor, segments: Tensor, n: int, fraction1: float,
                  fraction2: float, generator: torch.Generator | None = None,
                  lloyd_steps: int = 10, max_seed_tokens: int = 10000) -> tuple[float, float]:
        """k-means++ seeding and ``lloyd_steps`` k-means steps for both levels
        (:func:`ddcl_theory.layers.readouts.lloyd`), and temperatures from the data's spread.

        Level 1 is seeded on ``tokens`` (at most ``max_seed_tokens`` of them, drawn at random)
        and gets tau1 = ``fraction1`` times the mean squared
        distance of the tokens to their mean; level 2 is then seeded on the resulting summaries
        and gets tau2 = ``fraction2`` times their spread. Returns (tau1, tau2).
        """
        check_positive_float(fraction1, "fraction1")
        check_positive_float(fraction2, "fraction2")

        def spread(x: Tensor) -> float:
            return float(((x - x.mean(0)) ** 2).sum(-1).mean())

        sample = tokens
        if tokens.shape[0] > max_seed_tokens:
            pick = torch.randperm(tokens.shape[0], generator=generator)[:max_seed_tokens]
            sample = tokens[pick.to(tokens.device)]
        self.level1.init_prototypes_from(sample.unsqueeze(1), generator=generator)
        self.level1.prototypes[0].copy_(lloyd(sample, self.level1.prototypes[0], lloyd_steps))
        tau1 = max(fraction1 * spread(tokens), 1e-12)
        self.level1.temperature.set(tau1)
        summaries = self(tokens, segments, n).summaries
        self.level2.init_prototypes_from(summaries.unsqueeze(1), generator=generator)
        self.level2.prototypes[0].copy_(lloyd(summaries, self.level2.prototypes[0], lloyd_steps))
        tau2 = max(fraction2 * spread(summaries), 1e-12)
        self.level2.temperature.set(tau2)
        return tau1, tau2
