"""Small models built from LaplacianAttention: shapes, per-layer head counts, causality (L11 in a
model), parameter count independent of the number of Laplacian heads (L5 in a model)."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ddcl_theory.models.char_gpt import CharGPT
from ddcl_theory.models.ddcl_transformer import DDCLTransformer
from ddcl_theory.models.transformer import (TransformerBlock, TransformerStack,
                                            laplacian_heads_per_layer, value_output_maps)
from ddcl_theory.models.vit import ViT


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- per-layer head counts

def test_laplacian_heads_int_is_broadcast_and_list_is_kept():
    assert laplacian_heads_per_layer(2, depth=3, heads=4) == (2, 2, 2)
    assert laplacian_heads_per_layer([0, 4, 1], depth=3, heads=4) == (0, 4, 1)
    model = ViT(4, 12, 3, dim=8, depth=3, heads=4, laplacian_heads=(0, 4, 1))
    assert [b.attn.laplacian_heads for b in model.stack.blocks] == [0, 4, 1]


@pytest.mark.parametrize("bad", [[1, 2], 5, -1, [0, 0, 9], True, [0.5, 1, 1]])
def test_laplacian_heads_bad_values_raise(bad):
    with pytest.raises(ValueError, match=r"^laplacian_heads(\[\d\])?: expected"):
        laplacian_heads_per_layer(bad, depth=3, heads=4)


def test_laplacian_heads_errors_name_the_layer_of_a_bad_value():
    with pytest.raises(ValueError, match=r"^laplacian_heads\[2\]: expected an int in \[0, 4\]"):
        laplacian_heads_per_layer([0, 1, 9], depth=3, heads=4)


def test_blocks_and_stacks_check_their_sizes():
    with pytest.raises(ValueError, match="^mlp_ratio: expected an int >= 1"):
        TransformerBlock(8, 2, mlp_ratio=0)
    with pytest.raises(ValueError, match="^depth: expected an int >= 1"):
        TransformerStack(8, True, 2)


# ---------------------------------------------------------------- ViT

@pytest.mark.parametrize("pool, extra", [("mean", 0), ("cls", 1)])
def test_vit_shapes_and_hidden_states(pool, extra):
    model = ViT(num_patches=16, patch_dim=48, num_classes=10, dim=16, depth=3, heads=4,
                laplacian_heads=[0, 2, 4], pool=pool)
    x = torch.randn(5, 16, 48)
    logits, hidden = model(x, return_hidden=True)
    assert logits.shape == (5, 10)
    assert len(hidden) == 4 and all(h.shape == (5, 16 + extra, 16) for h in hidden)
    assert torch.equal(model(x), logits)


def test_vit_rejects_wrong_input_shape():
    model = ViT(16, 48, 10, dim=16, depth=1, heads=2)
    with pytest.raises(ValueError, match=r"^patches: expected shape \(B, 16, 48\)"):
        model(torch.randn(2, 15, 48))
    with pytest.raises(ValueError, match="^pool: expected one of"):
        ViT(16, 48, 10, pool="max")
    with pytest.raises(ValueError, match="^num_classes: expected an int >= 1"):
        ViT(16, 48, 0)


@pytest.mark.parametrize("pool", ["mean", "cls"])
def test_vit_parameter_count_independent_of_laplacian_heads(pool):
    counts = {n_params(ViT(16, 48, 10, dim=16, depth=2, heads=4, laplacian_heads=k, pool=pool))
              for k in range(5)}
    assert len(counts) == 1


def test_vit_laplacian_setting_changes_the_function():
    torch.manual_seed(0)
    base = ViT(16, 48, 10, dim=16, depth=2, heads=4, laplacian_heads=0)
    lap = ViT(16, 48, 10, dim=16, depth=2, heads=4, laplacian_heads=4)
    lap.load_state_dict(base.state_dict())              # same weights, different heads
    x = torch.randn(3, 16, 48)
    assert not torch.allclose(base(x), lap(x))


# ---------------------------------------------------------------- character GPT

@pytest.mark.parametrize("lap", [0, 2, 4, (4, 0)])
def test_gpt_shapes_and_hidden_states(lap):
    model = CharGPT(vocab_size=11, block_size=8, dim=16, depth=2, heads=4, laplacian_heads=lap)
    idx = torch.randint(0, 11, (3, 8))
    logits, hidden = model(idx, return_hidden=True)
    assert logits.shape == (3, 8, 11)
    assert len(hidden) == 3 and all(h.shape == (3, 8, 16) for h in hidden)
    assert model(idx[:, :5]).shape == (3, 5, 11)


@settings(max_examples=20, deadline=None)
@given(lap=st.sampled_from([0, 1, 2, 4]), t=st.integers(0, 7), seed=st.integers(0, 10**6))
def test_gpt_is_causal_future_tokens_do_not_change_earlier_logits(lap, t, seed):
    torch.manual_seed(seed)
    model = CharGPT(vocab_size=13, block_size=8, dim=16, depth=2, heads=4,
                    laplacian_heads=lap).eval()
    idx = torch.randint(0, 13, (2, 8))
    changed = idx.clone()
    changed[:, t:] = (changed[:, t:] + 1 + torch.randint(0, 12, changed[:, t:].shape)) % 13
    with torch.no_grad():
        a, ha = model(idx, return_hidden=True)
        b, hb = model(changed, return_hidden=True)
    torch.testing.assert_close(a[:, :t], b[:, :t], rtol=0, atol=1e-6)
    for x, y in zip(ha, hb):
        torch.testing.assert_close(x[:, :t], y[:, :t], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, t], b[:, t])        # the changed position itself does change


def test_gpt_parameter_count_independent_of_laplacian_heads():
    counts = {n_params(CharGPT(65, 32, dim=32, depth=2, heads=4, laplacian_heads=k))
              for k in range(5)}
    assert len(counts) == 1


def test_gpt_weight_tying_and_initial_loss_near_uniform():
    torch.manual_seed(0)
    tied = CharGPT(65, 16, dim=32, depth=2, heads=4)
    untied = CharGPT(65, 16, dim=32, depth=2, heads=4, tie_weights=False)
    assert tied.head.weight is tied.tok.weight
    assert n_params(untied) - n_params(tied) == 65 * 32
    idx = torch.randint(0, 65, (4, 16))
    assert abs(tied.loss(idx, idx).item() - math.log(65)) < 0.1


def test_gpt_rejects_bad_input():
    model = CharGPT(10, 8, dim=8, depth=1, heads=2)
    with pytest.raises(ValueError, match=r"^idx: length T \(at most block_size\): .*\[1, 8\]"):
        model(torch.zeros(2, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="^idx: expected dtype torch.int64"):
        model(torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"^idx: expected shape \(B, T\)"):
        model(torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="^vocab_size: expected an int >= 1"):
        CharGPT(True, 8)


# ---------------------------------------------------------------- DDCL transformer

@pytest.mark.parametrize("kwargs, message", [
    (dict(readout="max"), "^readout: expected one of"),
    (dict(depth=0), "^depth: expected an int >= 1"),
    (dict(ddcl_block_after=2), r"^ddcl_block_after \(None for no block\): .*\[0, 1\]"),
    (dict(ddcl_block_after=0.5), "^ddcl_block_after"),
    (dict(vocab_size=10), "^input_dim: give exactly one"),
])
def test_ddcl_transformer_checks_its_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DDCLTransformer(3, 8, **({"input_dim": 4, "depth": 2} | kwargs))


def test_ddcl_transformer_variants_of_one_seed_share_the_encoder_and_classifier_start():
    """The DDCL parts are built last: under one seed, adding them changes nothing else."""
    def build(**kwargs):
        torch.manual_seed(3)
        return DDCLTransformer(3, 8, input_dim=4, depth=2, dim=8, attn_heads=2, **kwargs)

    plain = build(readout="mean").state_dict()
    for kwargs in (dict(readout="ddcl"), dict(readout="mean", ddcl_block_after=0)):
        other = build(**kwargs).state_dict()
        shared = [k for k in plain if not k.startswith("pool.")]
        assert "head.weight" in shared and "layers.1.linear2.weight" in shared
        assert all(torch.equal(plain[k], other[k]) for k in shared)


def test_gpt_trains_down_on_a_repeating_pattern():
    torch.manual_seed(0)
    model = CharGPT(5, 10, dim=16, depth=1, heads=2, laplacian_heads=1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    seq = torch.arange(11).remainder(5).repeat(4, 1)
    first = model.loss(seq[:, :-1], seq[:, 1:]).item()
    for _ in range(60):
        loss = model.loss(seq[:, :-1], seq[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1 * first


def test_value_output_maps_reproduce_a_laplacian_head_update():
    """A Laplacian head's contribution is (I - P) X M_h (biases zero): the maps are right."""
    torch.manual_seed(0)
    model = ViT(6, 4, 2, dim=8, depth=1, heads=2, laplacian_heads=1).double()
    attn = model.stack.blocks[0].attn
    torch.nn.init.normal_(attn.in_proj.bias)                 # q, k biases allowed; v bias zeroed
    with torch.no_grad():
        attn.in_proj.bias[16:] = 0
        attn.out_proj.bias.zero_()
    x = torch.randn(3, 6, 8, dtype=torch.float64)
    y, p = attn(x, return_attention=True)
    maps = value_output_maps(attn)
    eye = torch.eye(6, dtype=torch.float64)
    expected = p[:, 0] @ x @ maps[0] + (eye - p[:, 1]) @ x @ maps[1]
    torch.testing.assert_close(y, expected)
