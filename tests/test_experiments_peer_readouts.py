"""The D17 experiment (ddcl_theory.experiments.peer_readouts): one training run of each readout
and what it records, the real-task loaders, the FLOP counts, the study's settings, its tuning
grid and the study end to end on a tiny task."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ddcl_theory.experiments import peer_readouts as pr
from ddcl_theory.layers.peers import (
    DDCLReadoutAdapter,
    PerceiverReadout,
    ReadoutOutput,
    SlotAttentionReadout,
)
from ddcl_theory.runtime import profile

DIM = 6
ALL = ("slot", "slot_learned", "perceiver", "perceiver_inverted", "ddcl")


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _x(b=3, t=5, dim=DIM, dtype=torch.float64, seed=1) -> torch.Tensor:
    return torch.randn(b, t, dim, generator=_gen(seed), dtype=dtype)


def _make(kind: str, dtype=torch.float64, seed=0) -> torch.nn.Module:
    torch.manual_seed(seed)
    layer = {"slot": lambda: SlotAttentionReadout(DIM, 4, iterations=2),
             "slot_learned": lambda: SlotAttentionReadout(DIM, 4, iterations=2, init="learned"),
             "perceiver": lambda: PerceiverReadout(DIM, 3),
             "perceiver_inverted": lambda: PerceiverReadout(DIM, 3, softmax_over="latents"),
             "ddcl": lambda: DDCLReadoutAdapter(DIM, 4, residual=False, norm=False)}[kind]()
    return layer.to(dtype)


def _call(layer, x, mask=None, seed=0) -> ReadoutOutput:
    """Forward with a fresh seeded generator for Slot Attention (reproducible initial slots)."""
    if isinstance(layer, SlotAttentionReadout):
        return layer(x, mask, generator=torch.Generator(device=x.device).manual_seed(seed))
    return layer(x, mask)


# ------------------------------------------------------------------------- one training run
def test_peer_settings_come_from_the_profile_and_validate(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    cpu = pr.PeerSettings.from_profile()
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    paper = pr.PeerSettings.from_profile()
    assert cpu != paper and paper.epochs > cpu.epochs
    monkeypatch.delenv(profile.PROFILE_ENV)
    assert pr.PeerSettings.from_profile() == cpu
    assert pr.PeerSettings.from_profile(num_slots=3).num_slots == 3
    for kwargs, name in [({"readouts": ("ddcl", "vq")}, "readouts"), ({"lr": 0.0}, "lr"),
                         ({"bank_init": "same"}, "bank_init"), ({"num_slots": 0}, "num_slots"),
                         ({"perceiver_softmax": "x"}, "perceiver_softmax"),
                         ({"ddcl_lam": -1.0}, "ddcl_lam"), ({"cost_lengths": ()}, "cost_lengths"),
                         ({"lr_bank": math.inf}, "lr_bank"), ({"seed": -1}, "seed"),
                         ({"label_smoothing": 1.0}, "label_smoothing"),
                         ({"measure_sequences": True}, "measure_sequences")]:
        with pytest.raises(ValueError, match=rf"PeerSettings\.{name}: expected"):
            pr.PeerSettings(**kwargs)
    with pytest.raises(ValueError, match=r"unknown field\(s\) \[.speed.\]"):
        pr.PeerSettings.from_profile(speed=3)


def test_synthetic_tokens_are_padded_and_labelled():
    data = pr.synthetic_tokens(12, 8, in_dim=4, classes=3, seed=0)
    assert data.tokens.shape == (12, 8, 4) and data.mask.shape == (12, 8)
    assert data.labels.tolist() == [i % 3 for i in range(12)]
    assert bool(data.mask[:, :4].all())                          # lengths >= seq_len // 2
    assert bool((data.tokens[~data.mask] == 0).all())
    other = pr.synthetic_tokens(12, 8, in_dim=4, classes=3, seed=1)
    assert not torch.equal(data.tokens, other.tokens)
    with pytest.raises(ValueError, match="clusters"):
        pr.synthetic_tokens(4, 4, classes=3, clusters=3)
    with pytest.raises(ValueError, match="labels"):
        pr.TokenSet(data.tokens, data.mask, data.labels.float())


@pytest.fixture(scope="module")
def tiny_run():
    data = pr.synthetic_tokens(48, 8, in_dim=4, seed=0)
    test = pr.synthetic_tokens(24, 8, in_dim=4, seed=1)
    s = pr.PeerSettings(num_slots=3, dim=8, hidden=8, epochs=2, batch_size=16, eval_batch=20)
    return s, pr.compare_readouts(data, s, test)


def test_run_trains_the_three_readouts_and_records_collapse_every_epoch(tiny_run):
    s, result = tiny_run
    assert set(result.histories) == set(pr.READOUTS)
    for kind, hist in result.histories.items():
        assert [r.epoch for r in hist.records] == [0, 1, 2]
        assert math.isnan(hist.records[0].loss) and math.isfinite(hist.final.loss)
        for name in ("vectors.effective_rank", "states.min_distance", "maps.mean_distance",
                     "perplexity", "token_perplexity", "test_acc", "train_acc"):
            series = hist.series(name)
            assert series.shape == (3,) and bool(all(map(math.isfinite, series))), (kind, name)
        assert 1 <= hist.final.perplexity <= s.num_slots + 1e-9
        assert hist.final.vectors.count == s.num_slots
    with pytest.raises(ValueError, match="name"):
        result.histories["slot"].series("vectors.nothing")


def test_training_is_reproducible_from_the_seed(tiny_run):
    s, result = tiny_run
    data = pr.synthetic_tokens(48, 8, in_dim=4, seed=0)
    test = pr.synthetic_tokens(24, 8, in_dim=4, seed=1)
    again = pr.train_readout("slot", data, s, test)
    assert again.series("loss")[1:].tolist() == result.histories["slot"].series("loss")[1:].tolist()


def test_near_equal_start_puts_every_bank_close_to_one_vector():
    data = pr.synthetic_tokens(24, 6, in_dim=4, seed=0)
    s = pr.PeerSettings(num_slots=4, dim=8, hidden=8, epochs=1, batch_size=12,
                        bank_init="near_equal", near_equal_noise=1e-6, slot_init="learned")
    for kind in ("ddcl", "perceiver"):
        rec = pr.train_readout(kind, data, s).records[0]
        assert rec.vectors.relative_min_distance < 1e-4, kind
        assert rec.vectors.effective_rank < 1.01, kind


def test_inference_cost_returns_ratios_to_ddcl_for_every_length():
    s = pr.PeerSettings(dim=8, num_slots=3, cost_lengths=(4, 16), cost_batch=2, cost_repeats=2,
                        cost_warmup=0)
    cost = pr.inference_cost(s)
    ratios = cost.ratios()
    assert set(ratios) == set(pr.READOUTS) and ratios["ddcl"] == [1.0, 1.0]
    assert all(len(v) == 2 and all(r > 0 for r in v) for v in ratios.values())
    assert cost.params["slot"] > cost.params["ddcl"]


# ------------------------------------------------------------------------- real-task loaders
def test_debris_sets_are_labelled_by_the_classes_they_contain():
    """Every token is an object of the catalogue; the classes of a set's objects are exactly
    the subset its label names, and each class of the subset is present."""
    from ddcl_theory.data import debris
    data = pr.debris_sets(45, 8, seed=3, catalogue=400)
    cat = debris.generate(400, seed=3)
    feats = torch.from_numpy(pr.debris_features(cat.features)).float()
    labels = torch.from_numpy(cat.labels)
    assert data.tokens.shape == (45, 8, 5) and data.labels.tolist().count(0) == 3
    for i in range(45):
        toks = data.tokens[i][data.mask[i]]
        match = (toks[:, None, :] == feats[None]).all(-1)              # (L, catalogue)
        assert bool(match.any(1).all())
        classes = {int(labels[match[j]].unique()[0]) for j in range(len(toks))}
        assert classes == set(pr.DEBRIS_SUBSETS[int(data.labels[i])])
        assert 4 <= len(toks) <= 8 and bool(data.mask[i, :len(toks)].all())
    assert bool((data.tokens[~data.mask] == 0).all())
    again = pr.debris_sets(45, 8, seed=3, catalogue=400)
    assert torch.equal(again.tokens, data.tokens) and torch.equal(again.labels, data.labels)
    assert len(pr.DEBRIS_SUBSETS) == 15 and len(set(pr.DEBRIS_SUBSETS)) == 15
    for kwargs, name in [({"seq_len": 3}, "seq_len"), ({"catalogue": 50}, "catalogue"),
                         ({"n": 0}, "n")]:
        with pytest.raises(ValueError, match=name):
            pr.debris_sets(**({"n": 4, "seq_len": 8, "seed": 0} | kwargs))


def test_debris_features_are_column_z_scores_of_logs_where_the_scale_spans_decades():
    f = torch.rand(50, 5, generator=_gen(1)).double().numpy() * 100 + 1
    x = pr.debris_features(f)
    assert x.mean(0) == pytest.approx([0] * 5, abs=1e-12)
    assert x.std(0) == pytest.approx([1] * 5, abs=1e-12)
    import numpy as np
    logs = np.log10(f[:, 0])
    assert np.allclose(x[:, 0], (logs - logs.mean()) / logs.std())
    assert np.allclose(x[:, 2], (f[:, 2] - f[:, 2].mean()) / f[:, 2].std())
    with pytest.raises(ValueError, match="features"):
        pr.debris_features(f[:, :4])


def test_text_sets_are_padded_and_standardised_with_training_token_statistics():
    import numpy as np

    from ddcl_theory.data.text.cache import TokenEmbeddings

    rng = np.random.default_rng(0)

    def emb(lengths):
        total = int(sum(lengths))
        return TokenEmbeddings((rng.normal(size=(total, 3)) * 4 + 2).astype(np.float16),
                               np.arange(total, dtype=np.int32),
                               np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                               "fake", 8)

    train, test = emb([3, 5, 2]), emb([4, 1])
    a, b = pr.text_sets(train, test, np.array([0, 1, 0]), np.array([1, 1]))
    assert a.tokens.shape == (3, 5, 3) and b.tokens.shape == (2, 4, 3)
    assert a.mask.sum(1).tolist() == [3, 5, 2] and b.labels.tolist() == [1, 1]
    valid = a.tokens[a.mask]
    assert valid.mean(0).abs().max() < 1e-5
    assert (valid.std(0, unbiased=True) - 1).abs().max() < 1e-5          # training statistics
    assert bool((a.tokens[~a.mask] == 0).all()) and bool((b.tokens[~b.mask] == 0).all())
    raw = torch.from_numpy(train.values).float()
    mean, std = raw.mean(0), raw.std(0)
    expect = (torch.from_numpy(test.values[:4]).float() - mean) / std
    torch.testing.assert_close(b.tokens[0], expect)


# -------------------------------------------------------------------- training-loop additions
@pytest.mark.parametrize("kind", ALL)
def test_trimming_all_padding_columns_leaves_every_readout_output_unchanged(kind):
    layer = _make(kind)
    x = _x(b=3, t=7)
    mask = torch.zeros(3, 7, dtype=torch.bool)
    mask[0, :4], mask[1, :2], mask[2, :3] = True, True, True
    x = torch.where(mask[..., None], x, torch.zeros(()))
    xt, mt = pr.model.trim_padding(x, mask)
    assert xt.shape == (3, 4, DIM) and mt.shape == (3, 4)
    full, short = _call(layer, x, mask), _call(layer, xt, mt)
    torch.testing.assert_close(short.pooled, full.pooled)
    torch.testing.assert_close(short.states, full.states)
    torch.testing.assert_close(short.attention, full.attention[..., :4])


def test_ddcl_critical_temperature_is_that_of_the_trained_l_q_on_the_projected_tokens():
    from ddcl_theory.theory.collapse import critical_temperature

    data = pr.synthetic_tokens(12, 6, in_dim=4, seed=0)
    s = pr.PeerSettings(num_slots=3, dim=8, hidden=8)
    model = pr.ReadoutClassifier(4, pr.build_readout("ddcl", s), 8, 8, 3)
    z = pr.ddcl_tokens(model, data)
    assert z.shape == (int(data.mask.sum()), 8)
    t_q = critical_temperature(z, objective="quantisation")        # 4 lambda_max: L_q, q live
    assert pr.ddcl_critical_temperature(model, data) == t_q
    assert t_q == pytest.approx(2 * pr.ddcl_critical_temperature(model, data, "free_energy"))
    assert pr.critical_ratio(model, data) == model.readout.layer.temperature.value / t_q
    one = pr.TokenSet(data.tokens[:1, :1], data.mask[:1, :1], data.labels[:1])
    with pytest.raises(ValueError, match="data"):
        pr.ddcl_critical_temperature(model, one)


def test_relative_temperature_starts_ddcl_at_r_times_the_critical_temperature():
    data = pr.synthetic_tokens(24, 6, in_dim=4, seed=0)
    for r in (0.1, 3.0):
        s = pr.PeerSettings(num_slots=3, dim=8, hidden=8, epochs=1, batch_size=12,
                            ddcl_relative_temperature=r)
        hist = pr.train_readout("ddcl", data, s)
        assert hist.records[0].critical_ratio == pytest.approx(r, rel=1e-5)
        assert math.isfinite(hist.final.critical_ratio)
    peer = pr.train_readout("perceiver", data, s)
    assert math.isnan(peer.records[0].critical_ratio)


def test_trace_temperature_lloyd_start_and_cosine_schedule():
    data = pr.synthetic_tokens(24, 6, in_dim=4, seed=0)
    s = pr.PeerSettings(num_slots=3, dim=8, hidden=8, epochs=2, batch_size=12,
                        ddcl_temperature_fraction=0.1, ddcl_lloyd_steps=5, schedule="cosine",
                        warmup_fraction=0.25, weight_decay=1e-4, label_smoothing=0.1,
                        ddcl_init_sequences=10)
    hist = pr.train_readout("ddcl", data, s)
    assert math.isfinite(hist.final.loss) and 0 < hist.records[0].critical_ratio < 1
    import dataclasses

    from ddcl_theory.experiments.peer_readouts.training import _initial_model
    first = pr.TokenSet(data.tokens[:10], data.mask[:10], data.labels[:10])
    rel = dataclasses.replace(s, ddcl_relative_temperature=0.25)      # T_c of the first 10
    model = _initial_model("ddcl", data, rel, 3, torch.Generator().manual_seed(0))
    assert model.readout.layer.temperature.value == pytest.approx(
        0.25 * pr.ddcl_critical_temperature(model, first), rel=1e-6)
    assert 1 <= hist.final.usage_perplexity <= 3
    assert hist.final.normalised_usage == pytest.approx(hist.final.usage_perplexity / 3)
    from ddcl_theory.experiments.peer_readouts.training import _schedule
    f = _schedule(s, 8)
    assert [round(f(i), 3) for i in (0, 1, 2, 3, 8)] == [0.5, 1.0, 1.0, 0.933, 0.0]
    assert _schedule(pr.PeerSettings(), 8)(5) == 1.0
    with pytest.raises(ValueError, match="schedule"):
        pr.PeerSettings(schedule="step")


def test_linear_encoder_maps_each_token_by_one_matrix():
    s = pr.PeerSettings(num_slots=2, dim=4, encoder="linear")
    model = pr.ReadoutClassifier(3, pr.build_readout("perceiver", s), 4, 8, 2, encoder="linear")
    assert isinstance(model.encoder, torch.nn.Linear)
    x = torch.randn(2, 5, 3)
    torch.testing.assert_close(model.encoder(x), x @ model.encoder.weight.T + model.encoder.bias)
    with pytest.raises(ValueError, match="encoder"):
        pr.PeerSettings(encoder="conv")
    with pytest.raises(ValueError, match="encoder"):
        pr.ReadoutClassifier(3, pr.build_readout("perceiver", s), 4, 8, 2, encoder="conv")


def test_measuring_a_subset_and_testing_only_at_the_end_changes_no_training_step():
    data = pr.synthetic_tokens(40, 6, in_dim=4, seed=0)
    test = pr.synthetic_tokens(20, 6, in_dim=4, seed=1)
    base = pr.PeerSettings(num_slots=3, dim=8, hidden=8, epochs=2, batch_size=10)
    full = pr.train_readout("slot", data, base, test)
    cheap = pr.train_readout("slot", data, pr.PeerSettings(**{
        **{f: getattr(base, f) for f in base.__dataclass_fields__},
        "measure_sequences": 16, "test_every_epoch": False}), test)
    assert cheap.series("loss")[1:].tolist() == full.series("loss")[1:].tolist()
    assert math.isnan(cheap.records[1].test_acc) and cheap.final.test_acc == full.final.test_acc


# ----------------------------------------------------------------------------- FLOP counts
def test_flop_counts_are_affine_in_length_and_count_slot_iterations():
    lengths = (8, 16, 24)
    one = pr.PeerSettings(dim=8, num_slots=3, cost_lengths=lengths, slot_iterations=1)
    three = pr.PeerSettings(dim=8, num_slots=3, cost_lengths=lengths, slot_iterations=3)
    f1, f3 = pr.flop_counts(one), pr.flop_counts(three)
    for counts in (f1["ddcl"], f1["perceiver"], f1["slot"], f3["slot"]):
        assert counts[2] - counts[1] == counts[1] - counts[0] > 0       # linear in T
    assert f1["ddcl"] == f3["ddcl"]
    per_round = [(a - b) / 2 for a, b in zip(f3["slot"], f1["slot"])]   # each extra round
    assert per_round[0] > 0 and per_round[2] - per_round[1] == per_round[1] - per_round[0]
    assert all(s > d for s, d in zip(f3["slot"], f3["ddcl"]))


# ---------------------------------------------------------------------------- study settings
def test_study_settings_come_from_the_profile_and_smoke_shrinks_only_budgets(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    cpu = pr.StudySettings.from_profile()
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    ref = pr.StudySettings.from_profile()
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    paper = pr.StudySettings.from_profile()
    monkeypatch.setenv(profile.SMOKE_ENV, "1")
    smoke = pr.StudySettings.from_profile()
    assert cpu.seeds == (0, 1, 2) and cpu.scales() == (2, 5) and len(cpu.configurations()) == 1
    assert cpu.measure_sequences == 128 and cpu.sweep_epochs == 8
    # the reference profile: a confirmatory run on the rule's seeds, the full tuning grid
    assert ref.seeds == tuple(range(4000, 4000 + pr.D17_SEEDS)) and ref.scales() == (5, 10, 20)
    assert ref.seeds_at(20) == ref.seeds and ref.seeds_at(5) == ref.seeds[:ref.trend_seeds]
    assert len(ref.configurations()) == 25 and (3e-3, 1.0) in ref.configurations()
    assert len(smoke.configurations()) == 1 and len(smoke.seeds_at(smoke.epochs)) == 1
    assert (ref.measure_sequences, ref.sweep_epochs, ref.ng_train) == (256, 8, cpu.ng_train)
    assert paper.epochs > cpu.epochs and len(paper.seeds) > len(cpu.seeds)
    assert smoke.text_dim == paper.text_dim and smoke.ng_max_length == paper.ng_max_length
    assert smoke.epochs < paper.epochs and set(smoke.cost_lengths) < set(paper.cost_lengths)
    assert pr.StudySettings.from_profile(epochs=8).epochs == 8
    monkeypatch.delenv(profile.SMOKE_ENV)
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    assert pr.StudySettings() == cpu and pr.PeerSettings() == pr.PeerSettings.from_profile()
    with pytest.raises(ValueError, match=r"unknown field\(s\) \[.speed.\]"):
        pr.StudySettings.from_profile(speed=1)


def test_validation_split_holds_out_a_seeded_share_and_the_best_configuration_is_chosen():
    data = pr.synthetic_tokens(20, 4, in_dim=3, seed=0)
    fit, val = pr.validation_split(data, 0.25, seed=1)
    assert (fit.tokens.shape[0], val.tokens.shape[0]) == (15, 5)
    both = torch.cat([fit.tokens, val.tokens]).flatten(1)
    assert sorted(map(tuple, both.tolist())) == sorted(map(tuple, data.tokens.flatten(1).tolist()))
    assert torch.equal(pr.validation_split(data, 0.25, seed=1)[1].tokens, val.tokens)
    assert pr.held_out_count(20, 0.25) == 5 and pr.held_out_count(3, 0.01) == 1


def test_equivalent_configurations_lie_within_one_binomial_standard_error_of_the_best():
    a = 0.6
    se = (a * (1 - a) / 160) ** 0.5                            # 0.0387
    scores = {(1e-3, 1.0): (a, 1.5), (3e-3, 0.3): (a - se + 1e-9, 1.4),
              (1e-2, 1.0): (a - se - 1e-6, 1.0), (3e-2, 0.1): (0.1, 0.5)}
    assert pr.equivalent(scores, 160) == ((1e-3, 1.0), (3e-3, 0.3))
    assert pr.equivalence_line(scores, 160) == pytest.approx(a - se, abs=1e-12)
    # more held-out sequences, a narrower band
    assert pr.equivalent(scores, 100_000) == ((1e-3, 1.0),)
    # a perfect best accuracy has no spread: only its equals
    assert pr.equivalent({(1e-3, 1.0): (1.0, 0.1), (3e-3, 1.0): (0.99, 0.1)}, 160) \
        == ((1e-3, 1.0),)
    with pytest.raises(ValueError, match="scores"):
        pr.equivalent({}, 10)
    with pytest.raises(ValueError, match=r"scores: expected \(accuracy, cross-entropy\)"):
        pr.equivalent({(1e-3, 1.0): 0.7}, 10)
    with pytest.raises(ValueError, match="held_out"):
        pr.equivalent({(1e-3, 1.0): (0.7, 1.0)}, 0)
    with pytest.raises(ValueError, match="held_out"):
        pr.equivalence_line({(1e-3, 1.0): (0.7, 1.0)}, -1)


@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0.1, 3), st.floats(0.05, 1)),
                min_size=1, max_size=12), st.integers(1, 2000))
@settings(max_examples=60, deadline=None)
def test_the_most_and_least_collapsed_are_equivalent_and_bracket_every_equivalent_rank(rows, n):
    configs = [(10.0 ** -i, 1.0) for i in range(len(rows))]
    scores = {c: (acc, loss) for c, (acc, loss, _) in zip(configs, rows)}
    ranks = {c: rank for c, (_, _, rank) in zip(configs, rows)}
    pool = pr.equivalent(scores, n)
    best = max(acc for acc, _ in scores.values())
    assert all(c in pool for c in configs if scores[c][0] == best)
    assert all(scores[c][0] >= best - (best * (1 - best) / n) ** 0.5 for c in pool)
    most, least = (pr.choose(scores, ranks, n, sel) for sel in pr.SELECTIONS)
    assert most in pool and least in pool
    assert ranks[most] == min(ranks[c] for c in pool)
    assert ranks[least] == max(ranks[c] for c in pool)
    # the grid's order does not move the pick where ranks and losses differ
    flipped = dict(reversed(list(scores.items())))
    if len({(ranks[c], scores[c][1]) for c in pool}) == len(pool):
        assert pr.choose(flipped, ranks, n, pr.SELECTIONS[0]) == most


def test_choose_breaks_equal_ranks_by_the_cross_entropy_and_names_bad_arguments():
    scores = {(1e-3, 1.0): (0.6, 1.2), (3e-3, 0.3): (0.6, 1.1), (1e-2, 0.1): (0.2, 0.1)}
    ranks = {(1e-3, 1.0): 0.3, (3e-3, 0.3): 0.3, (1e-2, 0.1): 0.9}
    # the third is far below the best: not equivalent, so its high rank is never picked
    assert pr.choose(scores, ranks, 160, "least collapsed") == (3e-3, 0.3)
    assert pr.choose(scores, ranks, 160, "most collapsed") == (3e-3, 0.3)
    with pytest.raises(ValueError, match="selection"):
        pr.choose(scores, ranks, 160, "best")
    with pytest.raises(ValueError, match="ranks: no maps rank"):
        pr.choose(scores, {(1e-3, 1.0): 0.3}, 160)


def test_one_grid_sets_each_readout_s_own_temperature_and_the_rate():
    s = pr.StudySettings(tune_lrs=(3e-3, 1e-2), tune_temperature_factors=(0.3, 1.0, 2.0))
    assert len(s.configurations()) == 6
    for kind, field in pr.TEMPERATURE_FIELDS.items():
        ps = s.tuned_settings(kind, 3, (1e-2, 0.3), epochs=2)
        assert getattr(ps, field) == pytest.approx(0.3 * getattr(s, field))
        assert (ps.lr, ps.lr_bank, ps.epochs, ps.seed) == (1e-2, 1e-2, 2, 3)
        assert ps.schedule == "cosine" and ps.num_slots == s.ng_slots
        others = [f for k, f in pr.TEMPERATURE_FIELDS.items() if k != kind]
        base = s.tuned_settings(kind, 3, (1e-2, 1.0))
        assert all(getattr(ps, f) == getattr(base, f) for f in others)   # only its own knob
    assert s.temperature("slot", 2.0) == 2.0 * s.slot_temperature
    with pytest.raises(ValueError, match="kind"):
        s.temperature("vq")
    with pytest.raises(ValueError, match=r"StudySettings\.tune_temperature_factors: .*T_c"):
        pr.StudySettings(tune_temperature_factors=(1.0, 4.0 / s.ddcl_relative_temperature))


def test_study_settings_validate_and_give_each_task_its_readout_shape():
    s = pr.StudySettings()
    ps = s.peer_settings("debris", 4, sweep=True, num_slots=12)
    assert (ps.dim, ps.num_slots, ps.encoder, ps.seed) == (s.debris_dim, 12, "mlp", 4)
    assert ps.epochs == s.sweep_epochs and not ps.test_every_epoch
    assert s.peer_settings("sst2", 0).encoder == "linear"
    main = s.peer_settings("20ng", 1, lr=0.01)
    assert (main.lr, main.lr_bank, main.schedule, main.num_slots) == (0.01, 0.01, "cosine", 20)
    from ddcl_theory.experiments.text_readout import ddcl_readout_config
    cfg = ddcl_readout_config()                      # the one DDCL readout of D14 and D17
    assert (main.ddcl_relative_temperature, main.ddcl_lam, main.ddcl_lloyd_steps,
            main.ddcl_init_sequences, main.weight_decay, main.batch_size) == (
        cfg.relative_temperature, cfg.beta, cfg.lloyd_steps, cfg.init_sequences,
        cfg.weight_decay, cfg.batch_size)
    assert main.dim == cfg.head_dim and main.label_smoothing > 0
    assert ps.schedule == "constant" and ps.ddcl_relative_temperature > 0
    assert pr.StudySettings(epochs=20, shorter_epochs=(5, 10)).scales() == (5, 10, 20)
    with pytest.raises(ValueError, match="epochs"):
        s.seeds_at(3)
    assert s.task_shape("20ng") == (s.text_dim, s.ng_slots)
    for kwargs, name in [({"seeds": ()}, "seeds"),
                         ({"sweep_task": "x"}, "sweep_task"), ({"epochs": 0}, "epochs"),
                         ({"lr": -1.0}, "lr"), ({"cost_lengths": (0,)}, "cost_lengths"),
                         ({"warmup": -1}, "warmup"), ({"ddcl_lam": -0.1}, "ddcl_lam"),
                         ({"decide_task": "mnist"}, "decide_task"),
                         ({"shorter_epochs": (5,)}, "shorter_epochs"),
                         ({"shorter_epochs": (3, 2)}, "shorter_epochs"),
                         ({"trend_seeds": 4}, "trend_seeds"),
                         ({"tune_lrs": ()}, "tune_lrs"), ({"tune_fraction": 1.0}, "tune_fraction"),
                         ({"tune_lrs": (1e-3, math.inf)}, "tune_lrs"),
                         ({"tune_temperature_factors": (0.0,)}, "tune_temperature_factors"),
                         ({"sweep_seeds": (0, -1)}, "sweep_seeds")]:
        with pytest.raises(ValueError, match=rf"StudySettings\.{name}: expected"):
            pr.StudySettings(**kwargs)
    with pytest.raises(ValueError, match="task"):
        s.task_shape("imdb")


def test_sweep_tries_every_readout_from_random_and_near_equal_starts_with_valid_settings():
    s = pr.StudySettings()
    for kind in pr.READOUTS:
        variants = [v for v in pr.SWEEP if v.readout == kind]
        assert any(v.near_equal for v in variants) and any(not v.near_equal for v in variants)
        for v in variants:
            s.peer_settings("debris", 0, sweep=True, **dict(v.overrides))   # validates
    assert len({(v.readout, v.label) for v in pr.SWEEP}) == len(pr.SWEEP)
    assert pr.Variant("slot", "x", (("slot_init_std", 1e-3),)).near_equal
    assert not pr.Variant("slot", "x", (("slot_init_std", 0.5),)).near_equal


def test_the_two_readings_tell_coinciding_maps_from_unused_vectors():
    s, t, b = 6, 24, 4
    token = torch.arange(t)
    spread = torch.nn.functional.one_hot(token % s, s).T.float().expand(b, s, t)
    coincide = torch.softmax(1e-3 * torch.randn(b, s, t, generator=_gen(0)), dim=1)
    few = torch.nn.functional.one_hot(token % 2, s).T.float().expand(b, s, t)
    assert pr.collapse_readings(spread) == pytest.approx((1.0, 1.0))
    rank, usage = pr.collapse_readings(coincide)
    assert rank < 1.5 / s and usage > 0.8                       # usage blind to coinciding maps
    assert pr.collapse_readings(few) == pytest.approx((2 / s, 2 / s))
    assert pr.first_choice_perplexity(torch.tensor([0.5, 0.5, 0.0])) == pytest.approx(2.0)


# ---------------------------------------------------------------------------------- study
def test_run_study_on_a_tiny_debris_task_gives_every_part_of_the_result(monkeypatch):
    monkeypatch.setattr(pr.study, "SWEEP", (pr.Variant("slot", "default"),
                                            pr.Variant("ddcl", "near",
                                                       (("bank_init", "near_equal"),)),
                                            pr.Variant("perceiver", "default")))
    s = pr.StudySettings(decide_task="debris", seeds=(0, 1), epochs=2, shorter_epochs=(1,),
                         trend_seeds=1,
                         tune_lrs=(3e-3, 1e-2), tune_temperature_factors=(0.3, 1.0),
                         sweep_seeds=(0,), sweep_epochs=1, debris_train=30, debris_test=15,
                         debris_length=6, debris_dim=8, hidden=8, debris_slots=3,
                         batch_size=16, measure_sequences=16, cost_lengths=(4, 8), cost_batch=2,
                         repeats=1, warmup=0)
    result = pr.run(s, timing=True)
    assert set(result.tuning) == set(pr.READOUTS)
    assert all(set(v) == set(s.configurations()) for v in result.tuning.values())
    assert all(result.chosen(k, sel) in result.equivalent(k) for k in pr.READOUTS
               for sel in pr.SELECTIONS)
    assert result.held_out == pr.held_out_count(30, s.tune_fraction)
    # the tuning as the decision records it: each pick equivalent, at or above the line
    from ddcl_theory.ledger.decisions.peer_readouts import configurations
    tuned = configurations(result)
    for k in pr.READOUTS:
        entry = tuned[k]
        assert entry["equivalent"] == len(result.equivalent(k))
        assert entry["line"] == result.equivalence_line(k)
        most, least = entry["most collapsed"], entry["least collapsed"]
        assert most["validation_acc"] >= entry["line"] and least["validation_acc"] >= entry["line"]
        assert entry["grid_lowest"] <= most["maps_rank"] <= least["maps_rank"]
        assert tuple(most["configuration"]) == result.chosen(k)
    # the least collapsed runs: every seed at the deciding schedule; where a readout's two
    # configurations coincide, the very runs of the deciding ones
    assert all(len(result.least[k]) == 2 and result.least[k][0].final.epoch == 2
               for k in pr.READOUTS)
    for k in pr.READOUTS:
        same = result.chosen(k, "most collapsed") == result.chosen(k, "least collapsed")
        assert (result.deciding(k, "least collapsed") is result.deciding(k)) == same
    rows = pr.tuning_rows(result)
    assert len(rows) == 3 * 4 and {r.factor for r in rows} == {0.3, 1.0}
    assert all(math.isnan(r.ratio_start) == (r.kind != "ddcl") for r in rows)
    assert set(result.main) == {1, 2} and set(result.main[2]) == set(pr.READOUTS)
    for epochs, n in ((1, 1), (2, 2)):              # the shorter schedule on the first seed
        runs = result.main[epochs]
        assert all(len(hs) == n and hs[0].final.epoch == epochs for hs in runs.values())
    final = result.deciding("slot")[0].final
    assert len(final.maps_rank_items) == 16 and result.deciding("slot")[0].records[0] \
        .maps_rank_items == ()
    assert sum(final.maps_rank_items) / 16 == pytest.approx(final.maps_rank)
    assert [r.variant.label for r in result.sweep] == ["default", "near", "default"]
    assert result.tasks["debris"].num_classes == 15
    assert set(result.flops) == set(pr.READOUTS) and result.cost is not None
    assert pr.accuracy(result, "slot").shape == (2,)
    assert pr.series(result, "ddcl", "maps.effective_rank").shape == (2, 3)
    assert pr.series(result, "ddcl", "maps.effective_rank", epochs=1).shape == (1, 2)
