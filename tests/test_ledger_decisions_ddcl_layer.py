"""Decision rules of the DDCL-layer chapter (D1, D2, D15, D16) on small hand-built inputs."""
from __future__ import annotations

from types import SimpleNamespace as NS

import numpy as np

from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions import ddcl_layer as dec

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


FLAT = (2.3, 2.0, 1.9, 1.89, 1.88, 1.88)
FALLING = (2.3, 2.1, 1.9, 1.7, 1.5, 1.3)


def _log(acc_end, v=(0.5, 0.3), finite=True, curve=FLAT, held_out=FLAT):
    return NS(all_finite=finite, min_v=min(v) if v else float("nan"), train_loss=list(curve),
              test_loss=list(held_out), test_acc=[0.1, 0.12, acc_end])


class _Result:
    """A TransformerResult stand-in: runs[variant] = logs, per_seed as the real one."""

    def __init__(self, runs, chance=0.1, epochs=3):
        n = len(runs["ddcl"])
        self.runs, self.chance = runs, chance
        self.settings = NS(seeds=tuple(range(n)), epochs=epochs, n_train=1000, n_test=1000,
                           scales=(1, 2, 3))

    def per_seed(self, variant, field, epoch=None):
        vals = [getattr(log, field) for log in self.runs[variant]]
        if field == "test_acc":
            vals = [v[-1 if epoch is None else epoch - 1] for v in vals]
        return np.array(vals, dtype=float)


ACC = {"ddcl": (0.22, 0.25, 0.24, 0.23, 0.26), "mean": (0.3, 0.31, 0.29, 0.3, 0.32),
       "block": (0.27, 0.26, 0.28, 0.29, 0.27)}


def _result(acc=ACC, **log_kwargs):
    over = log_kwargs.pop("only", None)
    return _Result({k: [_log(a, **(log_kwargs if over in (None, k) else {})) for a in accs]
                    for k, accs in acc.items()})


def test_d15_reproduced_when_both_intervals_clear_the_margin_with_the_rule_and_trend():
    v = dec.decide_d15(_result())
    assert v.word == "reproduced" and v.tolerance is dec.D15_TOLERANCE
    assert v.rule == rule_of("D15").text and v.n_seeds == 5
    assert v.our_value.startswith("acc readout 0.240 +- 0.016, block 0.274")
    low, high = v.interval           # the binding one: the readout's (closer to the margin)
    assert 0.05 < low < 0.14 < high and v.numbers["intervals"]["readout"] == [low, high]
    assert list(v.trend) == ["1 epochs", "2 epochs", "3 epochs"]
    assert v.trend["1 epochs"] == [0.0, 0.0, 0.0] and v.trend["3 epochs"][0] == 0.14
    assert "smallest detectable effect" in v.evidence and "no number" in v.evidence


def test_d15_not_reproduced_when_an_interval_lies_below_the_margin():
    near_chance = {**ACC, "block": (0.12, 0.13, 0.11, 0.12, 0.13)}
    assert dec.decide_d15(_result(near_chance)).word == "not reproduced"


def test_d15_inconclusive_when_an_interval_straddles_or_seeds_are_few_or_runs_unfinished():
    wide = {**ACC, "ddcl": (0.1, 0.3, 0.12, 0.28, 0.14)}
    assert dec.decide_d15(_result(wide)).word == "inconclusive"
    three = {k: a[:3] for k, a in ACC.items()}
    v = dec.decide_d15(_result(three))
    assert v.word == "inconclusive" and "fewer than the rule's 5" in v.evidence
    moving = dec.decide_d15(_result(held_out=FALLING, only="block"))
    assert moving.word == "inconclusive" and "readout 0, block 5 of 5 each" in moving.evidence
    assert moving.numbers["unfinished_by_arm"] == {"readout": 0, "block": 5}


def test_d15_gate_reads_the_held_out_curve_and_shows_the_training_curve_beside_it():
    """A block that overfits (training loss still falling, held-out loss flat) has finished."""
    overfit = dec.decide_d15(_result(curve=FALLING, only="block"))
    assert overfit.word == "reproduced"
    assert overfit.numbers["unfinished_training_curve"] == {"readout": 0, "block": 5}
    assert "on their training cross-entropy: readout 0, block 5" in overfit.evidence
    assert "fitting the training images" in overfit.evidence


def test_d15_requirement_non_finite_loss_or_negative_v_is_not_reproduced():
    assert dec.decide_d15(_result(finite=False, only="mean")).word == "not reproduced"
    assert dec.decide_d15(_result(v=(0.5, -1e-3), only="ddcl")).word == "not reproduced"


def test_d16_qualified_only_for_explained_variance_and_peaked_assignments():
    assert dec.decide_d16(NS(r2=0.8, mean_top2=0.9)).word == "qualified"
    assert dec.decide_d16(NS(r2=0.4, mean_top2=0.9)).word == "not reproduced"
    assert dec.decide_d16(NS(r2=0.8, mean_top2=0.7)).word == "not reproduced"
