"""ddcl_theory.models.hf_gpt: transformers' GPT-2 read like the character GPT (the streams
before the final LayerNorm, causal logits), Laplacian heads through laplacianize, a stack of
seeds equal to its seeds one by one, and the language-model study's measures on it."""
from __future__ import annotations

import math

import pytest
import torch

from ddcl_theory.experiments import laplacian_lm
from ddcl_theory.experiments.laplacian_gpt import spread_starts
from ddcl_theory.models.hf_gpt import HFGPT
from ddcl_theory.runtime.stacked import StackedModels

KW = dict(dim=16, depth=3, heads=4, mlp_ratio=2)


def test_streams_before_the_final_norm_give_the_logits():
    torch.manual_seed(0)
    model = HFGPT(40, 12, **KW).eval()
    idx = torch.randint(0, 40, (2, 10))
    logits, states = model(idx, return_hidden=True)
    assert logits.shape == (2, 10, 40) and len(states) == 4
    assert all(s.shape == (2, 10, 16) for s in states)
    assert torch.allclose(model.hf.lm_head(model.norm(states[-1])), logits, atol=1e-5)
    assert torch.equal(model(idx), logits)
    assert model.hf.lm_head.weight is model.hf.transformer.wte.weight


def test_logits_at_a_position_see_no_later_token():
    torch.manual_seed(1)
    model = HFGPT(40, 12, laplacian_heads=2, **KW).eval()
    idx = torch.randint(0, 40, (1, 10))
    later = idx.clone()
    later[0, 6:] = (later[0, 6:] + 1) % 40
    a, b = model(idx), model(later)
    assert torch.allclose(a[0, :6], b[0, :6], atol=1e-6)
    assert not torch.allclose(a[0, 6:], b[0, 6:])


def test_laplacian_heads_change_the_output_and_zero_heads_do_not():
    torch.manual_seed(0)
    plain = HFGPT(40, 12, **KW).eval()
    zero, some = HFGPT(40, 12, laplacian_heads=0, **KW), HFGPT(40, 12, laplacian_heads=3, **KW)
    for m in (zero, some):
        m.load_state_dict(plain.state_dict())
        m.eval()
    idx = torch.randint(0, 40, (2, 8))
    assert torch.equal(zero(idx), plain(idx))
    assert not torch.allclose(some(idx), plain(idx))


def test_a_stack_of_seeds_equals_its_seeds_one_by_one():
    stack = StackedModels(lambda _s: HFGPT(40, 12, laplacian_heads=2, **KW), [0, 1]).eval()
    idx = torch.randint(0, 40, (2, 3, 8))
    out = stack(idx)
    for i, model in enumerate(stack.unstack()):
        assert torch.allclose(out[i], model.eval()(idx[i]), atol=1e-5)


def test_the_language_model_studys_measures_read_it():
    torch.manual_seed(0)
    model = HFGPT(12, 8, laplacian_heads=1, **KW)
    ids = torch.randint(0, 12, (400,))
    windows = {part: (ids, spread_starts(len(ids), 8, 16)) for part in ("val", "heldout")}
    out = laplacian_lm.measure(model, windows, 8, min_count=2)
    assert set(out) == {"val_loss", "heldout_loss", "cdnv"}
    assert out["val_loss"] == pytest.approx(math.log(12), rel=0.2) and out["cdnv"] > 0
    losses = laplacian_lm.heldout_window_losses(model, ids[:81], 8)
    assert losses.shape == (10,)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="dim: expected a multiple of heads"):
        HFGPT(40, 12, dim=10, heads=4)
    model = HFGPT(40, 12, **KW)
    with pytest.raises(ValueError, match="idx: length T"):
        model(torch.zeros(1, 13, dtype=torch.long))
    with pytest.raises(ValueError, match="idx: expected dtype"):
        model(torch.zeros(1, 5))
