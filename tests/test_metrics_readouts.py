"""ddcl_theory.metrics.readouts: pairwise distances, effective rank, usage from maps (claim D17)."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ddcl_theory.metrics import prototypes as protos
from ddcl_theory.metrics import readouts as rm

SMALL = settings(max_examples=25, deadline=None)


def _v(*shape, seed=0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _orthogonal(d: int, seed: int) -> torch.Tensor:
    q, _ = torch.linalg.qr(_v(d, d, seed=seed))
    return q


# ---------------------------------------------------------------------------------- distances
@SMALL
@given(seed=st.integers(0, 10_000), s=st.integers(2, 7), d=st.integers(1, 5))
def test_pairwise_distances_equal_the_brute_force_min_and_mean(seed, s, d):
    v = _v(s, d, seed=seed)
    dist = [float((v[i] - v[j]).norm()) for i in range(s) for j in range(i + 1, s)]
    lo, mean = rm.pairwise_distances(v)
    assert float(lo) == pytest.approx(min(dist), rel=1e-12)
    assert float(mean) == pytest.approx(sum(dist) / len(dist), rel=1e-12)


@SMALL
@given(seed=st.integers(0, 10_000))
def test_pairwise_distances_are_invariant_under_rotation_and_translation(seed):
    v = _v(5, 4, seed=seed)
    moved = v @ _orthogonal(4, seed + 1) + _v(1, 4, seed=seed + 2) * 10
    for a, b in zip(rm.pairwise_distances(v), rm.pairwise_distances(moved)):
        assert float(a) == pytest.approx(float(b), rel=1e-9)


def test_pairwise_distances_of_one_vector_are_zero_and_batches_are_per_set():
    lo, mean = rm.pairwise_distances(_v(1, 3))
    assert float(lo) == 0.0 and float(mean) == 0.0
    batch = _v(4, 3, 2)
    lo_b, mean_b = rm.pairwise_distances(batch)
    assert lo_b.shape == mean_b.shape == (4,)
    for i in range(4):
        torch.testing.assert_close(lo_b[i], protos.separation(batch[i], "min"))


# ------------------------------------------------------------------------------ effective rank
def test_effective_rank_of_coincident_vectors_is_one_and_of_orthonormal_ones_is_their_number():
    same = _v(1, 5).expand(6, 5)
    assert float(rm.effective_rank(same)) == pytest.approx(1.0, abs=1e-12)
    ortho = _orthogonal(5, 3)[:4]                                    # 4 orthonormal rows
    assert float(rm.effective_rank(ortho)) == pytest.approx(4.0, rel=1e-12)
    assert float(rm.effective_rank(torch.zeros(3, 4, dtype=torch.float64))) == 0.0


def test_effective_rank_equals_exp_entropy_of_normalised_singular_values():
    v = _v(5, 3, seed=4)
    sigma = torch.linalg.svdvals(v)
    p = sigma / sigma.sum()
    expected = math.exp(-float((p * p.log()).sum()))
    assert float(rm.effective_rank(v)) == pytest.approx(expected, rel=1e-12)


@SMALL
@given(seed=st.integers(0, 10_000), s=st.integers(1, 6), d=st.integers(1, 6),
       scale=st.floats(1e-3, 1e3))
def test_effective_rank_lies_in_one_to_min_s_d_and_ignores_scale_and_rotation(seed, s, d, scale):
    v = _v(s, d, seed=seed)
    r = float(rm.effective_rank(v))
    assert 1.0 - 1e-9 <= r <= min(s, d) + 1e-9
    assert float(rm.effective_rank(v * scale)) == pytest.approx(r, rel=1e-9)
    assert float(rm.effective_rank(v @ _orthogonal(d, seed + 1))) == pytest.approx(r, rel=1e-9)
    perm = torch.randperm(s, generator=torch.Generator().manual_seed(seed))
    assert float(rm.effective_rank(v[perm])) == pytest.approx(r, rel=1e-9)


def test_effective_rank_drops_as_vectors_merge():
    base, spread = _v(1, 6, seed=1), _v(4, 6, seed=2)
    ranks = [float(rm.effective_rank(base + a * spread)) for a in (1.0, 0.1, 0.01, 0.0)]
    assert ranks == sorted(ranks, reverse=True) and ranks[-1] == pytest.approx(1.0)
    assert ranks[0] > 2.0


# ---------------------------------------------------------------------------------- map usage
def test_map_usage_of_hard_assignments_counts_the_winners():
    att = torch.zeros(1, 3, 4, dtype=torch.float64)
    att[0, 0, :3] = 1.0
    att[0, 2, 3] = 1.0                                                 # slot 1 never wins
    use = rm.map_usage(att)
    assert use.fraction_used == pytest.approx(2 / 3) and use.dead == 1
    assert use.histogram.tolist() == [0.75, 0.0, 0.25]
    assert use.token_perplexity == pytest.approx(1.0)
    expected = math.exp(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert use.perplexity == pytest.approx(expected) and use.tokens == 4


def test_map_usage_of_equally_shared_tokens_has_perplexities_s():
    att = torch.full((2, 5, 7), 0.2, dtype=torch.float64)
    use = rm.map_usage(att)
    assert use.perplexity == pytest.approx(5.0) and use.token_perplexity == pytest.approx(5.0)


@SMALL
@given(seed=st.integers(0, 10_000))
def test_map_usage_normalises_columns_and_skips_masked_tokens(seed):
    """A softmax over tokens (rows sum to 1) gives the same usage as its column-normalised
    form; masked tokens (whatever their values) do not count."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, 4, 6, generator=g, dtype=torch.float64)
    mask = torch.rand(2, 6, generator=g) > 0.3
    mask[:, 0] = True
    rows = torch.softmax(logits, -1)
    cols = rows / rows.sum(1, keepdim=True)
    a, b = rm.map_usage(rows, mask), rm.map_usage(cols, mask)
    assert a.perplexity == pytest.approx(b.perplexity, rel=1e-12)
    assert a.token_perplexity == pytest.approx(b.token_perplexity, rel=1e-12)
    assert a.tokens == int(mask.sum())
    noisy = rows.clone()
    noisy.transpose(1, 2)[~mask] = torch.rand(int((~mask).sum()), 4, generator=g,
                                               dtype=torch.float64)
    assert rm.map_usage(noisy, mask).perplexity == pytest.approx(a.perplexity, rel=1e-12)


def test_map_usage_rejects_bad_maps_and_masks():
    with pytest.raises(ValueError, match="attention"):
        rm.map_usage(torch.rand(3, 4))
    with pytest.raises(ValueError, match="attention"):
        rm.map_usage(-torch.rand(1, 3, 4))
    with pytest.raises(ValueError, match="attention"):
        rm.map_usage(torch.zeros(1, 3, 4))                           # no non-zero column
    with pytest.raises(ValueError, match="mask"):
        rm.map_usage(torch.rand(1, 3, 4), torch.ones(1, 4))
    with pytest.raises(ValueError, match="mask"):
        rm.map_usage(torch.rand(1, 3, 4), torch.ones(1, 5, dtype=torch.bool))


# ---------------------------------------------------------------------------- collapse metrics
def test_collapse_metrics_of_a_batch_are_the_means_of_the_per_set_values():
    batch = _v(3, 4, 5, seed=7)
    m = rm.collapse_metrics(batch)
    singles = [rm.collapse_metrics(batch[i]) for i in range(3)]
    for name in ("min_distance", "mean_distance", "effective_rank", "scale",
                 "relative_min_distance"):
        assert getattr(m, name) == pytest.approx(sum(getattr(s, name) for s in singles) / 3,
                                                 rel=1e-12)
    assert m.count == 4


def test_relative_min_distance_is_scale_free_and_the_collapse_rule_needs_both_signs():
    v = _v(4, 6, seed=8)
    a, b = rm.collapse_metrics(v), rm.collapse_metrics(v * 1e4)
    assert a.relative_min_distance == pytest.approx(b.relative_min_distance, rel=1e-9)
    assert not a.collapsed()
    merged = _v(1, 6, seed=9).expand(4, 6) + 1e-6 * v
    assert rm.collapse_metrics(merged).collapsed()
    pair = torch.cat([v[:3], v[:1] + 1e-6])                           # two close, rest apart
    assert not rm.collapse_metrics(pair).collapsed()
    assert rm.collapse_metrics(torch.zeros(3, 2, dtype=torch.float64)).relative_min_distance == 0


def test_collapse_metrics_reject_bad_vectors():
    for bad in (torch.randn(4), torch.randn(1, 2, 3, 4), torch.ones(3, 2, dtype=torch.long),
                torch.tensor([[float("nan"), 0.0]]), [[0.0, 1.0]]):
        with pytest.raises(ValueError, match="vectors"):
            rm.collapse_metrics(bad)


# ------------------------------------------------------- the collapse rule on attention maps
def _competitive(logits: torch.Tensor) -> torch.Tensor:
    """(S, T) logits -> attention rows that are a softmax over S (each token's column sums to 1)."""
    return torch.softmax(logits, dim=0)


def test_collapse_rule_on_attention_rows_sees_shared_tokens_and_one_slot_taking_all():
    """Maps (S, T) as S vectors in R^T: equal sharing of every token and one slot winning every
    token both collapse (the S rows carry one row's information); hard, distinct choices do not."""
    s, t = 4, 12
    shared = torch.full((s, t), 1.0 / s, dtype=torch.float64)
    assert rm.collapse_metrics(shared).collapsed()
    winner = torch.zeros(s, t, dtype=torch.float64)
    winner[0] = 1.0
    assert rm.collapse_metrics(winner).collapsed()
    distinct = torch.zeros(s, t, dtype=torch.float64)
    distinct[torch.arange(t) % s, torch.arange(t)] = 1.0              # slot t mod S takes t
    m = rm.collapse_metrics(distinct)
    assert not m.collapsed() and m.effective_rank == pytest.approx(s, rel=1e-12)
    use = rm.map_usage(distinct[None])
    assert use.fraction_used == 1.0 and use.token_perplexity == pytest.approx(1.0)


@SMALL
@given(seed=st.integers(0, 10_000), s=st.integers(3, 6), t=st.integers(3, 10))
def test_competitive_maps_at_a_very_high_temperature_collapse_and_at_zero_do_not(seed, s, t):
    """Softmax over S of logits / T: as T -> infinity the rows become equal (rank 1: collapsed);
    as T -> 0 every token goes to its arg-max slot, and the maps collapse only if one slot
    wins every token (with at most 10 tokens a second winner owns at least a tenth of them, so the
    rows' singular values differ by at most a factor 3 and the effective rank stays >= 1.75).
    S >= 3: with S = 2, one slot taking every token leaves a full and an empty row, far apart,
    which the rule (it needs a small distance too) does not call collapsed."""
    logits = _v(s, t, seed=seed)
    soft = rm.collapse_metrics(_competitive(logits / 1e6))
    assert soft.collapsed() and soft.effective_rank == pytest.approx(1.0, abs=1e-4)
    hard = rm.collapse_metrics(_competitive(logits / 1e-6))
    winners = logits.argmax(0).unique().numel()
    assert hard.collapsed() == (winners == 1)
    assert hard.effective_rank >= 1.0 - 1e-9
