"""Which build of the pinned torch `make setup` installs, and the pip command for the CUDA one.

    python scripts/torch_variant.py            # prints "cpu" or "cuda"
    python scripts/torch_variant.py --pip      # the pip arguments that install the CUDA build

``TORCH=cpu|cuda|auto`` chooses (``make setup TORCH=cuda``); ``auto`` (the default) takes
``cuda`` when ``nvidia-smi -L`` lists a GPU. The pinned environment (requirements.txt,
constraints.txt) installs the CPU build; the CUDA build of the same version is then installed
over it from PyPI (whose Linux x86_64 torch wheels are CUDA builds), ignoring pip's local
configuration (``--isolated``: a machine whose pip finds a CPU wheel on disk first), with the
same constraints, so nothing else moves. ``TORCH_INDEX_URL`` names another index (e.g.
``https://download.pytorch.org/whl/cu128``). The goldens stay CPU builds' outputs.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

VARIANTS = ("cpu", "cuda", "auto")


def has_gpu() -> bool:
    """``nvidia-smi -L`` runs and lists at least one GPU."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return False
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def variant(requested: str | None, gpu: bool) -> str:
    """``"cpu"`` or ``"cuda"`` from ``TORCH`` (``requested``) and whether a GPU is present."""
    requested = (requested or "auto").strip().lower()
    if requested not in VARIANTS:
        raise SystemExit(f"TORCH: expected one of {VARIANTS}, got {requested!r}")
    if requested == "auto":
        return "cuda" if gpu else "cpu"
    return requested


def pinned_torch(constraints: Path) -> str:
    """The torch pin of the constraints file, e.g. ``"torch==2.13.0"``."""
    for line in constraints.read_text().splitlines():
        if re.fullmatch(r"torch==[\w.]+", line.strip()):
            return line.strip()
    raise SystemExit(f"{constraints}: no torch==<version> pin")


def cuda_pip_args(constraints: Path, index_url: str | None) -> list[str]:
    """pip arguments that replace the installed CPU torch by the CUDA build of the pin."""
    args = ["install", "--isolated", "--force-reinstall", "-c", str(constraints),
            pinned_torch(constraints)]
    if index_url:
        args += ["--index-url", index_url, "--extra-index-url", "https://pypi.org/simple"]
    return args


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parents[1]
    chosen = variant(os.environ.get("TORCH"), has_gpu())
    if "--pip" in argv:
        print("\n".join(cuda_pip_args(root / "constraints.txt", os.environ.get("TORCH_INDEX_URL"))))
    else:
        print(chosen)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
