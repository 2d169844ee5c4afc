"""Compare the results a build wrote with the committed ones, by meaning rather than by bytes.

Verdict words, claim ids, chapters and pages must match exactly; the numbers inside
``our_value``, ``evidence`` and ``paper_value`` must agree within the tolerance the claim was
settled with (tight unless the chapter declared one; see :mod:`ddcl_theory.ledger.tolerance`).

    python -m ddcl_theory.ledger.results_check            # results/ against git HEAD
    python -m ddcl_theory.ledger.results_check --ref main --dir /tmp/results

Exit status 0 when everything agrees, 1 with one line per moved claim otherwise. Stale
reference results (:func:`ddcl_theory.ledger.reference.stale`) are printed as notes; ``make
check-reference`` is the check that fails on them.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from ddcl_theory.ledger import reference
from ddcl_theory.ledger.tolerance import Tolerance, compare_text
from ddcl_theory.runtime.paths import repo_root

EXACT_FIELDS = ("id", "verdict", "chapter", "page")
NUMERIC_FIELDS = ("our_value", "evidence", "paper_value")


def committed_json(relpath: str, ref: str = "HEAD") -> list[dict] | None:
    """The JSON file ``relpath`` (relative to the repository root) as committed at ``ref``."""
    root = repo_root()
    if root is None:
        raise RuntimeError("results_check: run from a checkout")
    proc = subprocess.run(["git", "show", f"{ref}:{relpath}"], cwd=root, capture_output=True,
                          text=True, check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def committed_files(ref: str = "HEAD") -> list[str]:
    """Paths of the JSON files under ``results/`` committed at ``ref`` (the paper/ and reference/
    folders aside: the reference results are checked for staleness, :mod:`.reference`)."""
    proc = subprocess.run(["git", "ls-tree", "-r", "--name-only", ref, "--", "results"],
                          cwd=repo_root(), capture_output=True, text=True, check=True)
    return [p for p in proc.stdout.split() if p.endswith(".json") and not _set_aside(p)]


def _set_aside(rel: str) -> bool:
    """Files that are not claim rows rewritten by a cpu build: a paper rerun's and the committed
    reference run's results, the first edition's archive, the per-seed values and settings
    behind the verdicts (their words and numbers are compared through the verdict files), and
    the GPU runbook's FLOP counts (written by ``make runbook``, checked by the smoke test)."""
    return rel.startswith(("results/paper/", "results/reference/", "results/first_edition/",
                           "results/seeds/", "results/settings/", "results/runbook/"))


def compare_rows(want: list[dict], got: list[dict], where: str) -> list[str]:
    """Differences between two lists of claim rows (settlements or ledger rows)."""
    problems = []
    want_by_id = {r["id"]: r for r in want}
    got_by_id = {r["id"]: r for r in got}
    for cid in sorted(set(want_by_id) ^ set(got_by_id)):
        side = "committed only" if cid in want_by_id else "new, not committed"
        problems.append(f"{where}: {cid}: {side}")
    for cid in [r["id"] for r in want if r["id"] in got_by_id]:
        w, g = want_by_id[cid], got_by_id[cid]
        tol = Tolerance.from_dict(w.get("tolerance"))
        for field in EXACT_FIELDS:
            if w.get(field) != g.get(field):
                problems.append(f"{where}: {cid}: {field} changed from {w.get(field)!r} "
                                f"to {g.get(field)!r}")
        for field in NUMERIC_FIELDS:
            a, b = w.get(field) or "", g.get(field) or ""
            for p in compare_text(a, b, tol):
                problems.append(f"{where}: {cid}: {field}: {p}")
    return problems


def check(results: Path, ref: str = "HEAD") -> list[str]:
    """All differences between the results in ``results`` and those committed at ``ref``."""
    problems = []
    for rel in committed_files(ref):
        local = results / Path(rel).relative_to("results")
        if not local.is_file():
            problems.append(f"{rel}: committed but not written by this build")
            continue
        problems += compare_rows(committed_json(rel, ref) or [],
                                 json.loads(local.read_text(encoding="utf-8")), rel)
    committed = set(committed_files(ref))
    for local in sorted(results.glob("**/*.json")):
        rel = "results/" + local.relative_to(results).as_posix()
        if rel not in committed and not _set_aside(rel):
            problems.append(f"{rel}: written by this build but not committed")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="HEAD", help="git revision holding the committed results")
    parser.add_argument("--dir", type=Path, default=None, help="results folder (default results/)")
    args = parser.parse_args(argv)
    results = args.dir or repo_root() / "results"
    problems = check(results, args.ref)
    for p in problems:
        print(p)
    for note in reference.stale(results / reference.REFERENCE):
        print(f"note: {note}")          # make check-reference fails on these
    print("results: agree with the committed ones" if not problems
          else f"results: {len(problems)} difference(s) from {args.ref}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
