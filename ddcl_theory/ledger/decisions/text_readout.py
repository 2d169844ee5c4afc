"""The decision of the text-readout chapter: claim D14 (a DDCL readout on a frozen text encoder
beats the mean-pooling and [CLS] probes on SST-2, IMDB and 20 Newsgroups).

The rule is the registry's (``rule_of("D14")``, :mod:`ddcl_theory.ledger.rules`): one test per
corpus and probe, in the order (SST-2, IMDB, 20 Newsgroups) x (mean pooling, [CLS]). The
statistic of a test is the paired difference in test accuracy, DDCL readout - probe; each seed
is scored on its own part of the test draw, so its interval is the two-stage bootstrap over
seeds and the test items within them (:func:`stats.bootstrap_seeds_items`) of the per-item
correctness differences, taken at the largest scale (the whole training draw). The gates:
every confirmatory DDCL run stopped by its validation rule, every probe fit converged.

The binding test (the one whose interval the ledger shows) is named by :func:`binding`: among
the tests that give the claim's word, those against each corpus's stronger probe on validation
come first (decided before the test set is scored), then the lowest interval.

Reads a text-readout result by attribute: ``encoder``, ``corpora`` (name -> result with
``num_classes``, ``n_train``, ``n_test``, ``max_length``, ``truncated``, ``tuning``
(``stronger``, ``chosen``, ``chosen_c(b)``), ``scales`` (share -> seed runs with ``paired(b)``,
``ddcl`` (``finished``, ``stopped``), ``probes[b].converged``)).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ddcl_theory.ledger import stats
from ddcl_theory.ledger.claims import rule_of
from ddcl_theory.ledger.design import Gate, TestResult
from ddcl_theory.ledger.tolerance import Tolerance, count_allowance
from ddcl_theory.ledger.verdict import Verdict

__all__ = ["RULE", "CORPORA", "BASELINES", "PAPER", "TOLERANCE", "Cell", "cells", "gates",
           "binding", "pilot", "decide_d14"]

RULE = rule_of("D14")
#: The corpora and probes of the rule's tests, in its order (corpus slowest).
CORPORA = ("sst2", "imdb", "20ng")
BASELINES = ("mean", "[CLS]")
#: Resamples of the two-stage bootstrap.
N_RESAMPLES = 9999
PAPER = ("aggregator: ACC SST-2 (K=2) 86.7, IMDB (K=4) 91.3, 20NG 17.5 (protocol not stated; "
         "frozen BERT-base, where ours is all-MiniLM-L6-v2)")
#: How far the numbers of the evidence may move between machines (the cpu profile's pilot:
#: per-seed accuracies of early-stopped readouts move by up to about 0.02 between kernel sets;
#: the difference of two arms and the interval ends of 3 seeds by about twice that).
TOLERANCE = Tolerance(abs=0.05, reason="accuracies of early-stopped readouts and their paired "
                      "differences, intervals and detectable effects over 3 seeds (seed sd of a "
                      "per-seed difference up to about 0.03 in the cpu pilot); counts of runs "
                      "by how they stopped move by their count_allowance")


class Cell:
    """The paired values of one test at one scale: per seed, the per-item correctness
    differences DDCL - probe on the seed's test items.

    Attributes:
        corpus, baseline: the test's corpus and probe; items: one (n_items,) array per seed.
    """

    def __init__(self, corpus: str, baseline: str, items: Sequence[np.ndarray]) -> None:
        if not items:
            raise ValueError(f"items: expected at least one seed for {corpus}/{baseline}")
        self.corpus, self.baseline = corpus, baseline
        self.items = [np.asarray(v, dtype=float) for v in items]

    @property
    def per_seed(self) -> list[float]:
        """The statistic per seed: the mean difference over the seed's test items."""
        return [float(v.mean()) for v in self.items]

    @property
    def spread(self) -> float:
        """Sample standard deviation of :attr:`per_seed` (nan for one seed)."""
        values = self.per_seed
        return float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")

    def interval(self, n_resamples: int = N_RESAMPLES) -> stats.Interval:
        """Two-stage bootstrap over seeds and items (a point for one seed)."""
        if len(self.items) == 1:
            v = self.per_seed[0]
            return stats.Interval(v, v, v, 1, "bootstrap over seeds and items")
        return stats.bootstrap_seeds_items(self.items, n_resamples=n_resamples)


def cells(result: Any, share: float | None = None) -> list[Cell]:
    """The rule's tests as :class:`Cell` at one scale (default the largest), in rule order."""
    out = []
    for name in CORPORA:
        if name not in result.corpora:
            raise ValueError(f"result: expected the corpora {CORPORA}, missing {name!r}")
        c = result.corpora[name]
        runs = c.scales[max(c.scales) if share is None else share]
        out += [Cell(name, b, [r.paired(b) for r in runs]) for b in BASELINES]
    return out


def gates(result: Any) -> list[Gate]:
    """The design's gates: every confirmatory DDCL run (every seed and scale) stopped by its
    validation rule; every probe fit at its chosen C converged."""
    runs = [s for c in result.corpora.values() for rs in c.scales.values() for s in rs]
    unfinished = sum(not s.ddcl.finished for s in runs)
    probes = [p for s in runs for p in s.probes.values()]
    unconverged = sum(not p.converged for p in probes)
    return [
        Gate("DDCL runs stop by the validation rule", unfinished == 0,
             f"{len(runs) - unfinished} of {len(runs)} stopped at a validation plateau or past "
             f"the validation optimum" + ("" if not unfinished else
                                           "; the rest reached the epoch cap: a higher cap "
                                           "would let them finish")),
        Gate("probes converge", unconverged == 0,
             f"{len(probes) - unconverged} of {len(probes)} probe fits converged"
             + ("" if not unconverged else "; more lbfgs iterations would let the rest finish")),
    ]


def binding(results: Sequence[TestResult], stronger: Mapping[str, str]) -> int:
    """Index of the test that carries the claim's word. Candidates: the tests whose word is
    the combined word of all tests; those against each corpus's ``stronger`` probe (named on
    validation, before the test set is scored) come first. Among them: for ``not
    reproduced`` the least upper end (the clearest shortfall), for ``reproduced`` the least
    lower end (the weakest success), for ``inconclusive`` the first in the rule's order."""
    words = [r.word for r in results]
    word = ("not reproduced" if "not reproduced" in words else
            "inconclusive" if "inconclusive" in words else "reproduced")
    order = [(c, b) for c in CORPORA for b in BASELINES]
    candidates = [i for i, r in enumerate(results) if r.word == word]

    def key(i: int) -> tuple:
        weaker = stronger[order[i][0]] != order[i][1]
        if word == "inconclusive":
            return (weaker, i)
        return (weaker, results[i].interval[0 if word == "reproduced" else 1], i)

    return min(candidates, key=key)


def pilot(results: Sequence[TestResult]) -> list[TestResult]:
    """The tests of a run with fewer seeds than the rule registers: a pilot decides nothing,
    so every test's word is ``inconclusive`` (its interval is kept)."""
    return [replace(r, word="inconclusive") if r.n_seeds < RULE.n_seeds else r
            for r in results]


def _pct(x: float) -> str:
    return f"{x:.3f}"


def decide_d14(result: Any, titles: Mapping[str, str], *,
               n_resamples: int = N_RESAMPLES) -> Verdict:
    """D14 from a text-readout ``result`` (the corpora's display ``titles``); ``n_resamples``
    of each bootstrap."""
    cs = cells(result)
    results = pilot(RULE.evaluate([(cell.interval(n_resamples), cell.spread) for cell in cs]))
    gate_list = gates(result)
    word = RULE.word(results, gate_list)
    stronger = {name: result.corpora[name].tuning.stronger for name in CORPORA}
    i = binding(results, stronger)
    cell, test = cs[i], results[i]
    shares = sorted(result.corpora[CORPORA[0]].scales)
    trend = {}
    for share in shares:
        iv = cells(result, share)[i].interval(n_resamples)
        trend[f"{share:.0%} of the training draw"] = [round(iv.estimate, 4), round(iv.low, 4),
                                                      round(iv.high, 4)]
    per_corpus = []
    for name in CORPORA:
        c = result.corpora[name]
        arms = {"DDCL": [r.ddcl.selected_test_acc for r in c.seeds]}
        arms.update({b: [r.probes[b].test_acc for r in c.seeds] for b in BASELINES})
        tests = [f"DDCL - {b} {stats_text(results[CORPORA.index(name) * 2 + j])}"
                 for j, b in enumerate(BASELINES)]
        per_corpus.append(
            f"{titles[name]} ({c.n_train} train, {c.n_test} test, cut at {c.max_length} "
            f"tokens): test accuracy DDCL {_pct(np.mean(arms['DDCL']))}, mean probe "
            f"{_pct(np.mean(arms['mean']))}, [CLS] probe {_pct(np.mean(arms['[CLS]']))}; "
            f"stronger probe on validation: {c.tuning.stronger}; " + ", ".join(tests))
    runs = [s.ddcl for c in result.corpora.values() for rs in c.scales.values() for s in rs]
    stops = {rule: sum(r.stopped == rule for r in runs) for rule in ("plateau", "passed optimum")}
    count_abs = max(count_allowance(k, len(runs)) for k in stops.values())
    n = test.n_seeds
    few = (f" A pilot: {n} seeds of the {RULE.n_seeds} the rule registers, so every test is "
           f"inconclusive." if n < RULE.n_seeds else "")
    evidence = (
        f"Frozen {result.encoder}; {n} seeds, each scored on its own part of the test draw; "
        f"test accuracy with the whole training draw; 95% intervals by a bootstrap over seeds "
        f"and test items.{few} " + "; ".join(per_corpus) + ". "
        f"Binding: {titles[cell.corpus]}, DDCL - {cell.baseline} probe {stats_text(test)}. "
        f"DDCL runs stopped at a validation plateau {stops['plateau']}, past the validation "
        f"optimum {stops['passed optimum']}, of {len(runs)}. Paper: {PAPER}.")
    our_value = "; ".join(
        f"{titles[name]} DDCL - {cell_b} {results[CORPORA.index(name) * 2 + j].estimate:+.3f}"
        for name in CORPORA for j, cell_b in enumerate(BASELINES))
    per_seed: dict[str, list] = {}
    for c, r in zip(cs, results):
        per_seed[r.statistic] = c.per_seed
        per_seed[f"{r.statistic} (per item)"] = [v.astype(int).tolist() for v in c.items]
    tolerance = Tolerance(abs=TOLERANCE.abs, reason=TOLERANCE.reason, count_abs=count_abs)
    return Verdict("D14", word, evidence, our_value=our_value, paper_value=PAPER,
                   numbers={"binding": f"{cell.corpus}/{cell.baseline}",
                            "stronger": stronger,
                            "chosen": {name: {"DDCL": result.corpora[name].tuning.chosen.label,
                                              **{b: result.corpora[name].tuning.chosen_c(b)
                                                 for b in BASELINES}}
                                       for name in CORPORA},
                            "words": {f"{c.corpus}/{c.baseline}": r.word
                                      for c, r in zip(cs, results)}},
                   rule=RULE.text, n_seeds=n, interval=tuple(test.interval),
                   scale=f"the whole training draw ({titles[cell.corpus]})", trend=trend,
                   tolerance=tolerance, tests=tuple(results), gates=tuple(gate_list),
                   per_seed=per_seed)


def stats_text(test: TestResult) -> str:
    """``"+0.012 [-0.004, +0.027] (word)"`` of a decided test."""
    low, high = test.interval
    return f"{test.estimate:+.3f} [{low:+.3f}, {high:+.3f}] ({test.word})"
