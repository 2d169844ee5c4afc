"""ddcl_theory.models.hf_vit: transformers' ViT read like the package's ViT (hidden states,
the final LayerNorm), Laplacian heads through laplacianize, DeiT's stochastic depth in training
mode only, and a stack of seeds equal to its seeds one by one."""
from __future__ import annotations

import pytest
import torch

from ddcl_theory.models import hf_vit
from ddcl_theory.models.hf_vit import HFViT
from ddcl_theory.runtime.stacked import StackedModels

KW = dict(image_size=16, patch=4, dim=16, depth=3, heads=4, mlp_ratio=2)


def test_hidden_states_and_the_final_norm_give_the_logits():
    torch.manual_seed(0)
    model = HFViT(5, **KW).eval()
    with torch.no_grad():                  # a norm that is no projection: twice != once
        model.norm.weight.uniform_(0.5, 2.0)
        model.norm.bias.normal_()
    x = torch.randn(3, 3, 16, 16)
    logits, states = model(x, return_hidden=True)
    assert logits.shape == (3, 5) and len(states) == 4
    assert all(s.shape == (3, 1 + 16, 16) for s in states)
    assert not torch.allclose(states[-1], model.norm(states[-1]), atol=1e-3)
    read = model.hf.classifier(model.norm(states[-1])[:, 0])
    assert torch.allclose(read, logits, atol=1e-6)
    assert torch.equal(model(x), logits)


def test_laplacian_heads_change_the_output_and_zero_heads_do_not():
    torch.manual_seed(0)
    plain = HFViT(5, **KW).eval()
    state = plain.state_dict()
    zero = HFViT(5, laplacian_heads=0, **KW).eval()
    zero.load_state_dict(state)
    some = HFViT(5, laplacian_heads=2, **KW).eval()
    some.load_state_dict(state)
    x = torch.randn(2, 3, 16, 16)
    assert torch.equal(zero(x), plain(x))
    assert not torch.allclose(some(x), plain(x))
    heads = [m.laplacian_heads for m in some.hf.modules() if hasattr(m, "laplacian_heads")
             and not isinstance(m, HFViT)]
    assert heads == [2] * KW["depth"]
    bases = {m.laplacian_base for m in some.hf.modules() if hasattr(m, "laplacian_base")}
    assert bases == {"eager"}                      # the base a stack of seeds can vmap


def test_drop_path_rates_rise_linearly_to_the_last_block():
    assert hf_vit.drop_path_rates(0.1, 3) == pytest.approx([0.0, 0.05, 0.1])
    assert hf_vit.drop_path_rates(0.3, 1) == [0.0]
    with pytest.raises(ValueError, match="drop_path"):
        hf_vit.drop_path_rates(1.0, 3)


def test_a_dropped_branch_is_zero_for_some_images_and_rescaled_for_the_others():
    layer = torch.nn.Linear(4, 4)
    layer.register_forward_hook(hf_vit._drop_branch(0.3))
    x = torch.randn(4000, 4)
    with torch.no_grad():
        full = torch.nn.functional.linear(x, layer.weight, layer.bias)
        out = layer(x)
        zero = (out == 0).all(-1)
        assert abs(zero.double().mean().item() - 0.3) < 0.03
        assert torch.allclose(out[~zero], full[~zero] / 0.7, atol=1e-6)
        layer.eval()
        assert torch.equal(layer(x), full)


def test_stochastic_depth_acts_in_training_mode_only():
    torch.manual_seed(0)
    model = HFViT(5, drop_path=0.5, **KW)
    x = torch.randn(8, 3, 16, 16)
    model.train()
    assert not torch.equal(model(x), model(x))
    model.eval()
    assert torch.equal(model(x), model(x))


def test_drawn_drop_scales_decide_the_step_and_zero_drops_every_branch():
    torch.manual_seed(0)
    model = HFViT(5, drop_path=0.5, **KW).train()
    x = torch.randn(6, 3, 16, 16)
    g = torch.Generator().manual_seed(3)
    scale = model.draw_drop_scale(6, g)
    assert scale.shape == (6, 3, 2) and torch.equal(scale[:, 0], torch.ones(6, 2))  # rate 0
    assert set(scale[:, 2].unique().tolist()) <= {0.0, 2.0}                         # rate 0.5
    assert torch.equal(model(x, scale), model(x, scale))           # no global draw left
    first_only = torch.ones(6, 3, 2)
    first_only[:, 1:] = 0.0                  # blocks 2 and 3 dropped (block 1's rate is 0)
    with torch.no_grad():
        h = model.hf.vit.layers[0](model.hf.vit.embeddings(x))
        final = model.hf.classifier(model.norm(h)[:, 0])
        assert torch.allclose(model(x, first_only), final, atol=1e-5)
    with pytest.raises(ValueError, match="drop_scale: expected shape"):
        model(x, torch.ones(6, 2, 2))


def test_a_stack_of_seeds_equals_its_seeds_one_by_one_in_training_too():
    stack = StackedModels(lambda _s: HFViT(5, drop_path=0.3, **KW), [0, 1]).train()
    x = torch.randn(2, 3, 3, 16, 16)
    scales = torch.stack([hf_vit.draw_drop_scale(hf_vit.drop_path_rates(0.3, 3), 3,
                                                 torch.Generator().manual_seed(s))
                          for s in (0, 1)])
    out = stack(x, scales)
    for i, model in enumerate(stack.unstack()):
        assert torch.allclose(out[i], model.train()(x[i], scales[i]), atol=1e-5)


def test_a_stack_of_seeds_equals_its_seeds_one_by_one():
    stack = StackedModels(lambda _s: HFViT(5, laplacian_heads=1, **KW), [0, 1]).eval()
    x = torch.randn(2, 3, 3, 16, 16)
    out = stack(x)
    for i, model in enumerate(stack.unstack()):
        assert torch.allclose(out[i], model.eval()(x[i]), atol=1e-5)


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="image_size: expected a multiple of patch"):
        HFViT(5, image_size=18, patch=4)
    with pytest.raises(ValueError, match="dim: expected a multiple of heads"):
        HFViT(5, dim=10, heads=4)
    with pytest.raises(ValueError, match="pixels: expected shape"):
        HFViT(5, **KW)(torch.randn(2, 3, 32, 32))
    with pytest.raises(ValueError, match="laplacian_heads"):
        HFViT(5, laplacian_heads=5, **KW)
