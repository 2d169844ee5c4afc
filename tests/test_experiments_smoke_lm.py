"""The paper profile's smoke run of the language-model study: GPT-2 small (124M parameters, a
1,024-token context, the GPT-2 BPE vocabulary) with none and with 5 Laplacian heads, a few steps
of each arm on one CPU thread (tests/_smoke_run.py; the other experiments are in
test_experiments_smoke.py)."""
from __future__ import annotations

import pytest

from _smoke_run import LM_SHARE, run_smoke


@pytest.mark.slow
def test_smoke_run_of_the_language_model_at_gpt2_small_passes(tmp_path):
    record = run_smoke(tmp_path, LM_SHARE)
    (lm,) = record["experiments"]
    assert lm["name"] == "laplacian_lm.run" and lm["steps"] > 0
    models = lm["training"]["models"]
    assert models and all(c["examples"] > 0 for c in models.values())
