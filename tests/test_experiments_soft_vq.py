"""The soft-against-hard VQ experiment (ddcl_theory.experiments.soft_vq, claim D11)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from ddcl_theory.experiments import soft_vq
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir


def test_soft_temperature_is_r_times_the_critical_temperature_of_the_first_batch(tiny_result):
    s = _tiny()
    x_tr = soft_vq.prepare_images(s)[0]
    model = soft_vq._build(s, "soft", x_tr.shape[1], 0)
    order = torch.randperm(len(x_tr), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        tokens = model.encode(x_tr[order[: s.batch_size]]).reshape(-1, s.latent_dim)
    cov = torch.cov(tokens.double().T, correction=0)
    t_c = 2 * float(torch.linalg.eigvalsh(cov)[-1])
    run = tiny_result.select("soft", 0.1)[0]
    assert run.temperature == pytest.approx(0.1 * t_c, rel=1e-9)


def test_soft_quantiser_needs_no_estimator_and_hard_vq_does():
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(0)) * 0.2
    g = soft_vq.encoder_gradients(x, num_codes=8, latent_dim=4, hidden=8)
    assert g.soft > 0 and g.hard_straight_through > 0
    assert g.hard_without_estimator == 0.0


def _tiny(**kw):
    base = dict(n_train=48, n_test=16, downsample=2, hidden=8, latent_dim=4, num_codes=8,
                epochs=2, batch_size=16, lr=2e-3, beta=0.25, relative_temperatures=(0.1, 1.0),
                main_temperature=0.1, seeds=(0,), n_show=2, threads=1)
    base.update(kw)
    return soft_vq.SoftVQSettings(**base)


@pytest.fixture(scope="module")
def tiny_result():
    return soft_vq.run(_tiny())


def test_vq_experiment_records_usage_per_epoch_from_the_first_batch(tiny_result):
    res = tiny_result
    assert {r.method for r in res.runs} == set(soft_vq.METHODS)
    assert len(res.runs) == 4                                 # two temperatures + hard + ema
    for r in res.runs:
        assert len(r.usage) == len(r.perplexity) == len(r.test_mse) == 2
        assert all(1 / 8 <= u <= 1 for u in r.usage + [r.first_batch_usage, r.test_usage])
        # one epoch sees the first batch and more: never fewer codes than the first batch
        assert r.usage[0] >= r.first_batch_usage
        assert all(1 <= p <= 8 + 1e-9 for p in r.perplexity + r.soft_perplexity)
        assert r.reconstructions.shape[0] == 2 and r.reconstructions.min() >= 0
    hard = res.select("hard")[0]
    assert hard.soft_perplexity == pytest.approx(hard.perplexity)    # one-hot assignments
    assert res.trivial_mse > 0


def test_vq_experiment_is_deterministic_given_the_seed(tiny_result):
    again = soft_vq.train_one(_tiny(), "soft", 0, soft_vq.prepare_images(_tiny())[:3], 0.1)
    first = tiny_result.select("soft", 0.1)[0]
    assert again.usage == first.usage and again.test_mse == pytest.approx(first.test_mse, rel=1e-6)


def test_temperature_table_has_one_row_per_temperature(tiny_result):
    table = soft_vq.temperature_table(tiny_result)
    assert [row["r"] for row in table] == [0.1, 1.0]
    for row in table:
        assert 0 < row["usage_min"] <= min(row["usage_first"][0], row["usage_last"][0])
        assert row["sustained"] == (row["usage_min"] >= soft_vq.FULL_USAGE)
    assert tiny_result.usage_later("hard") == soft_vq.usage_after_first_epoch(
        tiny_result.select("hard"))
    assert tiny_result.usage("hard").shape == (1, 2)


def test_a_killed_vq_run_resumes_to_the_same_numbers(tmp_path, monkeypatch):
    s = _tiny(epochs=3)
    tensors = soft_vq.prepare_images(s)[:3]
    whole = soft_vq.train_one(s, "ema", 0, tensors)
    real_fit = soft_vq.fit

    def killed_fit(*args, end_of_round, **kw):
        def end(r):
            out = end_of_round(r)
            if r == 1:
                raise KeyboardInterrupt                 # a kill after epoch 2 was saved
            return out
        return real_fit(*args, end_of_round=end, **kw)

    run = RunDir("soft_vq", s, root=tmp_path, enabled=True)
    monkeypatch.setattr(soft_vq, "fit", killed_fit)
    with pytest.raises(KeyboardInterrupt):
        soft_vq.train_one(s, "ema", 0, tensors, run_dir=run)
    monkeypatch.setattr(soft_vq, "fit", real_fit)
    assert run.state_path(soft_vq.unit_key("ema", 0)).is_file()
    resumed = soft_vq.train_one(s, "ema", 0, tensors,
                                run_dir=RunDir("soft_vq", s, root=tmp_path, enabled=True))
    for name in ("usage", "perplexity", "soft_perplexity", "test_mse", "first_batch_usage",
                 "test_mse_codes", "test_usage"):
        assert getattr(resumed, name) == getattr(whole, name), name
    assert np.array_equal(resumed.reconstructions, whole.reconstructions)


def test_settings_are_checked():
    with pytest.raises(ValueError, match="main_temperature"):
        _tiny(main_temperature=0.5)
    with pytest.raises(ValueError, match="epochs"):
        _tiny(epochs=0)
    with pytest.raises(ValueError, match="relative_temperatures"):
        _tiny(relative_temperatures=(0.1, -1.0))


def test_paper_profile_changes_the_vq_settings(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    cpu = soft_vq.SoftVQSettings.from_profile()
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    paper = soft_vq.SoftVQSettings.from_profile()
    assert cpu != paper and paper.epochs >= 44 and paper.num_codes == cpu.num_codes == 64
    monkeypatch.delenv(profile.PROFILE_ENV)
    assert soft_vq.SoftVQSettings.from_profile() == cpu
    assert dataclasses.replace(cpu).downsample == 2
