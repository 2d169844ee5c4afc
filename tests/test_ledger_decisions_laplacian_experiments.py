"""ddcl_theory.ledger.decisions.laplacian_experiments: the registry's rules of L6-L9 on hand-built
studies (paired seeds, checkpoints, plateau flags), one case per verdict word and gate."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions import laplacian_experiments as dec

SETTINGS = ("0", "1", "half", "all")
COUNTS = {"0": 0, "1": 1, "half": 2, "all": 4}
NOISE = np.array([0.0, 0.01, -0.01, 0.005, -0.005])       # per seed, mean 0


def vit_study(n_seeds=5, plateau=True, curve=(1.2, 1.0, 0.95, 0.94), **fields):
    """A ViT study with two checkpoints; ``fields[name] = {setting: value}`` sets a ViTPoint
    field at both checkpoints (plus a per-seed wiggle); unspecified fields are 0.5."""
    def point(s, i):
        values = {f: v.get(s, v.get("*", 0.5)) + NOISE[i] * abs(v.get(s, 0.5))
                  for f, v in fields.items()}
        base = dict(test_acc=0.5, within_seq=0.5, between_class=0.5, nc1=0.5, pr=10.0,
                    pr_stream=10.0, k99=20, train_acc=0.9, nc1_train=1.0, val_loss=1.0)
        base.update(values)
        return SimpleNamespace(**base)

    runs = [SimpleNamespace(setting=s, seed=i, laplacian_heads=COUNTS[s],
                            plateau=plateau if not callable(plateau) else plateau(s, i),
                            curve=curve,
                            points=(point(s, i), point(s, i)))
            for s in SETTINGS for i in range(n_seeds)]
    vit = SimpleNamespace(dim=32, depth=2, heads=4, n_train=100, seeds=tuple(range(n_seeds)),
                          head_settings=SETTINGS)
    settings = SimpleNamespace(vit=vit, checkpoints=(2, 4), scales=("2 ep", "4 ep"))
    return SimpleNamespace(
        settings=settings, runs=runs, source="test",
        by=lambda s: sorted((r for r in runs if r.setting == s), key=lambda r: r.seed),
        counts=lambda: dict(COUNTS))


def test_l6_words_and_fields():
    rising = {s: 0.30 + 0.02 * COUNTS[s] for s in SETTINGS}
    v = dec.decide_l6(vit_study(test_acc=rising))
    assert (v.claim, v.word, v.n_seeds) == ("L6", "reproduced", 5)
    assert v.rule == rule_of("L6").text and v.interval[0] > 0
    assert list(v.trend) == ["2 ep", "4 ep"] and len(v.trend["4 ep"]) == 3
    assert v.numbers["slope"][0] == pytest.approx(0.02, rel=0.2)
    assert "smallest detectable" in v.evidence and "82.32" in v.evidence
    falling = {s: 0.40 - 0.02 * COUNTS[s] for s in SETTINGS}
    assert dec.decide_l6(vit_study(test_acc=falling)).word == "not reproduced"
    flat = dec.decide_l6(vit_study(test_acc={"*": 0.4}))
    assert flat.word in ("inconclusive", "not reproduced")


def test_l6_gates_plateau_and_seeds():
    rising = {s: 0.30 + 0.02 * COUNTS[s] for s in SETTINGS}
    v = dec.decide_l6(vit_study(test_acc=rising, plateau=lambda s, i: i != 2))
    assert v.word == "inconclusive" and "had not reached the plateau" in v.evidence
    assert dec.decide_l6(vit_study(n_seeds=3, test_acc=rising)).word == "inconclusive"


def test_slopes_are_least_squares_over_head_counts():
    exact = {s: 0.1 + 0.05 * COUNTS[s] for s in SETTINGS}
    study = vit_study(test_acc=exact)
    assert dec.slopes(study)[0] == pytest.approx(0.05)


def test_l7_words():
    down, up = {"0": 0.5, "all": 0.3}, {"0": 0.5, "all": 0.7}
    v = dec.decide_l7(vit_study(within_seq=down, between_class=up, nc1=down))
    assert v.word == "reproduced" and v.interval[1] < 0
    assert set(v.numbers["intervals"]) == {"within_seq", "between_class", "nc1"}
    assert dec.decide_l7(vit_study(within_seq=down, between_class=up, nc1=up)
                         ).word == "not reproduced"
    v = dec.decide_l7(vit_study(within_seq=down, between_class=up, nc1=down,
                                plateau=lambda s, i: s != "all"))
    assert v.word == "inconclusive"


def test_l8_words():
    v = dec.decide_l8(vit_study(pr={"0": 10.0, "all": 8.0}))
    assert v.word == "reproduced" and v.numbers["change"][0] == pytest.approx(-0.2, rel=0.05)
    assert "k99 relative change" in v.evidence and "cannot resolve" not in v.evidence
    assert len(v.numbers["k99_change"]) == 3
    assert dec.decide_l8(vit_study(pr={"0": 10.0, "all": 12.0})).word == "not reproduced"
    assert dec.decide_l8(vit_study(pr={"0": 10.0, "all": 8.0}, plateau=False)
                         ).word == "inconclusive"


def gpt_study(n_seeds=5, lap_curve=(4.0, 3.0, 2.5, 2.4), base_curve=(4.0, 3.2, 2.7, 2.6),
              lap_cdnv=(9.0, 4.0, 2.0, 1.9), base_cdnv=(9.0, 5.0, 3.0, 2.9), plateau=True):
    """Two arms with the given (val loss, CDNV) curves (before training, then 3 rounds); seed i
    shifts every value by a small per-seed amount."""
    def run(setting, loss, cdnv, i):
        pts = tuple(SimpleNamespace(val_loss=l + NOISE[i], cdnv=c * (1 + NOISE[i]))
                    for l, c in zip(loss, cdnv))
        return SimpleNamespace(setting=setting, seed=i, laplacian_heads=0 if setting == "0"
                               else 5, points=pts, plateau=plateau)

    runs = ([run("0", base_curve, base_cdnv, i) for i in range(n_seeds)]
            + [run("5", lap_curve, lap_cdnv, i) for i in range(n_seeds)])
    settings = SimpleNamespace(l9_setting="5", steps=30, dim=32, heads=8, checkpoints=(1, 2, 3),
                               scales=("10 steps", "20 steps", "30 steps"))
    return SimpleNamespace(settings=settings, runs=runs, source="test",
                           by=lambda s: [r for r in runs if r.setting == s])


def test_matched_cdnv_reads_both_arms_at_the_worse_arms_best_loss():
    level, base, lap = dec.matched_cdnv_pairs(gpt_study())
    assert level[0] == pytest.approx(2.6)                  # the baseline's best
    assert base[0] == pytest.approx(2.9)
    # the Laplacian arm crosses 2.6 between 3.0 (CDNV 4) and 2.5 (CDNV 2): 4 - 0.8 * 2
    assert lap[0] == pytest.approx(2.4)


def test_l9_words():
    v = dec.decide_l9(gpt_study())
    assert v.word == "reproduced" and v.interval[1] < 0
    assert list(v.trend) == ["10 steps", "20 steps", "30 steps"]
    assert "matched" in v.evidence and v.rule == rule_of("L9").text
    # the Laplacian arm only looks more separable because it is further along the loss curve
    confounded = gpt_study(lap_cdnv=(9.0, 6.0, 2.0, 1.0), base_cdnv=(9.0, 4.0, 3.0, 2.0))
    assert dec.decide_l9(confounded).word == "not reproduced"
    assert dec.decide_l9(gpt_study(plateau=False)).word == "inconclusive"
    assert dec.decide_l9(gpt_study(n_seeds=3)).word == "inconclusive"


def test_seeds_needed_and_direction():
    # mean 1, sd 1: the paired design detects it once (t_.975 + t_.8) / sqrt(n) <= 1
    n = dec.seeds_needed([0.0, 1.0, 2.0, 0.5, 1.5])
    assert n is not None and 8 <= n <= 12
    assert dec.seeds_needed([1.0, -1.0]) is None
    assert dec.direction({"a": [0.1, 0, 0.2], "b": [-0.3, -0.4, -0.2]}) == \
        "+0.1 -> -0.3 (away from 0)"
    assert dec.direction({"a": [0.5, 0, 1], "b": [0.1, 0, 0.2]}).endswith("(toward 0)")


def test_the_outlook_sentence_appears_at_the_rules_seed_count_only():
    rising = {s: 0.30 + 0.02 * COUNTS[s] for s in SETTINGS}
    assert "Over the checkpoints: all - none" in dec.decide_l6(vit_study(test_acc=rising)
                                                               ).evidence
    assert "Over the checkpoints" not in dec.decide_l6(vit_study(n_seeds=3, test_acc=rising)
                                                       ).evidence
    assert "matched CDNV" in dec.decide_l9(gpt_study()).evidence


def test_l6_says_when_the_runs_are_read_past_their_validation_optimum():
    at_end = dec.decide_l6(vit_study())
    assert "lowest at its last epoch" in at_end.evidence
    past = dec.decide_l6(vit_study(curve=(1.2, 0.9, 0.95, 0.96)))
    assert f"{len(past_runs := vit_study().runs)} of {len(past_runs)} runs had their least " \
        "validation loss before the last epoch (at epochs 2-2)" in past.evidence
