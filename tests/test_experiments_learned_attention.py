"""ddcl_theory.experiments.learned_attention: attention matrices of a small trained model (for
L1 and L11), trained through the one loop and resumable after a kill."""
from __future__ import annotations

import numpy as np
import pytest

from ddcl_theory.experiments import learned_attention as la
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir

from _killers import Killed, KilledAfter


def test_learned_attention_matrices_are_stochastic_and_causal():
    s = la.LearnedAttentionSettings(causal=True, seq_len=8, dim=8, heads=2, steps=3, samples=2)
    res = la.run(s)
    assert res.attention.shape == (2, 2, 8, 8)
    np.testing.assert_allclose(res.attention.sum(-1), 1.0, atol=1e-12)
    assert np.all(np.triu(res.attention, k=1) == 0)


@pytest.mark.parametrize("causal", [True, False])
def test_a_killed_training_resumes_to_the_same_attention(tmp_path, causal):
    s = la.LearnedAttentionSettings(causal=causal, seq_len=8, dim=8, heads=2, steps=20,
                                    samples=2)
    whole = la._train(s)
    with pytest.raises(Killed):
        la._train(s, KilledAfter("la-test", s, root=tmp_path, enabled=True, saves=4))
    run = RunDir("la-test", s, root=tmp_path, enabled=True)
    assert run.state_path("state").is_file()
    resumed = la._train(s, run)
    assert np.array_equal(resumed.attention, whole.attention)
    assert (resumed.first_loss, resumed.last_loss) == (whole.first_loss, whole.last_loss)
    assert not run.state_path("state").exists()


def test_causal_is_a_field_of_the_profile_settings_and_the_ranges_are_checked(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    masked = la.LearnedAttentionSettings.from_profile(causal=False)
    assert not masked.causal and masked.steps == 3000 and masked.seq_len == 128
    assert masked.replace(causal=True) == la.LearnedAttentionSettings.from_profile()
    with pytest.raises(ValueError, match="laplacian_heads"):
        la.LearnedAttentionSettings(heads=2, laplacian_heads=3)
    with pytest.raises(ValueError, match="mask_rate"):
        la.LearnedAttentionSettings(mask_rate=1.0)
