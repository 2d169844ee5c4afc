"""The language-model study's data per model: GPT-2 BPE tokens with HellaSwag for ``gpt2`` (here
a byte-level BPE trained on a stand-in corpus, in GPT-2's file format), stand-ins only in the
smoke run, and the study at tiny GPT-2 shapes read as the character study is."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ddcl_theory.data import hellaswag, lm_corpus, paper
from ddcl_theory.experiments import laplacian_lm as lm
from ddcl_theory.experiments import lm_data
from ddcl_theory.experiments.laplacian_gpt import text_parts
from ddcl_theory.ledger.decisions import laplacian_lm as decide
from ddcl_theory.runtime import profile

DOCS = ["The cat sat on the mat and looked at the door.",
        "A dog ran in the park, then it rested under a tree.",
        "Rain fell on the town all night; in the morning the streets shone."] * 40
ROWS = [{"ind": i, "activity_label": "Walking", "ctx_a": "A man walks to the door.",
         "ctx_b": "he", "label": i % 4,
         "endings": ["opens it.", "sat on the mat.", "ran in the park.", "looked at it."],
         "source_id": "x"} for i in range(3)]


def tiny_gpt2(**changes) -> lm.LMSettings:
    base = dict(model="gpt2", block_size=16, dim=16, depth=1, heads=4, laplacian_heads=2,
                batch_size=4, steps=(2, 4), rounds=2, eval_windows=4, cdnv_min_count=2,
                seeds=(0, 1), trend_seeds=1, corpus_tokens=100_000, val_fraction=0.1,
                heldout_fraction=0.1)
    return lm.LMSettings(**{**base, **changes})


@pytest.fixture
def bpe_files(tmp_path, monkeypatch):
    """A byte-level BPE (vocab.json, merges.txt) and a HellaSwag file in place of the fetched
    ones, and the corpus tokenised from the stand-in documents."""
    from tokenizers import ByteLevelBPETokenizer
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(DOCS, vocab_size=320, min_frequency=1,
                            special_tokens=[lm_corpus.EOT], show_progress=False)
    tok.save_model(str(tmp_path))
    vocab, merges = tmp_path / "vocab.json", tmp_path / "merges.txt"
    jsonl = tmp_path / "hellaswag_val.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    bpe = lm_corpus.bpe_tokenizer(vocab, merges)
    ids = np.array([i for d in DOCS for i in bpe.encode(d + lm_corpus.EOT).ids], dtype="<u2")
    monkeypatch.setattr(paper, "gpt2_bpe_files", lambda: (vocab, merges))
    monkeypatch.setattr(paper, "hellaswag_file", lambda: jsonl)
    monkeypatch.setattr(lm_corpus, "corpus_tokens", lambda n, **_: ids[:n])
    return bpe, ids


def test_gpt2_data_is_the_bpe_corpus_in_three_parts_with_hellaswag(bpe_files):
    bpe, ids = bpe_files
    data = lm_data.lm_data(tiny_gpt2())
    joined = torch.cat([data.text.train, data.text.val, data.text.heldout]).numpy()
    assert np.array_equal(joined, ids) and len(data.text.vocab) == bpe.get_vocab_size()
    assert len(data.text.heldout) == int(0.1 * len(ids))
    assert [it.label for it in data.items] == [0, 1, 2] and data.downstream.startswith("HellaSwag")
    assert data.encode(" opens it.") == bpe.encode(" opens it.").ids
    assert len(lm_data.lm_data(tiny_gpt2(downstream_items=2)).items) == 2


def test_the_gpt2_study_is_read_as_the_character_study_and_scored_downstream(bpe_files):
    study = lm.run(tiny_gpt2())
    assert study.unit == "token" and study.model_name == "GPT-2"
    assert study.downstream == "HellaSwag (validation)"
    assert len(study.runs) == 2 * (1 + 2)
    for r in study.runs:
        assert np.isfinite(r.val_loss).all() and np.isfinite(r.cdnv).all()
        assert r.val_loss[0] == pytest.approx(np.log(study.vocab_size), rel=0.1)  # untrained
        if r.steps == 4:                       # scored at the longest length only
            assert r.downstream in {0.0, 1 / 3, 2 / 3, 1.0}
        else:
            assert r.downstream is None
    v = decide.decide_l9(study)
    assert "GPT-2 (d=16" in v.evidence and "nats/token" in v.evidence
    assert "nats/char" not in v.evidence and "per character" not in v.evidence.split(
        "Gate")[1].split("Paper")[0]
    assert "HellaSwag (validation) length-normalised accuracy (acc_norm)" in v.evidence
    assert set(v.numbers["downstream"]) == {"0", "2"}


def test_stacks_of_one_seed_give_the_runs_of_the_stacked_seeds():
    from test_experiments_laplacian_lm import _same_run, tiny
    stacked, one = lm.run(tiny()), lm.run(tiny(stack_size=1))
    assert [(r.laplacian_heads, r.steps, r.seed) for r in one.runs] == \
        [(r.laplacian_heads, r.steps, r.seed) for r in stacked.runs]
    for a, b in zip(stacked.runs, one.runs):
        _same_run(a, b, rel=2e-4)


def test_the_evaluation_chunks_keep_the_logits_bounded_and_the_numbers(monkeypatch):
    from ddcl_theory.models.char_gpt import CharGPT
    text = text_parts(0.05)
    torch.manual_seed(0)
    model = CharGPT(len(text.vocab), 8, dim=8, depth=1, heads=2)
    whole = lm.heldout_window_losses(model, text.heldout[:400], 8)
    monkeypatch.setattr(lm, "LOGITS_PER_CHUNK", 8 * len(text.vocab) * 3)   # 3 windows a chunk
    np.testing.assert_allclose(lm.heldout_window_losses(model, text.heldout[:400], 8), whole,
                               rtol=1e-6)


def test_outside_the_smoke_run_missing_gpt2_data_is_an_error(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    monkeypatch.delenv(profile.SMOKE_ENV, raising=False)
    monkeypatch.setattr(paper, "gpt2_bpe_files", _missing)
    monkeypatch.setattr(lm_corpus, "corpus_tokens", _missing)
    with pytest.raises(FileNotFoundError, match="make data PROFILE=paper"):
        lm_data.lm_data(tiny_gpt2())


def test_the_smoke_run_reads_announced_stand_ins_of_the_paper_shapes(monkeypatch, capsys):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    monkeypatch.setenv(profile.SMOKE_ENV, "1")
    monkeypatch.setattr(paper, "gpt2_bpe_files", _missing)
    monkeypatch.setattr(lm_corpus, "corpus_tokens", _missing)
    data = lm_data.lm_data(tiny_gpt2(downstream_items=3))
    assert "NOTICE: the smoke run reads stand-ins" in capsys.readouterr().out
    assert len(data.text.vocab) == lm_data.GPT2_VOCAB and "stand-in" in data.text.source
    chars = text_parts(0.05)
    assert int(data.text.train.max()) < len(chars.vocab)
    assert len(data.items) == 3 and data.downstream == "HellaSwag-format stand-in"
    heldout = "".join(data.text.vocab[i] for i in data.text.heldout.tolist())
    assert all(it.context in heldout for it in data.items)        # cut from the held-out part
    assert data.encode("ab\u00e9") == [chars.vocab.index("a"), chars.vocab.index("b")]


def _missing(*_a, **_k):
    raise FileNotFoundError("gpt2-bpe: not fetched; run `make data PROFILE=paper`")


def test_stand_in_items_have_hellaswag_s_shape_with_the_true_ending_cycling():
    text = "\n".join(f"line {i}" for i in range(12))
    items = lm_data.standin_items(text, 5)
    assert [it.label for it in items] == [0, 1, 2, 3, 0]
    for i, it in enumerate(items):
        assert it.context == f"line {i}" and it.endings[it.label] == f"line {i + 1}"
        assert len(it.endings) == hellaswag.ENDINGS == len(set(it.endings))
    with pytest.raises(ValueError, match="n: expected 1 <= n <= 8"):
        lm_data.standin_items(text, 9)
    with pytest.raises(ValueError, match="size: expected at least"):
        lm_data.standin_vocab(["a", "b"], 1)


@pytest.mark.parametrize("changes, message", [
    (dict(corpus_tokens=None), r"LMSettings\.model='gpt2': expected corpus_tokens"),
    (dict(model="char"), r"LMSettings\.model='char': corpus_tokens and heldout_fraction"),
    (dict(model="bert"), r"LMSettings\.model"),
])
def test_settings_tie_the_corpus_fields_to_the_model(changes, message):
    with pytest.raises(ValueError, match=message):
        tiny_gpt2(**changes)


def test_the_paper_profile_is_gpt2_small_in_stacks_of_one(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    monkeypatch.delenv(profile.SMOKE_ENV, raising=False)
    s = lm.LMSettings.from_profile()
    assert (s.model, s.block_size, s.dim, s.depth, s.heads, s.laplacian_heads) == \
        ("gpt2", 1024, 768, 12, 12, 5)
    assert s.stack_size == 1 and s.attention == "sdpa"
    assert s.decay_matrices_only and s.grad_clip == 1.0                    # GPT-2's recipe
    tokens = s.steps[-1] * s.batch_size * s.block_size
    train = s.corpus_tokens * (1 - s.heldout_fraction) * (1 - s.val_fraction)
    assert tokens < train           # the longest run draws fewer tokens than it could train on


def test_stacks_of_a_length_train_under_names_of_their_own():
    from test_experiments_laplacian_lm import tiny
    assert lm.unit_name(tiny(), 2, 8, (0, 1)) == "lap=2,steps=8"
    one = tiny(stack_size=1)
    assert [lm.unit_name(one, 2, 8, (s,)) for s in (0, 1)] == \
        ["lap=2,steps=8,seeds=0-0", "lap=2,steps=8,seeds=1-1"]


def test_gpt2_s_recipe_decays_the_matrices_only_and_clips_each_seed(bpe_files, monkeypatch):
    from ddcl_theory.runtime.stacked import StackedModels
    seen = {}
    clip = StackedModels.clip_before_step
    monkeypatch.setattr(StackedModels, "clip_before_step",
                        lambda self, opt, norm: seen.setdefault("clip", (opt, norm))
                        and clip(self, opt, norm))
    adamw = torch.optim.AdamW

    def spy(params, **kwargs):
        seen["opt"] = adamw(params, **kwargs)
        return seen["opt"]
    monkeypatch.setattr(torch.optim, "AdamW", spy)
    settings = tiny_gpt2(decay_matrices_only=True, grad_clip=0.5, steps=(2,), seeds=(0,))
    lm.train_lm_stack(settings, lm_data.lm_data(settings), 2, 2, (0,), "cpu")
    decay, plain = seen["opt"].param_groups
    assert (decay["weight_decay"], plain["weight_decay"]) == (settings.weight_decay, 0.0)
    assert all(p.dim() >= 3 for p in decay["params"])          # (seed, rows, cols): matrices
    assert plain["params"] and all(p.dim() == 2 for p in plain["params"])  # biases, LayerNorms
    assert seen["clip"] == (seen["opt"], 0.5)
    seen.clear()
    lm.train_lm_stack(tiny_gpt2(steps=(2,), seeds=(0,)), lm_data.lm_data(tiny_gpt2()), 2, 2,
                      (0,), "cpu")                                 # the character GPT's recipe
    assert len(seen["opt"].param_groups) == 1 and "clip" not in seen
