"""The character data and loss of the language-model study (L9): ids over the sorted vocabulary,
the 90/10 split, the validation split carved from the training text, windows with their next
characters (tiling a text, or spread over it) and the next-character loss. The study that trains
the GPT is tested in test_experiments_laplacian_lm."""
from __future__ import annotations

import math

import pytest
import torch

from ddcl_theory.experiments import laplacian_gpt as lg
from ddcl_theory.models.char_gpt import CharGPT


def test_encode_round_trip():
    ids, vocab = lg.encode("to be, or not to be")
    assert "".join(vocab[i] for i in ids) == "to be, or not to be"
    assert vocab == sorted(vocab)
    with pytest.raises(ValueError, match="text"):
        lg.encode("")


def test_text_splits_are_the_first_nine_tenths_and_the_rest():
    train, val, vocab, _ = lg.text_splits()
    n = len(train) + len(val)
    assert len(train) == int(0.9 * n) and train.dtype == val.dtype == torch.int64
    assert 0 <= int(torch.cat([train, val]).min()) and int(torch.cat([train, val]).max()) < len(
        vocab)


def test_windows_hold_the_block_and_the_characters_that_follow_it():
    ids = torch.arange(100) * 3
    starts = torch.tensor([0, 17, 90])
    x, y = lg.next_char_windows(ids, starts, 8)
    assert x.shape == y.shape == (3, 8)
    assert torch.equal(x[1], ids[17:25]) and torch.equal(y[1], ids[18:26])
    assert torch.equal(x[:, 1:], y[:, :-1])
    with pytest.raises(ValueError, match="ids, starts"):
        lg.next_char_windows(ids[None], starts, 8)


def test_next_char_loss_is_the_models_loss_and_log_v_for_uniform_logits():
    torch.manual_seed(0)
    model = CharGPT(11, 8, dim=8, depth=1, heads=2, laplacian_heads=1)
    x, y = lg.next_char_windows(torch.randint(0, 11, (50,)), torch.tensor([0, 5, 30]), 8)
    assert torch.equal(lg.next_char_loss(model, x, y), model.loss(x, y))
    uniform = lg.next_char_loss(lambda t: torch.zeros(*t.shape, 11), x, y)
    assert float(uniform) == pytest.approx(math.log(11))


def test_the_validation_split_is_the_end_of_the_training_text():
    train, heldout, vocab, _ = lg.text_splits()
    parts = lg.text_parts(0.05)
    assert torch.equal(torch.cat([parts.train, parts.val]), train)
    assert torch.equal(parts.heldout, heldout) and parts.vocab == vocab
    assert len(parts.val) == int(0.05 * len(train))
    with pytest.raises(ValueError, match="val_fraction"):
        lg.text_parts(1.0)


def test_tiling_windows_cover_a_text_once_and_spread_windows_span_it():
    starts = lg.tiling_starts(100, 8)
    assert starts.tolist() == list(range(0, 96, 8))       # 12 windows, the last ends at 96
    assert int(starts[-1]) + 8 + 1 <= 100
    spread = lg.spread_starts(100, 8, 5)
    assert spread[0] == 0 and int(spread[-1]) == 100 - 8 - 1 and len(spread) == 5
    with pytest.raises(ValueError, match="length, block"):
        lg.tiling_starts(8, 8)
    with pytest.raises(ValueError, match="length, block, n"):
        lg.spread_starts(100, 8, 0)
