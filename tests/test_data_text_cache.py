"""The embedding cache: key, atomic writes, hits that never call the encoder, ragged storage."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from _text_fakes import FakeEncoder

from ddcl_theory.data.text import cache as C
from ddcl_theory.data.text import clean_imdb, load_encoder, strip_newsgroup

TEXTS = ["a good film", "bad", "not bad at all , really", "the end"]


def test_cache_key_changes_with_model_checksum_texts_max_length_and_indices():
    h = C.texts_digest(TEXTS)
    base = C.cache_key("m", h, 64, checksum="abc", indices=[0, 1, 2, 3])
    assert base == C.cache_key("m", h, 64, checksum="abc", indices=np.arange(4))
    variants = [C.cache_key("m2", h, 64, checksum="abc", indices=[0, 1, 2, 3]),
                C.cache_key("m", h, 65, checksum="abc", indices=[0, 1, 2, 3]),
                C.cache_key("m", h, 64, checksum="abd", indices=[0, 1, 2, 3]),
                C.cache_key("m", h, 64, checksum=None, indices=[0, 1, 2, 3]),
                C.cache_key("m", h, 64, checksum="abc", indices=[0, 1, 2, 4]),
                C.cache_key("m", h, 64, checksum="abc", indices=None),
                C.cache_key("m", C.texts_digest(TEXTS[:3] + ["the end."]), 64, checksum="abc",
                            indices=[0, 1, 2, 3])]
    assert len({base, *variants}) == 1 + len(variants)


def test_texts_digest_is_order_and_boundary_sensitive():
    assert C.texts_digest(["ab"]) != C.texts_digest(["a", "b"])
    assert C.texts_digest(["a", "b"]) != C.texts_digest(["b", "a"])
    with pytest.raises(ValueError, match="texts"):
        C.texts_digest("a single string")


def test_bad_key_arguments_raise():
    with pytest.raises(ValueError, match="max_length"):
        C.cache_key("m", "h", 0)
    with pytest.raises(ValueError, match="model"):
        C.cache_key("", "h", 8)
    with pytest.raises(ValueError, match="indices"):
        C.cache_key("m", "h", 8, indices=[[0, 1]])


def test_a_hit_does_not_call_the_encoder_and_returns_the_same_arrays(tmp_path):
    enc = FakeEncoder()
    first = C.embed(enc, TEXTS, 16, directory=tmp_path, checksum="x")
    assert enc.calls == 1 and not first.hit
    second = C.embed(enc, TEXTS, 16, directory=tmp_path, checksum="x")
    assert enc.calls == 1 and second.hit and second.key == first.key
    for name in ("values", "ids", "offsets"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))
    # another max length is another entry: the encoder runs again
    C.embed(enc, TEXTS, 4, directory=tmp_path, checksum="x")
    assert enc.calls == 2
    assert len(list(tmp_path.glob("*.npz"))) == 2


def test_stored_embeddings_are_float16_copies_with_ids_and_lengths(tmp_path):
    enc = FakeEncoder()
    emb = C.embed(enc, TEXTS, 5, directory=tmp_path)
    assert emb.values.dtype == np.float16 and emb.ids.dtype == np.int32
    expected = enc.encode(TEXTS, 5)
    assert emb.lengths.tolist() == [len(i) for i, _ in expected] == [5, 3, 5, 4]
    for i, (ids, values) in enumerate(expected):
        a, b = emb.offsets[i], emb.offsets[i + 1]
        np.testing.assert_array_equal(emb.ids[a:b], ids)
        np.testing.assert_allclose(emb.values[a:b].astype(np.float32), values, rtol=1e-3,
                                   atol=1e-3)


def test_padded_tensors_and_attention_mask_match_the_ragged_storage(tmp_path):
    emb = C.embed(FakeEncoder(), TEXTS, 16, directory=tmp_path)
    x, mask, ids = emb.padded([2, 1], dtype=torch.float32)
    assert x.shape == (2, int(emb.lengths.max()), emb.dim)
    assert mask.sum(1).tolist() == [emb.lengths[2], emb.lengths[1]]
    assert float(x[~mask].abs().max()) == 0.0 and int(ids[~mask].abs().max()) == 0
    a, b = emb.offsets[1], emb.offsets[2]
    np.testing.assert_array_equal(x[1, : b - a].numpy(), emb.values[a:b].astype(np.float32))
    np.testing.assert_array_equal(emb.cls(), emb.values[emb.offsets[:-1]].astype(np.float32))
    mean = (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    np.testing.assert_allclose(emb.mean()[[2, 1]], mean.numpy(), rtol=1e-6, atol=1e-6)
    sub = emb.subset([3, 0])
    assert sub.lengths.tolist() == [emb.lengths[3], emb.lengths[0]]
    np.testing.assert_array_equal(sub.cls(), emb.cls()[[3, 0]])


def test_interrupted_write_leaves_no_file_and_the_next_call_encodes(tmp_path, monkeypatch):
    enc = FakeEncoder()
    real_savez = np.savez

    def failing_savez(f, **arrays):
        f.write(b"PK partial bytes")            # something reaches the disk, then it fails
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", failing_savez)
    with pytest.raises(OSError, match="disk full"):
        C.embed(enc, TEXTS, 16, directory=tmp_path)
    assert list(tmp_path.iterdir()) == []       # neither the final file nor a temporary one
    monkeypatch.setattr(np, "savez", real_savez)
    emb = C.embed(enc, TEXTS, 16, directory=tmp_path)
    assert enc.calls == 2 and not emb.hit and (tmp_path / f"{emb.key}.npz").is_file()


def test_the_final_file_appears_only_by_rename(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append((os.path.dirname(src), os.path.basename(src), os.path.basename(dst)))
        assert not os.path.exists(dst)           # nothing at the final name before the rename
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    emb = C.embed(FakeEncoder(), TEXTS, 16, directory=tmp_path)
    assert len(seen) == 1
    folder, src, dst = seen[0]
    assert folder == str(tmp_path) and dst == f"{emb.key}.npz" and src.startswith(".")


def test_a_corrupt_cache_file_is_a_miss_and_is_rewritten(tmp_path):
    enc = FakeEncoder()
    emb = C.embed(enc, TEXTS, 16, directory=tmp_path)
    path = tmp_path / f"{emb.key}.npz"
    path.write_bytes(path.read_bytes()[:100])   # truncated
    again = C.embed(enc, TEXTS, 16, directory=tmp_path)
    assert enc.calls == 2 and not again.hit
    assert C.embed(enc, TEXTS, 16, directory=tmp_path).hit and enc.calls == 2


def test_cache_directory_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DDCL_CACHE_DIR", str(tmp_path / "a"))
    assert C.embeddings_dir() == tmp_path / "a" / "embeddings"
    monkeypatch.delenv("DDCL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert C.embeddings_dir() == tmp_path / "x" / "ddcl-theory" / "embeddings"


def test_embed_checks_its_arguments(tmp_path):
    with pytest.raises(ValueError, match="texts"):
        C.embed(FakeEncoder(), [], 8, directory=tmp_path)
    with pytest.raises(ValueError, match="indices"):
        C.embed(FakeEncoder(), TEXTS, 8, directory=tmp_path, indices=[0, 1])


def test_newsgroup_strip_removes_header_quotes_and_signature():
    msg = ("From: someone@example.com\nSubject: Re: bikes\nOrganization: X\n\n"
           "In article <1@x> joe@y.com writes:\n> quoted line\n}>nested quote\nJD> tagged quote\n"
           "My own words.\nMore words.\n--\nJoe, Example Inc.")
    assert strip_newsgroup(msg) == "My own words.\nMore words."
    assert strip_newsgroup("no header block at all") == "no header block at all"


def test_imdb_clean_replaces_line_break_tags():
    assert clean_imdb("Great.<br /><br />Really<br/>good") == "Great.  Really good"


def test_load_encoder_rejects_unknown_names():
    with pytest.raises(ValueError, match="name"):
        load_encoder("gpt-17")


def test_the_paper_profile_refuses_a_substitute_for_bert_base(monkeypatch, capsys):
    from ddcl_theory.data.text import encoders
    from ddcl_theory.runtime import profile

    monkeypatch.setattr(encoders, "_bert_base_source", lambda: None)
    monkeypatch.delenv(encoders.SUBSTITUTE_ENV, raising=False)
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    monkeypatch.setenv(profile.ALLOW_CPU_ENV, "1")
    monkeypatch.delenv(profile.SMOKE_ENV, raising=False)
    assert not encoders.substitute_allowed()
    with pytest.raises(FileNotFoundError, match="make data PROFILE=paper.*DDCL_ALLOW_SUBSTITUTE"):
        load_encoder("bert-base-uncased")
    monkeypatch.setenv(profile.SMOKE_ENV, "1")                  # the smoke run: shapes, not BERT
    assert encoders.substitute_allowed()
    monkeypatch.delenv(profile.SMOKE_ENV)
    monkeypatch.setenv(encoders.SUBSTITUTE_ENV, "1")            # asked for explicitly
    assert encoders.substitute_allowed()
    monkeypatch.delenv(encoders.SUBSTITUTE_ENV)
    for name in ("cpu", "reference"):
        monkeypatch.setenv(profile.PROFILE_ENV, name)
        assert encoders.substitute_allowed()
    encoder = load_encoder("bert-base-uncased")
    assert encoder.name == encoders.MINILM and "NOTICE: no local copy" in capsys.readouterr().out
