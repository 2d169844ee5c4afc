"""Decision rules of the DDCL-layer chapter (D1, D2, D15, D16) on small hand-built inputs."""
from __future__ import annotations

from types import SimpleNamespace as NS

import numpy as np
import pytest

from ddcl_theory.experiments.ddcl_layer import TransformerSettings
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions import ddcl_layer as dec
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.settings import CONFIRMATORY_SEED_BASE

D1_OK = dict(min_q=0.0, row_error=1e-7, centroid_error=1e-6, rule_error=1e-8, inside_box=True,
             unchanged=True)


def test_d1_confirmed_when_every_check_passes_and_refuted_otherwise():
    v = dec.decide_d1(**D1_OK)
    assert v.claim == "D1" and v.word == "confirmed" and "< 1e-06" in v.our_value
    assert dec.decide_d1(**{**D1_OK, "row_error": 1e-5}).word == "refuted"
    assert dec.decide_d1(**{**D1_OK, "unchanged": False}).word == "refuted"


def _counts(attention):
    return NS(seq_lens=[64, 256, 1024], ddcl=[100, 400, 1600], attention=attention)


STORED = dict(ratio_at={16384: {"sdpa_over_ddcl_wall": 65.0, "ddcl_over_bare_cpu": 1.2}},
              mem_lens=[1024, 65536], mem_ddcl=[6.0, 7.0])


def test_d2_confirmed_for_affine_counts_and_linear_against_quadratic_slopes():
    v = dec.decide_d2(_counts([200, 2000, 22400]), slope_ddcl=1.03, slope_sdpa=2.25, **STORED)
    assert v.word == "confirmed" and "2x at T = 64" in v.evidence and "65x" in v.our_value
    assert dec.decide_d2(_counts([200, 2000, 22400]), slope_ddcl=1.5, slope_sdpa=2.25,
                         **STORED).word == "refuted"
    not_affine = NS(seq_lens=[64, 256, 1024], ddcl=[100, 400, 2000], attention=[200, 2000, 22400])
    assert dec.decide_d2(not_affine, slope_ddcl=1.0, slope_sdpa=2.0, **STORED).word == "refuted"


@pytest.fixture(autouse=True)
def _fewer_resamples(monkeypatch):
    """The intervals of these hand-built results are far from their margins: 1,000 bootstrap
    resamples decide them as 4,000 do, in a quarter of the time."""
    monkeypatch.setattr(dec, "D15_RESAMPLES", 1000)


FLAT = (2.3, 2.0, 1.9, 1.89, 1.88, 1.88)
FALLING = (2.3, 2.1, 1.9, 1.7, 1.5, 1.3)
OVERFIT = (2.3, 2.0, 1.9, 1.95, 2.1, 2.3)      # rises after its optimum: early stopping caught it
N_ITEMS = 400
SEEDS = rule_of("D15").n_seeds


def _correct(acc: float, shift: int = 0) -> list[int]:
    """0/1 correctness on N_ITEMS items with accuracy ``acc`` (the first items right, moved on
    by ``shift`` so that two arms disagree on some items)."""
    right = np.zeros(N_ITEMS, dtype=int)
    right[:round(acc * N_ITEMS)] = 1
    return np.roll(right, shift).tolist()


def _log(acc, shift=0, v=(0.5, 0.3), finite=True, val=OVERFIT):
    return NS(all_finite=finite, min_v=min(v) if v else float("nan"), val_loss=list(val),
              test_acc=acc, test_correct=_correct(acc, shift), best_epoch=3)


class _Result:
    """A TransformerResult stand-in: by_size[n][variant] = logs; per_seed and per_item as the
    real one."""

    def __init__(self, by_size, chance=0.1):
        n = len(next(iter(by_size.values()))["ddcl"])
        self.by_size, self.chance = by_size, chance
        self.settings = NS(seeds=tuple(range(n)), epochs=12, train_sizes=tuple(by_size),
                           n_train=max(by_size), n_val=500, n_test=N_ITEMS)

    @property
    def runs(self):
        return self.by_size[self.settings.n_train]

    def per_seed(self, variant, field, n_train=None):
        logs = self.by_size[n_train or self.settings.n_train][variant]
        return np.array([getattr(log, field) for log in logs], dtype=float)

    def per_item(self, variant, n_train=None):
        logs = self.by_size[n_train or self.settings.n_train][variant]
        return np.array([log.test_correct for log in logs], dtype=np.int8)


def _seed_noise(n):
    return 0.01 * np.sin(np.arange(n) * 1.7)           # a fixed, small seed-to-seed spread


def _result(readout=0.0, block=0.005, mean=0.33, n=SEEDS, only=None, **log_kwargs):
    """Arms whose accuracies differ from the mean pool's by ``readout`` and ``block`` (plus
    per-seed offsets when arrays); ``log_kwargs`` go to the logs of ``only`` (every arm when
    None)."""
    noise = _seed_noise(n)

    def arm(key, offset):
        offset = np.broadcast_to(offset, (n,))
        kw = log_kwargs if only in (None, key) else {}
        return [_log(mean + noise[i] + offset[i], shift=7 * (key != "mean"), **kw)
                for i in range(n)]

    sizes = {}
    for size, scale in ((250, 0.5), (500, 0.8), (1000, 1.0)):
        sizes[size] = {"ddcl": arm("ddcl", np.asarray(readout) * scale),
                       "mean": arm("mean", 0.0), "block": arm("block", np.asarray(block))}
    return _Result(sizes)


def test_d15_reproduced_when_both_arms_are_non_inferior_and_train():
    v = dec.decide_d15(_result())
    assert v.word == "reproduced", v.evidence
    assert [t.word for t in v.tests] == ["reproduced"] * 4
    assert v.rule == rule_of("D15").text and v.n_seeds == SEEDS
    assert v.tolerance is dec.D15_TOLERANCE and v.gates[0].passed
    assert list(v.trend) == ["250 images", "500 images", "1,000 images"]
    low, high = v.interval
    assert low > rule_of("D15").tests[0].margin and v.tests[0].interval == [low, high]
    keys = [t.statistic for t in rule_of("D15").tests]
    assert all(len(v.per_seed[k]) == SEEDS for k in keys)
    assert len(v.per_seed["test correct per item, readout"][0]) == N_ITEMS
    assert "bootstrap over seeds and test items" in v.evidence and "no number" in v.evidence


def test_d15_not_reproduced_when_the_readout_is_clearly_worse_than_mean_pooling():
    v = dec.decide_d15(_result(readout=-0.09))
    assert v.word == "not reproduced" and v.tests[0].word == "not reproduced"
    assert v.tests[1].word == "reproduced" and v.tests[0].interval[1] < -0.02
    assert v.interval == tuple(v.tests[0].interval)         # the binding test: the readout's
    assert "readout - mean pool" in v.evidence and "lies below its SESOI" in v.evidence
    trend = v.trend                                          # the readout's gap at each size
    assert trend["250 images"][0] > trend["1,000 images"][0]


def test_d15_not_reproduced_when_an_arm_barely_beats_chance():
    """A real but negligible effect: the block trains to 0.03 above chance."""
    v = dec.decide_d15(_result(block=0.13 - 0.33, readout=0.13 - 0.33))
    assert v.word == "not reproduced" and v.tests[3].word == "not reproduced"
    assert 0 < v.tests[3].estimate < 0.05


def test_d15_inconclusive_when_an_interval_holds_the_margin():
    wide = -0.02 + 0.08 * np.where(np.arange(SEEDS) % 2, 1, -1)   # mean -0.02, large spread
    v = dec.decide_d15(_result(readout=wide))
    assert v.tests[0].word == "inconclusive" and v.word == "inconclusive"
    low, high = v.tests[0].interval
    assert low < -0.02 < high


def test_d15_inconclusive_when_a_run_is_still_improving_on_validation_yet_shows_intervals():
    v = dec.decide_d15(_result(val=FALLING, only="block"))
    assert v.word == "inconclusive" and not v.gates[0].passed
    assert f"block {SEEDS} of {SEEDS}" in v.gates[0].detail
    assert [t.word for t in v.tests] == ["reproduced"] * 4        # still decided and shown
    assert "validation optimum" in v.evidence
    assert dec.decide_d15(_result(val=FLAT)).word == "reproduced"  # a plateau has finished


def test_d15_is_a_pilot_with_fewer_seeds_than_the_rule():
    v = dec.decide_d15(_result(n=3))
    assert v.word == "inconclusive" and [t.word for t in v.tests] == ["reproduced"] * 4
    assert f"3 seeds, fewer than the rule's {SEEDS}" in v.evidence
    one = dec.decide_d15(_result(n=1))                             # the smoke run: a point
    assert one.word == "inconclusive" and one.tests[0].interval[0] == one.tests[0].interval[1]


def test_d15_requirement_non_finite_loss_or_negative_v_is_not_reproduced():
    assert dec.decide_d15(_result(finite=False, only="mean")).word == "not reproduced"
    v = dec.decide_d15(_result(v=(0.5, -1e-3), only="ddcl"))
    assert v.word == "not reproduced" and "requirement" in v.evidence


def test_d15_gate_reads_the_validation_curve_one_sided():
    assert dec.d15_stopped_falling(FLAT) and dec.d15_stopped_falling(OVERFIT)
    assert not dec.d15_stopped_falling(FALLING)
    assert not dec.d15_stopped_falling([2.3, 2.0, 1.9])            # too short to tell


def test_d15_reference_profile_runs_the_rules_seeds_and_no_pilot_seed():
    ref = TransformerSettings.for_profile(profile.Profile("reference", "cpu"))
    assert len(ref.seeds) == rule_of("D15").n_seeds
    assert min(ref.seeds) >= CONFIRMATORY_SEED_BASE > max(TransformerSettings().seeds)


def test_d16_qualified_only_for_explained_variance_and_peaked_assignments():
    assert dec.decide_d16(NS(r2=0.8, mean_top2=0.9)).word == "qualified"
    assert dec.decide_d16(NS(r2=0.4, mean_top2=0.9)).word == "not reproduced"
    assert dec.decide_d16(NS(r2=0.8, mean_top2=0.7)).word == "not reproduced"
