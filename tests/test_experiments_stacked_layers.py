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
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    assert S.StackedSettings.from_profile() != paper
    with pytest.raises(ValueError, match="lr"):
        dataclasses.replace(S.StackedSettings(), lr=0.0)


@pytest.mark.skipif(__import__("ddcl_theory.data", fromlist=["find"]).find("20newsgroups") is None,
                    reason="20 Newsgroups not in a data directory")
def test_run_on_20newsgroups_with_a_fake_encoder(tmp_path, monkeypatch):
    monkeypatch.setenv("DDCL_CACHE_DIR", str(tmp_path))
    text = dataclasses.replace(S.TextReadoutSettings(), ng_train=60, ng_max_length=16)
    s = dataclasses.replace(S.StackedSettings(), k1=6, k2=4, epochs=3, batch_docs=20, text=text,
                            recompute_every=1)
    r = S.run(s, encoder=FakeEncoder())
    assert r.n_docs == 60 and len(r.words) == 6 and r.groups.shape == (4, 20)
    assert r.groups.sum() == 60
    for lvl in (1, 2):
        tr = r.traces[lvl]
        assert len(tr.l_q) == s.epochs + 1
        assert max(tr.residual) < 1e-12 and max(tr.recomputed_gap) < 1e-10
        assert min(tr.v) >= 0 and min(tr.step_min_v[1:]) >= 0


@pytest.mark.skipif(__import__("ddcl_theory.data", fromlist=["find"]).find("20newsgroups") is None,
                    reason="20 Newsgroups not in a data directory")
def test_a_killed_stacked_run_resumes_to_the_same_numbers(tmp_path, monkeypatch):
    monkeypatch.setenv("DDCL_CACHE_DIR", str(tmp_path / "cache"))
    text = dataclasses.replace(S.TextReadoutSettings(), ng_train=40, ng_max_length=16)
    s = dataclasses.replace(S.StackedSettings(), k1=5, k2=3, epochs=4, batch_docs=10, text=text,
                            recompute_every=2)
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
    for lvl in (1, 2):
        for name, values in whole.traces[lvl].__dict__.items():
            assert np.array_equal(np.array(getattr(resumed.traces[lvl], name)),
                                  np.array(values), equal_nan=True), (lvl, name)
    assert resumed.acc == whole.acc and np.array_equal(resumed.groups, whole.groups)
