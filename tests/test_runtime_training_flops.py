"""fit's FLOP count: torch's counter on each training step, forward and backward, and examples."""
from __future__ import annotations

import pytest
import torch

from ddcl_theory.runtime.training import batch_examples, counting_flops, fit


def _linear_fit(n=24, batch=8, d_in=5, d_out=3, rounds=2):
    torch.manual_seed(0)
    model = torch.nn.Linear(d_in, d_out, bias=False)
    x, y = torch.randn(n, d_in), torch.randn(n, d_out)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def batches(_r):
        for i in range(0, n, batch):
            yield torch.arange(i, min(i + batch, n))

    return fit(model, opt, rounds=rounds, batches=batches, device="cpu",
               loss=lambda f, idx: ((f(x[idx]) - y[idx]) ** 2).mean())


def test_a_linear_layer_counts_its_forward_and_weight_gradient_products():
    with counting_flops() as totals:
        _linear_fit(n=24, batch=8, d_in=5, d_out=3, rounds=2)
    # per example: forward 2*5*3, weight gradient 2*5*3 (the input needs no gradient)
    linear = {"flops": 48 * 4 * 5 * 3, "steps": 6, "examples": 48}
    assert totals == {**linear, "models": {"Linear": linear}}


def test_a_ragged_last_batch_counts_its_own_rows():
    with counting_flops() as totals:
        _linear_fit(n=20, batch=8, d_in=4, d_out=2, rounds=1)
    assert totals["steps"] == 3 and totals["examples"] == 20
    assert totals["flops"] == 20 * 4 * 4 * 2


def test_each_model_class_is_counted_apart():
    with counting_flops() as totals:
        _linear_fit(n=8, batch=8, d_in=2, d_out=2, rounds=1)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4, bias=False))
        fit(model, torch.optim.SGD(model.parameters(), lr=0.1), rounds=1, device="cpu",
            batches=lambda r: [torch.ones(5, 3)], loss=lambda f, x: f(x).sum())
    assert totals["models"] == {"Linear": {"flops": 8 * 4 * 2 * 2, "steps": 1, "examples": 8},
                                "Sequential": {"flops": 5 * 4 * 3 * 4, "steps": 1,
                                               "examples": 5}}
    assert totals["flops"] == 8 * 16 + 5 * 48 and totals["examples"] == 13


def test_nothing_is_counted_outside_the_block_and_blocks_do_not_nest():
    with counting_flops() as totals:
        pass
    _linear_fit()
    assert totals == {"flops": 0, "steps": 0, "examples": 0, "models": {}}
    with counting_flops(), pytest.raises(RuntimeError, match="already counting"):
        with counting_flops():
            pass


@pytest.mark.parametrize("batch, expected", [
    (torch.arange(7), 7),                                   # indices
    (torch.zeros(3, 5, dtype=torch.long), 15),              # three seeds' index rows
    (torch.zeros(4, 2, 2), 4),                              # the data itself
    ((torch.zeros(6, 3), torch.zeros(6)), 6),               # (x, y) regression targets
    ((torch.zeros(3, 8, 4, 2), torch.zeros(3, 8, dtype=torch.long)), 24),  # stacked (x, labels)
    ((torch.zeros(2, 7, dtype=torch.long), torch.zeros(2, 7, dtype=torch.long)), 14),  # tokens
    ((torch.zeros(5, 2), torch.ones(5, 4, dtype=torch.bool)), 5),   # a mask is not an index
    ({"x": torch.zeros(2, 9)}, 2),
    (([], torch.arange(5)), 5),
    ("no tensor", 0),
])
def test_batch_examples_reads_the_first_tensor(batch, expected):
    assert batch_examples(batch) == expected


def test_a_stack_of_seeds_is_counted_under_its_width():
    from ddcl_theory.runtime.stacked import StackedModels
    from ddcl_theory.runtime.training import flops_key

    def block(width):
        return lambda _seed: torch.nn.Sequential(torch.nn.Linear(3, width),
                                                 torch.nn.LayerNorm(width))

    assert flops_key(StackedModels(block(8), (0, 1))) == "StackedModels[d=8]"
    assert flops_key(StackedModels(block(16), (0,))) == "StackedModels[d=16]"
    # a stack without a LayerNorm, and a plain model, keep the class name
    assert flops_key(StackedModels(lambda _s: torch.nn.Linear(3, 2), (0,))) == "StackedModels"
    assert flops_key(torch.nn.Sequential(torch.nn.LayerNorm(4))) == "Sequential"
