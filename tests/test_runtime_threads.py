"""torch's CPU thread count for the length of a block, restored after it."""
from __future__ import annotations

import pytest
import torch

from ddcl_theory.runtime.threads import num_threads


def test_num_threads_sets_the_count_inside_and_restores_it_after_an_error():
    before = torch.get_num_threads()
    inside = 1 if before != 1 else 2
    with num_threads(inside):
        assert torch.get_num_threads() == inside
    assert torch.get_num_threads() == before
    with pytest.raises(KeyError), num_threads(inside):
        raise KeyError("inside")
    assert torch.get_num_threads() == before


def test_none_leaves_the_count_and_a_bad_count_is_refused():
    before = torch.get_num_threads()
    with num_threads(None):
        assert torch.get_num_threads() == before
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match="n: expected an int >= 1"), num_threads(bad):
            pass
