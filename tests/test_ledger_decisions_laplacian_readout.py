"""ddcl_theory.ledger.decisions.laplacian_readout: the registered X2 rule on hand-built
readout studies (every side of the rule: reproduced, not reproduced for a wrong sign and for a
negligible effect, inconclusive, a failed gate, too few seeds, and a premise that is not met)."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from ddcl_theory.experiments import laplacian_readout as lr
from ddcl_theory.ledger import stats
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions import laplacian_experiments as lx
from ddcl_theory.ledger.decisions import laplacian_readout as dec
from ddcl_theory.ledger.earlier_runs import earlier_runs
from ddcl_theory.ledger.rules import X2_PLANNING_SPREAD
from ddcl_theory.metrics.geometry import AnovaSplit

N_EVAL = 1000
COUNTS = (100, 300)
LAST = COUNTS[-1]


@pytest.fixture(autouse=True)
def _fewer_resamples(monkeypatch):
    """Fewer crossed-bootstrap resamples than the chapter's keep these tests fast; the words
    tested here do not hinge on the Monte Carlo error of an interval's end."""
    monkeypatch.setattr(dec, "TEST_RESAMPLES", 999)


def _wiggle(seed: int, size: float) -> float:
    """A deterministic per-seed wiggle of sd about ``size`` (mean about 0 over the seeds)."""
    return size * np.sqrt(2) * np.sin(2.1 * seed + 0.3)


def _settings(n_seeds: int) -> lr.ReadoutSettings:
    return lr.ReadoutSettings(n_train=COUNTS, n_val=50, n_test=N_EVAL, dim=8, heads=4,
                              num_prototypes=4, ddcl_heads=2, epochs=30, patience=3,
                              seeds=tuple(range(n_seeds)))


def _run(st, n_train, setting, seed, *, gain, within, used, noise, cut, var_noise=None,
         shift=11):
    lap = setting == "all"
    w = _wiggle(seed + (7 if lap else 0), noise)         # each arm its own wiggle
    wv = w if var_noise is None else _wiggle(seed + (7 if lap else 0), var_noise)
    acc = 0.4 + (gain(n_train) if lap else 0.0) + w
    hits = int(round(acc * N_EVAL))
    correct = np.zeros(N_EVAL, dtype=np.uint8)
    correct[(np.arange(hits) + 37 * seed + (shift if lap else 0)) % N_EVAL] = 1
    scale = (1.0 + within) if lap else 1.0
    final = AnovaSplit(total=4.0, within_sequence=2.0 * scale * (1 + wv),
                       between_sequence=2.0, within_class=1.0, between_class=1.0)
    stream = AnovaSplit(total=8.0, within_sequence=3.0 * scale * (1 + wv),
                        between_sequence=5.0, within_class=2.0, between_class=3.0)
    best = st.epochs if (n_train, setting, seed) in cut else 10
    length = st.epochs if best == st.epochs else best + st.patience
    return lr.ReadoutRun(
        n_train=n_train, setting=setting, laplacian_heads=st.heads if lap else 0, seed=seed,
        val_loss=(1.0,) * length, val_acc=(0.5,) * length, train_loss=(1.0,) * length,
        best_epoch=best, epochs=st.epochs, patience=st.patience, eval_acc=hits / N_EVAL,
        final=final, stream=stream, fraction_used=0.8 + (used if lap else 0.0) + w / 10,
        perplexity=10.0, separation_min=1.0, separation_mean=2.0,
        relative_min=0.5 * (1 + w), relative_mean=1.0, l_q=0.1, v=0.2,
        correct=np.packbits(correct).tobytes(), n_eval=N_EVAL)


def study(n_seeds: int | None = None, *, gain=0.03, within=-0.3, used=0.0, noise=0.005,
          cut=(), var_noise=None, shift=11) -> lr.ReadoutStudy:
    """A study of the rule's seeds (default): the readout on the all-Laplacian encoder is
    ``gain`` more accurate (a number, or a function of the image count), the tokens' within-
    sequence variance changes by ``within`` (relative), usage by ``used``; ``noise``: the
    per-seed wiggle (``var_noise``: of the variances, default ``noise``); ``cut``: (n,
    setting, seed) of runs that reached the epoch cap; ``shift``: how far the Laplacian arm's
    block of correct pool images is moved from the other arm's (the images they disagree on)."""
    n_seeds = n_seeds or rule_of("X2").n_seeds
    st = _settings(n_seeds)
    g = gain if callable(gain) else (lambda n: gain)
    runs = [_run(st, n, s, seed, gain=g, within=within, used=used, noise=noise, cut=cut,
                 var_noise=var_noise, shift=shift)
            for n in st.n_train for s in lr.SETTINGS for seed in st.seeds]
    return lr.ReadoutStudy(st, runs, "test", 10, 16)


def test_x2_is_reproduced_when_the_accuracy_gain_clears_0_by_more_than_the_sesoi():
    v = dec.decide_x2(study(gain=lambda n: 0.01 if n < LAST else 0.03))
    assert (v.claim, v.word) == ("X2", "reproduced")
    assert v.rule == rule_of("X2").text and v.tolerance == dec.TRAINING
    assert v.n_seeds == rule_of("X2").n_seeds and v.interval[0] > rule_of("X2").tests[0].s
    assert v.tests[0].estimate == pytest.approx(0.03, abs=2e-3) and v.tests[0].binding
    assert [t.binding for t in v.tests[1:]] == [False] * 4
    assert list(v.trend) == ["100 images", "300 images"]
    assert v.trend["100 images"][0] < v.trend["300 images"][0]
    assert ("the gap's point estimates rise at every step over the image counts; from 100 "
            "images to 300 images the gap moves +2") in v.evidence
    assert v.gates[0].passed
    assert "also clears the SESOI" in v.evidence and "SESOI 0.4 points;" in v.evidence
    acc = rule_of("X2").tests[0].statistic
    items = f"{acc} (per pool image, - 0 +)"
    assert set(v.per_seed) == ({t.statistic for t in rule_of("X2").all_tests}
                               | {f"{acc}, at 100 images", items})
    assert all(len(x) == v.n_seeds for x in v.per_seed.values())
    # the committed per-image values give back each seed's gap
    decoded = np.array([["-0+".index(c) - 1 for c in row] for row in v.per_seed[items]])
    assert decoded.shape == (v.n_seeds, N_EVAL)
    assert decoded.mean(axis=1) == pytest.approx(v.per_seed[acc])
    # the premise (beside) holds: the tokens the readout reads were smoothed
    assert v.tests[1].word == "reproduced" and v.numbers["premise_word"] == "reproduced"
    assert "smoothing helped the prototypes" in v.evidence


def test_x2_is_not_reproduced_for_a_wrong_sign_and_for_a_negligible_gain():
    wrong = dec.decide_x2(study(gain=-0.03))
    assert wrong.word == "not reproduced" and wrong.interval[1] < 0
    assert "did not help the prototypes" in wrong.evidence
    assert ("Why not reproduced: the accuracy interval lies short of the SESOI (0.4 points), "
            "and wholly below 0: the readout is less accurate on the Laplacian encoder."
            ) in wrong.evidence
    assert "a loss smaller than the SESOI" not in wrong.evidence        # -3 points
    mild = dec.decide_x2(study(gain=-0.002, noise=0.0002, shift=0))     # -0.2 points, real
    assert mild.interval[1] < 0 < mild.interval[1] + rule_of("X2").tests[0].s
    assert ("the readout is less accurate on the Laplacian encoder (a loss smaller than the "
            "SESOI is not excluded).") in mild.evidence
    small = dec.decide_x2(study(gain=0.002, noise=0.0002, shift=0))     # +0.2 points, real
    assert small.word == "not reproduced"
    assert 0 < small.interval[0] and small.interval[1] < rule_of("X2").tests[0].s
    assert ("Why not reproduced: the accuracy interval lies short of the SESOI: any gain is "
            "smaller than the SESOI (0.4 points), though real") in small.evidence
    assert "not excluded" not in small.evidence
    null = dec.decide_x2(study(gain=0.0, noise=0.0004, shift=0))
    low, high = null.interval
    assert null.word == "not reproduced" and low < 0 < high
    assert (f"if there is one; a loss of up to {-100 * low:.2f} points is not excluded"
            in null.evidence)


def test_x2_interval_covers_the_sampling_of_the_shared_pool(monkeypatch):
    """The same seed gaps with more pool images the arms disagree on: the t interval over
    seeds would not move, the accuracy interval widens (the chapter's resamples: the wide
    interval's upper end lies near the SESOI)."""
    monkeypatch.setattr(dec, "TEST_RESAMPLES", lx.TEST_RESAMPLES)
    narrow, wide = (dec.decide_x2(study(gain=0.002, noise=0.0002, shift=k)) for k in (0, 11))
    assert narrow.per_seed[rule_of("X2").tests[0].statistic] == pytest.approx(
        wide.per_seed[rule_of("X2").tests[0].statistic], abs=1e-12)
    width = [v.interval[1] - v.interval[0] for v in (narrow, wide)]
    assert width[1] > 2 * width[0]
    assert narrow.word == "not reproduced" and wide.word == "inconclusive"
    assert wide.tests[0].method == "bootstrap over seeds and items"


def test_x2_is_inconclusive_when_the_interval_holds_0_and_the_sesoi():
    v = dec.decide_x2(study(gain=0.005, noise=0.03))
    assert v.word == "inconclusive" and v.interval[0] < 0 < 0.004 < v.interval[1]
    assert "holds both 0 and the SESOI" in v.evidence and "would tell them apart" in v.evidence
    assert v.tests[0].seeds_needed > v.n_seeds


def test_x2_gate_a_deciding_run_cut_by_the_epoch_cap_makes_the_word_inconclusive():
    v = dec.decide_x2(study(cut={(LAST, "all", 0)}))
    assert v.word == "inconclusive" and not v.gates[0].passed
    assert v.tests[0].word == "reproduced"                  # the interval is still shown
    assert "epoch cap" in v.evidence
    # a run cut by the cap at a smaller count does not gate the verdict
    assert dec.decide_x2(study(cut={(COUNTS[0], "all", 0)})).word == "reproduced"


def test_x2_with_fewer_seeds_than_the_rule_registers_is_a_pilot():
    few = rule_of("X2").n_seeds - 1
    v = dec.decide_x2(study(few))
    assert v.word == "inconclusive" and v.tests[0].word == "reproduced"
    assert f"fewer than the rule's {rule_of('X2').n_seeds}" in v.evidence


@pytest.mark.parametrize("within, spread, premise, how", [
    (0.3, 0.02, "not reproduced", "raised"),
    (0.0, 0.02, "not reproduced", "did not lower"),
    (-0.08, 0.2, "inconclusive", "were not shown to lower")])
def test_x2_premise_not_met_changes_the_reading_not_the_word(within, spread, premise, how):
    """Tokens roughened, unchanged, or not shown smoothed: the word stays the accuracy's, and
    the reading says which (a rise shown is called one)."""
    v = dec.decide_x2(study(within=within, var_noise=spread))
    assert v.word == "reproduced" and v.numbers["premise_word"] == premise
    assert "not whether smoothing does" in v.numbers["reading"]
    assert f"the Laplacian heads {how} the within-sequence variance" in v.evidence
    assert (v.tests[1].interval[0] > 0) == (how == "raised")


def test_paired_samples_are_differences_and_relative_changes_by_seed():
    s = study(gain=0.02, within=-0.25, used=0.1, noise=0.0)
    acc, after, before, used, sep = dec.samples(s)
    assert acc == pytest.approx(np.full(len(s.settings.seeds), 0.02), abs=1e-3)
    assert after == pytest.approx(np.full(len(s.settings.seeds), -0.25))
    assert before == pytest.approx(after) and sep == pytest.approx(np.zeros_like(sep))
    assert used == pytest.approx(np.full(len(s.settings.seeds), 0.1))
    first = dec.samples(s, COUNTS[0])[0]
    assert first.shape == (len(s.settings.seeds),)


def test_a_relative_change_needs_a_positive_baseline():
    s = study()
    broken = [r if r.setting == "all" else
              lr.ReadoutRun(**{**r.__dict__, "relative_min": 0.0}) for r in s.runs]
    with pytest.raises(ValueError, match="relative_min"):
        dec.samples(lr.ReadoutStudy(s.settings, broken, "test", 10, 16))


def test_x2_power_fields_come_from_the_crossed_interval_and_the_pool_is_split_out():
    s = study(gain=0.002, noise=0.0002)            # the seeds agree, the pool's images do not
    v = dec.decide_x2(s)
    acc = v.tests[0]
    iv = stats.Interval(acc.estimate, *acc.interval, acc.n_seeds, acc.method)
    p = lx.crossed_power(iv, dec.item_differences(s), acc.sesoi - acc.margin)
    assert (acc.detectable, acc.seeds_needed) == (pytest.approx(p["detectable"]),
                                                  p["seeds_needed"])
    assert v.numbers["power"] == pytest.approx(p)
    seed_only = stats.detectable_effect(float(np.std(dec.samples(s)[0], ddof=1)), v.n_seeds)
    assert acc.detectable > 5 * seed_only
    se = lx.mean_standard_errors(dec.item_differences(s), iv)
    assert v.numbers["mean_se"] == pytest.approx(se)
    assert (f"Standard error of the {v.n_seeds}-seed mean gap: {100 * se['seeds']:.2f} points "
            "from the seeds' spread") in v.evidence
    assert f"at the SESOI their power is {100 * p['power']:.0f}%" in v.evidence
    both = 100 * float(np.hypot(se["seeds"], se["pool"]))
    assert f"{lx.crossed_width_text(se)}. By the interval's own width" in v.evidence
    assert f"{both:.2f}" in v.evidence
    planned = stats.detectable_effect(X2_PLANNING_SPREAD, rule_of("X2").n_seeds)
    assert (f"The rule's text expected 43 seeds to detect {100 * planned:.2f} points, from a t "
            f"interval over an earlier run's seeds alone") in v.evidence
    assert p["detectable"] < planned
    assert (f"{100 * p['detectable']:.2f} points, at least as sensitive as planned."
            ) in v.evidence
    noisy = dec.decide_x2(study(gain=0.005, noise=0.03))
    wide = noisy.numbers["power"]["detectable"]
    assert wide > planned
    assert f"{100 * wide:.2f} points, less sensitive than planned." in noisy.evidence
    # a pilot's few seeds are not set against the rule's plan
    assert "expected 43 seeds" not in dec.decide_x2(study(5)).evidence
    assert p["out_of_reach"] is None
    # the premise's tests keep their t interval's power
    assert v.tests[1].method == "paired t"


def test_x2_says_when_a_test_beside_clears_0_but_not_its_sesoi():
    t = dec.decide_x2(study(gain=0.03)).tests
    sep = dataclasses.replace(t[4], estimate=0.05, interval=(0.01, 0.09), word="reproduced")
    assert not sep.reaches_sesoi
    assert dec._beside_word(sep) == ("reproduced: clear of its margin, not shown to reach its "
                                     "SESOI of +10%")
    used = dataclasses.replace(t[3], estimate=0.03, interval=(0.01, 0.05), word="reproduced")
    assert dec._beside_word(used) == ("reproduced: clear of its margin, not shown to reach its "
                                      "SESOI of +6.25 points")
    far = dataclasses.replace(t[4], estimate=0.3, interval=(0.2, 0.4), word="reproduced")
    assert far.reaches_sesoi and dec._beside_word(far) == "reproduced"


def test_optimum_gate_names_the_cut_runs_and_the_epochs():
    st = _settings(2)
    runs = [_run(st, LAST, "0", seed, gain=lambda n: 0.0, within=0.0, used=0.0, noise=0.0,
                 cut={(LAST, "0", 1)}) for seed in (0, 1)]
    gate = dec.optimum_gate(runs, "runs")
    assert not gate.passed and "1 of 2 runs" in gate.detail and "10-30" in gate.detail
    assert dec.optimum_gate(runs[:1], "runs").passed


def test_the_reference_profile_runs_the_seeds_the_rule_registers():
    assert lr.CONFIRMATORY_SEEDS == rule_of("X2").n_seeds >= 10
    # the amended rule's confirmatory run draws seeds the first run did not use
    from ddcl_theory.runtime.settings import confirmatory_seeds
    from ddcl_theory.runtime import profile
    seeds = lr.ReadoutSettings.for_profile(profile.Profile("reference", "cpu")).seeds
    assert seeds == confirmatory_seeds(rule_of("X2").n_seeds, run=lr.CONFIRMATORY_RUN)
    assert lr.CONFIRMATORY_RUN >= 2 and not set(seeds) & set(
        confirmatory_seeds(rule_of("X2").n_seeds, run=1))
    assert "PILOT" not in rule_of("X2").power and str(rule_of("X2").n_seeds) in rule_of(
        "X2").power


def test_the_rules_planned_sensitivity_is_the_planning_spreads():
    """The rule's text sizes its seeds from a t interval at the planning spread: the number
    the evidence sets beside this run's is the one the text quotes."""
    text = rule_of("X2").power
    planned = stats.detectable_effect(X2_PLANNING_SPREAD, rule_of("X2").n_seeds)
    assert f"sd {X2_PLANNING_SPREAD:.4f}" in text and f"{100 * planned:.2f} points" in text
    assert stats.seeds_needed(X2_PLANNING_SPREAD, rule_of("X2").tests[0].sesoi) == 141
    assert "about 141 seeds" in text


def test_per_image_values_decode_to_what_was_encoded():
    rng = np.random.default_rng(0)
    items = rng.integers(-1, 2, size=(5, 37)).astype(float)
    assert np.array_equal(dec.decode_items(dec.encode_items(items)), items)
    with pytest.raises(ValueError, match="encoded"):
        dec.decode_items(["+0-", "+0"])
    with pytest.raises(ValueError, match="encoded"):
        dec.decode_items(["+0x"])


def _earlier(v, seeds, code="abc1234"):
    return {"recorded_in": "def5678", "code": code, "date": "2026-01-01",
            "what": "a run under an older loop", "seeds": list(seeds), "per_seed": v.per_seed}


def test_an_earlier_run_is_decided_from_its_committed_values_as_the_record_is():
    v = dec.decide_x2(study(gain=-0.03))
    again = dec.earlier_tests(rule_of("X2"), v.per_seed)
    assert [(t.word, t.interval) for t in again] == [(t.word, t.interval) for t in v.tests]
    broken = {**v.per_seed, rule_of("X2").tests[0].statistic: [0.5] * v.n_seeds}
    with pytest.raises(ValueError, match="do not average"):
        dec.earlier_tests(rule_of("X2"), broken)


def test_a_loss_is_qualified_when_an_earlier_run_on_the_same_seeds_held_0():
    null = dec.decide_x2(study(gain=0.0, noise=0.0004, shift=0))        # 0 inside, no gain
    loss = study(gain=-0.03)
    seeds = loss.settings.seeds
    v = dec.decide_x2(loss, earlier=[_earlier(null, seeds)])
    assert v.word == "not reproduced" and v.interval[1] < 0
    acc = v.numbers["earlier"][0]["tests"][0]
    low, high = acc["interval"]
    assert low < 0 < high and v.numbers["earlier"][0]["code"] == "abc1234"
    points = (f"{100 * acc['estimate']:+.2f} [{100 * low:+.2f}, {100 * high:+.2f}] points")
    assert ("the readout is less accurate on the Laplacian encoder in this run; the earlier run "
            f"on the same seeds held 0 in its interval (code of abc1234: {points}), so not every "
            "run shows the loss; ") in v.evidence
    assert ", and every run lies short of the SESOI." in v.evidence
    assert "Run to run: the same seeds, run from the code of abc1234 (a run under an older "\
        "loop; 2026-01-01), gave all - none" in v.evidence
    r = np.corrcoef(null.per_seed[rule_of("X2").tests[0].statistic],
                    v.per_seed[rule_of("X2").tests[0].statistic])[0, 1]
    assert f"its per-seed gaps correlating r = {r:+.2f} with this run's" in v.evidence
    assert "the word is not reproduced in every run; the record is this run's" in v.evidence
    # two earlier runs, one of them a loss too: the one that held 0 is named
    both = dec.decide_x2(loss, earlier=[_earlier(v, seeds, "aaa1111"), _earlier(null, seeds)])
    assert ("in this run; 1 of the 2 earlier runs on the same seeds held 0 in its interval "
            f"(code of abc1234: {points})") in both.evidence and "aaa1111: " not in both.evidence
    assert len(both.numbers["earlier"]) == 2
    # earlier runs that also lost: no qualifier; one on other seeds: not set beside
    same = dec.decide_x2(loss, earlier=[_earlier(v, seeds)])
    assert "as in the earlier run on the same seeds" in same.evidence
    assert "every test's word the same as this run's" in same.evidence
    twice = dec.decide_x2(loss, earlier=[_earlier(v, seeds), _earlier(v, seeds)])
    assert "as in each of the 2 earlier runs on the same seeds" in twice.evidence
    other = dec.decide_x2(loss, earlier=[_earlier(null, [s + 1 for s in seeds])])
    assert "Run to run" not in other.evidence and other.numbers["earlier"] == []
    assert other.evidence.endswith("the readout is less accurate on the Laplacian encoder.")


def test_the_committed_earlier_run_of_x2_is_the_reference_seeds_and_decides():
    runs = earlier_runs("X2")
    assert [r["recorded_in"] for r in runs] == ["82d2243", "6ebe765"]
    from ddcl_theory.runtime import profile
    seeds = lr.ReadoutSettings.for_profile(profile.Profile("reference", "cpu")).seeds
    assert all(run["seeds"] == list(seeds) for run in runs)
    tests = dec.earlier_tests(rule_of("X2"), runs[0]["per_seed"])
    # as that run's committed verdict gave it: -0.41 [-0.95, +0.11] points, not reproduced
    assert tests[0].estimate == pytest.approx(-0.0041070, abs=1e-6)
    assert tests[0].interval == pytest.approx((-0.0095, 0.0011), abs=5e-4)
    assert [t.word for t in tests] == ["not reproduced"] * 4 + ["inconclusive"]
    # the run of record before this one: -0.68 [-1.25, -0.10] points, a loss shown
    later = dec.earlier_tests(rule_of("X2"), runs[1]["per_seed"])
    assert later[0].interval == pytest.approx((-0.01245, -0.00105), abs=5e-4)
    assert [t.word for t in later] == ["not reproduced"] * 4 + ["reproduced"]


def test_earlier_runs_reject_a_malformed_record(tmp_path):
    folder = tmp_path / "earlier"
    folder.mkdir()
    assert earlier_runs("X9", tmp_path) == []
    (folder / "X9.json").write_text('{"claim": "X8", "runs": []}')
    with pytest.raises(ValueError, match="claim must be 'X9'"):
        earlier_runs("X9", tmp_path)
    (folder / "X9.json").write_text('{"claim": "X9", "runs": [{"code": "a"}]}')
    with pytest.raises(ValueError, match=r"runs\[0\] lacks recorded_in"):
        earlier_runs("X9", tmp_path)
    run = {"recorded_in": "a", "code": "b", "date": "c", "what": "d", "seeds": [1, 2],
           "per_seed": {"gap": [0.1]}}
    (folder / "X9.json").write_text(json.dumps({"claim": "X9", "runs": [run]}))
    with pytest.raises(ValueError, match="has 1 values for 2 seeds"):
        earlier_runs("X9", tmp_path)
