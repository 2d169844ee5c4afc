"""The papers' language model for L9 at paper scale: GPT-2 small's shapes, the corpus split
into the study's parts."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from ddcl_theory.experiments import gpt2_recipe as gr
from ddcl_theory.runtime import profile


def test_the_corpus_splits_in_order_into_training_validation_and_held_out():
    tokens = np.arange(1000, dtype=np.uint16)
    parts = gr.corpus_parts(tokens, ["t"] * 1000, 0.1, 0.05, source="x")
    assert len(parts.heldout) == 50 and len(parts.val) == 95 and len(parts.train) == 855
    joined = torch.cat([parts.train, parts.val, parts.heldout])
    assert joined.dtype == torch.int64 and torch.equal(joined, torch.arange(1000))
    assert len(parts.vocab) == 1000 and parts.source == "x"
    with pytest.raises(ValueError, match="val_fraction: expected a fraction"):
        gr.corpus_parts(tokens, [], 0.6, 0.05)
    with pytest.raises(ValueError, match="leave an empty part"):
        gr.corpus_parts(tokens[:10], [], 0.01, 0.01)


def test_the_paper_shapes_are_gpt2_small_with_five_laplacian_heads(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    monkeypatch.setenv("DDCL_ALLOW_CPU", "1")
    shapes = gr.GPT2Shapes.from_profile()
    assert (shapes.dim, shapes.depth, shapes.heads, shapes.block_size) == (768, 12, 12, 1024)
    assert shapes.laplacian_heads == 5
    model = shapes.model(50257, shapes.laplacian_heads)
    n = sum(p.numel() for p in model.parameters())
    assert 124.0e6 < n < 124.9e6                                 # GPT-2 small, tied head
    assert shapes.attention == "sdpa"
    assert {m.laplacian_base for m in model.modules() if hasattr(m, "laplacian_base")} == {"sdpa"}
    with pytest.raises(ValueError, match="laplacian_heads: expected at most heads"):
        dataclasses.replace(shapes, laplacian_heads=13).check()


def test_sdpa_and_eager_give_one_model_the_same_logits():
    shapes = gr.GPT2Shapes()
    torch.manual_seed(0)
    eager = shapes.model(40, 5).eval()
    sdpa = dataclasses.replace(shapes, attention="sdpa").model(40, 5).eval()
    sdpa.load_state_dict(eager.state_dict())
    bases = {m.laplacian_base for m in sdpa.modules() if hasattr(m, "laplacian_base")}
    assert bases == {"sdpa"}                                   # SDPA under the Laplacian heads
    idx = torch.randint(0, 40, (2, shapes.block_size))
    torch.testing.assert_close(sdpa(idx), eager(idx), atol=1e-5, rtol=1e-5)
