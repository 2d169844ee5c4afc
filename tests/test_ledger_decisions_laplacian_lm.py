"""decide_l9 on every side of its registered rule, on hand-built studies: reproduced, not
reproduced (a clear effect of the wrong sign, and a real but negligible one), inconclusive (an
interval holding the margin and the SESOI), a failed gate and too few seeds; and the per-seed
statistics it reads."""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest

from ddcl_theory.ledger.decisions import laplacian_lm as d
from ddcl_theory.ledger.rules import L9_SETTLE, RULES

RULE = RULES["L9"]
ROUNDS = 4


@dataclass
class Run:
    laplacian_heads: int
    seed: int
    steps: int
    val_loss: tuple
    cdnv: tuple
    best: int
    heldout_windows: np.ndarray

    @property
    def heldout(self) -> float:
        return float(self.heldout_windows.mean())


def _run(lap: int, seed: int, steps: int, loss: float, cdnv: float, last_drop: float,
         rng: np.random.Generator) -> Run:
    """A run whose validation loss falls to ``loss`` (by ``last_drop`` over its last round),
    whose CDNV falls with it to ``cdnv``, read at its last round."""
    val = np.linspace(4.0, loss + last_drop, ROUNDS)
    val = np.append(val, loss)
    cdnv_curve = cdnv * val / loss
    windows = loss + 0.3 * rng.standard_normal(500)
    windows += loss - windows.mean()
    return Run(lap, seed, steps, tuple(val), tuple(cdnv_curve), ROUNDS, windows)


class Study:
    def __init__(self, loss_gap: float, cdnv_change: float, n_seeds: int = RULE.n_seeds,
                 spread: float = 0.004, lap_last_drop: float = 0.001, steps=(100, 200)):
        rng = np.random.default_rng(0)
        self.settings = SimpleNamespace(steps=steps, scales=tuple(f"{s} steps" for s in steps),
                                        arms=(0, 5), dim=64, depth=2, heads=8)
        self.source = "synthetic text"
        self.n_heldout_windows = 500
        self.runs = []
        for s in steps:
            for seed in range(n_seeds):
                base_loss = 1.8 + 0.05 * rng.standard_normal()
                noise = spread * rng.standard_normal(2)
                self.runs.append(_run(0, seed, s, base_loss, 1.0, 0.001, rng))
                self.runs.append(_run(5, seed, s, base_loss + loss_gap + noise[0],
                                      1.0 + cdnv_change + noise[1], lap_last_drop, rng))

    def by(self, lap: int, steps: int | None = None):
        steps = self.settings.steps[-1] if steps is None else steps
        return sorted((r for r in self.runs if (r.laplacian_heads, r.steps) == (lap, steps)),
                      key=lambda r: r.seed)


def test_the_statistics_are_paired_differences_of_each_seed():
    study = Study(-0.05, -0.3)
    gaps, changes = d.loss_gaps(study), d.cdnv_changes(study)
    assert gaps.shape == changes.shape == (RULE.n_seeds,)
    base, lap = study.by(0)[3], study.by(5)[3]
    assert gaps[3] == pytest.approx(lap.heldout - base.heldout)
    assert changes[3] == pytest.approx(lap.cdnv[-1] / base.cdnv[-1] - 1)
    level, matched = d.matched_cdnv_changes(study)
    assert level[3] == pytest.approx(max(min(base.val_loss), min(lap.val_loss)))
    assert np.all(np.isfinite(matched)) and d.item_standard_errors(study).shape == gaps.shape


def test_unpaired_seeds_are_refused():
    study = Study(-0.05, -0.3)
    study.by(5)[0].seed = 99
    with pytest.raises(ValueError, match="not paired"):
        d.loss_gaps(study)


def test_a_clear_gain_on_both_tests_is_reproduced():
    v = d.decide_l9(Study(-0.05, -0.3))
    assert v.word == "reproduced" and "reproduced, beyond the SESOI" in v.evidence
    assert [t.word for t in v.tests[:2]] == ["reproduced", "reproduced"]
    assert len(v.tests) == 3 and not v.tests[2].binding
    assert v.gates[0].passed and v.n_seeds == RULE.n_seeds
    assert set(v.trend) == {"100 steps", "200 steps"}
    assert v.per_seed[RULE.tests[0].statistic] == pytest.approx(
        d.loss_gaps(Study(-0.05, -0.3)).tolist())
    assert len(v.per_seed) == 3 and v.tolerance == d.L9_TOLERANCE


def test_a_loss_that_rises_is_not_reproduced():
    v = d.decide_l9(Study(+0.05, -0.3))
    assert v.word == "not reproduced" and v.tests[0].word == "not reproduced"
    assert v.interval[0] > 0                         # the binding test is the loss gap
    assert "not reproduced: the wrong sign" in v.evidence


def test_a_real_but_negligible_cdnv_change_is_not_reproduced():
    v = d.decide_l9(Study(-0.05, -0.03, spread=0.004))
    assert v.tests[1].word == "not reproduced" and v.tests[1].interval[1] < 0
    assert v.word == "not reproduced"
    assert "not reproduced: real but smaller than the SESOI" in v.evidence


def test_an_interval_holding_margin_and_sesoi_is_inconclusive():
    v = d.decide_l9(Study(-0.005, -0.3, spread=0.02))
    low, high = v.tests[0].interval
    assert low < RULE.tests[0].s and high > 0
    assert v.word == "inconclusive" and v.interval == tuple(v.tests[0].interval)


def test_a_gap_still_moving_at_the_end_of_the_schedule_fails_the_gate():
    moving = Study(-0.05, -0.3, lap_last_drop=0.001 + 2 * L9_SETTLE)
    assert d.gap_moves(moving) == pytest.approx(np.full(RULE.n_seeds, -2 * L9_SETTLE))
    v = d.decide_l9(moving)
    assert v.tests[0].word == v.tests[1].word == "reproduced"
    assert not v.gates[0].passed and v.word == "inconclusive"
    assert "longer schedule" in v.gates[0].detail
    both_still_learning = Study(-0.05, -0.3, lap_last_drop=0.001)
    assert d.settled_gate(both_still_learning).passed        # the comparison has settled


def test_fewer_seeds_than_the_rule_registers_are_a_pilot():
    v = d.decide_l9(Study(-0.05, -0.3, n_seeds=3))
    assert [t.word for t in v.tests[:2]] == ["reproduced", "reproduced"]
    assert v.word == "inconclusive" and v.n_seeds == 3


def test_the_matched_cdnv_reads_both_arms_at_the_worse_arms_best_loss():
    base = Run(0, 0, 100, (4.0, 3.2, 2.7, 2.6), (9.0, 5.0, 3.0, 2.9), 3, np.ones(3))
    lap = Run(5, 0, 100, (4.0, 3.0, 2.5, 2.4), (9.0, 4.0, 2.0, 1.9), 3, np.ones(3))
    study = SimpleNamespace(settings=SimpleNamespace(arms=(0, 5)),
                            by=lambda arm, steps=None: [base] if arm == 0 else [lap])
    level, change = d.matched_cdnv_changes(study)
    # the Laplacian arm crosses 2.6 between 3.0 (CDNV 4) and 2.5 (CDNV 2): 4 - 0.8 * 2 = 2.4
    assert level[0] == pytest.approx(2.6) and change[0] == pytest.approx(2.4 / 2.9 - 1)


def test_the_lead_moves_only_when_its_estimates_move_one_way_past_the_first_interval():
    shrinking = {"250 steps": [-0.101, -0.132, -0.070], "500 steps": [-0.089, -0.118, -0.061],
                 "1000 steps": [-0.026, -0.032, -0.019]}
    assert d._lead_moves(shrinking) == "the Laplacian arm's lead shrinks with training"
    rising = dict(zip(shrinking, reversed(list(shrinking.values()))))
    assert d._lead_moves(rising) == \
        "the Laplacian arm's lead grows with training"             # more negative: a larger lead
    behind = {k: [-v[0], -v[2], -v[1]] for k, v in shrinking.items()}   # Laplacian worse
    assert d._lead_moves(behind) == "the Laplacian arm's deficit shrinks with training"
    zigzag = {"50 steps": [-0.197, -0.258, -0.135], "100 steps": [-0.258, -0.364, -0.152],
              "200 steps": [-0.201, -0.374, -0.027]}
    assert d._lead_moves(zigzag) == "the Laplacian arm's lead shows no clear direction"
    within = {"a": [-0.10, -0.20, -0.01], "b": [-0.12, -0.22, -0.02]}   # inside the first interval
    assert d._lead_moves(within) == "the Laplacian arm's lead shows no clear direction"
    assert d._lead_moves({"a": [-0.1, -0.1, -0.1], "b": [-0.2, -0.2, -0.2]}) == \
        "the Laplacian arm's lead reads no direction from one seed"


def test_power_is_spoken_of_only_for_an_undecided_test():
    decided = d.decide_l9(Study(-0.05, -0.3, n_seeds=3))           # both tests reproduced
    assert "Power:" not in decided.evidence
    undecided = d.decide_l9(Study(-0.005, -0.3, spread=0.02))
    assert "Power: the loss gap would need" in undecided.evidence
    assert "the CDNV change would need" not in undecided.evidence
