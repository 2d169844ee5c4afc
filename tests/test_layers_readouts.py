"""Argument checks of the readouts of frozen tokens (ddcl_theory.layers.readouts); their numbers
are tested with the text-readout experiment (tests/test_experiments_text_readout.py)."""
from __future__ import annotations

import pytest
import torch

from ddcl_theory.layers import readouts as R


@pytest.mark.parametrize("pool", [R.masked_mean, R.first_token, R.PackedTokens.from_padded])
def test_token_readouts_need_a_token_batch_and_its_bool_mask(pool):
    x, mask = torch.randn(2, 3, 4), torch.ones(2, 3, dtype=torch.bool)
    pool(x, mask)
    with pytest.raises(ValueError, match=r"^x: expected shape \(B, T, dim\), got \(3, 4\)"):
        pool(x[0], mask)
    with pytest.raises(ValueError, match=r"^mask: expected a bool tensor .*got None"):
        pool(x, None)
    with pytest.raises(ValueError, match="^mask: expected a bool tensor"):
        pool(x, mask.float())
    with pytest.raises(ValueError, match=r"^mask: expected shape \(B, T\)=\(2, 3\)"):
        pool(x, mask[:, :2])


def test_lloyd_and_packed_tokens_check_their_shapes():
    with pytest.raises(ValueError, match=r"^centres: expected shape \(K, 4\), got \(2, 3\)"):
        R.lloyd(torch.randn(5, 4), torch.randn(2, 3))
    with pytest.raises(ValueError, match=r"^z: expected shape \(N, d\)"):
        R.lloyd(torch.randn(5), torch.randn(2, 3))
    with pytest.raises(ValueError, match=r"^values: expected shape \(total, d\)"):
        R.PackedTokens(torch.randn(4), torch.tensor([0, 4]))


def test_pooled_readout_checks_classes_and_the_temperature_fraction():
    with pytest.raises(ValueError, match="^num_classes: expected an int >= 2, got 1"):
        R.DDCLPooledReadout(4, 1, 2)
    model = R.DDCLPooledReadout(4, 2, 2)
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="^fraction: expected a finite number > 0"):
            model.calibrate(torch.randn(6, 4), bad)
