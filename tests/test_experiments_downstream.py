"""HellaSwag scoring: each ending's log-probability equals a token-by-token sum under the model,
batching and padding change nothing, truncation keeps the ending whole, the accuracies read the
right argmax, and the reader cleans and checks the authors' format."""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
import torch
from torch import nn

from ddcl_theory.data import hellaswag
from ddcl_theory.experiments import downstream
from ddcl_theory.models.hf_gpt import HFGPT

VOCAB = 11


class Bigram(nn.Module):
    """logits[b, t] = table[idx[b, t]]: a causal model whose next-token law is a fixed table."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(VOCAB, VOCAB,
                                              generator=torch.Generator().manual_seed(seed)))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.table[idx]


def _by_hand(table: torch.Tensor, context: list[int], ending: list[int]) -> float:
    logp = torch.log_softmax(table.double(), dim=-1)
    seq = context + ending
    return sum(float(logp[seq[i - 1], seq[i]]) for i in range(len(context), len(seq)))


def test_each_ending_scores_the_sum_of_its_token_log_probabilities():
    model = Bigram()
    context, endings = [1, 2, 3], [[4], [5, 6, 7], [8, 9], [10, 0, 1, 2]]
    got = downstream.ending_logprobs(model, context, endings, block_size=16)
    want = [_by_hand(model.table.detach(), context, e) for e in endings]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_causal_transformer_scores_the_same_batched_or_one_ending_at_a_time():
    torch.manual_seed(0)
    model = HFGPT(VOCAB, 16, dim=16, depth=2, heads=2, laplacian_heads=1).eval()
    context, endings = [1, 2, 3, 4], [[5], [6, 7, 8], [9, 10], [0, 1, 2, 3, 4]]
    batched = downstream.ending_logprobs(model, context, endings, block_size=16)
    alone = [downstream.ending_logprobs(model, context, [e], block_size=16)[0] for e in endings]
    np.testing.assert_allclose(batched, alone, rtol=1e-5, atol=1e-5)


def test_a_long_context_loses_its_oldest_tokens_and_the_ending_stays_whole():
    torch.manual_seed(0)
    model = HFGPT(VOCAB, 6, dim=16, depth=1, heads=2).eval()
    context, ending = [1, 2, 3, 4, 5, 6, 7, 8], [9, 10]
    cut = downstream.ending_logprobs(model, context, [ending], block_size=6)
    kept = downstream.ending_logprobs(model, context[-5:], [ending], block_size=6)
    assert cut[0] == pytest.approx(kept[0], abs=1e-6)
    with pytest.raises(ValueError, match="an ending of 7 tokens does not fit"):
        downstream.ending_logprobs(model, context, [[1] * 7], block_size=6)
    with pytest.raises(ValueError, match="context: expected at least one token"):
        downstream.ending_logprobs(model, [], [ending], block_size=6)
    with pytest.raises(ValueError, match="each of at least one token"):
        downstream.ending_logprobs(model, context, [[]], block_size=6)


def _items(n: int = 12, seed: int = 0) -> list[hellaswag.HellaSwagItem]:
    rng = np.random.default_rng(seed)
    letters = "abcdefghij"
    out = []
    for i in range(n):
        endings = tuple("".join(rng.choice(list(letters), size=rng.integers(1, 6)))
                        for _ in range(4))
        out.append(hellaswag.HellaSwagItem("abc", endings, int(rng.integers(0, 4)), i))
    return out


def _encode(text: str) -> list[int]:
    return [0 if c == " " else "abcdefghij".index(c) + 1 for c in text]


def test_the_accuracies_read_the_argmax_by_total_and_per_character():
    model = Bigram(1)
    items = _items()
    score = downstream.score_items(model, _encode, items, block_size=16)
    assert score.logprob.shape == score.per_char.shape == (len(items), 4) and score.n == len(items)
    for i, item in enumerate(items):
        want = [_by_hand(model.table.detach(), _encode(item.context), _encode(" " + e))
                for e in item.endings]
        np.testing.assert_allclose(score.logprob[i], want, rtol=1e-6)
        lengths = [len(e) for e in item.endings]           # the harness's acc_norm
        assert score.correct[i] == (int(np.argmax(want)) == item.label)
        assert score.correct_norm[i] == (int(np.argmax(np.array(want) / lengths)) == item.label)
    assert score.accuracy == pytest.approx(score.correct.mean())
    low, high = score.interval_norm()
    assert 0 <= low <= score.accuracy_norm <= high <= 1
    with pytest.raises(ValueError, match="items: expected at least one"):
        downstream.score_items(model, _encode, [], block_size=16)


def test_uniform_logits_favour_the_shortest_ending_in_total_and_the_longest_per_character():
    items = _items(20, seed=3)

    class Uniform(nn.Module):
        def forward(self, idx):
            return torch.zeros(*idx.shape, VOCAB)

    score = downstream.score_items(Uniform(), _encode, items, block_size=16)
    lengths = np.array([[len(e) for e in it.endings] for it in items])
    assert np.array_equal(score.logprob.argmax(1), lengths.argmin(1))
    # one token per character and one for the leading space: -(n + 1) log V over n characters
    np.testing.assert_allclose(score.per_char, -np.log(VOCAB) * (lengths + 1) / lengths)
    assert np.array_equal(score.per_char.argmax(1), lengths.argmax(1))


# ----------------------------------------------------------------------------------- the reader
ROW = {"ind": 24, "activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.",
       "ctx_b": "he", "ctx": "A man is sitting on a roof. he", "split": "val",
       "split_type": "indomain", "label": 3,
       "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.",
                   "is holding a rubik's cube.", "starts pulling up roofing on a roof."],
       "source_id": "activitynet~v_-JhWjGDPHMY"}
WIKIHOW = dict(ROW, ind=7, activity_label="Fold a shirt",
               ctx_a="[header] How to fold a shirt [title] Lay it flat.",
               ctx_b="smooth  the McKinley sleeves", endings=["[step] Fold it.", "b", "c", "d"],
               label="0")


def test_the_reader_joins_and_cleans_the_context_and_endings(tmp_path):
    path = tmp_path / "val.jsonl"
    path.write_text(json.dumps(ROW) + "\n\n" + json.dumps(WIKIHOW) + "\n", encoding="utf-8")
    first, second = hellaswag.read_items(path)
    # the harness's query: "<activity label>: <ctx_a> <ctx_b capitalised>", then cleaned
    assert first.context == "Roof shingle removal: A man is sitting on a roof. He"
    assert first.label == 3
    assert first.endings[3] == "starts pulling up roofing on a roof." and first.ind == 24
    assert second.context == ("Fold a shirt: How to fold a shirt. Lay it flat. Smooth the "
                              "mckinley sleeves")
    assert second.endings[0] == "Fold it." and second.label == 0
    assert hellaswag.read_items(path, limit=1) == [first]


@pytest.mark.parametrize("row, message", [
    (dict(ROW, endings=["a", "b"]), "endings: expected 4 strings"),
    (dict(ROW, label=4), r"label: expected an int in \[0, 4\)"),
    ({k: v for k, v in ROW.items() if k != "ctx_b"}, r"expected a HellaSwag item, missing"),
])
def test_a_malformed_item_is_named_by_its_line(tmp_path, row, message):
    path = tmp_path / "val.jsonl"
    path.write_text(json.dumps(ROW) + "\n" + json.dumps(row) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"val.jsonl, line 2: {message}"):
        hellaswag.read_items(path)
    path.write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 1: expected a JSON object, got list"):
        hellaswag.read_items(path)
    path.write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="no HellaSwag items"):
        hellaswag.read_items(path)
    with pytest.raises(ValueError, match="limit: expected None or an int >= 1"):
        hellaswag.read_items(path, limit=0)


def test_the_pin_is_git_s_blob_hash_of_the_file(tmp_path):
    path = tmp_path / "val.jsonl"
    path.write_bytes(json.dumps(ROW).encode() + b"\n")
    src = hellaswag.GitBlobSource("x", "http://x/", "val.jsonl", "sha1", "", {})
    git = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert src.hexdigest(path) == src.bytes_digest(path.read_bytes()) == git
    assert f"/{hellaswag.HELLASWAG_COMMIT}/data/hellaswag_val.jsonl" in hellaswag.HELLASWAG_URL
    assert len(hellaswag.HELLASWAG_COMMIT) == len(hellaswag.HELLASWAG_BLOB) == 40
