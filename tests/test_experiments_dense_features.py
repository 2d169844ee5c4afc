"""ddcl_theory.experiments.dense_features: self-distillation on the dense proxy (tiny runs on
noise backgrounds, so no data set is needed): paired draws per seed, views and patches, the
schedule, the probes, the floors and ceiling, a killed run resuming to the same numbers, and the
profiles. The verdict rule is tested in tests/test_ledger_decisions_dense_features.py."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _killers import Killed, KilledAfter
from ddcl_theory.data import dense_proxy
from ddcl_theory.experiments import dense_features as exp
from ddcl_theory.runtime.rundir import RunDir


@pytest.fixture(autouse=True)
def noise_backgrounds(monkeypatch):
    def fake(split):
        rng = np.random.default_rng(0 if split == "train" else 1)
        images = rng.uniform(0, 1, (50, 32, 32, 3)).astype(np.float32)
        return images, np.arange(50) % 10
    monkeypatch.setattr(dense_proxy, "cifar_backgrounds", fake)


def tiny(**kw) -> exp.DenseSettings:
    base = dict(n_train=48, n_val=16, n_test=16, test_backgrounds="test", patch=8, dim=16,
                depth=1, heads=2, mlp_ratio=2, out_dim=16, batch_size=16, steps=(10, 20),
                steps_per_round=5, tune_lrs=(1e-3, 3e-3), tune_seeds=(900,), trend_seeds=1,
                weight_decay=0.0, momentum=0.9, probe_steps=10, probe_lr=0.1,
                ceiling_steps=10, seeds=(0,), head_settings=("0", "all"))
    return exp.DenseSettings(**{**base, **kw})


def test_a_seed_draws_its_own_images_and_standardises_on_training_statistics():
    s = tiny()
    d0, again, d1 = exp.prepare(s, 0), exp.prepare(s, 0), exp.prepare(s, 1)
    assert torch.equal(d0.x_train, again.x_train) and torch.equal(d0.x_test, again.x_test)
    assert not torch.equal(d0.x_train, d1.x_train) and not torch.equal(d0.x_test, d1.x_test)
    assert d0.x_train.shape == (48, 16, 8 * 8 * 3) and d0.x_val.shape == (16, 16, 192)
    assert d0.y_train.shape == (48, 16) and d0.y_val.shape == (16, 16)
    # the training images have zero mean and unit sd per channel; validation images are the
    # last n_val of the same draw, standardised with the training statistics
    mean = d0.images_train.mean(dim=(0, 2, 3))
    sd = d0.images_train.std(dim=(0, 2, 3))
    assert torch.allclose(mean, torch.zeros(3), atol=1e-4)
    assert torch.allclose(sd, torch.ones(3), atol=1e-2)
    assert len(d0.train) == 48 and len(d0.val) == 16 and len(d0.test) == 16


def test_views_are_seeded_and_differ():
    x = torch.randn(4, 3, 32, 32)
    a1, b1 = exp.two_views(x, torch.Generator().manual_seed(0))
    a2, b2 = exp.two_views(x, torch.Generator().manual_seed(0))
    assert torch.equal(a1, a2) and torch.equal(b1, b2) and not torch.equal(a1, b1)
    assert a1.shape == x.shape


def test_patches_match_the_data_packages_order():
    from ddcl_theory.data import image_patches
    x = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype(np.float32)
    ours = exp.to_patches(torch.from_numpy(x.transpose(0, 3, 1, 2).copy()), 8)
    assert np.allclose(ours.numpy(), image_patches(x, 8))


def test_warmup_then_cosine_to_zero():
    f = exp.warmup_cosine(100, 0.1)
    assert [f(s) for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])
    assert f(10) == pytest.approx(1.0) and f(55) == pytest.approx(0.5)
    assert f(100) == pytest.approx(0.0, abs=1e-12)
    values = [f(s) for s in range(10, 101)]
    assert all(a >= b for a, b in zip(values, values[1:]))          # decays monotonically
    assert exp.warmup_cosine(10, 0.0)(0) == pytest.approx(1.0)


def test_probe_shapes_and_scores():
    s = tiny()
    d = exp.prepare(s, 0)
    probe = exp.train_probe(d.x_train, d.y_train, steps=5, lr=0.1, seed=0)
    assert probe.weight.shape == (dense_proxy.NUM_CLASSES, 8 * 8 * 3)
    assert probe(d.x_train).shape == (48, 16, dense_proxy.NUM_CLASSES)
    again = exp.train_probe(d.x_train, d.y_train, steps=5, lr=0.1, seed=0)
    assert torch.equal(probe.weight, again.weight)                  # seeded, global state kept
    score = exp.probe_features((d.x_train, d.x_val, d.x_test),
                               (d.x_train.mean(1), d.x_val.mean(1), d.x_test.mean(1)), d, s,
                               seed=0)
    for v in (score.miou, score.pixel_acc, score.val_miou, score.image_acc,
              score.val_image_acc):
        assert 0 <= v <= 1
    assert len(score.image_correct) == 16 and score.image_acc == np.mean(score.image_correct)
    dense_only = exp.probe_features((d.x_train, d.x_val, d.x_test), None, d, s, seed=0)
    assert math.isnan(dense_only.image_acc) and dense_only.miou == score.miou
    # the validation scores are those of the same probes, and read no test image
    no_test = exp.prepare(s, 0, with_test=False)
    assert no_test.test is None and no_test.x_test is None and no_test.image_test is None
    fg, acc = exp.validation_scores((d.x_train, d.x_val), (d.x_train.mean(1), d.x_val.mean(1)),
                                    no_test, s, seed=0)
    assert fg == score.val_fg_miou and acc == score.val_image_acc
    with pytest.raises(ValueError, match="^labels: expected shape"):
        exp.train_probe(d.x_train, d.y_train[:, :3], steps=1, lr=0.1, seed=0)


def test_a_probe_finds_what_is_linear_in_the_features():
    # features that carry the patch label one-hot are read perfectly; noise is not
    s = tiny(probe_steps=60)
    d = exp.prepare(s, 0)
    k = dense_proxy.NUM_CLASSES

    def onehot(y):
        return torch.nn.functional.one_hot(y, k).float() + 0.01 * torch.randn(*y.shape, k)

    y_test = torch.from_numpy(d.test.patch_labels.reshape(16, -1))
    good = exp.probe_features((onehot(d.y_train), onehot(d.y_val), onehot(y_test)), None, d,
                              s, seed=0)
    g = torch.Generator().manual_seed(0)
    noise = [torch.randn(n, 16, 8, generator=g) for n in (48, 16, 16)]
    bad = exp.probe_features(noise, None, d, s, seed=0)
    # the best a patch-level labelling can do: the true patch labels, upsampled to pixels
    best_miou, best_acc = exp._score(y_test.numpy(), d.test)
    assert good.pixel_acc == pytest.approx(best_acc, abs=0.02)
    assert good.miou > bad.miou + 0.3 and good.miou <= best_miou + 1e-9
    # the foreground probe reads the same features: tile or background
    best_fg, _ = exp._score((y_test > 0).long().numpy(), d.test, foreground=True)
    assert good.fg_miou == pytest.approx(best_fg, abs=0.03) and good.fg_miou > bad.fg_miou + 0.2


def test_tiny_run_loss_decreases_and_reads_its_settling_probe():
    s = tiny(steps=(20,))
    r = exp.pretrain(s, "all", 0, 20, exp.prepare(s, 0), lr=1e-2)
    assert len(r.curve) == 4 and r.curve[-1] < r.curve[0]
    assert r.laplacian_heads == 2 and r.steps == 20 and r.setting == "all"
    assert 0 <= r.settle_val_fg_miou <= 1 and 0 <= r.score.miou <= 1
    assert 0 <= r.teacher_entropy <= r.teacher_mean_entropy + 1e-6 <= math.log(16) + 1e-6
    assert 1 <= r.effective_rank <= 16
    assert s.settle_round(20) == 3 and s.settle_round(100) == 15


def test_floors_and_the_ceiling():
    s = tiny(ceiling_steps=20)
    d = exp.prepare(s, 0)
    f = exp.floors(s, 0, d)
    labels = d.test.pixel_labels
    share = float(np.mean(labels == 0))
    assert f.background_pixel_acc == pytest.approx(share)
    # all-background: the background's IoU is its pixel share, every digit class 0
    present = len(np.unique(labels))
    assert f.background == pytest.approx(share / present)
    assert set(f.untrained) == set(f.ceiling) == {"0", "all"}
    c = f.ceiling["all"]
    assert len(c.val_curve) == 4 and c.best_step == 5 * (int(np.argmax(c.val_curve)) + 1)
    assert 0 <= c.miou <= 1


def test_a_killed_run_resumes_to_the_same_numbers(tmp_path):
    s = tiny()
    d = exp.prepare(s, 0)
    whole = exp.pretrain(s, "all", 0, 20, d, lr=3e-3)
    with pytest.raises(Killed):                          # killed after round 2 of 4
        exp.pretrain(s, "all", 0, 20, d, lr=3e-3,
                     run=KilledAfter("dense-test", s, root=tmp_path, enabled=True, saves=2))
    run = RunDir("dense-test", s, root=tmp_path, enabled=True)
    assert run.state_path("all-seed0-20").is_file()
    assert exp.pretrain(s, "all", 0, 20, d, lr=3e-3, run=run) == whole


def test_sweep_pairs_settings_seeds_and_lengths():
    s = tiny(seeds=(0, 1, 2), steps=(5, 10), trend_seeds=2)
    sweep = exp.run(s, run_dir=RunDir("dense", s, enabled=False))
    # every seed runs the deciding length; the shorter one and the ceiling the trend seeds only
    assert [(r.setting, r.seed, r.steps) for r in sweep.runs] == [
        ("0", 0, 5), ("all", 0, 5), ("0", 0, 10), ("all", 0, 10),
        ("0", 1, 5), ("all", 1, 5), ("0", 1, 10), ("all", 1, 10),
        ("0", 2, 10), ("all", 2, 10)]
    assert sweep.values("all").shape == (3,) and sweep.source == "cifar10"
    assert sweep.values("0", steps=5).shape == (2,)
    assert sweep.values("0", steps=5)[1] == sweep.run("0", 1, 5).score.miou
    assert sweep.floor_values("ceiling", "all").shape == (2,)
    assert sweep.floor_values("untrained", "all").shape == (3,)
    assert [set(f.ceiling) for f in sweep.floors] == [{"0", "all"}, {"0", "all"}, set()]
    assert set(sweep.digests) == {"seed 0", "seed 1", "seed 2"}
    assert sweep.log_k == pytest.approx(math.log(16))
    with pytest.raises(KeyError):
        sweep.run("all", 3)
    with pytest.raises(ValueError, match="^which"):
        sweep.floor_values("best")


def test_settings_validation():
    for changes, message in [({"steps": (20, 10)}, r"steps: expected increasing"),
                             ({"steps": (12,)}, r"steps_per_round: expected a divisor"),
                             ({"dim": 0}, r"dim: expected >= 1"),
                             ({"patch": 5}, r"patch: expected a divisor of 32"),
                             ({"zoom": 5}, r"zoom: a digit of 40 pixels"),
                             ({"seeds": ()}, r"seeds: expected at least one value"),
                             ({"tune_lrs": (3e-3, 1e-3)}, r"tune_lrs: expected increasing"),
                             ({"tune_seeds": (0,)}, r"tune_seeds: .*\[0\] also in seeds"),
                             ({"test_backgrounds": "val"}, r"test_backgrounds: expected one"),
                             ({"head_settings": ("0", "most")}, r"head_settings: .*'most'")]:
        with pytest.raises(ValueError, match=r"DenseSettings\." + message):
            tiny(**changes)


def test_profiles_cpu_is_small_reference_runs_the_rules_confirmatory_seeds(monkeypatch):
    from ddcl_theory.ledger.rules import RULES
    from ddcl_theory.runtime import profile
    from ddcl_theory.runtime.settings import confirmatory_seeds
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    cpu = exp.DenseSettings.from_profile()
    assert cpu == exp.DenseSettings()                       # the defaults are the cpu values
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    ref = exp.DenseSettings.from_profile()
    assert all(seed < 1000 for seed in cpu.seeds)
    assert ref.seeds == confirmatory_seeds(RULES["L10"].n_seeds, run=exp.CONFIRMATORY_RUN)
    assert ref.seeds[0] == 3000 and exp.REFERENCE_SEEDS == RULES["L10"].n_seeds
    assert ref.steps[-1] > cpu.steps[-1] and ref.threads == 1 and ref.workers == 2
    assert ref.tune_steps == ref.steps[-1] == 800 and len(ref.steps) >= 3
    assert ref.test_backgrounds == "rest" and ref.n_test == 4096 and ref.trend_seeds == 8


def test_the_sweep_prepares_its_data_on_the_profiles_device(monkeypatch):
    from ddcl_theory.runtime.profile import Profile
    asked = []

    def stop(settings, seed, device="cpu", **kw):
        asked.append(device)
        raise RuntimeError("stop after prepare")
    monkeypatch.setattr(exp.profile, "current", lambda: Profile("paper", "cuda"))
    monkeypatch.setattr(exp, "prepare", stop)
    with pytest.raises(RuntimeError, match="stop after prepare"):
        exp.run(tiny(), run_dir=RunDir("dense", tiny(), enabled=False))
    assert asked == ["cuda"]


def test_every_training_loop_runs_where_the_data_are(monkeypatch):
    """Pre-training, the ceiling and the probes train their models on the data's device."""
    seen = []
    real_fit = exp.fit

    def recording_fit(model, *args, device, **kw):
        seen.append((torch.device(device), {p.device for p in model.parameters()}))
        return real_fit(model, *args, device=device, **kw)
    monkeypatch.setattr(exp, "fit", recording_fit)
    s = tiny(steps=(10,))
    d = exp.prepare(s, 0, device=torch.device("cpu"))
    exp.pretrain(s, "all", 0, 10, d, lr=1e-3)
    exp.floors(s, 0, d)
    here = d.x_train.device
    assert {p.device for p in (d.x_train, d.y_train, d.images_train, d.image_test)} == {here}
    assert len(seen) >= 2 + 3 * 2 + 2 and all(dev == here and params == {here}
                                              for dev, params in seen)


def test_no_device_is_hard_wired():
    """Only :func:`prepare` names a device (its default); everything else follows the data."""
    import ast
    import inspect
    tree = ast.parse(inspect.getsource(exp))
    literal = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.keyword)
               and node.arg == "device" and isinstance(node.value, ast.Constant)]
    assert literal == []


def test_test_images_take_their_backgrounds_from_the_rest_of_the_training_set(monkeypatch):
    rng = np.random.default_rng(7)
    rest = rng.uniform(0, 1, (40, 32, 32, 3)).astype(np.float32), np.arange(40) % 10
    monkeypatch.setattr(exp, "_rest_backgrounds", lambda: rest)
    s = tiny(test_backgrounds="rest")
    t = exp.test_images(s, 0)
    assert t.source == "cifar10 (rest of the training set)" and len(t) == 16
    # each test image's background is one of the rest's images, and its class is that image's
    background = t.pixel_labels == 0
    for img, cls, mask in zip(t.images, t.image_labels, background):
        match = [i for i in range(40) if np.allclose(rest[0][i][mask], img[mask])]
        assert match and all(rest[1][i] == cls for i in match)
    assert exp.test_images(tiny(), 0).source == "cifar10"     # the staged test split


def test_tuning_runs_read_validation_images_only():
    s = tiny(steps=(10,))
    with pytest.raises(ValueError, match="^d: a tuning run reads no test image"):
        exp.tune(s, "all", 1e-3, 900, exp.prepare(s, 900))
    t = exp.tune(s, "all", 1e-3, 900, exp.prepare(s, 900, with_test=False))
    assert (t.setting, t.lr, t.seed) == ("all", 1e-3, 900)
    assert 0 <= t.val_fg_miou <= 1 and 0 <= t.val_image_acc <= 1
    # the same run as a deciding run at that rate: the same validation scores
    r = exp.pretrain(s, "all", 900, 10, exp.prepare(s, 900), lr=1e-3)
    assert (t.val_fg_miou, t.val_image_acc) == (r.score.val_fg_miou, r.score.val_image_acc)


def _tuning(setting, rows):
    return [exp.TuningRun(setting, lr, seed, fg, acc) for lr, seed, acc, fg in rows]


def test_each_arm_takes_the_rate_of_its_best_mean_rank_over_both_scores():
    s = tiny(tune_lrs=(1e-3, 2e-3, 4e-3), tune_seeds=(900, 901))
    # none: accuracy ranks 1e-3 > 2e-3 > 4e-3, foreground 2e-3 > 4e-3 > 1e-3 (mean over seeds)
    none = _tuning("0", [(1e-3, 900, 0.30, 0.40), (1e-3, 901, 0.30, 0.40),
                         (2e-3, 900, 0.25, 0.60), (2e-3, 901, 0.27, 0.60),
                         (4e-3, 900, 0.20, 0.50), (4e-3, 901, 0.20, 0.52)])
    # all: 4e-3 best on both
    lap = _tuning("all", [(1e-3, 900, 0.1, 0.1), (1e-3, 901, 0.1, 0.1),
                          (2e-3, 900, 0.2, 0.2), (2e-3, 901, 0.2, 0.2),
                          (4e-3, 900, 0.3, 0.3), (4e-3, 901, 0.3, 0.3)])
    # mean ranks of none: 1e-3 (1 + 3) / 2 = 2, 2e-3 (2 + 1) / 2 = 1.5, 4e-3 2.5
    assert exp.tuned_lrs(none + lap, s) == {"0": 2e-3, "all": 4e-3}
    assert list(exp.tuning_means(none, s, "0", "val_image_acc")) == pytest.approx(
        [0.30, 0.26, 0.20])


def test_tuning_ties_go_to_the_larger_sum_then_to_the_smaller_rate():
    s = tiny(tune_lrs=(1e-3, 2e-3), tune_seeds=(900,))
    # ranks tie (1 + 2 and 2 + 1); sums 0.9 and 1.0
    crossed = _tuning("0", [(1e-3, 900, 0.5, 0.4), (2e-3, 900, 0.4, 0.6)])
    same = _tuning("all", [(1e-3, 900, 0.3, 0.3), (2e-3, 900, 0.3, 0.3)])
    assert exp.tuned_lrs(crossed + same, s) == {"0": 2e-3, "all": 1e-3}


def test_a_missing_tuning_run_is_named():
    s = tiny(tune_lrs=(1e-3, 2e-3), tune_seeds=(900, 901))
    runs = _tuning("0", [(1e-3, 900, 0.3, 0.3), (1e-3, 901, 0.3, 0.3), (2e-3, 900, 0.3, 0.3)])
    with pytest.raises(ValueError, match=r"^tuning: expected 2 runs of \('0', lr 0.002\), got 1"):
        exp.tuned_lrs(runs, s)


def test_each_arm_pre_trains_at_its_tuned_rate(monkeypatch):
    s = tiny(steps=(10,), tune_lrs=(1e-3, 3e-3))
    monkeypatch.setattr(exp, "tuned_lrs", lambda tuning, st: {"0": 1e-3, "all": 3e-3})
    seen = {}
    real = exp.pretrain

    def recording(st, setting, seed, steps, d, *, lr, **kw):
        seen[setting] = lr
        return real(st, setting, seed, steps, d, lr=lr, **kw)
    monkeypatch.setattr(exp, "pretrain", recording)
    sweep = exp.run(s, run_dir=RunDir("dense", s, enabled=False))
    assert seen == {"0": 1e-3, "all": 3e-3} == sweep.lrs
    assert len(sweep.tuning) == 4 and {t.seed for t in sweep.tuning} == {900}
    assert sweep.tuning_table("all", "val_fg_miou").shape == (2,)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=6),
       st.randoms(use_true_random=False))
def test_the_tuned_rate_is_never_beaten_on_both_scores_and_ignores_the_runs_order(scores,
                                                                                  rnd):
    grid = tuple(1e-4 * 2 ** i for i in range(len(scores)))
    s = tiny(tune_lrs=grid, tune_seeds=(900,))
    runs = [exp.TuningRun(arm, lr, 900, fg / 20, acc / 20)
            for arm in ("0", "all") for lr, (acc, fg) in zip(grid, scores)]
    chosen = exp.tuned_lrs(runs, s)
    rnd.shuffle(runs)
    assert exp.tuned_lrs(runs, s) == chosen
    i = grid.index(chosen["0"])
    acc, fg = scores[i]
    # no rate of the grid is at least as good on both scores and better on one
    assert not any(a >= acc and f >= fg and (a, f) != (acc, fg) for a, f in scores)
