"""laplacianize: Laplacian heads in transformers' ViT, GPT-2 and BERT equal the package's layer."""
from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="laplacianize needs transformers "
                                   "(the peers extra); the book's environment pins it")

from ddcl_theory import laplacianize  # noqa: E402
from ddcl_theory.layers.laplacian import LaplacianAttention  # noqa: E402
from ddcl_theory.layers.laplacianize import (  # noqa: E402
    IMPLEMENTATION,
    SDPA_IMPLEMENTATION,
    attention_modules,
)

D, H = 16, 4
#: transformers' eager attention takes its softmax in float32 even for float64 inputs
ATOL = {"eager": 1e-6, "sdpa": 1e-12}


def _vit(impl: str = "eager"):
    cfg = transformers.ViTConfig(hidden_size=D, num_hidden_layers=2, num_attention_heads=H,
                                 intermediate_size=32, image_size=16, patch_size=4,
                                 attn_implementation=impl)
    return transformers.ViTModel(cfg).eval().double()


def _gpt2(impl: str = "eager"):
    cfg = transformers.GPT2Config(n_embd=D, n_layer=2, n_head=H, vocab_size=50, n_positions=32, bos_token_id=0, eos_token_id=0,
                                  attn_implementation=impl)
    return transformers.GPT2LMHeadModel(cfg).eval().double()


def _bert(impl: str = "eager"):
    cfg = transformers.BertConfig(hidden_size=D, num_hidden_layers=2, num_attention_heads=H,
                                  intermediate_size=32, vocab_size=50, max_position_embeddings=32,
                                  attn_implementation=impl)
    return transformers.BertModel(cfg).eval().double()


def _ours(q, k, v, o_weight, o_bias, n, causal=False) -> LaplacianAttention:
    """The package's layer with the given projections (q, k, v: (weight, bias))."""
    layer = LaplacianAttention(D, heads=H, laplacian_heads=n, causal=causal).double().eval()
    with torch.no_grad():
        layer.in_proj.weight.copy_(torch.cat([q[0], k[0], v[0]]))
        layer.in_proj.bias.copy_(torch.cat([q[1], k[1], v[1]]))
        layer.out_proj.weight.copy_(o_weight)
        layer.out_proj.bias.copy_(o_bias)
    return layer


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("n", [0, 1, H])
def test_vit_attention_equals_the_package_layer(impl, n):
    model = laplacianize(_vit(impl), n)
    att = model.layers[0].attention
    x = torch.randn(2, 7, D, dtype=torch.float64)
    ours = _ours((att.q_proj.weight, att.q_proj.bias), (att.k_proj.weight, att.k_proj.bias),
                 (att.v_proj.weight, att.v_proj.bias), att.o_proj.weight, att.o_proj.bias, n)
    theirs = att(x)[0]
    assert torch.allclose(theirs, ours(x), atol=ATOL[impl])


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_gpt2_causal_attention_equals_the_package_layer(impl):
    model = laplacianize(_gpt2(impl), 2)
    ids = torch.randint(0, 50, (2, 9))
    hidden = {}
    block = model.transformer.h[1]
    block.attn.register_forward_hook(lambda m, a, kw, out: hidden.update(x=a[0], y=out[0]),
                                     with_kwargs=True)
    model(ids)                                  # the model builds the causal mask itself
    att = block.attn
    w, b = att.c_attn.weight.T, att.c_attn.bias                 # Conv1D: (in, out)
    ours = _ours((w[:D], b[:D]), (w[D:2 * D], b[D:2 * D]), (w[2 * D:], b[2 * D:]),
                 att.c_proj.weight.T, att.c_proj.bias, 2, causal=True)
    assert torch.allclose(hidden["y"], ours(hidden["x"]), atol=ATOL[impl])


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_bert_self_attention_equals_the_package_layer_with_padding(impl):
    model = laplacianize(_bert(impl), 3)
    ids = torch.randint(0, 50, (2, 6))
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    seen = {}
    sa = model.layers[0].attention.self if hasattr(model, "layers") \
        else model.encoder.layer[0].attention.self
    sa.register_forward_hook(lambda m, a, kw, out: seen.update(x=a[0], y=out[0]),
                             with_kwargs=True)
    model(input_ids=ids, attention_mask=mask)   # the model builds the padding mask itself
    eye = torch.eye(D, dtype=torch.float64)
    ours = _ours((sa.query.weight, sa.query.bias), (sa.key.weight, sa.key.bias),
                 (sa.value.weight, sa.value.bias), eye, torch.zeros(D, dtype=torch.float64), 3)
    valid = mask.bool()
    assert torch.allclose(seen["y"][valid], ours(seen["x"], mask=valid)[valid], atol=ATOL[impl])


def test_the_whole_model_changes_and_zero_heads_restore_it():
    model = _gpt2()
    ids = torch.randint(0, 50, (2, 8))
    plain = model(ids).logits
    laplacianize(model, 2)
    assert model.config._attn_implementation == IMPLEMENTATION
    assert all(m.laplacian_heads == 2 for _, m, _ in attention_modules(model))
    assert not torch.allclose(model(ids).logits, plain)
    laplacianize(model, 0)
    assert torch.allclose(model(ids).logits, plain, atol=ATOL["eager"])
    assert all(m.laplacian_base == "eager" for _, m, _ in attention_modules(model))


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_generation_with_a_kv_cache_matches_the_full_forward(impl):
    model = laplacianize(_gpt2(impl), 3)
    ids = torch.randint(0, 50, (1, 6))
    full = model(ids).logits[:, -1]
    cache = model(ids[:, :-1], use_cache=True).cache
    step = model(ids[:, -1:], cache=cache, use_cache=True).logits[:, -1]
    assert torch.allclose(full, step, atol=1e-10)


def test_bad_arguments_name_what_was_expected():
    with pytest.raises(ValueError, match=r"laplacian_heads \(layer .* has 4 heads\): expected "
                                         r"an int in \[0, 4\], got 5"):
        laplacianize(_vit(), 5)
    with pytest.raises(ValueError, match="model: expected a transformers PreTrainedModel"):
        laplacianize(torch.nn.Linear(2, 2), 1)
    cfg = transformers.RobertaConfig(hidden_size=D, num_hidden_layers=1, num_attention_heads=H,
                                     intermediate_size=32, vocab_size=50)
    with pytest.raises(ValueError, match="model: no self-attention layer"):
        laplacianize(transformers.RobertaModel(cfg), 1)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_each_base_gets_its_own_masks(impl, monkeypatch):
    """Over SDPA a purely causal mask is left out (SDPA's ``is_causal``: the fused kernels,
    and the path that runs under vmap on CUDA); over eager it is the additive float mask."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    import ddcl_theory.layers.laplacianize as lz
    model = laplacianize(_gpt2(impl), 2)
    assert model.config._attn_implementation == {"eager": IMPLEMENTATION,
                                                  "sdpa": SDPA_IMPLEMENTATION}[impl]
    masks = []

    def spying(function):
        def spy(module, q, k, v, mask, *args, **kwargs):
            masks.append(mask)
            return function(module, q, k, v, mask, *args, **kwargs)
        return spy
    if impl == "sdpa":
        monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS._global_mapping, "sdpa",
                            spying(ALL_ATTENTION_FUNCTIONS._global_mapping["sdpa"]))
    else:
        eager_of = lz._eager_of
        monkeypatch.setattr(lz, "_eager_of", lambda module: spying(eager_of(module)))
    ids = torch.randint(0, 50, (2, 8))
    model(ids)
    assert len(masks) == 2
    if impl == "sdpa":
        assert all(m is None for m in masks)
        padded = model(ids, attention_mask=torch.tensor([[1] * 8, [0] * 2 + [1] * 6]))
        assert masks[-1] is not None and masks[-1].dtype == torch.bool      # padding: a mask
        assert torch.isfinite(padded.logits).all()
    else:
        assert all(m is not None and m.dtype == torch.float64 for m in masks)


def test_sdpa_base_survives_a_second_call_and_zero_heads():
    model = laplacianize(_gpt2("sdpa"), 3)
    laplacianize(model, 1)
    assert model.config._attn_implementation == SDPA_IMPLEMENTATION
    assert {m.laplacian_base for _, m, _ in attention_modules(model)} == {"sdpa"}
    plain = _gpt2("sdpa")
    plain.load_state_dict(model.state_dict())
    ids = torch.randint(0, 50, (2, 8))
    assert torch.allclose(laplacianize(model, 0)(ids).logits, plain(ids).logits, atol=1e-12)


def test_under_vmap_on_cuda_sdpa_leaves_out_the_memory_efficient_kernel(monkeypatch):
    """Its backward fails under vmap on CUDA ("LSE is not correctly aligned", seen on an H200):
    there the SDPA base runs with cuDNN, flash or math; elsewhere nothing changes."""
    import contextlib
    from types import SimpleNamespace

    import ddcl_theory.layers.laplacianize as lz
    seen = []
    torch.vmap(lambda q: seen.append(lz._vmap_safe_sdpa("sdpa", q)) or q)(torch.randn(3, 4))
    assert isinstance(seen[0], contextlib.nullcontext)                 # vmap on the CPU
    cuda_like = SimpleNamespace(is_cuda=True)
    monkeypatch.setattr(torch._C._functorch, "is_batchedtensor", lambda _t: True)
    assert isinstance(lz._vmap_safe_sdpa("eager", cuda_like), contextlib.nullcontext)
    chosen = []
    import torch.nn.attention as attention
    monkeypatch.setattr(attention, "sdpa_kernel",
                        lambda backends, set_priority=False: chosen.append(backends) or "ctx")
    assert lz._vmap_safe_sdpa("sdpa", cuda_like) == "ctx"
    assert attention.SDPBackend.EFFICIENT_ATTENTION not in chosen[0]
    assert chosen[0][-1] == attention.SDPBackend.MATH
    monkeypatch.setattr(torch._C._functorch, "is_batchedtensor", lambda _t: False)
    assert isinstance(lz._vmap_safe_sdpa("sdpa", cuda_like), contextlib.nullcontext)



def _future_leak(model) -> float:
    """How far the earlier logits move when only the last token changes (0: causal)."""
    ids = torch.randint(0, 50, (1, 10))
    other = ids.clone()
    other[0, -1] = (ids[0, -1] + 1) % 50
    return (model(ids).logits[0, :-1] - model(other).logits[0, :-1]).abs().max().item()


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_a_model_built_from_a_laplacianized_config_stays_causal(impl):
    """The SDPA name leaves the causal mask to SDPA: it must run over SDPA whatever the module
    says (a fresh model from the config has no ``laplacian_base``), else tokens see the future."""
    model = laplacianize(_gpt2(impl), 2)
    assert _future_leak(model) == 0.0
    assert _future_leak(transformers.GPT2LMHeadModel(model.config).eval().double()) == 0.0
    eager = laplacianize(_gpt2("eager"), 2)
    eager.set_attn_implementation(SDPA_IMPLEMENTATION)        # the eager base, SDPA's masks
    assert _future_leak(eager) == 0.0


@pytest.mark.parametrize("padding", ["left", "right"])
def test_over_sdpa_padding_masks_give_the_eager_base_s_outputs(padding):
    eager, sdpa = laplacianize(_gpt2("eager"), 2), laplacianize(_gpt2("sdpa"), 2)
    sdpa.load_state_dict(eager.state_dict())
    ids, mask = torch.randint(0, 50, (2, 8)), torch.ones(2, 8, dtype=torch.long)
    mask[1, :3] = 0 if padding == "left" else 1
    mask[1, 5:] = 0 if padding == "right" else 1
    kept = mask.bool()
    a, b = (m(ids, attention_mask=mask).logits for m in (eager, sdpa))
    torch.testing.assert_close(b[kept], a[kept], atol=ATOL["eager"], rtol=0)
    bert_e, bert_s = laplacianize(_bert("eager"), 2), laplacianize(_bert("sdpa"), 2)
    bert_s.load_state_dict(bert_e.state_dict())
    x, y = (m(ids, attention_mask=mask).last_hidden_state for m in (bert_e, bert_s))
    torch.testing.assert_close(y[kept], x[kept], atol=ATOL["eager"], rtol=0)


def test_a_vmapped_sdpa_model_takes_a_padding_mask_per_model():
    """Under vmap a batched padding mask is made into a mask (skipping it would read its values,
    which vmap refuses); each model gets its own, as called alone."""
    from torch.func import functional_call, stack_module_state
    models = [laplacianize(_gpt2("sdpa"), 2) for _ in range(2)]
    params, buffers = stack_module_state(models)
    ids = torch.randint(0, 50, (2, 3, 8))
    mask = torch.ones(2, 3, 8, dtype=torch.long)
    mask[1, 1, :3] = 0

    def one(p, b, x, m):
        return functional_call(models[0], (p, b), (x,), {"attention_mask": m}).logits
    for m in (mask, torch.ones_like(mask)):
        out = torch.vmap(one)(params, buffers, ids, m)
        for i, model in enumerate(models):
            alone = model(ids[i], attention_mask=m[i]).logits
            kept = m[i].bool()
            torch.testing.assert_close(out[i][kept], alone[kept], atol=1e-10, rtol=0)
