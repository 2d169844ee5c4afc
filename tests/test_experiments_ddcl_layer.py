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
                                          num_prototypes=4)
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
    assert len(whole.train_loss) == 3 and len(whole.l_q) == 9 and whole.all_finite
    run = RunDir("ddcl_transformer", TINY_TRANSFORMER, root=tmp_path, enabled=True)
    with monkeypatch.context() as m:
        _killing_fit(m, after_round=1)
        with pytest.raises(KeyboardInterrupt):
            dl.train_classifier(TINY_TRANSFORMER, variant, data, run)
    assert run.state_path(f"variant={variant}").is_file()
    again = RunDir("ddcl_transformer", TINY_TRANSFORMER, root=tmp_path, enabled=True)
    resumed = dl.train_classifier(TINY_TRANSFORMER, variant, data, again)
    assert dataclasses.asdict(resumed) == dataclasses.asdict(whole)


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
