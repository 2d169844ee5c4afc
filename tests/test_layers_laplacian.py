"""LaplacianAttention: the layer of Zhang & Papyan (claims L1, L5, L11 at layer level).

Every test names the equation or property it checks. Laplacian heads are the trailing heads and
output (I - P) V = V - P V; with laplacian_heads = 0 the layer is nn.MultiheadAttention.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from ddcl_theory import LaplacianAttention


def _layer(dim=16, heads=4, **kw) -> LaplacianAttention:
    torch.manual_seed(1)
    layer = LaplacianAttention(dim, heads, **kw).eval()
    with torch.no_grad():   # non-zero biases so that bias handling is exercised
        layer.in_proj.bias.normal_()
        layer.out_proj.bias.normal_()
    return layer


def _padding_mask(lengths: list[int], t: int, *, left: bool = False) -> torch.Tensor:
    mask = torch.zeros(len(lengths), t, dtype=torch.bool)
    for i, n in enumerate(lengths):
        if left:
            mask[i, t - n:] = True
        else:
            mask[i, :n] = True
    return mask


def _manual(layer: LaplacianAttention, x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """y from the definition: heads P_h V_h (ordinary) or (I - P_h) V_h (Laplacian), concat, W_O."""
    b, t, d = x.shape
    v = (x @ layer.in_proj.weight[2 * d:].T + layer.in_proj.bias[2 * d:])
    v = v.view(b, t, layer.heads, layer.head_dim).transpose(1, 2)
    eye = torch.eye(t, dtype=x.dtype)
    outs = []
    for h in range(layer.heads):
        op = eye - p[:, h] if h >= layer.attention_heads else p[:, h]
        outs.append(op @ v[:, h])
    return layer.out_proj(torch.cat(outs, dim=-1))


# ---------------------------------------------------------------------------- validation
@pytest.mark.parametrize("kwargs, name", [
    (dict(dim=10, heads=4), "dim"),
    (dict(dim=0, heads=1), "dim"),
    (dict(dim=8, heads=0), "heads"),
    (dict(dim=8, heads=2, laplacian_heads=3), "laplacian_heads"),
    (dict(dim=8, heads=2, laplacian_heads=-1), "laplacian_heads"),
    (dict(dim=8, heads=2, laplacian_heads=1.0), "laplacian_heads"),
    (dict(dim=8, heads=2, laplacian_heads=True), "laplacian_heads"),
    (dict(dim=8, heads=2, dropout=1.0), "dropout"),
    (dict(dim=8, heads=2, dropout="0.1"), "dropout"),
])
def test_constructor_rejects_bad_arguments_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name}: expected"):
        LaplacianAttention(**kwargs)


def test_dim_must_be_a_multiple_of_heads():
    with pytest.raises(ValueError, match="^dim: expected a multiple of heads=4, got 10$"):
        LaplacianAttention(10, 4)


@pytest.mark.parametrize("x_shape", [(5, 8), (2, 5, 9), (1, 2, 5, 8)])
def test_forward_rejects_wrong_x_shape(x_shape):
    with pytest.raises(ValueError, match=r"^x: expected shape \(B, T, 8\)"):
        LaplacianAttention(8, 2)(torch.randn(*x_shape))


@pytest.mark.parametrize("mask", [torch.ones(2, 4, dtype=torch.bool), torch.ones(5, dtype=torch.bool),
                                  torch.ones(2, 5)])
def test_forward_rejects_wrong_mask(mask):
    with pytest.raises(ValueError, match="^mask: expected"):
        LaplacianAttention(8, 2)(torch.randn(2, 5, 8), mask)


# ---------------------------------------------------------------------------- definitions
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("laplacian_heads", [0, 1, 3, 4])
def test_output_equals_definition_PV_or_I_minus_P_V(laplacian_heads, causal):
    layer = _layer(laplacian_heads=laplacian_heads, causal=causal)
    x = torch.randn(3, 6, 16)
    y, p = layer(x, return_attention=True)
    assert p.shape == (3, 4, 6, 6)
    torch.testing.assert_close(y, _manual(layer, x, p), atol=1e-5, rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(laplacian_heads=st.integers(0, 4), causal=st.booleans(), t=st.integers(1, 7),
       lengths=st.lists(st.integers(0, 7), min_size=1, max_size=3), seed=st.integers(0, 2**16))
def test_fused_path_equals_explicit_path(laplacian_heads, causal, t, lengths, seed):
    layer = _layer(laplacian_heads=laplacian_heads, causal=causal)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(len(lengths), t, 16, generator=g)
    mask = _padding_mask([min(n, t) for n in lengths], t)
    for m in (None, mask):
        fused = layer(x, m)
        explicit, _ = layer(x, m, return_attention=True)
        assert torch.isfinite(fused).all()
        torch.testing.assert_close(fused, explicit, atol=2e-5, rtol=2e-5)


def test_explicit_flag_selects_explicit_path_with_same_result():
    layer = _layer(laplacian_heads=2, causal=True)
    x = torch.randn(2, 5, 16)
    fused = layer(x)
    layer.explicit = True
    torch.testing.assert_close(layer(x), fused, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_zero_laplacian_heads_is_nn_multihead_attention(causal):
    layer = _layer(laplacian_heads=0, causal=causal)
    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(layer.in_proj.weight)
        mha.in_proj_bias.copy_(layer.in_proj.bias)
        mha.out_proj.weight.copy_(layer.out_proj.weight)
        mha.out_proj.bias.copy_(layer.out_proj.bias)
    x = torch.randn(3, 6, 16)
    mask = _padding_mask([6, 4, 2], 6)
    attn_mask = torch.ones(6, 6).triu(1).bool() if causal else None
    ref, ref_p = mha(x, x, x, key_padding_mask=~mask, attn_mask=attn_mask,
                     average_attn_weights=False)
    y, p = layer(x, mask, return_attention=True)
    torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(p, ref_p, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(layer(x, mask), ref, atol=1e-5, rtol=1e-5)


def test_parameter_count_and_names_do_not_depend_on_laplacian_heads():
    layers = [LaplacianAttention(24, 6, laplacian_heads=k) for k in range(7)]
    counts = {sum(p.numel() for p in m.parameters()) for m in layers}
    assert counts == {4 * 24 * 24 + 4 * 24}
    assert len({tuple(m.state_dict()) for m in layers}) == 1


# ---------------------------------------------------------------------------- identities
@pytest.mark.parametrize("causal", [False, True])
def test_attention_rows_sum_to_one_so_I_minus_P_annihilates_ones(causal):
    layer = _layer(laplacian_heads=2, causal=causal)
    _, p = layer(torch.randn(2, 7, 16), _padding_mask([7, 5], 7), return_attention=True)
    ones = torch.ones(7, 1)
    lap = torch.eye(7) - p
    torch.testing.assert_close((lap @ ones)[0], torch.zeros(4, 7, 1), atol=1e-6, rtol=0)
    torch.testing.assert_close((lap @ ones)[1], torch.zeros(4, 7, 1), atol=1e-6, rtol=0)


def test_constant_input_gives_zero_laplacian_head_output_before_projection():
    """(I - P) 1 v^T = 0: all-Laplacian layer maps token-constant x to the output bias."""
    layer = _layer(laplacian_heads=4)
    x = torch.randn(3, 1, 16).expand(3, 8, 16)
    y = layer(x)
    torch.testing.assert_close(y, layer.out_proj.bias.expand_as(y), atol=1e-5, rtol=0)
    mixed = _layer(laplacian_heads=2)
    ym = mixed(x)
    torch.testing.assert_close(ym, ym[:, :1].expand_as(ym), atol=1e-5, rtol=0)


def test_causal_attention_is_lower_triangular_and_first_token_never_moves():
    """L11 at layer level: P_11 = 1, so a Laplacian head's first output row is v_1 - v_1 = 0."""
    layer = _layer(laplacian_heads=4, causal=True)
    x = torch.randn(2, 6, 16)
    y, p = layer(x, return_attention=True)
    assert torch.equal(p.triu(1), torch.zeros_like(p))
    torch.testing.assert_close(p[..., 0, 0], torch.ones(2, 4))
    torch.testing.assert_close(y[:, 0], layer.out_proj.bias.expand(2, 16), atol=1e-5, rtol=0)
    # a later token does not change earlier outputs
    x2 = x.clone()
    x2[:, 4:] = torch.randn(2, 2, 16)
    torch.testing.assert_close(layer(x2)[:, :4], y[:, :4], atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------- masks
@pytest.mark.parametrize("causal, left", [(False, False), (False, True), (True, False), (True, True)])
def test_padded_call_equals_unpadded_call_on_valid_tokens(causal, left):
    layer = _layer(laplacian_heads=2, causal=causal)
    t, lengths = 7, [7, 4, 1]
    x = torch.randn(len(lengths), t, 16)
    mask = _padding_mask(lengths, t, left=left)
    y = layer(x, mask)
    y_explicit, _ = layer(x, mask, return_attention=True)
    for i, n in enumerate(lengths):
        rows = slice(t - n, t) if left else slice(0, n)
        alone = layer(x[i:i + 1, rows])
        torch.testing.assert_close(y[i:i + 1, rows], alone, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(y_explicit[i:i + 1, rows], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("explicit", [False, True])
def test_fully_masked_query_rows_give_zero_heads_not_nan(explicit):
    """Convention: a query with no allowed key gets P = 0 and zero head output on every head."""
    layer = _layer(laplacian_heads=2, causal=True, explicit=explicit)
    x = torch.randn(2, 5, 16)
    mask = _padding_mask([0, 3], 5, left=True)   # all-padding row; left padding under causal
    y, p = layer(x, mask, return_attention=True)
    assert torch.isfinite(y).all() and torch.isfinite(p).all()
    bias = layer.out_proj.bias
    torch.testing.assert_close(y[0], bias.expand(5, 16))
    torch.testing.assert_close(y[1, :2], bias.expand(2, 16))
    assert torch.equal(p[0], torch.zeros_like(p[0]))
    assert torch.equal(p[1, :, :2], torch.zeros_like(p[1, :, :2]))
    torch.testing.assert_close(layer(x, mask), y, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------- training mode
def test_dropout_breaks_row_sums_only_in_training_mode():
    layer = LaplacianAttention(16, 4, laplacian_heads=2, dropout=0.5)
    x = torch.randn(2, 8, 16)
    layer.train()
    torch.manual_seed(0)
    _, p_train = layer(x, return_attention=True)
    row_sums = p_train.sum(-1)
    assert (row_sums - 1).abs().max() > 0.1          # (I - P) 1 != 0 under dropout
    layer.eval()
    _, p_eval = layer(x, return_attention=True)
    torch.testing.assert_close(p_eval.sum(-1), torch.ones(2, 4, 8))
    fused_eval = layer(x)
    layer.train()
    assert not torch.allclose(layer(x), fused_eval)   # fused path also applies dropout


def test_zero_dropout_training_mode_equals_eval_mode():
    layer = _layer(laplacian_heads=2)
    x = torch.randn(2, 5, 16)
    y_eval = layer(x)
    layer.train()
    torch.testing.assert_close(layer(x), y_eval)


# ---------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck_float64(explicit, causal):
    torch.manual_seed(0)
    layer = LaplacianAttention(4, 2, laplacian_heads=1, causal=causal, explicit=explicit)
    layer = layer.double().eval()
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    assert torch.autograd.gradcheck(lambda inp: layer(inp, mask), (x,))
    w = layer.in_proj.weight
    assert torch.autograd.gradcheck(
        lambda weight: torch.func.functional_call(layer, {"in_proj.weight": weight}, (x.detach(),)),
        (w.detach().clone().requires_grad_(True),))
