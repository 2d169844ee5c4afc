"""The field's GPT for the paper profile: transformers' ``GPT2LMHeadModel`` at GPT-2's shapes,
with Laplacian heads (:func:`ddcl_theory.laplacianize`), read like the package's
:class:`~ddcl_theory.models.char_gpt.CharGPT`.

``forward(idx)`` gives logits; ``forward(idx, return_hidden=True)`` also the residual stream
before the first block and after each, all before the final LayerNorm (transformers' own last
hidden state is after it), and :attr:`HFGPT.norm` is that LayerNorm. So the language-model
study's measures (:func:`ddcl_theory.experiments.laplacian_lm.measure`: the loss, and the CDNV
of the final tokens grouped by the next token) read either model.

    >>> model = HFGPT(50257, 1024, dim=768, depth=12, heads=12, laplacian_heads=5)  # GPT-2 small
    >>> logits = model(torch.randint(0, 50257, (2, 16)))        # (2, 16, 50257)
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ddcl_theory.layers.laplacianize import laplacianize
from ddcl_theory.runtime.validate import (
    check_choice,
    check_int_range,
    check_positive_int,
    check_shape,
)

__all__ = ["HFGPT"]


class HFGPT(nn.Module):
    """transformers' GPT-2 language model (learned positions, pre-norm blocks, final LayerNorm,
    the output head tied to the token embedding), no dropout, no cache.

    Args:
        vocab_size: tokens V (its last id doubles as GPT-2's end-of-text id in the config).
        block_size: longest context ``T_max``.
        dim, depth, heads, mlp_ratio: width, blocks, heads per block, MLP width over ``dim``.
        laplacian_heads: the last ``laplacian_heads`` heads of every block compute ``V - P V``.
        attention: transformers' attention function under the Laplacian one ("eager" or
            "sdpa"; eager stacks under ``vmap`` on the CPU).

    Shapes: ``forward(idx (B, T) int64, T <= block_size) -> logits (B, T, V)``; with
    ``return_hidden=True`` also ``[x_0, ..., x_depth]``, each (B, T, dim).
    """

    def __init__(self, vocab_size: int, block_size: int, *, dim: int = 768, depth: int = 12,
                 heads: int = 12, laplacian_heads: int = 0, mlp_ratio: int = 4,
                 attention: str = "eager") -> None:
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel
        self.vocab_size = check_positive_int(vocab_size, "vocab_size")
        self.block_size = check_positive_int(block_size, "block_size")
        if check_positive_int(dim, "dim") % check_positive_int(heads, "heads"):
            raise ValueError(f"dim: expected a multiple of heads={heads}, got {dim}")
        check_choice(attention, "attention", ("eager", "sdpa"))
        config = GPT2Config(vocab_size=vocab_size, n_positions=block_size, n_embd=dim,
                            n_layer=check_positive_int(depth, "depth"), n_head=heads,
                            n_inner=check_positive_int(mlp_ratio, "mlp_ratio") * dim,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                            bos_token_id=vocab_size - 1, eos_token_id=vocab_size - 1)
        config._attn_implementation = attention
        self.hf = GPT2LMHeadModel(config)
        laplacianize(self.hf, laplacian_heads)
        self.laplacian_heads = int(laplacian_heads)

    @property
    def norm(self) -> nn.LayerNorm:
        """The final LayerNorm (before the output head)."""
        return self.hf.transformer.ln_f

    def forward(self, idx: Tensor, return_hidden: bool = False
                ) -> Tensor | tuple[Tensor, list[Tensor]]:
        check_shape(idx, "idx", ("B", "T"), dtype=torch.long)
        check_int_range(idx.shape[1], "idx: length T (at most block_size)", 1, self.block_size)
        if not return_hidden:
            return self.hf(input_ids=idx, use_cache=False).logits
        last: list[Tensor] = []
        hook = self.hf.transformer.h[-1].register_forward_hook(
            lambda _m, _a, out: last.append(out[0] if isinstance(out, tuple) else out))
        try:
            out = self.hf(input_ids=idx, use_cache=False, output_hidden_states=True)
        finally:
            hook.remove()
        # transformers' last hidden state is after the final LayerNorm: the block's own output
        return out.logits, list(out.hidden_states[:-1]) + [last[-1]]
