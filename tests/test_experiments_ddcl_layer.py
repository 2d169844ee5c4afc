"""The DDCL-layer chapter's experiments (D15, D16) on the one training loop: kill and resume."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from ddcl_theory.experiments import ddcl_layer as dl
from ddcl_theory.runtime.rundir import RunDir

from _killers import killing_fit

TINY_TRANSFORMER = dl.TransformerSettings(n_train=60, n_test=20, epochs=3, batch_size=20, dim=16,
                                          num_prototypes=4, seeds=(0, 1))
TINY_PATCHES = dl.PatchSettings(n_images=10, n_test=4, steps=6)


def _killing_fit(monkeypatch, after_round: int):
    """Make the experiment's ``fit`` raise after round ``after_round`` (a kill between saves)."""
    killing_fit(monkeypatch, dl, after_round)


def _data(s: dl.TransformerSettings):
    data = dl.load_cifar10()
    x_tr = dl.cifar_patch_tokens(data.x_train[: s.n_train], s.patch)
    x_te = dl.cifar_patch_tokens(data.x_test[: s.n_test], s.patch)
    x_tr, x_te = dl._standardise(x_tr, x_te)
    return (x_tr, torch.from_numpy(data.y_train[: s.n_train]), x_te,
            torch.from_numpy(data.y_test[: s.n_test]))


@pytest.mark.parametrize("variant", ["ddcl", "block"])
def test_a_killed_transformer_run_resumes_to_the_same_log(tmp_path, monkeypatch, variant):
    data = _data(TINY_TRANSFORMER)
    whole = dl.train_classifier(TINY_TRANSFORMER, variant, data)
    assert len(whole.train_loss) == len(whole.test_loss) == 3 and len(whole.l_q) == 9
    assert whole.all_finite and whole.seed == 0 and whole.min_v >= 0
    run = RunDir("ddcl_transformer", TINY_TRANSFORMER, root=tmp_path, enabled=True)
    with monkeypatch.context() as m:
        _killing_fit(m, after_round=1)
        with pytest.raises(KeyboardInterrupt):
            dl.train_classifier(TINY_TRANSFORMER, variant, data, run)
    assert run.state_path(f"variant={variant},seed=0").is_file()
    again = RunDir("ddcl_transformer", TINY_TRANSFORMER, root=tmp_path, enabled=True)
    resumed = dl.train_classifier(TINY_TRANSFORMER, variant, data, again)
    assert dataclasses.asdict(resumed) == dataclasses.asdict(whole)


def test_transformer_runs_every_variant_per_seed_and_reads_them_by_seed():
    s = dataclasses.replace(TINY_TRANSFORMER, epochs=2)
    res = dl.run_transformer(s)
    assert set(res.runs) == set(dl.VARIANTS) and res.settings is s
    assert [log.seed for log in res.runs["ddcl"]] == [0, 1]
    acc = res.per_seed("block", "test_acc", epoch=1)
    assert acc.shape == (2,) and np.all((acc >= 0) & (acc <= 1))
    assert np.array_equal(res.per_seed("ddcl", "test_acc"),
                          [log.test_acc[-1] for log in res.runs["ddcl"]])
    assert res.per_seed("ddcl", "perplexity").shape == (2,)
    assert np.isnan(res.per_seed("mean", "min_v")).all()
    # seed s: the same batches and initialisation stream for every variant, another per seed
    assert res.runs["ddcl"][0].train_loss != res.runs["ddcl"][1].train_loss


def test_transformer_settings_scales_and_seeds():
    assert dl.TransformerSettings(epochs=12, seeds=(0,)).scales == (3, 6, 12)
    assert dl.TransformerSettings(epochs=4, seeds=(0,)).scales == (1, 2, 4)
    assert dl.TransformerSettings(epochs=1, seeds=(0,)).scales == (1,)
    with pytest.raises(ValueError, match="seeds"):
        dl.TransformerSettings(seeds=(0, 0))
    with pytest.raises(ValueError, match="n_train"):
        dl.TransformerSettings(n_train=0)
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
