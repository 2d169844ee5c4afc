"""The DDCL-layer chapter's experiments (D15, D16) on the one training loop: kill and resume."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from ddcl_theory.experiments import ddcl_layer as dl
from ddcl_theory.runtime.rundir import RunDir

from _killers import killing_fit

TINY_TRANSFORMER = dl.TransformerSettings(train_sizes=(40, 60), n_val=20, n_test=20, epochs=3,
                                          batch_size=20, dim=16, num_prototypes=4, seeds=(0, 1))
TINY_PATCHES = dl.PatchSettings(n_images=10, n_test=4, steps=6)


def _killing_fit(monkeypatch, after_round: int):
    """Make the experiment's ``fit`` raise after round ``after_round`` (a kill between saves)."""
    killing_fit(monkeypatch, dl, after_round)


@pytest.mark.parametrize("variant", ["ddcl", "block"])
def test_a_killed_transformer_run_resumes_to_the_same_log(tmp_path, monkeypatch, variant):
    data, _ = dl.transformer_data(TINY_TRANSFORMER)
    whole = dl.train_classifier(TINY_TRANSFORMER, variant, data)
    assert len(whole.train_loss) == len(whole.val_loss) == 3 and len(whole.l_q) == 9
    assert whole.all_finite and whole.seed == 0 and whole.min_v >= 0 and whole.n_train == 60
    run = RunDir("ddcl_transformer", TINY_TRANSFORMER, root=tmp_path, enabled=True)
    with monkeypatch.context() as m:
        _killing_fit(m, after_round=1)
        with pytest.raises(KeyboardInterrupt):
            dl.train_classifier(TINY_TRANSFORMER, variant, data, run)
    assert run.state_path(f"n=60,variant={variant},seed=0").is_file()
    again = RunDir("ddcl_transformer", TINY_TRANSFORMER, root=tmp_path, enabled=True)
    resumed = dl.train_classifier(TINY_TRANSFORMER, variant, data, again)
    assert dataclasses.asdict(resumed) == dataclasses.asdict(whole)


def test_the_tested_model_is_the_one_of_the_lowest_validation_loss(monkeypatch):
    s = dataclasses.replace(TINY_TRANSFORMER, epochs=5, lr=0.05)    # a rate that overfits
    data, _ = dl.transformer_data(s)
    offered, predicted = [], []
    offer, predict = dl.BestState.offer, dl._predict

    def spy_offer(self, model, loss):
        offered.append({k: v.clone() for k, v in model.state_dict().items()})
        return offer(self, model, loss)

    def spy_predict(model, x, batch=250):
        predicted.append({k: v.clone() for k, v in model.state_dict().items()})
        return predict(model, x, batch)

    monkeypatch.setattr(dl.BestState, "offer", spy_offer)
    monkeypatch.setattr(dl, "_predict", spy_predict)
    log = dl.train_classifier(s, "ddcl", data)
    assert log.best_epoch == int(np.argmin(log.val_loss)) + 1 < s.epochs
    tested = predicted[s.epochs]          # after one validation call per epoch: the test call
    best = offered[log.best_epoch - 1]
    assert all(torch.equal(tested[k], best[k]) for k in best)
    assert not all(torch.equal(tested[k], offered[-1][k]) for k in best)
    assert len(log.test_correct) == s.n_test and set(log.test_correct) <= {0, 1}
    assert log.test_acc == pytest.approx(np.mean(log.test_correct))


def test_best_state_keeps_only_a_strictly_lower_loss():
    model = torch.nn.Linear(2, 1)
    best = dl.BestState(model)
    assert best.offer(model, 1.0) and float(best.best_loss) == 1.0
    with torch.no_grad():
        model.weight.fill_(3.0)
    assert not best.offer(model, 1.0) and not best.offer(model, float("nan"))
    assert not torch.equal(best.model.weight, model.weight)
    assert best.offer(model, 0.5) and torch.equal(best.model.weight, model.weight)
    assert "best_loss" in best.state_dict()              # checkpointed with the run


def test_validation_images_are_training_images_no_run_trains_on():
    s = TINY_TRANSFORMER
    data = dl.load_cifar10()
    small, _ = dl.transformer_data(s, 40)
    full, _ = dl.transformer_data(s)
    assert [len(t) for t in small] == [40, 40, 20, 20, 20, 20]
    assert [len(t) for t in full] == [60, 60, 20, 20, 20, 20]
    assert torch.equal(full[3], torch.from_numpy(data.y_train[60:80]))
    assert torch.equal(small[3], full[3])                 # one validation set for every size
    with pytest.raises(ValueError, match="n_val"):
        dl.transformer_data(dataclasses.replace(s, n_val=len(data.x_train)))


def test_transformer_runs_every_size_variant_and_seed_and_reads_them_by_seed():
    s = dataclasses.replace(TINY_TRANSFORMER, epochs=2)
    res = dl.run_transformer(s)
    assert set(res.by_size) == {40, 60} and res.runs is res.by_size[60] and res.settings is s
    assert set(res.runs) == set(dl.VARIANTS)
    assert [log.seed for log in res.runs["ddcl"]] == [0, 1]
    assert [log.n_train for log in res.by_size[40]["block"]] == [40, 40]
    acc = res.per_seed("block", "test_acc", n_train=40)
    assert acc.shape == (2,) and np.all((acc >= 0) & (acc <= 1))
    assert np.array_equal(res.per_seed("ddcl", "val_loss"),
                          [log.val_loss[-1] for log in res.runs["ddcl"]])
    items = res.per_item("mean")
    assert items.shape == (2, s.n_test) and np.allclose(items.mean(1),
                                                        res.per_seed("mean", "test_acc"))
    assert res.per_seed("ddcl", "perplexity").shape == (2,)
    assert np.isnan(res.per_seed("mean", "min_v")).all()
    # seed s: another batch order and initialisation per seed
    assert res.runs["ddcl"][0].train_loss != res.runs["ddcl"][1].train_loss


def test_every_variant_of_a_seed_starts_from_the_same_encoder_and_classifier(monkeypatch):
    """The pairing of D15: the variants differ by the DDCL layer only, not by their start or
    their batch order."""
    s = dataclasses.replace(TINY_TRANSFORMER, epochs=1)
    data, _ = dl.transformer_data(s)
    start, batch_stream = {}, {}
    original = dl.fit
    for variant in dl.VARIANTS:
        def spy(model, *args, variant=variant, **kwargs):
            start[variant] = {k: v.clone() for k, v in model.state_dict().items()}
            batch_stream[variant] = kwargs["generators"]["gen"].get_state()
            return original(model, *args, **kwargs)

        monkeypatch.setattr(dl, "fit", spy)
        dl.train_classifier(s, variant, data)
    shared = [k for k in start["mean"] if not k.startswith("pool.")]
    assert any(k.startswith("layers.") for k in shared) and "head.weight" in shared
    for variant in ("ddcl", "block"):
        assert all(torch.equal(start[variant][k], start["mean"][k]) for k in shared)
        assert torch.equal(batch_stream[variant], batch_stream["mean"])


def test_transformer_settings_sizes_and_seeds():
    assert dl.TransformerSettings(train_sizes=(250, 500, 1000), seeds=(0,)).n_train == 1000
    with pytest.raises(ValueError, match="seeds"):
        dl.TransformerSettings(seeds=(0, 0))
    with pytest.raises(ValueError, match="train_sizes"):
        dl.TransformerSettings(train_sizes=(400, 200))
    with pytest.raises(ValueError, match="train_sizes"):
        dl.TransformerSettings(train_sizes=(0, 200))
    with pytest.raises(ValueError, match="steps"):
        dl.PatchSettings(steps=0)


def test_a_killed_patch_fit_resumes_to_the_same_prototypes(tmp_path, monkeypatch):
    whole = dl._fit_patches(TINY_PATCHES)
    assert len(whole.l_q) == len(whole.l_ols) == len(whole.v) == 6
    run = RunDir("patch_prototypes", TINY_PATCHES, root=tmp_path, enabled=True)
    with monkeypatch.context() as m:
        _killing_fit(m, after_round=3)
        with pytest.raises(KeyboardInterrupt):
            dl._fit_patches(TINY_PATCHES, run)
    assert run.state_path("fit").is_file()
    again = RunDir("patch_prototypes", TINY_PATCHES, root=tmp_path, enabled=True)
    resumed = dl._fit_patches(TINY_PATCHES, again)
    assert (resumed.l_q, resumed.l_ols, resumed.v) == (whole.l_q, whole.l_ols, whole.v)
    np.testing.assert_array_equal(resumed.prototypes, whole.prototypes)
    assert resumed.r2 == whole.r2


def test_a_split_larger_than_the_data_raises_naming_the_sizes():
    from ddcl_theory.experiments.ddcl_layer import TransformerSettings, transformer_data
    s = TransformerSettings.from_profile()
    with pytest.raises(ValueError, match="n_test = 1001 exceeds the 1000 test images"):
        transformer_data(dataclasses.replace(s, n_test=1001))
    with pytest.raises(ValueError, match=r"train_sizes\[-1\] \+ n_val = 10001 exceeds the 10000"):
        transformer_data(dataclasses.replace(s, train_sizes=(9500,), n_val=501))


@pytest.mark.parametrize("name", ["cpu", "reference", "paper"])
def test_every_profile_asks_for_no_more_images_than_the_subset_holds(name, monkeypatch):
    from ddcl_theory.experiments.ddcl_layer import PatchSettings, TransformerSettings
    from ddcl_theory.runtime import profile
    monkeypatch.setenv(profile.PROFILE_ENV, name)
    t, p = TransformerSettings.from_profile(), PatchSettings.from_profile()
    assert t.train_sizes[-1] + t.n_val <= 10_000 and t.n_test <= 1_000
    assert p.n_images <= 10_000 and p.n_test <= 1_000
