"""ddcl-theory: DDCL-Attention and Laplacian heads, and the checks behind the book."""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["DDCLAttention", "LaplacianAttention", "laplacianize", "__version__"]


def __getattr__(name: str):
    # Lazy, so that `import ddcl_theory.ledger.claims` stays light.
    if name == "DDCLAttention":
        from ddcl_theory.layers.ddcl import DDCLAttention
        return DDCLAttention
    if name == "LaplacianAttention":
        from ddcl_theory.layers.laplacian import LaplacianAttention
        return LaplacianAttention
    if name == "laplacianize":
        from ddcl_theory.layers.laplacianize import laplacianize
        return laplacianize
    raise AttributeError(f"module 'ddcl_theory' has no attribute {name!r}")
