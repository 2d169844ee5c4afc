"""S seeds as one stacked model (ddcl_theory.runtime.stacked): each stacked seed trains like its
sequential twin, unstacks to the same modules, resumes from a checkpoint, refuses bad inputs."""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ddcl_theory.models.char_gpt import CharGPT
from ddcl_theory.models.mlp import TokenMLP
from ddcl_theory.models.vit import ViT
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.stacked import (PerSeedLoss, StackedModels, stack_batches,
                                         stacked_batches)
from ddcl_theory.runtime.training import fit

SEEDS = (3, 7)
STEPS = 20
F64 = dict(rtol=1e-9, atol=1e-12)
# Directions with a zero gradient (the key bias: softmax ignores a shift of a row's scores; the
# value bias of a Laplacian head: (I - P) 1 = 0) start at 0 and move only by Adam's update of
# rounding noise, ~1e-11 after 20 steps: an absolute allowance for trained parameters.
TRAINED = dict(rtol=1e-9, atol=1e-9)


def _vit(laplacian_heads, dropout: float = 0.0):
    return lambda _seed: ViT(4, 12, 3, dim=8, depth=2, heads=2, laplacian_heads=laplacian_heads,
                             dropout=dropout).double()


def _gpt(laplacian_heads):
    return lambda _seed: CharGPT(11, 8, dim=8, depth=2, heads=2,
                                 laplacian_heads=laplacian_heads).double()


# the data sets are drawn from their own generator: independent of every seed
_IMAGES = torch.randn(64, 4, 12, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
_LABELS = torch.randint(0, 3, (64,), generator=torch.Generator().manual_seed(2))
_TEXT = torch.randint(0, 11, (200,), generator=torch.Generator().manual_seed(3))


def _image_batch(gen: torch.Generator, size: int = 8):
    idx = torch.randint(0, len(_IMAGES), (size,), generator=gen)
    return _IMAGES[idx], _LABELS[idx]


def _text_batch(gen: torch.Generator, size: int = 4, block: int = 8):
    starts = torch.randint(0, len(_TEXT) - block - 1, (size,), generator=gen)
    windows = torch.stack([_TEXT[s:s + block + 1] for s in starts.tolist()])
    return windows[:, :-1], windows[:, 1:]


def _ce(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _stream(draw, gen: torch.Generator, steps: int):
    """``steps`` batches of one seed, drawn from its own generator."""
    for _ in range(steps):
        yield draw(gen)


def _per_seed_ce(forward, batch):
    x, y = batch
    return torch.vmap(_ce)(forward(x), y)                      # (S,)


def _sequential(make, seed, draw, steps=STEPS, clip=None):
    """One seed alone: the reference a stacked seed must reproduce."""
    gen = profile.seed_everything(seed)
    model = make(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    losses = []
    for _ in range(steps):
        x, y = draw(gen)
        opt.zero_grad()
        loss = _ce(model(x), y)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(loss.item())
    return model, torch.tensor(losses, dtype=torch.float64)


def _assert_same_parameters(a: nn.Module, b: nn.Module, **tol):
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert pa.keys() == pb.keys()
    for name in pa:
        torch.testing.assert_close(pa[name], pb[name], **tol, msg=name)


# ------------------------------------------------------------------ training twins
@pytest.mark.parametrize("laplacian_heads", [0, (1, 2)], ids=["none", "some-and-all"])
def test_a_stacked_vit_seed_trains_like_its_sequential_twin(laplacian_heads):
    make = _vit(laplacian_heads)
    stack = StackedModels(make, SEEDS)
    opt = torch.optim.AdamW(stack.parameters(), lr=1e-2, weight_decay=0.1)
    stack.clip_before_step(opt, 0.5)                       # per seed, active: norms exceed 0.5
    curves, norms = [], []
    for _ in range(STEPS):
        x, y = stack_batches([_image_batch(g) for g in stack.generators])   # (S, 8, ...)
        opt.zero_grad()
        losses = torch.vmap(_ce)(stack(x), y)
        losses.sum().backward()
        norms.append(stack.grad_norms())
        opt.step()
        curves.append(losses.detach())
    curves = torch.stack(curves)                                         # (steps, S)
    assert max(float(n.max()) for n in norms) > 0.5
    for i, (seed, trained) in enumerate(zip(SEEDS, stack.unstack())):
        twin, losses = _sequential(make, seed, _image_batch, clip=0.5)
        torch.testing.assert_close(curves[:, i], losses, **F64)
        _assert_same_parameters(trained, twin, **TRAINED)
    assert not torch.allclose(curves[:, 0], curves[:, 1])                # two seeds, two runs


@pytest.mark.parametrize("laplacian_heads", [(0, 1), 2], ids=["none-and-some", "all"])
def test_a_stacked_gpt_seed_trains_under_fit_like_its_sequential_twin(laplacian_heads):
    make = _gpt(laplacian_heads)
    stack = StackedModels(make, SEEDS)
    opt = torch.optim.AdamW(stack.parameters(), lr=1e-2, weight_decay=0.1)
    loss = PerSeedLoss(_per_seed_ce, stack.num_seeds)

    def batches(_round):
        return stacked_batches([_stream(_text_batch, g, STEPS // 4) for g in stack.generators])

    log = fit(stack, opt, rounds=4, batches=batches, loss=loss, device="cpu",
              generators=stack.named_generators(), compile=False)
    curves = loss.curves()
    assert curves.shape == (STEPS, 2)
    torch.testing.assert_close(torch.tensor(log.step_losses, dtype=torch.float64),
                               curves.sum(dim=1), **F64)
    for i, (seed, trained) in enumerate(zip(SEEDS, stack.unstack())):
        twin, losses = _sequential(make, seed, _text_batch)
        torch.testing.assert_close(curves[:, i], losses, **F64)
        _assert_same_parameters(trained, twin, **TRAINED)
    assert trained.head.weight is trained.tok.weight                   # the tie survives


def test_a_stack_without_randomness_is_deterministic():
    x = torch.randn(2, 5, 4, 12, dtype=torch.float64)
    a, b = StackedModels(_vit((1, 2)), SEEDS), StackedModels(_vit((1, 2)), SEEDS)
    assert torch.equal(a(x), b(x)) and torch.equal(a(x), a(x))


# ------------------------------------------------------------------ forward and unstack
@pytest.mark.parametrize("kind", ["vit", "gpt", "mlp"])
def test_unstacked_modules_give_the_stacked_forward(kind):
    torch.set_default_dtype(torch.float64)
    if kind == "vit":
        stack, x = StackedModels(_vit((0, 1)), SEEDS), torch.randn(2, 5, 4, 12)
    elif kind == "gpt":
        stack, x = StackedModels(_gpt((2, 1)), SEEDS), torch.randint(0, 11, (2, 3, 8))
    else:
        stack, x = StackedModels(lambda s: TokenMLP(4, 6, 3), SEEDS), torch.randn(2, 5, 7, 4)
    stack.eval()
    models = stack.unstack()
    assert [type(m) for m in models] == [type(models[0])] * 2 and not models[0].training
    out = stack(x)
    for i, m in enumerate(models):
        torch.testing.assert_close(out[i], m(x[i]), **F64)
    assert not torch.allclose(out[0], out[1])
    if kind != "mlp":
        logits, states = stack(x, return_hidden=True)              # keywords go to every seed
        assert len(states) == 3 and states[-1].shape[0] == 2
        torch.testing.assert_close(states[-1][1], models[1](x[1], return_hidden=True)[1][-1],
                                   **F64)
        # the stack computes attention through the explicit P; its modules keep the fused path
        assert all(b.attn.explicit for b in stack._template.stack.blocks)
        assert not any(b.attn.explicit for m in models for b in m.stack.blocks)


def test_the_stack_keeps_the_seeds_initialisation_and_data_order():
    stack = StackedModels(_vit(1), SEEDS)
    for i, seed in enumerate(SEEDS):
        gen = profile.seed_everything(seed)
        model = _vit(1)(seed)
        _assert_same_parameters(stack.unstack()[i], model, rtol=0, atol=0)
        assert torch.equal(torch.randperm(10, generator=gen),
                           torch.randperm(10, generator=stack.generators[i]))
    assert set(stack.named_generators()) == {"seed3", "seed7"}
    state = stack.state_dict()
    assert state["stacked.pos"].shape == (2, 1, 4, 8)
    assert state["stacked.stack.blocks.0.attn.in_proj.weight"].shape == (2, 24, 8)


def test_randomness_different_gives_each_seed_its_own_dropout_masks():
    def same_model(_seed):                  # every seed the same weights: only masks differ
        profile.seed_everything(0)
        return _vit((1, 2), dropout=0.5)(0)

    x = torch.randn(1, 5, 4, 12, dtype=torch.float64).expand(2, -1, -1, -1)
    different = StackedModels(same_model, SEEDS).train()
    out = different(x)
    assert not torch.allclose(out[0], out[1])
    same = StackedModels(same_model, SEEDS, randomness="same").train()
    out = same(x)
    torch.testing.assert_close(out[0], out[1], **F64)
    refuse = StackedModels(same_model, SEEDS, randomness="error").train()
    with pytest.raises(RuntimeError, match="vmap"):
        refuse(x)
    refuse.eval()                                              # no dropout in eval: no draw
    torch.testing.assert_close(refuse(x)[0], refuse(x)[1], **F64)


# ------------------------------------------------------------------ optimiser and clipping
@pytest.mark.parametrize("make_opt", [
    lambda p: torch.optim.Adam(p, lr=0.1, amsgrad=True),
    lambda p: torch.optim.AdamW(p, lr=0.1, weight_decay=0.3),
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
], ids=["adam", "adamw", "sgd"])
def test_one_optimiser_over_the_stack_is_s_independent_optimisers(make_opt):
    gen = torch.Generator().manual_seed(0)
    start = torch.randn(3, 4, 5, generator=gen, dtype=torch.float64)   # S = 3 seeds
    stacked = nn.Parameter(start.clone())
    alone = [nn.Parameter(start[i].clone()) for i in range(3)]
    opt, opts = make_opt([stacked]), [make_opt([p]) for p in alone]
    for _ in range(10):
        grads = torch.randn(3, 4, 5, generator=gen, dtype=torch.float64)
        grads[1] *= 1e-3                                   # seeds on different scales
        stacked.grad = grads.clone()
        opt.step()
        for i, (p, o) in enumerate(zip(alone, opts)):
            p.grad = grads[i].clone()
            o.step()
    torch.testing.assert_close(stacked.detach(), torch.stack([p.detach() for p in alone]),
                               rtol=1e-12, atol=1e-14)


def test_clipping_is_per_seed_not_over_the_stack():
    stack = StackedModels(_vit(1), SEEDS)
    x, y = stack_batches([_image_batch(g) for g in stack.generators])
    scale = torch.tensor([1.0, 100.0], dtype=torch.float64)         # seed 7's loss 100 times
    (torch.vmap(_ce)(stack(x), y) * scale).sum().backward()
    models = stack.unstack()
    for i, m in enumerate(models):
        (_ce(m(x[i]), y[i]) * scale[i]).backward()
    norms = stack.clip_grad_norm_(1.0)
    for i, m in enumerate(models):
        norm = torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        torch.testing.assert_close(norms[i], norm, **F64)
        grads = {n: p.grad for n, p in m.named_parameters()}
        for name, p in stack.stacked.named_parameters():
            torch.testing.assert_close(p.grad[i], grads[name], **F64)
    assert norms[1] > 50 * norms[0]          # over the stack, seed 3 would have been crushed


# ------------------------------------------------------------------ checkpoint and resume
@dataclass
class _Settings:
    rounds: int = 4


def _fit_stack(run=None, stop_after=None):
    stack = StackedModels(_gpt((0, 1)), SEEDS)
    opt = torch.optim.AdamW(stack.parameters(), lr=1e-2, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    stack.clip_before_step(opt, 0.5)

    def batches(_round):
        return stacked_batches([_stream(_text_batch, g, 3) for g in stack.generators])

    def end_of_round(r):
        if stop_after is not None and r == stop_after:
            raise KeyboardInterrupt                          # a kill between two saves
        return {"first": stack.stacked.tok.weight[1, 0, 0].item()}

    log = fit(stack, opt, rounds=4, batches=batches, loss=PerSeedLoss(_per_seed_ce, 2),
              device="cpu", run=run, name="stack", schedulers=[sched],
              generators=stack.named_generators(), end_of_round=end_of_round, compile=False)
    return stack, log


def test_a_killed_stacked_fit_resumes_to_the_same_numbers(tmp_path):
    whole, log = _fit_stack()
    run = RunDir("stacked-test", _Settings(), root=tmp_path, enabled=True)
    with pytest.raises(KeyboardInterrupt):
        _fit_stack(run=run, stop_after=2)                    # saved after rounds 0 and 1
    run2 = RunDir("stacked-test", _Settings(), root=tmp_path, enabled=True)
    resumed, log2 = _fit_stack(run=run2)
    assert log2.resumed_at == 2 and log2.losses == log.losses and log2.metrics == log.metrics
    for (name, a), b in zip(whole.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b, name


def test_a_state_dict_loads_only_into_a_stack_of_the_same_seeds():
    a = StackedModels(_vit(1), SEEDS)
    b = StackedModels(_vit(1), SEEDS)
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 3, 4, 12, dtype=torch.float64)
    assert torch.equal(a(x), b(x))
    with pytest.raises(ValueError, match="seeds"):
        StackedModels(_vit(1), (3, 8)).load_state_dict(a.state_dict())


# ------------------------------------------------------------------ bad inputs
def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="seeds: expected at least one"):
        StackedModels(_vit(1), [])
    with pytest.raises(ValueError, match="seeds: expected distinct"):
        StackedModels(_vit(1), [1, 1])
    with pytest.raises(ValueError, match="seeds: expected non-negative ints"):
        StackedModels(_vit(1), [1, -2])
    with pytest.raises(ValueError, match="randomness"):
        StackedModels(_vit(1), SEEDS, randomness="sometimes")
    with pytest.raises(ValueError, match="make_model: expected an nn.Module"):
        StackedModels(lambda s: None, SEEDS)
    with pytest.raises(ValueError, match="seed 7 differs in structure"):
        StackedModels(lambda s: TokenMLP(4, 6 + s, 3), SEEDS)
    with pytest.raises(ValueError, match="seed 7 differs in structure"):
        StackedModels(lambda s: _vit(1)(s) if s == 3 else _vit(1)(s).float(), SEEDS)
    stack = StackedModels(_vit(1), SEEDS)
    with pytest.raises(ValueError, match="leading seed axis of size S=2"):
        stack(torch.randn(3, 5, 4, 12, dtype=torch.float64))
    with pytest.raises(ValueError, match="at least one positional tensor"):
        stack()
    with pytest.raises(ValueError, match="max_norm"):
        stack.clip_grad_norm_(0.0)
    with pytest.raises(ValueError, match=r"shape \(S,\)=\(2,\)"):
        PerSeedLoss(lambda f, b: torch.ones(3), 2)(None, None)
    with pytest.raises(ValueError, match="one shape"):
        stack_batches([torch.zeros(2, 3), torch.zeros(3, 3)])
    with pytest.raises(ValueError, match="ended before the others"):
        list(stacked_batches([[torch.zeros(1)] * 2, [torch.zeros(1)]]))


def test_a_single_seed_called_directly_equals_its_vmapped_twin(monkeypatch):
    """``direct_single``: one seed runs without vmap (fused kernels on CUDA) with the same
    outputs, nested outputs and gradients; a stack of two ignores the switch."""
    import ddcl_theory.runtime.stacked as stacked_module
    x = torch.randint(0, 11, (1, 3, 8))
    direct = StackedModels(_gpt(1), (5,), direct_single=True)
    mapped = StackedModels(_gpt(1), (5,))
    real_vmap, calls = stacked_module.vmap, []
    monkeypatch.setattr(stacked_module, "vmap",
                        lambda *a, **k: calls.append(1) or real_vmap(*a, **k))
    direct(x)
    assert not calls                                            # the direct path: no vmap
    mapped(x)
    assert calls
    for stack in (direct, mapped):
        logits, states = stack(x, return_hidden=True)
        assert logits.shape == (1, 3, 8, 11) and states[-1].shape == (1, 3, 8, 8)
        _ce(logits[0], x[0]).backward()
    torch.testing.assert_close(direct(x), mapped(x), **F64)
    torch.testing.assert_close(direct(x, return_hidden=True)[1][1],
                               mapped(x, return_hidden=True)[1][1], **F64)
    for (name, a), (_, b) in zip(direct.named_parameters(), mapped.named_parameters()):
        assert a.grad is not None and a.grad.shape == a.shape, name
        torch.testing.assert_close(a.grad, b.grad, **F64)
    pair = StackedModels(_gpt(1), SEEDS, direct_single=True)
    assert pair(torch.randint(0, 11, (2, 3, 8))).shape == (2, 3, 8, 11)
