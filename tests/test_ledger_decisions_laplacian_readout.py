"""ddcl_theory.ledger.decisions.laplacian_readout: the X2 rule on hand-built sweeps."""
from __future__ import annotations

from types import SimpleNamespace as NS

import numpy as np

from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.decisions import laplacian_readout as dec

JITTER = np.array([0.01, -0.01, 0.005, -0.005, 0.0])


def sweep(acc_gain=0.05, within_gain=-0.1, n=5, moving=False, epochs=4):
    """Two settings ("all", "0"), n paired seeds: Laplacian minus none of test accuracy about
    ``acc_gain`` and of the within-sequence share about ``within_gain`` (small jitter by seed);
    the paths grow linearly to the final values; training losses flat unless ``moving``."""
    base = {"test_acc": 0.4, "within_seq": 0.5, "fraction_used": 0.8, "perplexity": 10.0,
            "separation_min": 1.0}
    gain = {"test_acc": acc_gain, "within_seq": within_gain}
    curve = tuple(np.linspace(2.0, 1.0, epochs)) if moving else (1.0,) * epochs
    runs = []
    for setting in ("all", "0"):
        for seed in range(n):
            vals = {f: v + (gain.get(f, 0.0) + JITTER[seed] if setting == "all" else 0.0)
                    for f, v in base.items()}
            ramp = np.arange(1, epochs + 1) / epochs
            runs.append(NS(setting=setting, seed=seed, train_loss=curve, **vals,
                           acc_path=tuple(vals["test_acc"] * ramp),
                           within_path=tuple(vals["within_seq"] * ramp)))

    def paired(field, setting, epoch=None):
        rs = sorted((r for r in runs if r.setting == setting), key=lambda r: r.seed)
        if epoch is None:
            return np.array([getattr(r, field) for r in rs])
        path = {"test_acc": "acc_path", "within_seq": "within_path"}[field]
        return np.array([getattr(r, path)[epoch - 1] for r in rs])

    vit = NS(dim=8, depth=1, heads=2, n_train=64, epochs=epochs, seeds=tuple(range(n)))
    settings = NS(vit=vit, num_prototypes=4, ddcl_heads=2, temperature=1.0, beta=0.01,
                  scales=(1, 2, epochs))
    return NS(settings=settings, source="test", paired=paired, runs=runs)


def test_x2_reproduced_when_the_premise_holds_and_the_accuracy_interval_is_above_0():
    v = dec.decide_x2(sweep())
    assert v.word == "reproduced" and v.n_seeds == 5 and v.rule == rule_of("X2").text
    assert v.numbers["premise_holds"] and v.interval == tuple(v.numbers["accuracy"][:2])
    assert v.interval[0] > 0 and v.tolerance == dec.TRAINING
    assert list(v.trend) == ["1 epochs", "2 epochs", "4 epochs"]
    assert v.trend["4 epochs"][0] == 0.05 and v.trend["1 epochs"][0] < 0.05
    assert "smallest detectable effect" in v.evidence and "Shown beside" in v.evidence


def test_x2_not_reproduced_when_the_accuracy_interval_lies_below_0():
    assert dec.decide_x2(sweep(acc_gain=-0.05)).word == "not reproduced"


def test_x2_inconclusive_when_straddling_few_seeds_or_runs_still_moving():
    assert dec.decide_x2(sweep(acc_gain=0.0)).word == "inconclusive"
    few = dec.decide_x2(sweep(n=3))
    assert few.word == "inconclusive" and "fewer than the rule's 5" in few.evidence
    moving = dec.decide_x2(sweep(moving=True))
    assert moving.word == "inconclusive" and moving.numbers["unfinished"] == 10


def test_x2_premise_that_fails_means_the_question_is_not_asked():
    for within_gain in (0.1, 0.0):           # raised, or not lowered beyond the spread
        v = dec.decide_x2(sweep(within_gain=within_gain, acc_gain=-0.05))
        assert v.word == "inconclusive" and not v.numbers["premise_holds"]
        assert "the question is not asked" in v.evidence and "askable" in v.evidence
        assert v.interval == tuple(v.numbers["premise"][:2])
    assert "do not lower it" in dec.decide_x2(sweep(within_gain=0.1)).evidence
