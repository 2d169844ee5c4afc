"""Claim D13 (DDCL against k-means on orbital debris): :func:`decide_d13`.

Reads a :class:`ddcl_theory.experiments.orbital_debris.DebrisResult` (``settings``,
``class_sizes``, ``runs`` and ``select``) and the parts of each DDCL variant computed by
:func:`ddcl_theory.experiments.orbital_debris.variant_parts`.
"""
from __future__ import annotations

import numpy as np

from ddcl_theory.data import debris
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict

#: How far the numbers of the evidence may move between machines.
TOLERANCE = Tolerance(abs=0.05, rel=0.3, reason="seed means of DDCL and k-means fits on five "
                      "synthetic catalogues")

RULE = ("reproduced: V >= 0 at every epoch of every DDCL run and one variant beats k-means "
        "(10 restarts) on ACC by more than the seed spread, has a monotone separation in every "
        "seed and fills the classes (no empty class, LEO the majority of at most one cluster on "
        "average while k-means gives it two or more); qualified: V >= 0 and some variant beats "
        "k-means on ACC, or is within the spread and fills the classes; not reproduced "
        "otherwise")

VARIANTS = ("ddcl", "readout")


def _mean_std(runs, name: str) -> tuple[float, float]:
    values = np.array([getattr(x, name) for x in runs], dtype=np.float64)
    return float(values.mean()), float(values.std())


def decide_d13(result, variants: dict[str, dict], kind: str = "min") -> Verdict:
    """D13 on the catalogues with overlap (the setting of the claim), for the two DDCL variants.

    ``variants``: ``{"ddcl": parts, "readout": parts}``, the parts of each variant against
    k-means (``acc``, ``nmi``, ``ari``, ``compare``, ``monotone``, ``ratio``, ``min_v``,
    ``leo_clusters``, ``empty``, ``fills``) for the separation ``kind``; left unchanged.

    Parts: ``acc`` - a variant's mean ACC beats k-means (10 restarts) by more than the seed
    spread (``compare > 0``); ``v`` - V >= 0 at every epoch of every DDCL run (head at every r,
    and readout); ``monotone`` - a variant's separation never decreases, in every seed;
    ``fills`` - a variant leaves no class empty in any seed and gives LEO at most one cluster
    on average, while k-means gives LEO two or more.

    ``reproduced`` when ``v`` holds and one variant has ``acc``, ``monotone`` and ``fills``;
    ``qualified`` when ``v`` holds and some variant has ``acc``, or is within the spread of
    k-means and has ``fills``; ``not reproduced`` otherwise.
    """
    missing = [m for m in VARIANTS if m not in variants]
    if missing:
        raise ValueError(f"variants: expected the parts of {VARIANTS}, missing {missing}")
    s = result.settings
    km = result.select("kmeans")
    traced = [x for x in result.runs if x.trace is not None and x.overlap]
    leo = debris.CLASSES.index("LEO")
    km_leo = float(np.mean([x.fill.majority_clusters[leo] for x in km]))
    v_ok = all(x.trace.min_v >= 0 for x in traced)
    parts_by = {m: {**variants[m], "fills": variants[m]["fills"] and km_leo >= 2.0}
                for m in VARIANTS}
    parts = {"v": v_ok}
    for m, p in parts_by.items():
        parts[f"acc ({m})"] = p["compare"] > 0
        parts[f"monotone ({m})"] = all(p["monotone"])
        parts[f"fills ({m})"] = p["fills"]
    full = [m for m, p in parts_by.items()
            if p["compare"] > 0 and all(p["monotone"]) and p["fills"]]
    partial = [m for m, p in parts_by.items()
               if p["compare"] > 0 or (p["compare"] == 0 and p["fills"])]
    if v_ok and full:
        word = "reproduced"
    elif v_ok and partial:
        word = "qualified"
    else:
        word = "not reproduced"
    acc_km = _mean_std(km, "acc")
    head_main = parts_by["ddcl"]

    def describe(m: str, name: str) -> str:
        p = parts_by[m]
        return (f"{name}: ACC {p['acc'][0]:.3f} +- {p['acc'][1]:.3f}, NMI {p['nmi'][0]:.3f}, "
                f"ARI {p['ari'][0]:.3f}; separation ({kind} pairwise distance) monotone in "
                f"{sum(p['monotone'])} of {len(p['monotone'])} seeds, final/initial "
                f"{min(p['ratio']):.2f} to {max(p['ratio']):.2f}; LEO the majority of "
                f"{p['leo_clusters']:.1f} clusters on average, {p['empty']} empty class-slots")

    evidence = (
        f"{len(s.seeds)} synthetic catalogues of {s.n_objects} objects (LEO/MEO/GEO/HEO "
        f"{'/'.join(str(int(v)) for v in result.class_sizes)}), standardised observed elements, "
        f"K = {s.num_clusters}, {s.epochs} full-batch epochs at tau = "
        f"{s.relative_temperature:g} T_c. k-means ({s.kmeans_restarts} restarts): ACC "
        f"{acc_km[0]:.3f} +- {acc_km[1]:.3f}, NMI {_mean_std(km, 'nmi')[0]:.3f}, LEO the "
        f"majority of {km_leo:.1f} clusters. " + describe("ddcl", "DDCL head") + ". "
        + describe("readout", "DDCL readout (encoder, bank, decoder)") + ". V >= 0 at every "
        f"epoch of all {len(traced)} DDCL runs (the head's smallest V at the main temperature "
        f"{head_main['min_v']:.2g}). Parts holding: "
        f"{[k for k, v in parts.items() if v] or 'none'}; failing: "
        f"{[k for k, v in parts.items() if not v] or 'none'}.")
    our = (f"ACC head {head_main['acc'][0]:.3f}, readout {parts_by['readout']['acc'][0]:.3f} "
           f"vs k-means {acc_km[0]:.3f}; V >= 0 throughout; separation monotone in "
           f"{sum(head_main['monotone'])}/{len(head_main['monotone'])} seeds (head)")
    return Verdict("D13", word, evidence, our_value=our,
                   numbers={"parts": parts, "kmeans_leo_clusters": km_leo}, rule=RULE,
                   n_seeds=len(s.seeds), tolerance=TOLERANCE)
