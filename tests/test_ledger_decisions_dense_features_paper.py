"""L10 decided at the papers' scale from a paired DINO study: the rule's three-way word on
constructed per-seed readings, each gate failing where it should, and the evidence of a real
(tiny) study."""
from __future__ import annotations

import numpy as np
import pytest

from ddcl_theory.experiments import dino_recipe as dr
from ddcl_theory.experiments import dino_study as ds
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions import dense_features_paper as dec
from ddcl_theory.ledger.rules import L10_SEEDS, L10_SETTLED


def _study(gap_miou=0.025, gap_acc=0.02, n=L10_SEEDS, sd=0.004, *, collapse=False,
           floor_gain=0.05, settle_move=0.0, seed=0) -> ds.DinoStudy:
    """A study whose paired differences have the given means and spread."""
    rng = np.random.default_rng(seed)
    st = ds.DinoStudySettings(seeds=tuple(range(n)), epochs=(25, 50, 100),
                              trend_seeds=min(4, n))
    runs, floors = [], []
    for seed_ in st.seeds:
        noise = rng.normal(0, sd, 3)
        for s, sign in (("0", 0.0), ("all", 1.0)):
            for e in st.epochs:
                if seed_ not in st.seeds_at(e):
                    continue
                miou = 0.20 + sign * (gap_miou * e / 100 + noise[0])
                acc = 0.60 + sign * (gap_acc + noise[1])
                val = miou + 0.01
                runs.append(ds.DinoRun(s, 6 if sign else 0, seed_, e, (1.0,) * 2, miou,
                                       0.5 + sign * noise[2], acc,
                                       val - sign * settle_move, val,
                                       4.0, 0.1 if collapse and sign else 5.0, 30.0))
            floors.append(ds.DinoFloor(s, seed_, 0.20 + sign * gap_miou - floor_gain
                                       + rng.normal(0, sd), 0.3, 0.2))
    return ds.DinoStudy(st, runs, floors, (0.02, 0.15), float(np.log(4096)),
                        {"imagenette_train": 9469, "imagenette_val": 3925,
                         "ade20k_fit": 18210, "ade20k_settle": 2000,
                         "ade20k_validation": 2000})


def test_gains_beyond_both_sesois_reproduce_the_claim():
    v = dec.decide_l10_paper(_study())
    assert v.word == "reproduced" and [t.word for t in v.tests[:2]] == ["reproduced"] * 2
    assert all(g.passed for g in v.gates) and v.n_seeds == L10_SEEDS
    assert v.per_seed[rule_of("L10").tests[1].statistic] == pytest.approx(
        list(dec.differences(_study(), "miou")))
    assert "ADE20K mIoU" in v.evidence and "neither tuned" in v.evidence
    assert "(the gap grows)" in v.evidence                     # the gap scales with length


def test_no_gain_decides_not_reproduced_and_a_few_seeds_leave_it_open():
    assert dec.decide_l10_paper(_study(gap_miou=0.0, gap_acc=0.0)).word == "not reproduced"
    few = dec.decide_l10_paper(_study(n=3, sd=0.03))
    assert few.word == "inconclusive" and f"the rule registers {L10_SEEDS}" in few.evidence


def test_each_gate_fails_where_it_should():
    fell = dec.decide_l10_paper(_study(collapse=True))
    assert fell.word == "inconclusive" and not fell.gates[0].passed
    flat = dec.decide_l10_paper(_study(floor_gain=-0.01))
    assert flat.word == "inconclusive" and not flat.gates[2].passed
    # a gap still moving by more than the allowance, in a way that would change test 2's word
    moving = _study(gap_miou=0.014, settle_move=-3 * L10_SETTLED)
    assert abs(dec.settling_moves(moving).mean() + 3 * L10_SETTLED) < 1e-9
    v = dec.decide_l10_paper(moving)
    assert not v.gates[1].passed and v.word == "inconclusive"
    # a gap still growing away from both boundaries cannot change the word: settled
    assert dec.decide_l10_paper(_study(settle_move=3 * L10_SETTLED)).gates[1].passed


def test_a_real_tiny_study_is_decided_with_its_sizes_in_the_evidence():
    recipe = dr.DinoRecipe()
    rng = np.random.default_rng(0)
    s = recipe.image_size
    seg = lambda m, split: ds.SegmentationSet(  # noqa: E731
        rng.integers(0, 256, (m, s, s, 3), dtype=np.uint8),
        rng.integers(0, 6, (m, s, s)).astype(np.uint8), tuple(map(str, range(m))), split)
    data = ds.ProbeData.split(rng.integers(0, 256, (16, s, s, 3), dtype=np.uint8),
                              np.arange(16) % 10, rng.integers(0, 256, (8, s, s, 3),
                                                               dtype=np.uint8),
                              np.arange(8) % 10, seg(8, "training"), seg(4, "validation"), 2)
    st = ds.DinoStudySettings(seeds=(0, 1), epochs=(1,))
    from ddcl_theory.runtime.rundir import RunDir
    study = ds.run(st, data=data, run_dir=RunDir("dino", st, enabled=False))
    v = dec.decide_l10_paper(study)
    assert v.word == "inconclusive" and v.n_seeds == 2 and len(v.tests) == 3
    assert "16 Imagenette images" in v.evidence and "fitted on 6 training images" in v.evidence
    assert "reads no direction from one seed" in v.evidence
