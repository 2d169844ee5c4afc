"""The benchmarked computations: one forward + backward pass of each method at one length."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as nnf

from ddcl_theory.bench.settings import METHODS, BenchSettings

__all__ = ["Case", "bare_products", "make_case", "timed"]


@dataclass
class Case:
    """One benchmarked computation: ``step()`` runs one forward + backward pass."""

    name: str
    step: Callable[[], None]
    input_bytes: int


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _ddcl_layer(s: BenchSettings, device: str):
    from ddcl_theory.layers.ddcl import DDCLAttention

    return DDCLAttention(s.dim, s.num_prototypes, heads=s.heads).to(device).train()


def bare_products(layer, x: torch.Tensor) -> torch.Tensor:
    """The matrix products of ``layer`` (a DDCLAttention with projections) and nothing else.

    x (B, T, dim) -> (B, T, dim): input projection, per head z_h P_h^T (B*T, K) and then
    (z_h P_h^T) P_h (B*T, hd) on column slices (no copies), heads joined, output projection.
    """
    b, t, _ = x.shape
    hd = layer.head_dim
    z = nnf.linear(x, layer.in_proj.weight, layer.in_proj.bias).reshape(b * t, -1)
    parts = []
    for h in range(layer.heads):
        p = layer.prototypes[h]
        parts.append((z[:, h * hd:(h + 1) * hd] @ p.T) @ p)
    m = torch.cat(parts, dim=1).view(b, t, -1)
    return nnf.linear(m, layer.out_proj.weight, layer.out_proj.bias)


def make_case(method: str, s: BenchSettings, seq_len: int, device: str,
              modules: dict | None = None) -> Case:
    """Build the module (reused through ``modules``) and the input of one method at one length."""
    modules = {} if modules is None else modules
    gen = torch.Generator(device="cpu").manual_seed(s.seed + seq_len)
    x = torch.randn(s.batch, seq_len, s.dim, generator=gen).to(device).requires_grad_(True)

    def zero():
        x.grad = None
        for m in modules.values():
            m.zero_grad(set_to_none=True)

    if method in ("ddcl", "bare"):
        if "ddcl" not in modules:
            modules["ddcl"] = _ddcl_layer(s, device)
        layer = modules["ddcl"]
        if method == "ddcl":
            def step():
                zero()
                out = layer(x)
                (out.output.sum() + out.losses.l_q + out.losses.v).backward()
        else:
            def step():
                zero()
                bare_products(layer, x).sum().backward()
    elif method == "sdpa":
        if "sdpa" not in modules:
            from ddcl_theory.layers.laplacian import LaplacianAttention

            modules["sdpa"] = LaplacianAttention(s.dim, s.heads).to(device).train()
        attn = modules["sdpa"]

        def step():
            zero()
            attn(x).sum().backward()
    elif method == "mean":
        def step():
            zero()
            x.mean(1).sum().backward()
    elif method == "vq":
        if "vq" not in modules:
            from vector_quantize_pytorch import VectorQuantize

            modules["vq"] = VectorQuantize(dim=s.dim, codebook_size=s.num_prototypes,
                                           heads=s.heads, separate_codebook_per_head=True,
                                           ).to(device).train()
        vq = modules["vq"]

        def step():
            zero()
            quantized, _, loss = vq(x)
            (quantized.sum() + loss.sum()).backward()
    else:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    return Case(method, step, x.numel() * x.element_size())


def timed(case: Case, device: str) -> tuple[float, float]:
    """(wall-clock, process CPU) seconds of one ``case.step()``, synchronised on CUDA."""
    _sync(device)
    w0, c0 = time.perf_counter(), time.process_time()
    case.step()
    _sync(device)
    return time.perf_counter() - w0, time.process_time() - c0
