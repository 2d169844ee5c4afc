"""The Laplacian-head sweeps (L6-L9): tiny runs return finite, reproducible numbers, and the
verdict logic follows its stated rules on hand-built sweeps."""
from __future__ import annotations

import dataclasses
import math

import pytest

from ddcl_theory.experiments import laplacian_gpt as lg
from ddcl_theory.experiments import laplacian_vit as lv


def tiny_vit() -> lv.ViTSettings:
    return dataclasses.replace(lv.ViTSettings.from_profile(), n_train=64, n_test=60, dim=8,
                               heads=2, depth=1, epochs=1, batch_size=32, seeds=(0,),
                               head_settings=("0", "all"))


def tiny_gpt() -> lg.GPTSettings:
    return dataclasses.replace(lg.GPTSettings.from_profile(), block_size=8, dim=8, heads=2,
                               depth=1, batch_size=8, steps=5, eval_windows=32, cdnv_min_count=2,
                               seeds=(0,), head_settings=("0", "all"), l9_setting="all")


def test_tiny_vit_sweep_is_finite_and_reproducible():
    a = lv.run(tiny_vit())
    b = lv.run(tiny_vit())
    assert a.runs == b.runs                                   # bit-identical on CPU
    assert [r.laplacian_heads for r in a.runs] == [0, 2]
    for r in a.runs:
        values = [v for v in dataclasses.asdict(r).values() if isinstance(v, float)]
        assert all(math.isfinite(v) for v in values)
        assert 0.0 <= r.test_acc <= 1.0 and 1 <= r.k99 <= 8
        assert r.within_seq + r.between_seq == pytest.approx(1.0)
        assert r.within_class + r.between_class == pytest.approx(r.between_seq)
    assert a.runs[0].lap_sign_balance is None and -1 <= a.runs[0].attn_sign_balance <= 1
    assert a.runs[1].attn_sign_balance is None and -1 <= a.runs[1].lap_sign_balance <= 1
    assert set(a.summary("lap_sign_balance")) == {"all"}


def test_tiny_gpt_sweep_is_finite_and_reproducible():
    a = lg.run(tiny_gpt())
    b = lg.run(tiny_gpt())
    assert a.runs == b.runs
    for r in a.runs:
        assert math.isfinite(r.val_loss) and 0 < r.val_loss < 2 * math.log(a.vocab_size)
        assert math.isfinite(r.cdnv) and r.cdnv > 0 and 1 <= r.k99 <= 8
        assert 0.0 <= r.within_seq <= 1.0


def test_encode_round_trip():
    ids, vocab = lg.encode("to be, or not to be")
    assert "".join(vocab[i] for i in ids) == "to be, or not to be"
    assert vocab == sorted(vocab)
    with pytest.raises(ValueError, match="text"):
        lg.encode("")


def test_laplacian_count_names():
    assert [lv.laplacian_count(s, 6) for s in lv.HEAD_SETTINGS] == [0, 1, 3, 6]
    assert lv.laplacian_count("5", 12) == 5
    for bad in ("most", "5", "-1"):
        with pytest.raises(ValueError, match="setting"):
            lv.laplacian_count(bad, 4)


def test_settings_validation():
    with pytest.raises(ValueError, match="dim"):
        dataclasses.replace(lv.ViTSettings.from_profile(), dim=0)
    with pytest.raises(ValueError, match="seeds"):
        dataclasses.replace(lg.GPTSettings.from_profile(), seeds=())
    with pytest.raises(ValueError, match="l9_setting"):
        dataclasses.replace(lg.GPTSettings.from_profile(), l9_setting="3")


# ---------------------------------------------------------------- verdict rules

def test_compare_uses_the_combined_spread():
    summary = {"a": (1.0, 0.3), "b": (0.5, 0.4), "c": (0.0, 0.0)}
    assert lv.compare(summary, "a", "b") == 0             # 0.5 is inside hypot(0.3, 0.4) = 0.5
    assert lv.compare(summary, "a", "c") == 1
    assert lv.compare(summary, "c", "a") == -1


def fake_vit(acc: dict[str, list[float]], **fields: dict[str, list[float]]) -> lv.ViTSweep:
    runs = []
    for s, values in acc.items():
        for seed, v in enumerate(values):
            extra = {k: fields[k][s][seed] if k in fields else 0.5
                     for k in ("within_seq", "between_class", "nc1")}
            runs.append(lv.ViTRun(setting=s, laplacian_heads=lv.laplacian_count(s, 4), seed=seed,
                                  train_loss=1.0, test_acc=v, between_seq=0.5, within_class=0.3,
                                  equinorm=0.1, cos_mean=-0.1, k99=fields.get("k99", {}).get(
                                      s, [10] * 3)[seed], within_seq_stream=0.5, k99_stream=10,
                                  attn_sign_balance=0.0, lap_sign_balance=None, **extra))
    return lv.ViTSweep(lv.ViTSettings.from_profile(), runs, "test", 10, 16)


def test_l6_rules():
    rising = fake_vit({"0": [.30, .31, .32], "1": [.33, .34, .35], "half": [.36, .37, .38],
                       "all": [.39, .40, .41]})
    assert lv.verdict_l6(rising).verdict == "reproduced"
    flat = fake_vit({s: [.30, .32, .34] for s in lv.HEAD_SETTINGS})
    assert lv.verdict_l6(flat).verdict == "not reproduced"
    bump = fake_vit({"0": [.30, .30, .30], "1": [.40, .40, .40], "half": [.30, .30, .30],
                     "all": [.30, .30, .30]})
    assert lv.verdict_l6(bump).verdict == "qualified"


def test_l7_rules():
    acc = {s: [.3, .3, .3] for s in lv.HEAD_SETTINGS}
    down = {s: [.5, .5, .5] for s in lv.HEAD_SETTINGS} | {"all": [.2, .2, .2]}
    up = {s: [.5, .5, .5] for s in lv.HEAD_SETTINGS} | {"all": [.8, .8, .8]}
    assert lv.verdict_l7(fake_vit(acc, within_seq=down, between_class=up, nc1=down)
                         ).verdict == "reproduced"
    assert lv.verdict_l7(fake_vit(acc, within_seq=down, between_class=up, nc1=up)
                         ).verdict == "qualified"
    assert lv.verdict_l7(fake_vit(acc, within_seq=up, between_class=down, nc1=down)
                         ).verdict == "not reproduced"


def fake_gpt(**fields: dict[str, list[float]]) -> lg.GPTSweep:
    runs = [lg.GPTRun(setting=s, laplacian_heads=lv.laplacian_count(s, 4), seed=i,
                      train_loss=2.0, within_seq=0.9,
                      val_loss=fields.get("val_loss", {}).get(s, [2.0] * 3)[i],
                      cdnv=fields.get("cdnv", {}).get(s, [2.0] * 3)[i],
                      k99=fields.get("k99", {}).get(s, [10] * 3)[i],
                      within_seq_stream=0.9, k99_stream=10, attn_sign_balance=None,
                      lap_sign_balance=None)
            for s in lv.HEAD_SETTINGS for i in range(3)]
    return lg.GPTSweep(lg.GPTSettings.from_profile(), runs, "test", 65)


def test_l8_rules():
    lower = {s: [20, 21, 22] for s in lv.HEAD_SETTINGS} | {"all": [15, 15, 16]}
    acc = {s: [.3, .3, .3] for s in lv.HEAD_SETTINGS}
    assert lg.verdict_l8(fake_vit(acc, k99=lower), fake_gpt(k99=lower)).verdict == "reproduced"
    assert lg.verdict_l8(fake_vit(acc), fake_gpt(k99=lower)).verdict == "qualified"
    assert lg.verdict_l8(fake_vit(acc), fake_gpt()).verdict == "not reproduced"


def test_l9_rules():
    better = {s: [2.0, 2.0, 2.0] for s in lv.HEAD_SETTINGS} | {"half": [1.5, 1.6, 1.5]}
    assert lg.verdict_l9(fake_gpt(val_loss=better, cdnv=better)).verdict == "qualified"
    assert lg.verdict_l9(fake_gpt(cdnv=better)).verdict == "qualified"
    assert lg.verdict_l9(fake_gpt()).verdict == "not reproduced"
