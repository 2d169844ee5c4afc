"""A language model's HellaSwag accuracy: L9's downstream task at paper scale.

Each item (:class:`~ddcl_theory.data.hellaswag.HellaSwagItem`) is a context and four endings.
The model scores every ending by the log-probability of its tokens after the context
(:func:`ending_logprobs`, the four in one batch); the item counts as right when the true ending
scores highest, by the total log-probability (``accuracy``) and by the log-probability per
character of the ending (``accuracy_norm``, which does not favour short endings; the
lm-evaluation-harness's ``acc_norm``, the figure usually reported for HellaSwag). Chance is 0.25.

    >>> from ddcl_theory.data import hellaswag, lm_corpus, paper
    >>> tok = lm_corpus.bpe_tokenizer(*paper.gpt2_bpe_files())
    >>> items = hellaswag.read_items(paper.hellaswag_file())
    >>> score = score_items(model, lambda s: tok.encode(s).ids, items, block_size=1024)
    >>> score.accuracy_norm, score.interval_norm()

Any model that maps token ids (B, T) to logits (B, T, V) works: the package's
:class:`~ddcl_theory.models.char_gpt.CharGPT` or :class:`~ddcl_theory.models.hf_gpt.HFGPT`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ddcl_theory.data.hellaswag import HellaSwagItem
from ddcl_theory.runtime.progress import progress

__all__ = ["DownstreamScore", "ending_logprobs", "score_items"]


@dataclass(frozen=True)
class DownstreamScore:
    """Per item: ``logprob`` (n, 4) total log-probability of each ending, ``per_char`` (n, 4)
    the same over the ending's characters, ``label`` (n,) the true ending."""

    logprob: np.ndarray
    per_char: np.ndarray
    label: np.ndarray

    @property
    def n(self) -> int:
        return int(self.label.shape[0])

    @property
    def correct(self) -> np.ndarray:
        """(n,) bool: the true ending has the highest total log-probability."""
        return self.logprob.argmax(1) == self.label

    @property
    def correct_norm(self) -> np.ndarray:
        """(n,) bool: the true ending has the highest log-probability per character."""
        return self.per_char.argmax(1) == self.label

    @property
    def accuracy(self) -> float:
        return float(self.correct.mean())

    @property
    def accuracy_norm(self) -> float:
        return float(self.correct_norm.mean())

    def interval_norm(self, level: float = 0.95) -> tuple[float, float]:
        """The Wilson interval of ``accuracy_norm`` over the items (their sampling only)."""
        from scipy import stats
        ci = stats.binomtest(int(self.correct_norm.sum()), self.n).proportion_ci(
            confidence_level=level, method="wilson")
        return float(ci.low), float(ci.high)


@torch.no_grad()
def ending_logprobs(model: Callable[[torch.Tensor], torch.Tensor], context: Sequence[int],
                    endings: Sequence[Sequence[int]], block_size: int,
                    device: str | torch.device = "cpu") -> np.ndarray:
    """(len(endings),) float64: the log-probability of each ending's tokens after the
    ``context`` tokens, all endings in one right-padded batch (the model is causal, so padding
    after a sequence does not change it). Where context and ending exceed ``block_size + 1``
    tokens the oldest context tokens are dropped; an ending must fit with one context token."""
    if len(context) < 1:
        raise ValueError("context: expected at least one token (the first ending token needs "
                         "a token to follow)")
    if not endings or any(len(e) < 1 for e in endings):
        raise ValueError("endings: expected at least one ending, each of at least one token")
    longest = max(len(e) for e in endings)
    if longest > block_size:
        raise ValueError(f"endings: an ending of {longest} tokens does not fit with a context "
                         f"token in block_size={block_size}")
    rows = [(list(context) + list(e))[-(block_size + 1):] for e in endings]
    width = max(len(r) for r in rows) - 1
    x = torch.zeros(len(rows), width, dtype=torch.long)
    y = torch.zeros_like(x)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, (row, ending) in enumerate(zip(rows, endings)):
        n = len(row) - 1
        x[i, :n] = torch.tensor(row[:-1])
        y[i, :n] = torch.tensor(row[1:])
        mask[i, n - len(ending):n] = True
    x, y, mask = x.to(device), y.to(device), mask.to(device)
    logp = F.log_softmax(model(x).float(), dim=-1).gather(-1, y.unsqueeze(-1)).squeeze(-1)
    return (logp.double() * mask).sum(1).cpu().numpy()


def score_items(model: torch.nn.Module, encode: Callable[[str], list[int]],
                items: Sequence[HellaSwagItem], block_size: int,
                device: str | torch.device = "cpu", desc: str = "HellaSwag"
                ) -> DownstreamScore:
    """Score every item (:func:`ending_logprobs`; each ending encoded with a leading space, as
    it follows the context in running text; an empty ending counts one character in
    ``per_char``). ``model`` is put in eval mode."""
    if not items:
        raise ValueError("items: expected at least one HellaSwag item")
    model.eval()
    logprob = np.zeros((len(items), len(items[0].endings)))
    per_char = np.zeros_like(logprob)
    for i, item in enumerate(progress(items, desc=desc)):
        endings = [encode(" " + e) for e in item.endings]
        logprob[i] = ending_logprobs(model, encode(item.context), endings, block_size, device)
        per_char[i] = logprob[i] / np.array([max(len(e), 1) for e in item.endings])
    return DownstreamScore(logprob, per_char, np.array([it.label for it in items]))
