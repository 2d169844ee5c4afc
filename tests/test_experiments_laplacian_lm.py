"""The language-model study of claim L9: the warm-up and cosine schedule, the shapes of a run, the
pairing of the two arms of a seed (same initial weights, same batches), a stacked seed trained
like its sequential twin, a killed stack resumed to the same numbers, and the settings' checks
per profile. The verdict rule is tested in test_ledger_decisions_laplacian_lm."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from ddcl_theory.experiments import laplacian_lm as lm
from ddcl_theory.experiments.laplacian_gpt import text_parts, tiling_starts
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import CONFIRMATORY_SEED_BASE
from ddcl_theory.runtime.stacked import StackedModels

from _killers import Killed, KilledAfter


def tiny(**changes) -> lm.LMSettings:
    base = dict(block_size=8, dim=8, depth=1, heads=4, laplacian_heads=2, batch_size=8,
                steps=(4, 8), rounds=2, eval_windows=8, cdnv_min_count=2, seeds=(0, 1),
                trend_seeds=1)
    return lm.LMSettings(**{**base, **changes})


@pytest.fixture(scope="module")
def text():
    return text_parts(tiny().val_fraction)


@pytest.fixture(scope="module")
def study():
    return lm.run(tiny())


def _same_run(a: lm.LMRun, b: lm.LMRun, rel: float = 0.0) -> None:
    """Every field of two runs agrees (curves and window losses to ``rel``)."""
    for f in dataclasses.fields(lm.LMRun):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name in ("val_loss", "heldout_loss", "train_loss", "cdnv", "heldout_windows"):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rel, atol=0)
        else:
            assert x == y, f.name


# ----------------------------------------------------------------------------- schedule
def test_the_learning_rate_rises_linearly_then_decays_by_a_cosine_to_its_floor():
    total, warm, floor = 100, 0.1, 0.01
    factors = [lm.lr_factor(k, total, warm, floor) for k in range(total + 1)]
    assert factors[:10] == pytest.approx([(k + 1) / 10 for k in range(10)])
    assert factors[10] == pytest.approx(1.0)                        # the peak after warm-up
    assert factors[55] == pytest.approx(floor + (1 - floor) * 0.5)  # half way down the cosine
    assert factors[total] == pytest.approx(floor)
    assert all(a >= b for a, b in zip(factors[10:], factors[11:]))  # monotone decay
    assert lm.lr_factor(0, 50, 0.0, 0.0) == pytest.approx(1.0)     # no warm-up: starts at peak


# ----------------------------------------------------------------------------- a study
def test_every_arm_and_length_runs_on_its_seeds_with_curves_of_every_round(study, text):
    s = study.settings
    assert s.arms == (0, 2) and s.scales == ("4 steps", "8 steps")
    assert {(r.laplacian_heads, r.steps) for r in study.runs} == {(a, n) for a in (0, 2)
                                                                 for n in (4, 8)}
    assert [r.seed for r in study.by(2)] == [0, 1] and [r.seed for r in study.by(2, 4)] == [0]
    n_windows = len(tiling_starts(len(text.heldout), s.block_size))
    assert study.n_heldout_windows == n_windows and study.vocab_size == len(text.vocab)
    for r in study.runs:
        per_round = r.steps // s.rounds
        assert r.eval_steps == tuple(i * per_round for i in range(s.rounds + 1))
        for curve in (r.val_loss, r.heldout_loss, r.train_loss, r.cdnv):
            assert len(curve) == s.rounds + 1 and all(math.isfinite(v) for v in curve)
        assert 1 <= r.best <= s.rounds and r.best == int(np.argmin(r.val_loss[1:])) + 1
        assert r.best_step == r.eval_steps[r.best]
        assert r.heldout_windows.shape == (n_windows,) and r.heldout > 0
        assert r.gap == pytest.approx(r.heldout - r.train_loss[r.best])
        assert r.val_loss[0] == pytest.approx(math.log(study.vocab_size), rel=0.1)  # untrained
    assert study.values("heldout", 0).shape == (2,) and study.values("gap", 2, 4).shape == (1,)


def test_a_study_is_reproducible(study):
    again = lm.run(tiny())
    assert len(again.runs) == len(study.runs)
    for a, b in zip(study.runs, again.runs):
        _same_run(a, b)


@pytest.mark.slow  # spawns two interpreters that import torch
def test_two_worker_processes_give_the_runs_of_one(study):
    spread = lm.run(tiny(workers=2))
    assert [(r.laplacian_heads, r.steps, r.seed) for r in spread.runs] == \
        [(r.laplacian_heads, r.steps, r.seed) for r in study.runs]
    for a, b in zip(study.runs, spread.runs):
        _same_run(a, b)


def test_both_arms_of_a_seed_start_from_the_same_weights_and_draw_the_same_batches(text):
    s = tiny()
    stacks = [StackedModels(lm._make_model(s, len(text.vocab), lap), (0, 1)) for lap in s.arms]
    for a, b in zip(stacks[0].parameters(), stacks[1].parameters()):
        assert torch.equal(a, b)
    assert not torch.equal(next(stacks[0].parameters())[0], next(stacks[0].parameters())[1])
    draws = [[torch.randint(0, 1000, (5,), generator=g) for g in st.generators] for st in stacks]
    for a, b in zip(*draws):
        assert torch.equal(a, b)
    assert not torch.equal(draws[0][0], draws[0][1])                # seeds differ


def test_a_stacked_seed_trains_as_its_sequential_twin(text):
    s = tiny()
    both = lm.train_lm_stack(s, text, 2, 8, (0, 1), "cpu")
    alone = lm.train_lm_stack(s, text, 2, 8, (1,), "cpu")
    _same_run(both[1], alone[0], rel=2e-4)


def test_a_killed_stack_resumes_to_the_same_numbers(tmp_path, text):
    s = tiny()
    whole = lm.train_lm_stack(s, text, 2, 8, (0, 1), "cpu")
    with pytest.raises(Killed):
        lm.train_lm_stack(s, text, 2, 8, (0, 1), "cpu",
                          KilledAfter("lm-test", s, root=tmp_path, enabled=True, saves=1))
    resumed = lm.train_lm_stack(s, text, 2, 8, (0, 1), "cpu",
                                RunDir("lm-test", s, root=tmp_path, enabled=True))
    for a, b in zip(whole, resumed):
        _same_run(a, b)


def test_only_rank_0_scores_the_trained_seeds(monkeypatch, text):
    s = tiny()
    # rank 0 broadcasts every measurement and each seed's scores, in the order the others wait
    sent = []
    monkeypatch.setattr(lm, "from_main", lambda obj: sent.append(obj) or obj)
    main = lm.train_lm_stack(s, text, 2, 8, (0, 1), "cpu")
    assert len(sent) == s.rounds + 1 + 2
    assert all(isinstance(m, dict) for m in sent[:s.rounds + 1])
    for run, (windows, downstream) in zip(main, sent[s.rounds + 1:]):
        assert np.array_equal(run.heldout_windows, windows) and run.downstream == downstream
    assert main[0].heldout_windows.shape == (len(tiling_starts(len(text.heldout), 8)),)
    scored = []
    monkeypatch.setattr(lm, "heldout_window_losses", lambda *a: scored.append(a))
    monkeypatch.setattr(lm, "_downstream", lambda *a: scored.append(a))
    monkeypatch.setattr(lm, "is_main", lambda: False)
    measured = {"val_loss": [1.0], "heldout_loss": [1.0], "train_loss": [1.0], "cdnv": [0.5]}
    final = (np.array([1.5, 2.5]), 0.25)
    broadcasts = []

    def from_main(obj):                # another rank: rank 0's objects arrive
        assert obj is None
        broadcasts.append(obj)
        return measured if len(broadcasts) <= s.rounds + 1 else final

    monkeypatch.setattr(lm, "from_main", from_main)
    other = lm.train_lm_stack(s, text, 2, 8, (0,), "cpu")[0]
    assert scored == [] and len(broadcasts) == s.rounds + 2
    assert np.array_equal(other.heldout_windows, final[0]) and other.downstream == 0.25


# ----------------------------------------------------------------------------- settings
@pytest.mark.parametrize("changes, message", [
    (dict(laplacian_heads=5), r"LMSettings\.laplacian_heads: expected at most heads=4"),
    (dict(dim=10), r"LMSettings\.dim: expected a multiple of heads=4"),
    (dict(steps=(8, 4)), r"LMSettings\.steps: expected increasing"),
    (dict(steps=(4, 4)), r"LMSettings\.steps: expected increasing"),
    (dict(steps=(4, 7)), r"LMSettings\.rounds: expected a divisor .* \[7\]"),
    (dict(rounds=1), r"LMSettings\.rounds: expected >= 2"),
    (dict(seeds=()), r"LMSettings\.seeds"),
    (dict(warmup_fraction=1.0), r"LMSettings\.warmup_fraction"),
    (dict(val_fraction=0.0), r"LMSettings\.val_fraction"),
    (dict(heldout_tokens=8), r"LMSettings\.heldout_tokens: expected None or at least"),
])
def test_settings_name_the_field_that_is_out_of_range(changes, message):
    with pytest.raises(ValueError, match=message):
        tiny(**changes)


def test_a_budget_of_held_out_characters_scores_only_their_windows():
    short = lm.run(tiny(steps=(4,), seeds=(0,), heldout_tokens=81))
    assert short.n_heldout_windows == 10
    assert all(r.heldout_windows.shape == (10,) for r in short.runs)


def test_the_shorter_lengths_run_on_the_first_trend_seeds():
    s = tiny(seeds=(0, 1, 2), trend_seeds=2)
    assert s.seeds_at(8) == (0, 1, 2) and s.seeds_at(4) == (0, 1)


def test_the_cpu_values_are_the_defaults_and_the_reference_uses_confirmatory_seeds(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    cpu = lm.LMSettings.from_profile()
    assert cpu == lm.LMSettings() and max(cpu.seeds) < CONFIRMATORY_SEED_BASE
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    ref = lm.LMSettings.from_profile()
    assert min(ref.seeds) >= CONFIRMATORY_SEED_BASE and len(ref.seeds) == lm.REFERENCE_SEEDS
    assert len(ref.steps) == 3 and ref.steps[-1] > cpu.steps[-1]
    assert ref.trend_seeds >= 5 and (ref.threads, ref.workers) == (1, 2)
