"""Shared test set-up: the suite and the goldens run under the cpu profile only."""
from __future__ import annotations

import os

import pytest
import torch

from ddcl_theory.runtime import profile


def pytest_configure(config):
    name = os.environ.get(profile.PROFILE_ENV, profile.DEFAULT_PROFILE)
    if name.strip().lower() not in ("", "cpu"):
        raise pytest.UsageError(
            f"{profile.PROFILE_ENV}={name!r}: the tests and the notebook goldens are recorded under "
            "the 'cpu' profile; unset it to run the tests (the paper profile is for reruns on a GPU)")
    # The ledger golden is the cpu ledger: a checkout that also holds paper-profile results
    # (after `make paper`) must not grow the paper column inside the notebook regression.
    os.environ.setdefault("DDCL_LEDGER_PAPER", "0")


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """The cpu profile's torch set-up: tiny tensors, so one thread beats two on a shared host."""
    before = torch.get_num_threads()
    profile.configure_torch()
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _float32_default():
    """Each test starts from torch's default dtype and a fixed seed."""
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(0)
    yield
