"""Peer readouts of claim D17: Slot Attention, the Perceiver-style readout and the DDCL adapter
(ddcl_theory.layers.peers); the experiment that trains them is tested in
tests/test_experiments_peer_readouts.py."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ddcl_theory.layers.peers import (
    DDCLReadoutAdapter,
    PerceiverReadout,
    ReadoutOutput,
    SlotAttentionReadout,
    gru_step,
)

SMALL = settings(max_examples=10, deadline=None)
DIM = 6


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _x(b=3, t=5, dim=DIM, dtype=torch.float64, seed=1) -> torch.Tensor:
    return torch.randn(b, t, dim, generator=_gen(seed), dtype=dtype)


def _make(kind: str, dtype=torch.float64, seed=0, **kw) -> torch.nn.Module:
    torch.manual_seed(seed)
    if kind == "slot":
        layer = SlotAttentionReadout(DIM, 4, iterations=2, **kw)
    elif kind == "slot_learned":
        layer = SlotAttentionReadout(DIM, 4, iterations=2, init="learned", **kw)
    elif kind == "perceiver":
        layer = PerceiverReadout(DIM, 3, **kw)
    elif kind == "perceiver_inverted":
        layer = PerceiverReadout(DIM, 3, softmax_over="latents", **kw)
    else:
        layer = DDCLReadoutAdapter(DIM, 4, residual=False, norm=False, **kw)
    return layer.to(dtype)


PEERS = ("slot", "slot_learned", "perceiver", "perceiver_inverted")
ALL = PEERS + ("ddcl",)


def _call(layer, x, mask=None, seed=0) -> ReadoutOutput:
    """Forward with a fresh seeded generator for Slot Attention (reproducible initial slots)."""
    if isinstance(layer, SlotAttentionReadout):
        return layer(x, mask, generator=torch.Generator(device=x.device).manual_seed(seed))
    return layer(x, mask)


# ------------------------------------------------------------------------------ shapes, basics
@pytest.mark.parametrize("kind", ALL)
def test_output_fields_have_the_documented_shapes(kind):
    layer = _make(kind)
    out = _call(layer, _x(b=3, t=5))
    s = {"slot": 4, "slot_learned": 4, "perceiver": 3, "perceiver_inverted": 3, "ddcl": 4}[kind]
    assert isinstance(out, ReadoutOutput)
    assert out.pooled.shape == (3, DIM)
    assert out.states.shape == (3, s, DIM)
    assert out.attention.shape == (3, s, 5)
    assert out.vectors.shape == (3, s, DIM)
    assert out.aux_loss.shape == ()


@pytest.mark.parametrize("kind", PEERS)
def test_pooled_is_the_mean_of_the_states(kind):
    out = _call(_make(kind), _x())
    torch.testing.assert_close(out.pooled, out.states.mean(1))


def test_ddcl_pooled_is_the_usage_weighted_sum_of_prototype_images():
    """pooled = sum_k qbar_k (W_out p_k + b), qbar = the mean assignment of the valid tokens."""
    layer = _make("ddcl")
    mask = torch.rand(3, 5, generator=_gen(2)) > 0.3
    mask[:, 0] = True
    out = layer(_x(), mask)
    qbar = out.attention.sum(-1) / mask.sum(-1, keepdim=True)           # (B, K)
    torch.testing.assert_close(out.pooled, (qbar[..., None] * out.states).sum(1))
    inner = layer.layer(_x(), mask)
    torch.testing.assert_close(out.aux_loss, inner.losses.l_q)
    torch.testing.assert_close(out.vectors[0], layer.layer.prototypes[0])


@pytest.mark.parametrize("kind", ["slot", "slot_learned", "perceiver_inverted", "ddcl"])
def test_competitive_attention_columns_sum_to_one_over_slots(kind):
    mask = torch.rand(3, 5, generator=_gen(3)) > 0.4
    out = _call(_make(kind), _x(), mask)
    sums = out.attention.sum(1)                                          # (B, T)
    torch.testing.assert_close(sums, mask.to(sums.dtype), rtol=0, atol=1e-12)
    assert bool((out.attention >= 0).all())


def test_standard_perceiver_attention_rows_sum_to_one_over_tokens():
    mask = torch.rand(3, 5, generator=_gen(3)) > 0.4
    mask[:, 1] = True
    out = _make("perceiver")(_x(), mask)
    torch.testing.assert_close(out.attention.sum(-1), torch.ones(3, 3, dtype=torch.float64),
                               rtol=0, atol=1e-12)


def test_perceiver_matches_a_direct_computation_of_cross_attention():
    """h = l + W_o softmax_t(q k^T / (sqrt(d) tau)) v, then the residual MLP, for one sequence."""
    layer = _make("perceiver", temperature=0.7)
    x = _x(b=1, t=4)[0]
    lat = layer.latents
    q = layer.to_q(layer.norm_latents(lat))
    k, v = layer.to_k(layer.norm_tokens(x)), layer.to_v(layer.norm_tokens(x))
    a = torch.softmax(q @ k.T / (math.sqrt(DIM) * 0.7), dim=-1)
    h = lat + layer.to_out(a @ v)
    h = h + layer.mlp.fc2(torch.relu(layer.mlp.fc1(layer.mlp.norm(h))))
    out = layer(x[None])
    torch.testing.assert_close(out.states[0], h)
    torch.testing.assert_close(out.attention[0], a)


def test_gru_step_equals_torch_gru_cell():
    cell = torch.nn.GRUCell(DIM, DIM).double()
    inp = torch.randn(7, DIM, dtype=torch.float64, generator=_gen(4))
    hid = torch.randn(7, DIM, dtype=torch.float64, generator=_gen(5))
    torch.testing.assert_close(gru_step(cell, inp, hid), cell(inp, hid))


def test_slot_attention_first_round_matches_a_direct_computation():
    """One iteration from learned initial slots: softmax over slots, weighted mean, GRU, MLP."""
    layer = SlotAttentionReadout(DIM, 4, iterations=1, init="learned", temperature=0.5).double()
    x = _x(b=1, t=5)[0]
    s0 = layer.initial_slots
    k, v = layer.to_k(layer.norm_tokens(x)), layer.to_v(layer.norm_tokens(x))
    q = layer.to_q(layer.norm_slots(s0))
    a = torch.softmax(q @ k.T / (math.sqrt(DIM) * 0.5), dim=0)          # (S, T) over slots
    w = a / (a.sum(-1, keepdim=True) + layer.eps)
    s1 = layer.gru(w @ v, s0)
    s1 = s1 + layer.mlp.fc2(torch.relu(layer.mlp.fc1(layer.mlp.norm(s1))))
    out = layer(x[None])
    torch.testing.assert_close(out.states[0], s1)
    torch.testing.assert_close(out.attention[0], a)


# ------------------------------------------------------------------------------------ masks
@SMALL
@given(seed=st.integers(0, 10_000), kind=st.sampled_from(ALL))
def test_padded_sequence_equals_the_unpadded_one(seed, kind):
    """Valid tokens then padding (any values) give the same outputs as the valid tokens alone."""
    layer = _make(kind)
    g = _gen(seed)
    n_valid = int(torch.randint(1, 6, (1,), generator=g))
    x = torch.randn(1, 7, DIM, generator=g, dtype=torch.float64)
    x[:, n_valid:] = torch.randn(1, 7 - n_valid, DIM, generator=g, dtype=torch.float64) * 1e3
    mask = torch.zeros(1, 7, dtype=torch.bool)
    mask[:, :n_valid] = True
    padded = _call(layer, x, mask)
    alone = _call(layer, x[:, :n_valid])
    for name in ("pooled", "states", "vectors"):
        torch.testing.assert_close(getattr(padded, name), getattr(alone, name))
    torch.testing.assert_close(padded.attention[..., :n_valid], alone.attention)
    assert bool((padded.attention[..., n_valid:] == 0).all())


@pytest.mark.parametrize("kind", ALL)
def test_masked_tokens_get_zero_attention_and_no_gradient(kind):
    layer = _make(kind)
    x = _x().requires_grad_(True)
    mask = torch.tensor([[1, 1, 0, 1, 0], [0, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    out = _call(layer, x, mask)
    assert bool((out.attention.transpose(1, 2)[~mask] == 0).all())
    (out.pooled.sum() + out.states.sum()).backward()
    assert bool((x.grad[~mask] == 0).all())
    assert bool((x.grad[mask].abs().sum(-1) > 0).all())


@pytest.mark.parametrize("kind", ALL)
def test_fully_masked_row_gives_zeros_not_nan(kind):
    layer = _make(kind)
    x = _x().requires_grad_(True)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    out = _call(layer, x, mask)
    for name in ("pooled", "states", "attention", "vectors"):
        t = getattr(out, name)
        assert bool(torch.isfinite(t).all()), name
        assert bool((t[1] == 0).all()), name
    out.pooled.sum().backward()
    params = [p.grad for p in layer.parameters() if p.grad is not None]
    assert bool(torch.isfinite(x.grad).all()) and all(bool(torch.isfinite(g).all())
                                                       for g in params)
    empty = _call(layer, torch.zeros(2, 0, DIM, dtype=torch.float64))
    assert empty.pooled.shape == (2, DIM) and bool((empty.pooled == 0).all())


# --------------------------------------------------------------------------------- symmetry
@SMALL
@given(seed=st.integers(0, 10_000), kind=st.sampled_from(ALL))
def test_permuting_tokens_permutes_attention_and_leaves_pooled_unchanged(seed, kind):
    layer = _make(kind)
    g = _gen(seed)
    x = torch.randn(2, 6, DIM, generator=g, dtype=torch.float64)
    mask = torch.rand(2, 6, generator=g) > 0.3
    perm = torch.randperm(6, generator=g)
    a, b = _call(layer, x, mask), _call(layer, x[:, perm], mask[:, perm])
    torch.testing.assert_close(b.pooled, a.pooled)
    torch.testing.assert_close(b.states, a.states)
    torch.testing.assert_close(b.attention, a.attention[..., perm])


@pytest.mark.parametrize("kind", ["slot_learned", "perceiver", "perceiver_inverted"])
def test_permuting_learned_slots_permutes_the_outputs(kind):
    """Slots/latents are a set: reordering the learned bank reorders states and maps."""
    layer = _make(kind)
    bank = layer.initial_slots if kind == "slot_learned" else layer.latents
    x = _x()
    a = layer(x)
    perm = torch.tensor([2, 0, 1] + list(range(3, bank.shape[0])))
    with torch.no_grad():
        bank.copy_(bank[perm].clone())
    b = layer(x)
    torch.testing.assert_close(b.states, a.states[:, perm])
    torch.testing.assert_close(b.attention, a.attention[:, perm])
    torch.testing.assert_close(b.pooled, a.pooled)


def test_equal_slots_stay_equal_and_share_tokens_equally():
    """The collapsed state is a fixed point: equal initial slots get identical updates."""
    layer = SlotAttentionReadout(DIM, 4, iterations=3, init="learned").double()
    with torch.no_grad():
        layer.initial_slots.copy_(layer.initial_slots[:1].expand(4, -1))
    out = layer(_x())
    torch.testing.assert_close(out.states, out.states[:, :1].expand_as(out.states))
    torch.testing.assert_close(out.attention, torch.full_like(out.attention, 0.25))


# ------------------------------------------------------------------------- reproducibility
def test_gaussian_slots_are_reproducible_with_a_generator_and_random_without():
    layer = _make("slot").eval()
    x = _x()
    a, b = _call(layer, x, seed=7), _call(layer, x, seed=7)
    torch.testing.assert_close(a.states, b.states, rtol=0, atol=0)
    c, d = layer(x), layer(x)                                    # global RNG: different draws
    assert not torch.allclose(c.states, d.states)
    learned = _make("slot_learned").eval()
    torch.testing.assert_close(learned(x).states, learned(x).states, rtol=0, atol=0)


def test_gaussian_slot_noise_has_the_learned_mean_and_std():
    layer = SlotAttentionReadout(DIM, 3, init="gaussian", init_std=0.3)
    with torch.no_grad():
        layer.slot_mu.fill_(2.0)
    s0 = layer.initial(4000, torch.float64, "cpu", generator=_gen(0))
    s0 = s0.detach()
    assert abs(float(s0.mean()) - 2.0) < 0.01
    assert abs(float(s0.std()) - 0.3) < 0.01


# -------------------------------------------------------------------------------- gradcheck
@pytest.mark.parametrize("kind", ALL)
def test_float64_gradcheck_of_pooled_and_states(kind):
    layer = _make(kind)
    x = _x(b=2, t=3).requires_grad_(True)
    mask = torch.tensor([[True, True, False], [True, True, True]])

    def f(inp):
        out = _call(layer, inp, mask)
        return out.pooled, out.states, out.attention

    assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["slot_learned", "perceiver"])
def test_float64_gradcheck_with_respect_to_the_bank(kind):
    layer = _make(kind)
    bank = layer.initial_slots if kind == "slot_learned" else layer.latents
    x = _x(b=2, t=3)
    name = "initial_slots" if kind == "slot_learned" else "latents"
    leaf = bank.detach().clone().requires_grad_(True)

    def g(b):
        return torch.func.functional_call(layer, {name: b}, (x,)).pooled

    assert torch.autograd.gradcheck(g, (leaf,), eps=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("kind", ALL)
def test_bad_forward_inputs_raise_naming_them(kind):
    layer = _make(kind)
    with pytest.raises(ValueError, match="^x: expected shape"):
        layer(torch.randn(5, DIM, dtype=torch.float64))
    with pytest.raises(ValueError, match="^x: expected shape"):
        layer(torch.randn(2, 5, DIM + 1, dtype=torch.float64))
    with pytest.raises(ValueError, match="^x: expected a floating-point tensor"):
        layer(torch.ones(2, 5, DIM, dtype=torch.long))
    with pytest.raises(ValueError, match="^mask: expected a bool tensor"):
        layer(_x(), torch.ones(3, 5))
    with pytest.raises(ValueError, match="^mask: expected shape"):
        layer(_x(), torch.ones(3, 4, dtype=torch.bool))


def test_bad_constructor_arguments_raise_naming_them():
    for kwargs, name in [({"num_slots": 0}, "num_slots"), ({"iterations": 0}, "iterations"),
                         ({"temperature": 0.0}, "temperature"), ({"init": "zeros"}, "init"),
                         ({"init_std": -1.0}, "init_std"), ({"temperature": float("nan")},
                                                             "temperature"),
                         ({"eps": True}, "eps"), ({"mlp_hidden": 0}, "mlp_hidden")]:
        args = {"dim": DIM, "num_slots": 3} | kwargs
        with pytest.raises(ValueError, match=f"^{name}: expected"):
            SlotAttentionReadout(**args)
    for kwargs, name in [({"num_latents": 0}, "num_latents"), ({"softmax_over": "heads"},
                                                              "softmax_over"),
                         ({"temperature": -1.0}, "temperature"), ({"dim": 2.5}, "dim"),
                         ({"latent_std": float("inf")}, "latent_std")]:
        args = {"dim": DIM, "num_latents": 3} | kwargs
        with pytest.raises(ValueError, match=f"^{name}: expected"):
            PerceiverReadout(**args)
    with pytest.raises(ValueError, match="heads"):
        DDCLReadoutAdapter(DIM, 3, heads=2)
    with pytest.raises(ValueError, match="generator"):
        _make("slot")(_x(), generator=0)


# ------------------------------------------------------------------------- low precision
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", PEERS)
def test_low_precision_inputs_compute_in_float32_and_return_their_dtype(kind, dtype):
    layer = _make(kind, dtype=torch.float32)
    x32 = _x(dtype=torch.float32) * 10
    mask = torch.rand(3, 5, generator=_gen(6)) > 0.3
    mask[:, 0] = True
    low = _call(layer, x32.to(dtype), mask)
    ref = _call(layer, x32.to(dtype).float(), mask)       # same rounded input, float32 path
    for name in ("pooled", "states", "attention", "vectors"):
        assert getattr(low, name).dtype == dtype
        torch.testing.assert_close(getattr(low, name), getattr(ref, name).to(dtype))
    half = _make(kind, dtype=dtype)                          # low-precision parameters too
    out = _call(half, x32.to(dtype), mask)
    assert out.pooled.dtype == dtype and bool(torch.isfinite(out.states).all())
    out.pooled.float().sum().backward()
    assert all(bool(torch.isfinite(p.grad).all()) for p in half.parameters()
               if p.grad is not None)


@pytest.mark.parametrize("kind", PEERS)
def test_autocast_bfloat16_keeps_the_float32_island(kind):
    layer = _make(kind, dtype=torch.float32)
    x = _x(dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = _call(layer, x)
    outside = _call(layer, x)
    assert inside.pooled.dtype == torch.float32
    torch.testing.assert_close(inside.pooled, outside.pooled)
