"""The soft-against-hard VQ experiment (ddcl_theory.experiments.soft_vq, claim D11)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ddcl_theory.experiments import soft_vq
from ddcl_theory.experiments.soft_vq import Arm
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.settings import CONFIRMATORY_SEED_BASE, confirmatory_seeds


def _tiny(**kw):
    base = dict(n_train=(32, 64), n_test=16, n_val=16, downsample=2, hidden=8, latent_dim=4,
                num_codes=8, epochs=2, batch_size=16, lr=2e-3, beta=0.25,
                relative_temperatures=(0.1, 1.0), ema_decays=(0.5, 0.99),
                ema_thresholds=(1.0,), seeds=(0, 1), n_show=2, threads=1, long_epochs=3,
                long_seeds=1)
    base.update(kw)
    return soft_vq.SoftVQSettings(**base)


@pytest.fixture(scope="module")
def tiny_result():
    return soft_vq.run(_tiny())


def test_soft_temperature_is_r_times_the_quantisation_critical_temperature():
    s = _tiny()
    tensors = soft_vq.prepare_images(s)
    x_tr = tensors["train"][:32]
    model = soft_vq._build(s, Arm("soft", r=0.1), x_tr.shape[1], 0)
    order = torch.randperm(len(x_tr), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        tokens = model.encode(x_tr[order[: s.batch_size]]).reshape(-1, s.latent_dim)
    cov = torch.cov(tokens.double().T, correction=0)
    t_c = 4 * float(torch.linalg.eigvalsh(cov)[-1])          # L_q with q differentiated
    run = soft_vq.train_one(s, Arm("soft", r=0.1), 0, 32, tensors, epochs=1)
    assert run.temperature == pytest.approx(0.1 * t_c, rel=1e-9)
    assert run.t_c_start == pytest.approx(t_c, rel=1e-9)
    assert run.tau_over_tc[0] == pytest.approx(0.1, rel=1e-9)
    assert run.t_c_end > 0 and run.t_c_end != run.t_c_start      # the encoder trained
    assert soft_vq.OBJECTIVE == "quantisation"


def test_the_uniform_soft_start_is_the_hard_vq_codebook_of_the_seed():
    s = _tiny()
    for seed in (0, 3):
        hard = soft_vq._build(s, Arm("hard"), 3, seed).quantizer.codebook
        soft = soft_vq._build(s, Arm("soft", r=0.1, start="uniform"), 3, seed).quantizer
        assert torch.equal(soft.codebook, hard)
        assert hard.abs().max() <= 1 / s.num_codes
    data = soft_vq._build(s, Arm("soft", r=0.1, start="data"), 3, 0).quantizer.codebook
    assert not torch.equal(data, hard)


def test_arms_name_their_bank_start():
    assert Arm("soft", r=0.1).bank == "data" and Arm("soft", r=0.1).name == "soft_data"
    assert Arm("soft", r=0.1).label == "soft data r=0.1"
    uniform = Arm("soft", r=0.1, start="uniform")
    assert uniform.name == "soft_uniform" and uniform.label == "soft uniform r=0.1"
    assert uniform.key == "soft-uniform-r0.1"
    assert Arm("hard").bank == "uniform" and Arm("ema", decay=0.9, threshold=1.0).bank == "data"
    with pytest.raises(ValueError, match="start"):
        Arm("hard", start="data")
    with pytest.raises(ValueError, match="start"):
        Arm("soft", r=0.1, start="normal")


def test_unused_codes_get_no_gradient_through_hard_vq_and_some_through_the_soft_bank():
    s = _tiny(n_train=(64,), epochs=1)
    tensors = soft_vq.prepare_images(s)
    hard = soft_vq.train_one(s, Arm("hard"), 0, 64, tensors)
    soft = soft_vq.train_one(s, Arm("soft", r=1.0, start="uniform"), 0, 64, tensors)
    ema = soft_vq.train_one(s, Arm("ema", decay=0.5, threshold=1.0), 0, 64, tensors)
    assert hard.grad_unused == [0.0] and hard.grad_used[0] > 0     # only picked codes move
    assert soft.grad_unused[0] > 0 and soft.grad_used[0] > 0
    assert hard.grad_ratio == [0.0] and soft.grad_ratio[0] > 0
    assert np.isnan(ema.grad_unused[0]) and np.isnan(ema.tau_over_tc[0])


def test_every_arm_of_a_seed_starts_from_the_same_encoder():
    s = _tiny()
    encoders = [soft_vq._build(s, arm, 3, 0).encoder.state_dict()
                for arm in (Arm("soft", r=0.1), Arm("hard"), Arm("ema", decay=0.8, threshold=1.0))]
    for other in encoders[1:]:
        assert all(torch.equal(encoders[0][k], other[k]) for k in encoders[0])


def test_soft_quantiser_needs_no_estimator_and_hard_vq_does():
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(0)) * 0.2
    g = soft_vq.encoder_gradients(x, num_codes=8, latent_dim=4, hidden=8)
    assert g.soft > 0 and g.hard_straight_through > 0
    assert g.hard_without_estimator == 0.0


def test_the_run_selects_then_trains_every_size_seed_and_arm(tiny_result):
    res = tiny_result
    assert len(res.selection) == 6 and sum(c.chosen for c in res.selection) == 3
    assert res.soft.bank == "uniform" and res.soft_data.bank == "data"
    assert res.ema.method == "ema"
    assert {c.arm.name for c in res.selection if c.chosen} == {"soft_uniform", "soft_data",
                                                                "ema"}
    assert len(res.runs) == 2 * 2 * 4                          # sizes x seeds x arms
    for size in (32, 64):
        for name in soft_vq.ARMS:
            runs = res.select(name, size)
            assert [x.seed for x in runs] == [0, 1] and all(x.n_train == size for x in runs)
            assert {x.arm.name for x in runs} == {name}
    assert [x.seed for x in res.long_runs] == [0]
    assert all(x.arm == Arm("hard") and len(x.usage) == 3 and x.n_train == 64
               for x in res.long_runs)
    with pytest.raises(ValueError, match="name"):
        res.select("gumbel")
    for r in res.runs:
        assert r.held_out == "test"
        for name in ("usage", "held_out_usage", "held_out_mse", "loss", "expiries",
                     "grad_unused", "grad_used"):
            assert len(getattr(r, name)) == 2, name
        assert all(1 / 8 <= u <= 1 for u in r.usage + r.held_out_usage + [r.first_batch_usage])
        assert r.usage[0] >= r.first_batch_usage
        assert r.mean_mse > 0 and isinstance(r.plateau, bool)
        assert r.reconstructions.shape[0] == 2 and r.reconstructions.min() >= 0
        if r.arm.method != "ema":
            assert r.expiries == [0, 0]
    assert res.values("soft_uniform", "held_out_usage").shape == (2, 2)
    # a data-start bank uses every code at the first batch; the uniform start does not
    assert all(x.first_batch_usage == 1.0 for x in res.select("soft_data"))
    assert all(x.first_batch_usage < 1.0 for x in res.select("soft_uniform"))


def test_expiry_is_counted_and_fires_under_a_low_decay():
    s = _tiny(n_train=(64,))
    tensors = soft_vq.prepare_images(s)
    fast = soft_vq.train_one(s, Arm("ema", decay=0.5, threshold=2.0), 0, 64, tensors)
    off = soft_vq.train_one(s, Arm("ema", decay=0.99, threshold=1e-9), 0, 64, tensors)
    assert sum(fast.expiries) > 0
    assert off.expiries == [0, 0]


def test_steps_until_expiry():
    assert soft_vq.steps_until_expiry(8, 0.99, 2) == 138        # 8 * 0.99**138 < 2
    assert 8 * 0.99 ** 137 >= 2 > 8 * 0.99 ** 138
    assert soft_vq.steps_until_expiry(8, 0.8, 2) == 7
    assert soft_vq.steps_until_expiry(1, 0.9, 2) == 0


def _candidate_run(arm, rel, expiries):
    return soft_vq.VQRun(arm=arm, seed=9, n_train=64, temperature=None, held_out="validation",
                         first_batch_usage=1.0, usage=[1.0], held_out_usage=[0.5],
                         held_out_mse=[rel], mean_mse=1.0, loss=[1.0], plateau=False,
                         expiries=[expiries], mse_codes=rel, mean_top_q=1.0,
                         reconstructions=np.zeros((1, 2, 2, 3)))


def test_choose_takes_the_lowest_validation_mse_among_firing_vq_settings():
    a, b, c = (Arm("ema", decay=d, threshold=1.0) for d in (0.8, 0.9, 0.99))
    s1, s2 = Arm("soft", r=0.1), Arm("soft", r=1.0)
    u1, u2 = Arm("soft", r=0.1, start="uniform"), Arm("soft", r=1.0, start="uniform")
    rows = soft_vq.choose([_candidate_run(s1, 0.5, 0), _candidate_run(s2, 0.4, 0),
                           _candidate_run(a, 0.6, 3), _candidate_run(b, 0.7, 1),
                           _candidate_run(c, 0.3, 0), _candidate_run(u1, 0.2, 0),
                           _candidate_run(u2, 0.9, 0)])
    # one choice per arm: each start of the soft quantiser is chosen among its own runs
    assert [r.chosen for r in rows] == [False, True, True, False, False, True, False]
    assert not rows[4].eligible                                 # never fired: not the baseline
    assert rows[0].train_usage == 1.0
    # none fires: the lowest MSE of all, and none counts as eligible
    rows = soft_vq.choose([_candidate_run(a, 0.6, 0), _candidate_run(c, 0.3, 0)])
    assert [r.chosen for r in rows] == [False, True] and not any(r.eligible for r in rows)


def test_vq_experiment_is_deterministic_given_the_seed(tiny_result):
    s = _tiny()
    again = soft_vq.train_one(s, tiny_result.soft, 1, 64, soft_vq.prepare_images(s))
    first = tiny_result.select("soft", 64)[1]
    assert again.held_out_usage == first.held_out_usage
    assert again.held_out_mse == pytest.approx(first.held_out_mse, rel=1e-6)


@pytest.mark.parametrize("arm", [Arm("ema", decay=0.5, threshold=2.0),
                                 Arm("soft", r=0.1, start="uniform")])
def test_a_killed_vq_run_resumes_to_the_same_numbers(tmp_path, monkeypatch, arm):
    s = _tiny(epochs=3)
    tensors = soft_vq.prepare_images(s)
    whole = soft_vq.train_one(s, arm, 0, 64, tensors)
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
        soft_vq.train_one(s, arm, 0, 64, tensors, run_dir=run)
    monkeypatch.setattr(soft_vq, "fit", real_fit)
    assert run.state_path(soft_vq.unit_key(arm, 0, 64)).is_file()
    resumed = soft_vq.train_one(s, arm, 0, 64, tensors,
                                run_dir=RunDir("soft_vq", s, root=tmp_path, enabled=True))
    for name in ("usage", "held_out_usage", "held_out_mse", "first_batch_usage", "loss",
                 "expiries", "mse_codes", "grad_unused", "grad_used", "t_c_start", "t_c_end"):
        np.testing.assert_array_equal(getattr(resumed, name), getattr(whole, name),
                                      err_msg=name)        # NaN equals NaN here
    assert np.array_equal(resumed.reconstructions, whole.reconstructions)


def test_settings_are_checked():
    with pytest.raises(ValueError, match="selection_seed"):
        _tiny(selection_seed=0)
    with pytest.raises(ValueError, match="epochs"):
        _tiny(epochs=0)
    with pytest.raises(ValueError, match="relative_temperatures"):
        _tiny(relative_temperatures=(0.1, -1.0))
    with pytest.raises(ValueError, match="n_train"):
        _tiny(n_train=(64, 32))
    with pytest.raises(ValueError, match="ema_decays"):
        _tiny(ema_decays=(1.0,))
    with pytest.raises(ValueError, match="r:"):
        Arm("soft")
    with pytest.raises(ValueError, match="decay"):
        Arm("ema", decay=0.8)
    with pytest.raises(ValueError, match="long_seeds"):
        _tiny(long_seeds=3)


def test_profiles_change_the_vq_settings(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    cpu = soft_vq.SoftVQSettings.from_profile()
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    ref = soft_vq.SoftVQSettings.from_profile()
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    paper = soft_vq.SoftVQSettings.from_profile()
    assert ref.seeds == confirmatory_seeds(soft_vq.CONFIRMATORY_SEEDS)
    assert all(seed < CONFIRMATORY_SEED_BASE for seed in cpu.seeds + (cpu.selection_seed,))
    assert len(ref.n_train) >= 3 and ref.n_train[-1] > cpu.n_train[-1]
    assert ref.long_epochs >= 44                                 # the source's 44 epochs
    assert paper.epochs >= 44 and paper.num_codes == cpu.num_codes == 64
    soft, soft_data, ema = soft_vq.candidates(ref)
    assert len(soft) == len(soft_data) == len(ema)               # the same selection budget
    assert max(ref.relative_temperatures) < 1                   # below the collapse threshold


def test_tau_over_tc_is_infinite_when_the_encoder_maps_every_image_to_one_token():
    run = _candidate_run(Arm("soft", r=0.3, start="uniform"), 0.5, 0)
    run.temperature, run.t_c_start, run.t_c_end = 0.6, 2.0, 0.0
    assert run.tau_over_tc == (pytest.approx(0.3), float("inf"))
    assert np.isnan(_candidate_run(Arm("hard"), 0.5, 0).tau_over_tc[1])
