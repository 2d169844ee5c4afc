"""Two stacked DDCL layers (claim D12): the decomposition and V >= 0 at both levels at once."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from _text_fakes import FakeEncoder

from ddcl_theory import functional as F
from ddcl_theory.experiments import stacked_layers as S
from ddcl_theory.models.stacked_ddcl import StackedDDCL
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import CONFIRMATORY_SEED_BASE


def _documents(seed: int, n: int = 12, d: int = 5, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 9, (n,), generator=gen)
    tokens = (torch.randn(int(lengths.sum()), d, generator=gen) * 3).to(dtype)
    seg = torch.repeat_interleave(torch.arange(n), lengths)
    return tokens, seg, n


def _check_levels(model, tokens, seg, n):
    out = model(tokens, seg, n)
    levels = ((out.level1, tokens, model.level1.prototypes[0]),
              (out.level2, out.summaries, model.level2.prototypes[0]))
    for level_out, inputs, protos in levels:
        l = level_out.losses
        assert l.l_q.dtype == torch.float64
        torch.testing.assert_close(l.l_q, l.l_ols + l.v, rtol=1e-12, atol=1e-12)
        assert float(l.v.detach()) >= 0
        q = level_out.assignments[:, 0, 0].detach()
        ref = F.loss_terms(inputs.detach(), protos.detach(), q)
        for a, b in zip((l.l_q, l.l_ols, l.v), ref):
            torch.testing.assert_close(a.detach(), b, rtol=1e-10, atol=1e-12)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_identity_and_v_nonnegative_at_both_levels_before_and_during_training(seed):
    tokens, seg, n = _documents(seed)
    gen = profile.seed_everything(seed)
    model = StackedDDCL(tokens.shape[1], 6, 3).double()
    model.calibrate(tokens, seg, n, 0.1, 0.1, generator=gen)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(15):
        out = _check_levels(model, tokens, seg, n)
        loss = out.level1.losses.l_q + out.level2.losses.l_q
        opt.zero_grad()
        loss.backward()
        opt.step()
    _check_levels(model, tokens, seg, n)


@pytest.mark.parametrize("tau", [1e-3, 1.0, 1e3])
def test_identity_holds_at_both_levels_at_extreme_temperatures(tau):
    tokens, seg, n = _documents(7)
    model = StackedDDCL(tokens.shape[1], 4, 3, tau1=tau, tau2=tau).double()
    _check_levels(model, tokens, seg, n)


def test_summaries_are_the_documents_mean_soft_centroids_in_the_level1_hull():
    tokens, seg, n = _documents(3)
    model = StackedDDCL(tokens.shape[1], 5, 2, tau1=2.0).double()
    out = model(tokens, seg, n)
    bank = model.level1.prototypes[0]
    torch.testing.assert_close(out.summaries, out.shares @ bank)
    torch.testing.assert_close(out.shares.sum(1), torch.ones(n, dtype=torch.float64))
    assert float(out.shares.detach().min()) >= 0


def test_the_level2_loss_moves_the_level1_prototypes():
    tokens, seg, n = _documents(5)
    model = StackedDDCL(tokens.shape[1], 4, 2, tau1=5.0, tau2=5.0).double()
    model(tokens, seg, n).level2.losses.l_q.backward()
    assert float(model.level1.prototypes.grad.abs().max()) > 0


def test_forward_checks_its_arguments():
    model = StackedDDCL(3, 2, 2)
    with pytest.raises(ValueError, match="segments"):
        model(torch.zeros(4, 3), torch.zeros(3, dtype=torch.long), 1)
    with pytest.raises(ValueError, match="fraction1"):
        model.calibrate(torch.randn(4, 3), torch.zeros(4, dtype=torch.long), 1, 0.0, 1.0)


def test_content_tokens_drops_special_tokens_and_rejects_empty_documents():
    values = np.arange(12, dtype=np.float32).reshape(6, 2)
    ids = np.array([1, 5, 2, 1, 7, 2])
    v, i, off = S.content_tokens(values, ids, np.array([0, 3, 6]), frozenset({1, 2}))
    assert i.tolist() == [5, 7] and off.tolist() == [0, 1, 2] and v.tolist() == [[2, 3], [8, 9]]
    with pytest.raises(ValueError, match="only special"):
        S.content_tokens(values, ids, np.array([0, 1, 6]), frozenset({1, 2}))


def test_settings_follow_the_profile(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    paper = S.StackedSettings.from_profile()
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    reference = S.StackedSettings.from_profile()
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    cpu = S.StackedSettings.from_profile()
    assert cpu != paper and cpu == S.StackedSettings()
    assert len(reference.seeds) >= 10 and min(reference.seeds) >= CONFIRMATORY_SEED_BASE
    assert max(cpu.seeds) < CONFIRMATORY_SEED_BASE and max(reference.scales) == 1.0
    with pytest.raises(ValueError, match="lr"):
        dataclasses.replace(cpu, lr=0.0)
    with pytest.raises(ValueError, match="scales"):
        dataclasses.replace(cpu, scales=(0.5, 0.25))


def test_the_text_draw_is_the_text_readout_draw_at_the_stacked_sizes():
    s = dataclasses.replace(S.StackedSettings(), documents=120, max_length=32, data_seed=3)
    text = s.text()
    assert (text.ng_train, text.ng_max_length, text.data_seed, text.encoder) == \
        (120, 32, 3, s.encoder)


def test_merged_groups_link_prototypes_closer_than_the_distance():
    p = torch.tensor([[0.0, 0.0], [0.05, 0.0], [0.1, 0.0], [5.0, 0.0], [5.0, 0.5]],
                     dtype=torch.float64)
    assert S.merged_groups(p, 0.06) == [(0, 1, 2), (3,), (4,)]     # single linkage: 0-1-2
    assert S.merged_groups(p, 0.01) == [(0,), (1,), (2,), (3,), (4,)]
    assert S.merged_groups(p, 1.0) == [(0, 1, 2), (3, 4)]
    with pytest.raises(ValueError, match="distance"):
        S.merged_groups(p, 0.0)


def test_the_levels_train_lq_with_q_differentiated_not_the_free_energy():
    through, detached = S.objective_gaps()
    assert through < 1e-12 and detached > 0.05


def test_thresholds_ratio_is_tau_over_the_lq_threshold():
    th = S.Thresholds(2.0, (1.0, 2.0), (2.0, 4.0))
    assert th.ratio == (1.0, 0.5)


def test_level_trace_reads_the_worst_step_and_evaluation():
    tr = S.LevelTrace(l_q=[2.0, 4.0], v=[0.5, 0.4], residual=[1e-16, 2e-16],
                      recomputed_gap=[3e-16, 1e-16], step_max_residual=[float("nan"), 5e-15],
                      step_min_v_share=[float("nan"), 0.2])
    assert tr.worst_residual == 5e-15 and tr.min_v_share == 0.1


def _small(**changes):
    base = dict(k1=6, k2=4, epochs=3, batch_docs=20, documents=60, max_length=16,
                scales=(0.5, 1.0), seeds=(0, 1))
    return dataclasses.replace(S.StackedSettings(), **{**base, **changes})


@pytest.mark.skipif(__import__("ddcl_theory.data", fromlist=["find"]).find("20newsgroups") is None,
                    reason="20 Newsgroups not in a data directory")
def test_run_on_20newsgroups_with_a_fake_encoder(tmp_path, monkeypatch):
    monkeypatch.setenv("DDCL_CACHE_DIR", str(tmp_path))
    s = _small()
    r = S.run(s, encoder=FakeEncoder())
    assert [(x.scale, x.seed) for x in r.runs] == [(0.5, 0), (0.5, 1), (1.0, 0), (1.0, 1)]
    assert [x.n_docs for x in r.largest] == [60, 60] and r.at(0.5)[0].n_docs == 30
    assert r.at(0.5)[0].n_tokens != r.at(0.5)[1].n_tokens     # each seed its own subset
    for run in r.runs:
        assert len(run.words) == 6 and run.groups.shape == (4, 20)
        assert run.groups.sum() == run.n_docs
        th1, th2 = run.thresholds[1], run.thresholds[2]
        assert th1.quantisation[0] == th1.quantisation[1]           # tokens do not move
        assert th1.quantisation[0] == pytest.approx(2 * th1.free_energy[0])
        assert th2.quantisation[0] == pytest.approx(2 * th2.free_energy[0])
        for lvl in (1, 2):
            tr = run.traces[lvl]
            assert len(tr.l_q) == len(tr.step_max_residual) == s.epochs + 1
            assert tr.worst_residual < 1e-12 and tr.min_v_share >= 0
            extra = sum(len(g.members) - 1 for g in run.merged[lvl])
            assert run.distinct[lvl] + extra == (s.k1 if lvl == 1 else s.k2)
            assert all(len(g.members) >= 2 for g in run.merged[lvl])


@pytest.mark.skipif(__import__("ddcl_theory.data", fromlist=["find"]).find("20newsgroups") is None,
                    reason="20 Newsgroups not in a data directory")
def test_a_killed_stacked_run_resumes_to_the_same_numbers(tmp_path, monkeypatch):
    monkeypatch.setenv("DDCL_CACHE_DIR", str(tmp_path / "cache"))
    s = _small(k1=5, k2=3, epochs=4, batch_docs=10, documents=40, scales=(1.0,), seeds=(0,))
    whole = S.run(s, encoder=FakeEncoder())
    real_fit = S.fit

    def killed_fit(*args, end_of_round, **kw):
        def end(r):
            out = end_of_round(r)
            if r == 2:
                raise KeyboardInterrupt                 # killed after the save at epoch 2
            return out
        return real_fit(*args, end_of_round=end, **kw)

    monkeypatch.setattr(S, "fit", killed_fit)
    with pytest.raises(KeyboardInterrupt):
        S.run(s, encoder=FakeEncoder(),
              run_dir=RunDir("stacked_layers", s, root=tmp_path, enabled=True))
    monkeypatch.setattr(S, "fit", real_fit)
    resumed = S.run(s, encoder=FakeEncoder(),
                    run_dir=RunDir("stacked_layers", s, root=tmp_path, enabled=True))
    a, b = whole.runs[0], resumed.runs[0]
    for lvl in (1, 2):
        for name, values in a.traces[lvl].__dict__.items():
            assert np.array_equal(np.array(getattr(b.traces[lvl], name)),
                                  np.array(values), equal_nan=True), (lvl, name)
    assert b.acc == a.acc and np.array_equal(b.groups, a.groups)
    assert b.thresholds == a.thresholds


@pytest.mark.skipif(__import__("ddcl_theory.data", fromlist=["find"]).find("20newsgroups") is None,
                    reason="20 Newsgroups not in a data directory")
def test_the_trained_model_sees_one_mini_batch_at_a_time_and_the_full_data_a_host_copy(
        tmp_path, monkeypatch):
    """At the paper's scale every token in float64 does not fit a GPU: the model on the device
    sees mini-batches only (after its calibration on the host); every measurement on all
    documents runs on a host copy."""
    monkeypatch.setenv("DDCL_CACHE_DIR", str(tmp_path))
    s = _small(k1=5, k2=3, epochs=3, batch_docs=7, documents=40, scales=(1.0,), seeds=(0,))
    copies, calls = [], []
    real_on_host, real_forward = S.on_host, StackedDDCL.forward

    def spy_on_host(model):
        copy = real_on_host(model)
        copies.append(copy)
        return copy

    def spy_forward(self, tokens, segments, n):
        calls.append((any(self is c for c in copies), n))
        return real_forward(self, tokens, segments, n)

    monkeypatch.setattr(S, "on_host", spy_on_host)
    monkeypatch.setattr(StackedDDCL, "forward", spy_forward)
    S.run(s, encoder=FakeEncoder())
    trained = [n for on_copy, n in calls if not on_copy]
    assert trained[0] == 40                                    # the calibration, on the host
    assert trained[1:] and max(trained[1:]) <= 7               # then mini-batches only
    assert len(trained) - 1 == s.epochs * -(-40 // 7)
    assert [n for on_copy, n in calls if on_copy] == [40] * (s.epochs + 2)
    assert len(copies) == s.epochs + 2                         # start, every epoch, the end
