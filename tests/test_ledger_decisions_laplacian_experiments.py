"""ddcl_theory.ledger.decisions.laplacian_experiments: the rules of L6-L9 on hand-built sweeps."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ddcl_theory.ledger.decisions import laplacian_experiments as dec

SETTINGS = ("0", "1", "half", "all")
COUNTS = {"0": 0, "1": 1, "half": 2, "all": 4}


def sweep(source="test", **fields):
    """A sweep with three seeds per setting; ``fields[name][setting]`` = per-seed values
    (default 0.5 for every unspecified field)."""
    runs = [SimpleNamespace(setting=s, seed=i, laplacian_heads=COUNTS[s],
                            **{f: v[s][i] if s in v else 0.5 for f, v in fields.items()})
            for s in SETTINGS for i in range(3)]

    def summary(field):
        out = {}
        for s in SETTINGS:
            values = np.array([getattr(r, field, 0.5) for r in runs if r.setting == s])
            out[s] = (float(values.mean()), float(values.std()))
        return out

    settings = SimpleNamespace(dim=8, depth=1, heads=4, n_train=100, seeds=(0, 1, 2),
                               head_settings=SETTINGS, steps=10, l9_setting="half")
    return SimpleNamespace(settings=settings, runs=runs, source=source, summary=summary)


def const(value, **per_setting):
    return {s: [per_setting.get(s, value)] * 3 for s in SETTINGS}


def test_compare_uses_the_combined_spread():
    summary = {"a": (1.0, 0.3), "b": (0.5, 0.4), "c": (0.0, 0.0)}
    assert dec.compare(summary, "a", "b") == 0             # 0.5 is inside hypot(0.3, 0.4) = 0.5
    assert dec.compare(summary, "a", "c") == 1
    assert dec.compare(summary, "c", "a") == -1


def test_l6_rules():
    rising = {"0": [.30, .31, .32], "1": [.33, .34, .35], "half": [.36, .37, .38],
              "all": [.39, .40, .41]}
    v = dec.decide_l6(sweep(test_acc=rising))
    assert (v.claim, v.word, v.n_seeds) == ("L6", "reproduced", 3)
    assert v.tolerance == dec.TRAINING and "drops along the sweep: none" in v.evidence
    assert dec.decide_l6(sweep(test_acc={s: [.30, .32, .34] for s in SETTINGS})
                         ).word == "not reproduced"
    bump = const(.30, **{"1": .40})
    assert dec.decide_l6(sweep(test_acc=bump)).word == "qualified"


def test_l7_rules():
    down, up = const(.5, all=.2), const(.5, all=.8)
    assert dec.decide_l7(sweep(within_seq=down, between_class=up, nc1=down)
                         ).word == "reproduced"
    assert dec.decide_l7(sweep(within_seq=down, between_class=up, nc1=up)).word == "qualified"
    v = dec.decide_l7(sweep(within_seq=up, between_class=down, nc1=down))
    assert v.word == "not reproduced" and v.numbers["signs"]["lower NC1"] == 1


def test_l8_rules():
    lower = const(20, all=15)
    assert dec.decide_l8(sweep(k99=lower), sweep(k99=lower)).word == "reproduced"
    assert dec.decide_l8(sweep(), sweep(k99=lower)).word == "qualified"
    v = dec.decide_l8(sweep(), sweep())
    assert v.word == "not reproduced" and "Lower with all heads Laplacian beyond the seed " \
        "spread: neither" in v.evidence


def test_l9_rules():
    better = const(2.0, half=1.5)
    v = dec.decide_l9(sweep(val_loss=better, cdnv=better))
    assert v.word == "qualified" and "'half' = 2 of 4 heads" in v.evidence
    assert dec.decide_l9(sweep(cdnv=better)).word == "qualified"
    assert dec.decide_l9(sweep()).word == "not reproduced"
    assert dec.decide_l9(sweep(val_loss=const(2.0, all=1.0)), setting="all").word == "qualified"
    with pytest.raises(ValueError, match="setting"):
        dec.decide_l9(sweep(), setting="5")
