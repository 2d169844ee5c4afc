"""Which CPU kernels torch runs here: ATen's vector capability and MKL's code path.

The emulated "other machine" of CI sets ``ATEN_CPU_CAPABILITY=default`` (ATen's scalar kernels)
and ``MKL_CBWR=COMPATIBLE`` (MKL's generic, conditional-numerical-reproducibility code path);
this tool shows that both took effect, by asking a fresh interpreter (both variables are read
once, when torch and MKL load).

    python -m ddcl_theory.runtime.kernels
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

PROBE = ("import torch; a = torch.ones(8, 8); a @ a; "
         "print('ATEN', torch.backends.cpu.get_cpu_capability())")


def probe(env: dict[str, str] | None = None) -> dict[str, str]:
    """{"aten": AVX512|AVX2|DEFAULT, "mkl_isa": ..., "mkl_cnr": OFF|COMPATIBLE|...} seen by a
    fresh interpreter with ``env`` added to this process's environment."""
    full = {**os.environ, **(env or {}), "MKL_VERBOSE": "1"}
    out = subprocess.run([sys.executable, "-c", PROBE], env=full, capture_output=True, text=True,
                         check=True, timeout=120).stdout
    aten = re.search(r"^ATEN (\S+)", out, re.MULTILINE)
    isa = re.search(r"for Intel\(R\) 64 architecture (.*?), Lnx", out)
    cnr = re.search(r"CNR:(\S+)", out)
    return {"aten": aten.group(1) if aten else "unknown",
            "mkl_isa": isa.group(1) if isa else "no MKL report",
            "mkl_cnr": cnr.group(1) if cnr else "no MKL report"}


def main() -> int:
    found = probe()
    print(f"kernels: ATen {found['aten']}; MKL {found['mkl_isa']} (CNR {found['mkl_cnr']}); "
          f"ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', '')!r} "
          f"MKL_CBWR={os.environ.get('MKL_CBWR', '')!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
