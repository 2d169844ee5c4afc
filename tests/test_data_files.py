"""ddcl_theory.data.files: the catalogue, the search path, verification by sha256 or content."""
from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np
import pytest

from ddcl_theory.data import derive, digest, files


def test_corrupt_file_is_rejected_not_used(monkeypatch, tmp_path):
    (tmp_path / files.FILES["tinyshakespeare"].name).write_text("not shakespeare")
    monkeypatch.setattr(files, "data_dirs", lambda: [tmp_path])
    with pytest.raises(ValueError, match="sha256"):
        files.find("tinyshakespeare")
    with pytest.raises(files.DataIntegrityError, match="tinyshakespeare.txt"):
        files.find("tinyshakespeare")
    with pytest.raises(ValueError, match="key"):
        files.find("mnist")


def _npz_entry(monkeypatch, tmp_path, arrays):
    """Write ``arrays`` as the fetcher would and record that file as the ``cifar10_rest`` entry."""
    out = tmp_path / files.FILES["cifar10_rest"].name
    derive.write_npz(out, arrays)
    monkeypatch.setitem(files.FILES, "cifar10_rest", replace(
        files.FILES["cifar10_rest"], sha256=digest.file_sha256(out),
        content=digest.arrays_digest(arrays), size=out.stat().st_size))
    return out


def test_a_file_of_the_recorded_size_verifies_by_sha256_and_another_by_content(monkeypatch,
                                                                              tmp_path):
    arrays = {"x_train": np.arange(96, dtype=np.uint8).reshape(1, 4, 8, 3),
              "train_index": np.array([7], dtype=np.int64)}
    out = _npz_entry(monkeypatch, tmp_path, arrays)
    assert files.verify("cifar10_rest", out) == "sha256"

    np.savez(out, **arrays)  # uncompressed: another size, the same arrays
    assert out.stat().st_size != files.FILES["cifar10_rest"].size
    monkeypatch.setattr(digest, "file_sha256", lambda path: pytest.fail("hashed a file whose "
                                                                         "size cannot match"))
    assert files.verify("cifar10_rest", out) == "content digest"

    arrays["train_index"] = np.array([8], dtype=np.int64)
    np.savez(out, **arrays)
    with pytest.raises(files.DataIntegrityError, match=r"size \(.* bytes\) differs"):
        files.verify("cifar10_rest", out)


def test_an_entry_without_a_size_still_tries_the_sha256_first(monkeypatch, tmp_path):
    out = tmp_path / files.FILES["sst2_dev"].name
    out.write_bytes(b"sentence\tlabel\nfine \t1\n")
    sha = hashlib.sha256(out.read_bytes()).hexdigest()
    monkeypatch.setitem(files.FILES, "sst2_dev", replace(files.FILES["sst2_dev"], sha256=sha,
                                                         size=None))
    assert files.verify("sst2_dev", out) == "sha256"


def test_the_search_path_ends_with_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv(files.DATA_ENV, str(tmp_path / "env"))
    monkeypatch.setenv("DDCL_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    found = files.search_dirs()
    assert found[0] == (f"${files.DATA_ENV}", tmp_path / "env")
    assert found[-1] == ("cache", tmp_path / "cache")
    assert tmp_path / "env" not in files.data_dirs() and tmp_path / "cache" in files.data_dirs()


def test_a_loader_without_fallback_names_the_file_and_the_command():
    err = files.missing_error("cifar10_rest", "CIFAR-10 rest")
    assert isinstance(err, FileNotFoundError)
    assert "cifar10_rest.npz" in str(err)
    assert "python -m ddcl_theory.data ensure cifar10_rest" in str(err)
    assert files.DATA_ENV in str(err)
