"""The learning-rate-ratio ablation (D9): collapse rule, optimiser groups, the cosine schedule,
a tiny sweep, separate runs per run length."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from ddcl_theory.experiments import eps_ablation as ea
from ddcl_theory.metrics import prototypes as protos
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.settings import confirmatory_seeds

from _killers import killing_fit

TINY = ea.AblationSettings(eps_values=(0.1, 1.0), seeds=(0,), n_train_per_class=6, n_test=20,
                           hidden=8, dim=4, num_prototypes=3, epochs=2, batch_size=8)


# ---------------------------------------------------------------------------- collapse rule

def test_collapse_rule_on_hand_made_prototypes():
    start = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    merged = torch.tensor([[0.0, 0.0], [0.01, 0.0], [0.0, 1.0]])     # two prototypes 1% apart
    apart = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0]])
    s0 = float(protos.separation(start, "min"))
    ratio = lambda p: float(protos.separation(p, "min")) / s0
    assert ea.is_collapsed(ratio(merged), perplexity=3.0)
    assert not ea.is_collapsed(ratio(apart), perplexity=3.0)
    assert not ea.is_collapsed(ea.COLLAPSE_SEPARATION_RATIO * 1.01, perplexity=3.0)


def test_collapse_rule_perplexity_one_prototype_takes_all():
    q = torch.zeros(10, 4)
    q[:, 2] = 1.0
    ppl = float(protos.perplexity(q))
    assert ppl == pytest.approx(1.0)
    assert ea.is_collapsed(1.0, ppl)
    assert not ea.is_collapsed(1.0, float(protos.perplexity(torch.full((10, 4), 0.25))))


def test_collapse_rule_nan_counts_as_collapsed():
    assert ea.is_collapsed(float("nan"), 3.0)
    hist = ea.RunHistory(eps=1.0, seed=0, separation=[1.0, float("nan")], v=[0.1, float("nan")],
                         l_q=[0.2, float("nan")], perplexity=[3.0, float("nan")],
                         accuracy=[0.5, 0.5])
    assert hist.diverged and hist.collapsed and not hist.finite


# ---------------------------------------------------------------------------- settings, groups

def test_settings_validation():
    with pytest.raises(ValueError, match="optimiser"):
        ea.AblationSettings(optimiser="rmsprop")
    with pytest.raises(ValueError, match="eps_values"):
        ea.AblationSettings(eps_values=(0.0, 1.0))
    with pytest.raises(ValueError, match="epochs"):
        ea.AblationSettings(epochs=0)
    with pytest.raises(ValueError, match="final_lr_fraction"):
        ea.AblationSettings(final_lr_fraction=0.0)
    with pytest.raises(ValueError, match="final_lr_fraction"):
        ea.AblationSettings(final_lr_fraction=1.5)


@pytest.mark.parametrize("optimiser", ea.OPTIMISERS)
def test_learning_rate_ratio_is_eps_and_prototypes_alone_are_fast(optimiser):
    s = dataclasses.replace(TINY, optimiser=optimiser)
    model = ea.JointModel(12, s, 2)
    fast, slow = ea._optimisers(model, s, eps=0.03)
    fast_params = [p for g in fast.param_groups for p in g["params"]]
    slow_params = [p for g in slow.param_groups for p in g["params"]]
    assert len(fast_params) == 1 and fast_params[0] is model.ddcl.prototypes
    assert all(p is not model.ddcl.prototypes for p in slow_params)
    assert len(fast_params) + len(slow_params) == len(list(model.parameters()))
    assert slow.param_groups[0]["lr"] == pytest.approx(0.03 * fast.param_groups[0]["lr"])


def test_cifar_tokens_pca_is_whitened_and_labels_reindexed():
    tok = ea.cifar_tokens(5, 10, patch=4, classes=(6, 0), pca_dim=3)
    side = 32 if tok.source == "cifar10" else 8          # the digits fallback is 8x8
    assert tok.x_train.shape == (10, (side // 4) ** 2, 3)
    flat = tok.x_train.reshape(-1, 3).astype(np.float64)
    np.testing.assert_allclose(flat.mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(flat.var(0), 1.0, rtol=1e-4)
    assert set(tok.y_train.tolist()) == {0, 1} and tok.y_train[0] == 0   # class 6 -> 0


# ---------------------------------------------------------------------------- tiny sweep

def test_tiny_ablation_run_finishes_with_finite_histories():
    res = ea.run(TINY)
    assert len(res.runs) == 2
    for r in res.runs:
        assert r.finite
        assert len(r.separation) == TINY.epochs + 1
        assert r.separation_ratio[0] == pytest.approx(1.0)
        assert all(v >= -1e-6 for v in r.v)                      # V >= 0 (D4), float32
        assert 0.0 <= r.accuracy[-1] <= 1.0
        assert 1.0 - 1e-9 <= r.perplexity[-1] <= TINY.num_prototypes + 1e-9
        assert len(r.train_loss) == TINY.epochs and np.all(np.isfinite(r.train_loss))
    assert 0.0 <= res.collapse_fraction(1.0) <= 1.0


def test_sweeps_have_the_rule_eps_and_three_run_lengths():
    main = ea.AblationSettings.from_profile()
    assert {0.01, 0.1, 1.0} <= set(main.eps_values) and len(main.eps_values) == 6
    assert len(main.scales) == 3 and main.scales[-1] == main.epochs
    assert ea.AblationSettings(epochs=48).scales == (12, 24, 48)
    sgd = ea.SGDAblationSettings.from_profile(lr_p=0.3)
    assert sgd.optimiser == "sgd" and sgd.lr_p == 0.3 and ea.SGDAblationSettings().lr_p == 1.0


@pytest.mark.parametrize("name", ["cpu", "reference"])
def test_both_readings_share_eps_seeds_lengths_and_schedule_in_every_profile(name):
    prof = profile.Profile(name, "cpu")
    adam, sgd = ea.AblationSettings.for_profile(prof), ea.SGDAblationSettings.for_profile(prof)
    for field in ("eps_values", "seeds", "epochs", "final_lr_fraction", "n_train_per_class"):
        assert getattr(adam, field) == getattr(sgd, field), field
    if name == "reference":             # confirmatory: the rule's seeds, none of a pilot's
        assert adam.seeds == confirmatory_seeds(ea.CONFIRMATORY_SEEDS) and adam.epochs == 48
    else:
        assert max(adam.seeds) < 1000


# ---------------------------------------------------------------------------- schedule

def test_cosine_factor_falls_from_one_to_the_final_fraction():
    total, final = 40, 0.01
    values = [ea.cosine_factor(k, total, final) for k in range(total + 3)]
    assert values[0] == pytest.approx(1.0) and values[total] == pytest.approx(final)
    assert values[total // 2] == pytest.approx((1 + final) / 2)
    assert all(a > b for a, b in zip(values[:total], values[1:total + 1]))   # strictly falls
    assert values[total + 2] == pytest.approx(final)                          # then stays
    assert ea.cosine_factor(7, 10, 1.0) == pytest.approx(1.0)                 # constant rate
    with pytest.raises(ValueError, match="final"):
        ea.cosine_factor(0, 10, 0.0)


@pytest.mark.parametrize("optimiser", ea.OPTIMISERS)
def test_both_rates_decay_together_so_their_ratio_stays_eps(optimiser):
    s = dataclasses.replace(TINY, optimiser=optimiser, epochs=3, final_lr_fraction=0.05)
    model = ea.JointModel(12, s, 2)
    opts = ea._optimisers(model, s, eps=0.3)
    scheds = ea._schedulers(opts, s, steps_per_epoch=4)
    lrs = []
    for _ in range(3 * 4):
        for o in opts:
            o.step()
        for sc in scheds:
            sc.step()
        lrs.append([o.param_groups[0]["lr"] for o in opts])
    lrs = np.array(lrs)
    np.testing.assert_allclose(lrs[:, 1] / lrs[:, 0], 0.3)
    assert lrs[-1, 0] == pytest.approx(0.05 * s.lr_p) and np.all(np.diff(lrs[:, 0]) < 0)


def test_run_lengths_are_separate_runs_each_with_its_own_schedule():
    s = dataclasses.replace(TINY, epochs=4, eps_values=(0.1,))
    sweep = ea.run_scales(s)
    assert sorted(sweep.by_length) == [1, 2, 4] and sweep.longest is sweep.by_length[4]
    for length, res in sweep.by_length.items():
        assert res.settings.epochs == length and len(res.runs[0].separation) == length + 1
    short, long = sweep.by_length[2].runs[0], sweep.by_length[4].runs[0]
    assert short.separation[0] == long.separation[0]       # the same seed's start
    assert short.separation[2] != long.separation[2]       # a faster decay, not a checkpoint


def test_prototypes_blind_to_task_variant_runs():
    res = ea.run(dataclasses.replace(TINY, eps_values=(0.1,), prototypes_see_task=False))
    assert res.runs[0].finite


def test_same_seed_same_history():
    a = ea.run_one(ea.cifar_tokens(4, 8, classes=(0, 6)), TINY, 0.1, 3)
    b = ea.run_one(ea.cifar_tokens(4, 8, classes=(0, 6)), TINY, 0.1, 3)
    assert a.separation == b.separation and a.accuracy == b.accuracy


def test_a_diverged_run_counts_as_collapsed_even_with_finite_last_separation():
    run = ea.RunHistory(eps=1.0, seed=0, separation=[1.0, 0.9], v=[0.1, 0.1],
                        l_q=[1.0, float("inf")], perplexity=[4.0, 4.0], accuracy=[0.5, 0.5])
    assert run.diverged and run.collapsed
    calm = ea.RunHistory(eps=0.1, seed=0, separation=[1.0, 0.9], v=[0.1, 0.1],
                         l_q=[1.0, 0.5], perplexity=[4.0, 4.0], accuracy=[0.5, 0.6])
    assert not calm.diverged and not calm.collapsed


# ---------------------------------------------------------------------------- kill and resume

def _killing_fit(monkeypatch, after_round: int):
    """Make the experiment's ``fit`` raise after round ``after_round`` (a kill between saves)."""
    killing_fit(monkeypatch, ea, after_round)


def test_a_killed_run_resumes_to_the_same_history(tmp_path, monkeypatch):
    tokens = ea.cifar_tokens(4, 8, classes=(0, 6))
    s = dataclasses.replace(TINY, epochs=4)
    whole = ea.run_one(tokens, s, 0.1, 3)
    run = ea.RunDir("eps_ablation", s, root=tmp_path, enabled=True)
    with monkeypatch.context() as m:
        _killing_fit(m, after_round=2)
        with pytest.raises(KeyboardInterrupt):
            ea.run_one(tokens, s, 0.1, 3, run)
    assert run.state_path("eps=0.1,seed=3").is_file()
    resumed = ea.run_one(tokens, s, 0.1, 3, ea.RunDir("eps_ablation", s, root=tmp_path,
                                                           enabled=True))
    assert dataclasses.asdict(resumed) == dataclasses.asdict(whole)


def test_a_diverging_run_stops_at_the_first_non_finite_l_q():
    s = dataclasses.replace(TINY, epochs=6, lr_p=50.0, optimiser="sgd")
    hist = ea.run_one(ea.cifar_tokens(4, 8, classes=(0, 6)), s, 1.0, 1)
    assert hist.diverged and np.all(np.isfinite(hist.l_q[:-1]))
    assert len(hist.l_q) == len(hist.accuracy) <= s.epochs + 1
