"""scripts/torch_variant.py: which torch build `make setup` installs, and how the CUDA one is."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "torch_variant.py"
spec = importlib.util.spec_from_file_location("torch_variant", SCRIPT)
torch_variant = importlib.util.module_from_spec(spec)
spec.loader.exec_module(torch_variant)


@pytest.mark.parametrize("requested, gpu, chosen", [
    (None, False, "cpu"), (None, True, "cuda"), ("auto", True, "cuda"), ("CPU", True, "cpu"),
    ("cuda", False, "cuda"),
])
def test_the_variant_follows_torch_and_the_gpu(requested, gpu, chosen):
    assert torch_variant.variant(requested, gpu) == chosen


def test_an_unknown_variant_is_refused():
    with pytest.raises(SystemExit, match="TORCH: expected one of"):
        torch_variant.variant("rocm", False)


def test_the_cuda_install_ignores_local_pip_config_and_keeps_the_pins():
    args = torch_variant.cuda_pip_args(ROOT / "constraints.txt", None)
    assert args[:3] == ["install", "--isolated", "--force-reinstall"]
    assert args[3:5] == ["-c", str(ROOT / "constraints.txt")]
    assert args[5] == torch_variant.pinned_torch(ROOT / "constraints.txt") == "torch==2.13.0"
    with_index = torch_variant.cuda_pip_args(ROOT / "constraints.txt", "https://x/whl/cu128")
    assert with_index[-4:] == ["--index-url", "https://x/whl/cu128", "--extra-index-url",
                               "https://pypi.org/simple"]


def test_a_constraints_file_without_a_torch_pin_is_refused(tmp_path):
    (tmp_path / "c.txt").write_text("numpy==2.4.6\n")
    with pytest.raises(SystemExit, match="no torch==<version> pin"):
        torch_variant.pinned_torch(tmp_path / "c.txt")
