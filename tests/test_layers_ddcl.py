"""DDCLAttention (claim D1) and the DDCL Transformer (claim D15)."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ddcl_theory import functional as F
from ddcl_theory.layers import ddcl as ddcl_module
from ddcl_theory.layers.ddcl import DDCLAttention, DDCLOutput
from ddcl_theory.layers.temperature import Temperature
from ddcl_theory.models.ddcl_transformer import DDCLTransformer

SMALL = settings(max_examples=15, deadline=None)


def _layer(dim=6, k=4, heads=2, dtype=torch.float64, seed=0, **kw) -> DDCLAttention:
    torch.manual_seed(seed)
    return DDCLAttention(dim, k, heads=heads, **kw).to(dtype)


def _x(b=3, t=5, dim=6, dtype=torch.float64, seed=1):
    return torch.randn(b, t, dim, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_output_fields_and_shapes():
    layer = _layer()
    out = layer(_x())
    assert isinstance(out, DDCLOutput)
    assert out.output.shape == (3, 5, 6)
    assert out.assignments.shape == (3, 2, 5, 4)
    assert out.pooled.shape == (3, 6)
    assert all(getattr(out.losses, n).shape == () for n in ("l_q", "l_ols", "v"))


@SMALL
@given(seed=st.integers(0, 1000), heads=st.sampled_from([1, 2, 3]), k=st.integers(1, 5),
       explicit=st.booleans())
def test_assignment_rows_sum_to_one_on_valid_tokens_and_vanish_on_masked(seed, heads, k,
                                                                         explicit):
    layer = _layer(dim=6, k=k, heads=heads, seed=seed, explicit=explicit)
    mask = torch.rand(3, 5, generator=torch.Generator().manual_seed(seed)) > 0.4
    out = layer(_x(seed=seed), mask)
    sums = out.assignments.sum(-1)                                  # (B, H, T)
    expected = mask[:, None, :].expand_as(sums).to(sums.dtype)
    torch.testing.assert_close(sums, expected, rtol=0, atol=1e-12)
    assert bool((out.assignments >= 0).all())


def test_output_is_projected_convex_combination_of_prototypes():
    """D1: without residual/norm, output = W_out [mu^1; ...] + b with mu^h = q^h P^h."""
    layer = _layer(residual=False, norm=False)
    x = _x()
    out = layer(x)
    z = layer.in_proj(x).reshape(3, 5, 2, 3).transpose(1, 2)
    for h in range(2):
        q = F.soft_assign(z[:, h].reshape(-1, 3), layer.prototypes[h], 1.0)
        torch.testing.assert_close(out.assignments[:, h].reshape(-1, 4), q)
        torch.testing.assert_close(out.centroids[:, h].reshape(-1, 3), q @ layer.prototypes[h])
    expected = layer.out_proj(out.centroids.transpose(1, 2).reshape(3, 5, 6))
    torch.testing.assert_close(out.output, expected)
    torch.testing.assert_close(out.pooled, expected.mean(1))


def test_residual_and_norm_switches():
    x = _x()
    base = _layer(residual=False, norm=False)(x).output
    res = _layer(residual=True, norm=False)(x).output
    torch.testing.assert_close(res, x + base)
    normed = _layer(residual=True, norm=True)(x).output
    torch.testing.assert_close(normed, torch.nn.functional.layer_norm(x + base, (6,)))


@SMALL
@given(seed=st.integers(0, 1000))
def test_equivariant_under_token_permutation(seed):
    layer = _layer(seed=seed)
    x = _x(seed=seed)
    perm = torch.randperm(5, generator=torch.Generator().manual_seed(seed))
    a, b = layer(x), layer(x[:, perm])
    torch.testing.assert_close(b.output, a.output[:, perm])
    torch.testing.assert_close(b.assignments, a.assignments[:, :, perm])
    torch.testing.assert_close(b.pooled, a.pooled)
    torch.testing.assert_close(b.losses.l_q, a.losses.l_q)


@SMALL
@given(seed=st.integers(0, 1000))
def test_equivariant_under_prototype_permutation(seed):
    layer = _layer(seed=seed)
    x = _x(seed=seed)
    perm = torch.randperm(4, generator=torch.Generator().manual_seed(seed))
    a = layer(x)
    with torch.no_grad():
        layer.prototypes.copy_(layer.prototypes[:, perm])
    b = layer(x)
    torch.testing.assert_close(b.assignments, a.assignments[..., perm])
    torch.testing.assert_close(b.output, a.output)
    torch.testing.assert_close(b.losses.v, a.losses.v)


@SMALL
@given(lengths=st.lists(st.integers(0, 5), min_size=1, max_size=3), seed=st.integers(0, 1000),
       explicit=st.booleans())
def test_padded_call_equals_unpadded_call_outputs_losses_and_gradients(lengths, seed, explicit):
    layer = _layer(seed=seed, explicit=explicit)
    xs = [_x(b=1, t=n, seed=seed + 10 + i)[0] for i, n in enumerate(lengths)]
    b = len(lengths)
    padded = torch.full((b, 5, 6), float("nan"), dtype=torch.float64)   # garbage in the padding
    mask = torch.zeros(b, 5, dtype=torch.bool)
    for i, (x, n) in enumerate(zip(xs, lengths)):
        padded[i, :n], mask[i, :n] = x, True
    out = layer(padded, mask)
    loss = out.losses.l_q + out.losses.v + out.pooled.square().sum() + out.output.square().sum()
    (g_pad,) = torch.autograd.grad(loss, layer.prototypes)
    assert bool(torch.isfinite(out.output).all()) and bool(torch.isfinite(g_pad).all())

    # the same tokens without padding: one flat sequence for the losses, one call per row for
    # outputs and pooled summaries
    flat = layer(torch.cat(xs)[None])
    torch.testing.assert_close(out.losses.l_q, flat.losses.l_q)
    torch.testing.assert_close(out.losses.l_ols, flat.losses.l_ols)
    torch.testing.assert_close(out.losses.v, flat.losses.v)
    ref_loss = flat.losses.l_q + flat.losses.v
    for i, (x, n) in enumerate(zip(xs, lengths)):
        row = layer(x[None])
        torch.testing.assert_close(out.output[i, :n], row.output[0])
        torch.testing.assert_close(out.assignments[i, :, :n], row.assignments[0])
        torch.testing.assert_close(out.pooled[i], row.pooled[0])
        assert bool((out.output[i, n:] == 0).all())
        ref_loss = ref_loss + row.pooled.square().sum() + row.output.square().sum()
    (g_ref,) = torch.autograd.grad(ref_loss, layer.prototypes)
    torch.testing.assert_close(g_pad, g_ref)


@pytest.mark.parametrize("explicit", [False, True])
def test_empty_sequences_and_fully_masked_rows_are_defined(explicit):
    layer = _layer(explicit=explicit)
    out = layer(torch.zeros(2, 0, 6, dtype=torch.float64))
    assert out.output.shape == (2, 0, 6) and out.assignments.shape == (2, 2, 0, 4)
    assert bool((out.pooled == 0).all())
    assert all(float(getattr(out.losses, n).detach()) == 0.0 for n in ("l_q", "l_ols", "v"))
    out.losses.l_q.backward()                                   # still part of the graph

    x = _x()
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    out = layer(x, mask)
    assert bool(torch.isfinite(out.output).all())
    assert bool((out.pooled[1] == 0).all()) and bool((out.output[1] == 0).all())
    none = layer(x, torch.zeros(3, 5, dtype=torch.bool))
    assert float(none.losses.l_q.detach()) == 0.0 and bool((none.pooled == 0).all())


def test_layer_losses_satisfy_the_decomposition_float64():
    layer = _layer(k=5, heads=3, dim=9)
    out = layer(_x(dim=9, t=11), torch.rand(3, 11) > 0.3)
    l_q, l_ols, v = (float(getattr(out.losses, n).detach()) for n in ("l_q", "l_ols", "v"))
    assert v >= 0
    assert abs(l_q - (l_ols + v)) <= 1e-10 * l_q


def test_zero_temperature_layer_assigns_to_the_nearest_prototype():
    layer = _layer(temperature=1e-6)
    out = layer(_x())
    hard = torch.nn.functional.one_hot(out.assignments.argmax(-1), 4).to(torch.float64)
    torch.testing.assert_close(out.assignments, hard, rtol=0, atol=1e-8)
    d = ((out.z[..., None, :] - layer.prototypes[None, :, None]) ** 2).sum(-1)   # (B, H, T, K)
    assert bool((out.assignments.argmax(-1) == d.argmin(-1)).all())


@pytest.mark.parametrize("explicit", [False, True])
def test_gradcheck_layer_float64(explicit):
    layer = _layer(dim=4, k=3, heads=2, learnable_temperature=True, explicit=explicit)
    x = _x(b=2, t=3, dim=4).requires_grad_(True)
    mask = torch.tensor([[True, True, False], [True, False, True]])

    def f(inp, protos):
        out = torch.func.functional_call(layer, {"prototypes": protos}, (inp, mask))
        return out.output, out.pooled, out.losses.l_q, out.losses.v

    protos = layer.prototypes.detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(f, (x, protos))


def test_temperature_is_a_submodule_read_by_both_paths():
    layer = _layer(temperature=2.0)
    assert isinstance(layer.temperature, Temperature) and layer.temperature.value == 2.0
    x = _x()
    hot = layer(x).assignments
    layer.temperature.set(0.5)
    for explicit in (False, True):
        layer.explicit = explicit
        cold = layer(x).assignments                              # sharper at the lower tau
        assert bool(cold.amax(-1).mean() > hot.amax(-1).mean())
        torch.testing.assert_close(cold[:, 0].reshape(-1, 4), F.soft_assign(
            layer(x).z[:, 0].reshape(-1, 3), layer.prototypes[0], 0.5))

    learn = _layer(temperature=3.0, learnable_temperature=True)
    learn(_x()).losses.l_q.backward()
    assert float(learn.temperature.log_tau.grad.abs()) > 0

    bad = _layer(temperature=lambda step: 1.0 - step)
    bad.temperature.advance(1)                                   # tau = 0 from step 1
    for explicit in (False, True):
        bad.explicit = explicit
        with pytest.raises(ValueError, match="temperature"):
            bad(_x())


@pytest.mark.parametrize("tau", [0.0, -1.0, float("nan")])
def test_non_positive_temperature_raises(tau):
    with pytest.raises(ValueError, match="temperature"):
        DDCLAttention(6, 4, temperature=tau)


def test_explicit_argument_and_attribute_choose_the_path(monkeypatch):
    def no_fused(*args):
        raise RuntimeError("the fused path ran")

    monkeypatch.setattr(ddcl_module, "prototype_readout", no_fused)
    x = _x()
    _layer(explicit=True)(x)                                     # never calls the fused function
    layer = _layer()
    assert not layer.explicit
    with pytest.raises(RuntimeError, match="fused"):
        layer(x)
    layer.explicit = True
    layer(x)


def test_bad_constructor_arguments_raise_naming_them():
    with pytest.raises(ValueError, match="num_prototypes"):
        DDCLAttention(6, 0)
    with pytest.raises(ValueError, match="dim"):
        DDCLAttention(7, 3, heads=2)
    with pytest.raises(ValueError, match="heads"):
        DDCLAttention(6, 3, heads=0)
    with pytest.raises(ValueError, match="head_dim"):
        DDCLAttention(6, 3, heads=2, head_dim=4, projections=False)
    DDCLAttention(7, 3, heads=2, head_dim=5)                    # explicit head_dim is fine


def test_bad_forward_inputs_raise_naming_them():
    layer = _layer()
    with pytest.raises(ValueError, match="x"):
        layer(torch.randn(5, 6, dtype=torch.float64))
    with pytest.raises(ValueError, match="x"):
        layer(torch.randn(2, 5, 7, dtype=torch.float64))
    with pytest.raises(ValueError, match="mask"):
        layer(_x(), torch.ones(3, 5))                           # float mask
    with pytest.raises(ValueError, match="mask"):
        layer(_x(), torch.ones(3, 4, dtype=torch.bool))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_low_precision_layer_has_no_nan(dtype):
    layer = _layer(dtype=dtype, temperature=0.1)
    x = _x(dtype=torch.float32).to(dtype) * 10
    mask = torch.rand(3, 5) > 0.3
    out = layer(x, mask)
    assert out.output.dtype == dtype
    for t in (out.output, out.assignments, out.pooled, out.losses.l_q, out.losses.v):
        assert bool(torch.isfinite(t).all())
    out.losses.l_q.backward()
    assert bool(torch.isfinite(layer.prototypes.grad).all())


def test_autocast_bfloat16_gives_finite_outputs():
    layer = _layer(dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(_x(dtype=torch.float32))
    assert bool(torch.isfinite(out.output).all())
    sums = out.assignments.float().sum(-1)
    torch.testing.assert_close(sums, torch.ones(3, 2, 5), atol=1e-2, rtol=0)


def test_init_prototypes_from_picks_projected_data_points():
    layer = _layer()
    x, mask = _x(t=8), torch.rand(3, 8) > 0.3
    layer.init_prototypes_from(x, mask, generator=torch.Generator().manual_seed(0))
    z = layer.in_proj(x[mask]).reshape(-1, 2, 3)
    for h in range(2):
        dist = ((layer.prototypes[h][:, None] - z[None, :, h]) ** 2).sum(-1)   # (K, N)
        assert bool((dist.min(-1).values < 1e-20).all())
    with pytest.raises(ValueError, match="num_prototypes"):
        _layer(k=4).init_prototypes_from(_x(b=1, t=3))


def test_diagnostics_report_usage_perplexity_and_separation():
    layer = _layer(k=4, heads=2)
    diag = layer.diagnostics(_x(t=20))
    assert len(diag.fraction_used) == len(diag.perplexity) == len(diag.separation_min) == 2
    assert all(0 < u <= 1 for u in diag.fraction_used)
    assert all(1 <= p <= 4 + 1e-9 for p in diag.perplexity)
    assert all(a <= b for a, b in zip(diag.separation_min, diag.separation_mean))
    assert diag.l_q == pytest.approx(diag.l_ols + diag.v)


@pytest.mark.parametrize("readout,block",
                         [("ddcl", None), ("mean", None), ("mean", 0), ("ddcl", 1)])
def test_ddcl_transformer_forward_backward(readout, block):
    """D15: the layer as readout and as a block inside nn.TransformerEncoderLayer stacks."""
    model = DDCLTransformer(3, 6, input_dim=5, dim=8, depth=2, attn_heads=2, num_prototypes=4,
                            ddcl_heads=2, readout=readout, ddcl_block_after=block)
    x = torch.randn(2, 6, 5)
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    model.init_prototypes_from(x, mask, generator=torch.Generator().manual_seed(0))
    out = model(x, mask)
    assert out.logits.shape == (2, 3)
    assert (out.ddcl is not None) == (readout == "ddcl")
    assert (out.block is not None) == (block is not None)
    loss = out.logits.sum()
    for part in (out.ddcl, out.block):
        if part is not None:
            loss = loss + part.losses.l_q
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    if block is not None:                       # gradient reaches the block's LayerNorm
        assert model.block.norm.weight.grad is not None


def test_ddcl_transformer_bad_arguments_raise():
    with pytest.raises(ValueError, match="input_dim"):
        DDCLTransformer(3, 6)
    with pytest.raises(ValueError, match="readout"):
        DDCLTransformer(3, 6, input_dim=4, readout="cls")
    model = DDCLTransformer(3, 4, vocab_size=10, dim=8, attn_heads=2, num_prototypes=2)
    assert model(torch.randint(10, (2, 4))).logits.shape == (2, 3)
    with pytest.raises(ValueError, match="max_len"):
        model(torch.randint(10, (2, 5)))
    with pytest.raises(ValueError, match="ddcl_block_after"):
        DDCLTransformer(3, 4, input_dim=4, depth=2, ddcl_block_after=2)


@pytest.mark.graph
def test_operation_counts_are_affine_in_t_for_ddcl_and_match_the_closed_forms():
    from ddcl_theory.experiments.ddcl_layer import operation_counts

    c = operation_counts([8, 16, 32], dim=8, num_prototypes=4, heads=2, attn_heads=2)
    assert c.ddcl == c.ddcl_formula and c.attention == c.attention_formula
    assert c.ddcl[2] - c.ddcl[1] == 2 * (c.ddcl[1] - c.ddcl[0])   # affine in T: O(TK)
    assert c.attention[2] > 4 * c.attention[0]                  # the T^2 term
