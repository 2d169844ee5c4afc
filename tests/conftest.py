"""Shared test set-up: the suite and the goldens run under the cpu profile only."""
from __future__ import annotations

import os

import pytest
import torch

from ddcl_theory.runtime import profile


#: Test files whose assertions hold numbers computed by torch's floating-point kernels (the
#: layers, the theory's numerical checks, metrics, models) to a tolerance: the ``kernels``
#: marker, which CI reruns on an emulated other machine. The rest test words, files, orchestration
#: (a resumed run against its uninterrupted twin, on the same kernels) or exact SymPy algebra.
KERNEL_TEST_FILES = ("test_layers_", "test_functional", "test_models", "test_theory_",
                     "test_metrics_")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name.startswith(KERNEL_TEST_FILES):
            item.add_marker(pytest.mark.kernels)


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
