"""Laplacian heads in a Hugging Face transformers model, in place: :func:`laplacianize`.

``laplacianize(model, laplacian_heads)`` turns the last ``laplacian_heads`` heads of every
self-attention layer of a transformers ViT, GPT-2 or BERT into Laplacian heads: each such head
outputs ``V - P V`` instead of ``P V`` (:class:`~ddcl_theory.layers.laplacian.LaplacianAttention`
computes the same thing on the package's own layout). No weight is added or changed.

How: transformers routes every attention layer through one registered *attention function*
(``config._attn_implementation``: ``"eager"``, ``"sdpa"``, ...). We register one more under two
names: ``"laplacian_sdpa"`` over SDPA, and ``"laplacian"`` over the model's previous function
otherwise (eager by default). It calls that base and then, for the trailing heads each attention
module names in its attribute ``laplacian_heads``, subtracts the result from the values. So the
previous implementation (eager or SDPA, dropout, the KV cache of generation) keeps working
unchanged; with a cache, each query's own value is the last rows of ``value``.

Each name takes its base's masks: transformers' additive float masks for ``"laplacian"``; SDPA's
own for ``"laplacian_sdpa"``, which leave a purely causal mask out and pass ``is_causal``
instead, so that a model called directly keeps SDPA's fused kernels (flash, cuDNN). A padding
mask batched by ``torch.vmap`` is always made into a mask (deciding whether to skip it reads
its values, which vmap refuses). Under ``vmap`` on CUDA (models stacked by
:class:`~ddcl_theory.runtime.stacked.StackedModels`) SDPA's memory-efficient kernel is left
out: its backward fails there ("LSE is not correctly aligned"). On an H200 the stacked GPT-2
then ran SDPA's math path (flash and cuDNN found no kernel for its batched inputs), which keeps
the T x T scores for backward: a stack of one seed is better called directly
(``StackedModels(..., direct_single=True)``).

    >>> from transformers import ViTConfig, ViTModel
    >>> from ddcl_theory import laplacianize
    >>> model = ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
    ...                            intermediate_size=64, image_size=32, patch_size=8))
    >>> model = laplacianize(model, laplacian_heads=2)      # heads 2 and 3 of every layer
    >>> model.config._attn_implementation                   # the ViT's default base is SDPA
    'laplacian_sdpa'
"""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from ddcl_theory.runtime.validate import check_int_range

__all__ = ["laplacianize", "attention_modules", "IMPLEMENTATION", "SDPA_IMPLEMENTATION",
           "SUPPORTED"]

#: The name of the attention function :func:`laplacianize` registers, over an eager base.
IMPLEMENTATION = "laplacian"
#: The same function over an SDPA base (with SDPA's masks).
SDPA_IMPLEMENTATION = "laplacian_sdpa"
#: The self-attention classes of the supported models and their attribute holding the number of
#: heads (cross-attention modules are left alone).
SUPPORTED = {"ViTAttention": "num_attention_heads", "ViTSelfAttention": "num_attention_heads",
             "GPT2Attention": "num_heads", "BertSelfAttention": "num_attention_heads"}


def attention_modules(model: nn.Module) -> Iterator[tuple[str, nn.Module, int]]:
    """``(name, module, number of heads)`` of every self-attention module of ``model`` that
    :func:`laplacianize` changes (those of :data:`SUPPORTED`, cross-attention excepted)."""
    for name, module in model.named_modules():
        attr = SUPPORTED.get(type(module).__name__)
        if attr is None or getattr(module, "is_cross_attention", False):
            continue
        yield name, module, int(getattr(module, attr))


def _eager_of(module: nn.Module):
    """The eager attention function of the module's own model family."""
    return getattr(sys.modules[type(module).__module__], "eager_attention_forward")


def _vmap_safe_sdpa(base: str, query: Tensor):
    """SDPA's backends without the memory-efficient one, for an SDPA base under ``vmap`` on
    CUDA (its backward fails there); else no change."""
    if base != "sdpa" or not query.is_cuda or not torch._C._functorch.is_batchedtensor(query):
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH],
                       set_priority=True)


def laplacian_attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor,
                        attention_mask: Tensor | None, *args, base: str | None = None, **kwargs):
    """The registered attention function: the base function (``base``; None: the module's
    ``laplacian_base``, else eager), then ``V - P V`` on its trailing ``module.laplacian_heads``
    heads. ``query`` (B, H, T, d), ``value`` (B, H_kv, S, d) with S >= T (a KV cache holds
    earlier positions first); the output is (B, T, H, d), as transformers' attention functions
    return it."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    base = base or getattr(module, "laplacian_base", "eager")
    function = ALL_ATTENTION_FUNCTIONS.get_interface(base, _eager_of(module))
    with _vmap_safe_sdpa(base, query):
        out, weights = function(module, query, key, value, attention_mask, *args, **kwargs)
    n = getattr(module, "laplacian_heads", 0)
    if n:
        heads, t = query.shape[1], query.shape[2]
        v = value
        if v.shape[1] != heads:                                    # grouped key/value heads
            v = v.repeat_interleave(heads // v.shape[1], dim=1)
        own = v[:, heads - n:, v.shape[2] - t:, :].transpose(1, 2).to(out.dtype)  # (B, T, n, d)
        out = torch.cat([out[:, :, :heads - n], own - out[:, :, heads - n:]], dim=2)
    return out, weights


def laplacian_sdpa_attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor,
                             attention_mask: Tensor | None, *args, **kwargs):
    """:func:`laplacian_attention` over SDPA whatever the module says: its masks are SDPA's,
    which no other base may take (a purely causal mask is left out)."""
    return laplacian_attention(module, query, key, value, attention_mask, *args, base="sdpa",
                               **kwargs)


def _sdpa_mask(*args, **kwargs):
    """transformers' ``sdpa_mask``, except that a padding mask batched by ``vmap`` is always made
    into a mask: whether one may be skipped is decided by reading its values."""
    from transformers.masking_utils import sdpa_mask
    padding = kwargs.get("attention_mask")
    if padding is not None and torch._C._functorch.is_batchedtensor(padding):
        kwargs.update(allow_is_causal_skip=False, allow_is_bidirectional_skip=False)
    return sdpa_mask(*args, **kwargs)


def _register() -> None:
    """Register the attention function under both names, each with its base's masks:
    transformers' additive float masks (``eager_mask``: 0 where a query may attend, the dtype's
    minimum elsewhere) for ``"laplacian"``, SDPA's (``sdpa_mask``: none where ``is_causal`` says
    it all, else booleans; :func:`_sdpa_mask`) for ``"laplacian_sdpa"``. An implementation without a mask function would get no
    mask at all, causal or padding."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    for name, function, mask in ((IMPLEMENTATION, laplacian_attention, eager_mask),
                                 (SDPA_IMPLEMENTATION, laplacian_sdpa_attention, _sdpa_mask)):
        if name not in ALL_ATTENTION_FUNCTIONS:
            AttentionInterface.register(name, function)
        if name not in AttentionMaskInterface._global_mapping:
            AttentionMaskInterface.register(name, mask)


def laplacianize(model: nn.Module, laplacian_heads: int) -> nn.Module:
    """Make the last ``laplacian_heads`` heads of every self-attention layer of a transformers
    ViT, GPT-2 or BERT model Laplacian heads (``V - P V``), in place; return the model.

    Args:
        model: a ``transformers.PreTrainedModel`` (ViT, GPT-2 or BERT family, any head).
        laplacian_heads: an int in ``[0, heads]``; 0 restores ordinary attention everywhere.

    Raises ``ValueError`` when the model has no supported attention module, or when
    ``laplacian_heads`` is out of range for one of its layers. Call it again to change the
    number; the model's previous attention function (eager or SDPA) is kept underneath.
    """
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "_attn_implementation"):
        raise ValueError(f"model: expected a transformers PreTrainedModel, got "
                         f"{type(model).__name__}")
    found = list(attention_modules(model))
    if not found:
        raise ValueError(f"model: no self-attention layer of {sorted(SUPPORTED)} in "
                         f"{type(model).__name__}; supported: ViT, GPT-2 and BERT models")
    for name, _, heads in found:
        check_int_range(laplacian_heads, f"laplacian_heads (layer {name!r} has {heads} heads)",
                        0, heads)
    _register()
    current = config._attn_implementation
    ours = (IMPLEMENTATION, SDPA_IMPLEMENTATION)
    base = current if current not in ours else getattr(found[0][1], "laplacian_base", "eager")
    for _, module, _ in found:
        module.laplacian_base = base
        module.laplacian_heads = int(laplacian_heads)
    model.set_attn_implementation(SDPA_IMPLEMENTATION if base == "sdpa" else IMPLEMENTATION)
    return model
