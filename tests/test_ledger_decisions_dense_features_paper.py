"""L10 decided on the papers' data from a paired DINO study, by its paper-scale rule: the
three-way word on constructed per-image readings, intervals that widen when the shared images
are few, each gate failing where it should, and the evidence of a real (tiny) study."""
from __future__ import annotations

import numpy as np
import pytest

from ddcl_theory.experiments import dino_study as ds
from ddcl_theory.ledger.decisions import dense_features_paper as dec
from ddcl_theory.ledger.rules import L10_SETTLED, PAPER_RULES, RULES
from ddcl_theory.runtime.rundir import RunDir

RULE = PAPER_RULES["L10"]
CLASSES = 6


def _counts(rng, images: int, q: float) -> np.ndarray:
    """Per-image counts (images, 3, CLASSES) whose pooled IoU is about q / (2 - q)."""
    labelled = rng.integers(50, 150, (images, CLASSES))
    hits = rng.binomial(labelled, q)
    return np.stack([hits, labelled, labelled], axis=1).astype(np.int32)


def _study(gap_q=0.04, gap_acc=0.03, n=RULE.n_seeds, sd=0.004, images=400, *, collapse=False,
           floor_gain=0.05, settle_move=0.0, seed=0) -> ds.DinoStudy:
    """A study whose arms differ by ``gap_q`` in the share of hits (about 0.03 mIoU per 0.04)
    and ``gap_acc`` in [CLS] accuracy, with seed-to-seed noise ``sd``."""
    rng = np.random.default_rng(seed)
    st = ds.DinoStudySettings(seeds=tuple(range(n)), epochs=(25, 50, 100),
                              trend_seeds=min(4, n))
    runs, floors = [], []
    for s_ in st.seeds:
        shift = rng.normal(0, sd, 2)
        for s, sign in (("0", 0.0), ("all", 1.0)):
            for e in st.epochs:
                if s_ not in st.seeds_at(e):
                    continue
                q = 0.5 + sign * (gap_q * e / 100 + shift[0])
                counts = _counts(rng, images, q)
                correct = (rng.random(images) < 0.6 + sign * (gap_acc + shift[1])).astype(np.int8)
                miou = ds.miou_of_counts(counts)
                val = miou + 0.01
                runs.append(ds.DinoRun(s, 6 if sign else 0, s_, e, 5e-4, (1.0,) * 2, miou, 0.5,
                                       float(correct.mean()), val - sign * settle_move, val,
                                       4.0, 0.1 if collapse and sign else 5.0, 30.0,
                                       correct, counts))
            floors.append(ds.DinoFloor(s, s_, 0.33 + sign * gap_q * 0.75 - floor_gain
                                       + rng.normal(0, sd), 0.3, 0.2))
    tuning = [ds.TuningRun(s, 5e-4, 900, 0.3, 0.5) for s in ("0", "all")]
    return ds.DinoStudy(st.replace(tune_lrs=(5e-4,)), tuning, {"0": 5e-4, "all": 5e-4}, runs,
                        floors, (0.02, 0.15), float(np.log(4096)),
                        {"imagenette_train": 9469, "imagenette_fit": 8469,
                         "imagenette_val": images, "ade20k_fit": 18210, "ade20k_settle": 2000,
                         "ade20k_validation": images}, "Imagenette (160 px), ADE20K")


def test_the_paper_rule_is_registered_apart_from_the_proxy_s():
    assert RULES["L10"] is not RULE and RULE.n_seeds == 26
    assert all(t.method == "bootstrap over seeds and items" for t in RULE.tests)
    assert "ADE20K validation mIoU" in RULE.tests[1].statistic and not RULE.beside
    assert [t.s for t in RULE.tests] == [t.s for t in RULES["L10"].tests]


def test_gains_beyond_both_sesois_reproduce_the_claim():
    study = _study()
    v = dec.decide_l10_paper(study)
    assert v.word == "reproduced" and [t.word for t in v.tests] == ["reproduced"] * 2
    assert all(g.passed for g in v.gates) and v.n_seeds == RULE.n_seeds
    assert v.per_seed[RULE.tests[1].statistic] == pytest.approx(
        list(dec.differences(study, "miou")))
    assert v.rule == RULE.text and "the papers' data" not in v.rule
    assert "the same images for every seed" in v.evidence
    assert "(the gap grows)" in v.evidence                     # the gap scales with length


def test_the_interval_covers_the_sampling_of_the_shared_images():
    """The same seed-to-seed spread on 40 shared images instead of 2,000: the crossed bootstrap
    widens the interval, which a t interval over the seeds alone would not."""
    wide, narrow = (dec.samples(_study(images=m))[1][0] for m in (40, 2000))
    assert (wide.high - wide.low) > 1.5 * (narrow.high - narrow.low)
    d = dec.differences(_study(images=40), "miou")
    t = dec._t(d, "paired t")
    assert (wide.high - wide.low) > (t.high - t.low)


def test_the_crossed_mIoU_bootstrap_is_reproducible_and_names_bad_counts():
    study = _study(n=5, images=50)
    a, b = study.items("all", "segment_counts"), study.items("0", "segment_counts")
    first, again = dec.crossed_miou(a, b), dec.crossed_miou(a, b)
    assert first == again and first.low <= first.estimate <= first.high
    assert first.estimate == pytest.approx(dec.differences(study, "miou").mean())
    with pytest.raises(ValueError, match="counts: expected two equal"):
        dec.crossed_miou(a, b[:, :10])
    with pytest.raises(ValueError, match="at least 2 seeds"):
        dec.crossed_miou(a[:1], b[:1])


def test_no_gain_decides_not_reproduced_and_a_few_seeds_leave_it_open():
    assert dec.decide_l10_paper(_study(gap_q=0.0, gap_acc=0.0)).word == "not reproduced"
    few = dec.decide_l10_paper(_study(n=3, sd=0.03, floor_gain=0.3))
    assert few.word == "inconclusive" and f"the rule registers {RULE.n_seeds}" in few.evidence


def test_each_gate_fails_where_it_should():
    fell = dec.decide_l10_paper(_study(collapse=True))
    assert fell.word == "inconclusive" and not fell.gates[0].passed
    flat = dec.decide_l10_paper(_study(floor_gain=-0.05))
    assert flat.word == "inconclusive" and not flat.gates[2].passed
    # a gap still moving by more than the allowance, in a way that would change test 2's word
    moving = _study(gap_q=0.022, settle_move=-4 * L10_SETTLED)
    assert abs(dec.settling_moves(moving).mean() + 4 * L10_SETTLED) < 1e-9
    v = dec.decide_l10_paper(moving)
    assert not v.gates[1].passed and v.word == "inconclusive"
    # a gap still growing away from both boundaries cannot change the word: settled
    assert dec.decide_l10_paper(_study(settle_move=4 * L10_SETTLED)).gates[1].passed


def test_the_chapter_records_the_papers_data_where_they_ran():
    paper = dec.decide_l10_paper(_study(n=3))
    assert dec.recorded(paper, None) is paper and dec.recorded(paper, paper) is paper
    with pytest.raises(ValueError, match="paper: expected a verdict on L10"):
        dec.recorded(paper, type(paper)("L9", "inconclusive", "x"))


def test_a_real_tiny_study_is_decided_with_its_sizes_and_source_in_the_evidence():
    rng = np.random.default_rng(0)
    st = ds.DinoStudySettings(seeds=(0, 1), epochs=(1,))
    s = st.recipe.image_size
    seg = lambda m, split: ds.SegmentationSet(  # noqa: E731
        rng.integers(0, 256, (m, s, s, 3), dtype=np.uint8),
        rng.integers(0, 6, (m, s, s)).astype(np.uint8), tuple(map(str, range(m))), split)
    data = ds.ProbeData.split(rng.integers(0, 256, (16, s, s, 3), dtype=np.uint8),
                              np.arange(16) % 10, rng.integers(0, 256, (8, s, s, 3),
                                                               dtype=np.uint8),
                              np.arange(8) % 10, seg(8, "training"), seg(4, "validation"), st,
                              source="random test images")
    study = ds.run(st, data=data, run_dir=RunDir("dino", st, enabled=False))
    v = dec.decide_l10_paper(study)
    assert v.word == "inconclusive" and v.n_seeds == 2 and len(v.tests) == 2
    assert "Data: random test images." in v.evidence
    assert "16 Imagenette images" in v.evidence and "fitted on 6 training images" in v.evidence
    assert "reads no direction from one seed" in v.evidence
