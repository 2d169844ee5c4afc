"""The decision of the text-readout chapter: claim D14 (a DDCL readout on a frozen BERT beats
[CLS], mean pooling and k-means on [CLS] on SST-2, IMDB and 20 Newsgroups).

Reads a text-readout result (``corpora``: name -> result with ``num_classes``, ``n_train``,
``n_test``, ``max_length``, ``probe``, ``clusters``) and its comparisons (``corpus``,
``baseline``, ``outcome``) by attribute.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict

__all__ = ["D14_RULE", "d14_word", "decide_d14"]

D14_RULE = ("a comparison is better (worse) when the difference of mean accuracies exceeds "
            "(falls below minus) twice the larger seed standard deviation, at least 0.01; "
            "reproduced when DDCL is better in every comparison, not reproduced when in none, "
            "qualified otherwise")

#: How far the accuracies quoted in the evidence may move between machines.
D14_TOLERANCE = Tolerance(abs=0.03, reason="seed means of short training runs and clusterings")


def d14_word(comparisons: Sequence[Any]) -> str:
    """"reproduced" when DDCL is better in every comparison, "not reproduced" when in none,
    "qualified" otherwise."""
    better = sum(c.outcome == "better" for c in comparisons)
    if better == len(comparisons):
        return "reproduced"
    return "not reproduced" if better == 0 else "qualified"


def decide_d14(result: Any, comparisons: Sequence[Any], titles: Mapping[str, str]) -> Verdict:
    """D14 from a text-readout ``result``, its DDCL-against-baseline ``comparisons`` (K = number
    of classes; supervised against the [CLS] and mean probes, the better DDCL clustering against
    k-means on [CLS]) and the corpora's display ``titles``; the word is :func:`d14_word`."""
    if not comparisons:
        raise ValueError("comparisons: expected at least one comparison")
    word = d14_word(comparisons)
    corpora = result.corpora
    counts = Counter(c.outcome for c in comparisons)
    acc = {n: {k: float(np.mean(v)) for k, v in r.probe.items()} for n, r in corpora.items()}
    cl = {n: {c.method: float(np.mean(c.acc)) for c in r.clusters if c.k == r.num_classes}
          for n, r in corpora.items()}
    ours = "; ".join(
        f"{titles[n]}: DDCL {acc[n][f'DDCL K={r.num_classes}']:.3f} vs [CLS] "
        f"{acc[n]['[CLS]']:.3f} vs mean {acc[n]['mean']:.3f}" for n, r in corpora.items())
    outcomes = "; ".join(
        f"{titles[n]}: " + ", ".join(f"{c.outcome} vs {c.baseline}" for c in comparisons
                                     if c.corpus == n)
        for n in corpora)
    clusters = ", ".join(
        f"{titles[n]} {max(cl[n]['DDCL on tokens'], cl[n]['DDCL on mean']):.3f} vs "
        f"{cl[n]['k-means on [CLS]']:.3f}" for n in corpora)
    sst2, imdb, ng = corpora["sst2"], corpora["imdb"], corpora["20ng"]
    evidence = (
        f"Frozen all-MiniLM-L6-v2 (a sentence-embedding fine-tune of MiniLM, not BERT-base), "
        f"class-balanced subsamples (SST-2 {sst2.n_train:,} train / full dev; "
        f"IMDB {imdb.n_train} + {imdb.n_test} reviews cut at {imdb.max_length} tokens; "
        f"20 Newsgroups {ng.n_train} + {ng.n_test}, headers stripped). "
        f"Supervised test accuracy, DDCL readout with K = classes (3 seeds) against logistic "
        f"regression on [CLS] and on the mean: {ours}. Unsupervised (K = classes), the better "
        f"DDCL clustering against k-means on [CLS]: ACC {clusters}. Outcomes (margin: twice the "
        f"seed spread, at least 0.01): {outcomes}; better in {counts['better']}, tie in "
        f"{counts['tie']}, worse in {counts['worse']} of {len(comparisons)}. Neither reading "
        f"of the aggregator's ACC (86.7 / 91.3 / 17.5) is matched: see the page.")
    our_value = (f"acc SST-2 DDCL {acc['sst2']['DDCL K=2']:.3f} / mean {acc['sst2']['mean']:.3f}; "
                 f"IMDB (K=4) DDCL {acc['imdb']['DDCL K=4']:.3f}; 20NG DDCL "
                 f"{acc['20ng']['DDCL K=20']:.3f} / mean {acc['20ng']['mean']:.3f}")
    seeds = max(len(v) for r in corpora.values() for v in r.probe.values())
    return Verdict("D14", word, evidence, our_value=our_value,
                   numbers={"better": counts["better"], "tie": counts["tie"],
                            "worse": counts["worse"], "comparisons": len(comparisons)},
                   rule=D14_RULE, n_seeds=seeds, tolerance=D14_TOLERANCE)
