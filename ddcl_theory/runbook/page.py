"""The book's GPU runbook page (``book/runbook.md``), written from counted FLOPs.

    python -m ddcl_theory.runbook.page            # write book/runbook.md
    python -m ddcl_theory.runbook.page --check    # exit 1 when the committed page is out of date

Per experiment, the training FLOPs of a paper-profile run are the FLOPs per training example
counted at the paper's shapes (:mod:`ddcl_theory.runbook.flops`) times the examples its
optimiser steps see at the paper's settings (:mod:`ddcl_theory.runbook.steps`); the text
chapters add the frozen encoder's forward pass over the documents they encode. GPU hours are
those FLOPs over a stated peak rate and utilisation (:data:`GPU`), not typed in. The page also
says how to run and resume one chapter, what the paper profile fetches, and, for every claim
the ledger leaves ``inconclusive``, what its binding test needs.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from ddcl_theory.runbook import flops as flop_counts
from ddcl_theory.runbook import steps as planned
from ddcl_theory.runtime.paths import repo_root

__all__ = ["GPU", "Gpu", "ExperimentCost", "experiment_costs", "render", "current_page", "main"]

PAGE = Path("book") / "runbook.md"
#: The recipe check's report from a GPU (``recipe_check --device cuda --report ...``).
MEASURED_FILE = Path("results") / "runbook" / "gpu_recipes.json"
#: The recipes of the recipe check that a registry entry trains as they are timed.
RECIPE_ENTRIES = {"gpt2 stacked": "laplacian_lm.run"}


@dataclass(frozen=True)
class Gpu:
    """The rate the hours are computed at: ``peak`` dense bf16 FLOP/s times ``utilisation``."""

    name: str
    peak: float
    utilisation: float

    @property
    def rate(self) -> float:
        return self.peak * self.utilisation

    def hours(self, flops: float) -> float:
        return flops / self.rate / 3600.0


#: NVIDIA's dense bf16 tensor-core peak of an H100 SXM (an H200 has the same), at a utilisation
#: typical of models this small (launch-bound: a width-192 ViT or a 6-layer character GPT keeps
#: a large GPU far from its peak); the hours scale with 1 / utilisation.
GPU = Gpu("one H100 or H200 (SXM)", 989.4e12, 0.1)


@dataclass(frozen=True)
class ExperimentCost:
    """One registry entry at the paper profile's settings: its optimiser steps, training
    examples (all model classes together), training FLOPs and the tokens its encoder reads."""

    name: str
    steps: int
    examples: int
    training_flops: float
    encoded_tokens: int

    @property
    def flops_per_example(self) -> float | None:
        """Training FLOPs per example, over the entry's models (None: no training step)."""
        return self.training_flops / self.examples if self.examples else None


def experiment_costs(counts: dict, settings: dict) -> list[ExperimentCost]:
    """One :class:`ExperimentCost` per entry of ``settings`` (entry name -> paper settings),
    from ``counts`` (:func:`ddcl_theory.runbook.flops.read`): per model class (and width, for a
    stack of seeds), the FLOPs per example counted at the paper's shapes times the examples that
    class trains on at these settings. ``KeyError`` naming an entry or model class that was not counted."""
    rows = []
    for name, s in settings.items():
        if name not in counts["experiments"]:
            raise KeyError(f"{name}: no FLOP count; rerun python -m ddcl_theory.runbook.flops")
        counted = counts["experiments"][name].get("models", {})
        examples = planned.examples(name, s)
        flops = 0.0
        for model, n in examples.items():
            if n == 0:
                continue
            c = counted.get(model)
            if not c or not c["examples"]:
                raise KeyError(f"{name}: model {model!r} trains at the paper's settings but "
                               "the smoke run counted none of its steps")
            flops += c["flops"] / c["examples"] * n
        docs, length = planned.encoded(name, s)
        rows.append(ExperimentCost(name, planned.steps(name, s), sum(examples.values()), flops,
                                   docs * length))
    return rows


def _number(x: float) -> str:
    """``x`` with three significant digits and an SI prefix, ready for a unit: "507 T"."""
    for unit, size in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6),
                       ("k", 1e3)):
        if x >= size:
            return f"{x / size:.3g} {unit}"
    return f"{x:.3g} "


def _hours(h: float) -> str:
    return "< 0.01" if h < 0.01 else f"{h:.2g}" if h < 10 else f"{h:,.0f}"


def _chapters(todo) -> dict[str, list[str]]:
    """``{chapter: names of the registry entries it calls}``, in file order."""
    from ddcl_theory.runbook.chapters import chapter_entries
    root = repo_root() or Path.cwd()
    return {p.stem: [e.name for e in chapter_entries(p, todo)]
            for p in sorted((root / "notebooks").glob("*.md"))}


def measured_lines(measured: dict | None, costs: list[ExperimentCost], gpu: Gpu = GPU
                   ) -> list[str]:
    """The page's section on the recipe check's report (``measured``; None: none committed):
    each recipe's seconds a step, speed and peak memory, and for a recipe a registry entry
    trains (:data:`RECIPE_ENTRIES`) the FLOP rate it reached and that entry's training hours at
    the measured speed."""
    lines = ["## Measured on a GPU", ""]
    if measured is None:
        return lines + [f"No measurement is committed (`{MEASURED_FILE.as_posix()}`).", ""]
    lines += [
        f"The recipe check of `make gpu-check` timed these optimiser steps on one "
        f"{measured['device_name']} ({measured['date']}; torch {measured['torch']}, CUDA "
        f"{measured['cuda']}, transformers {measured['transformers']}"
        f"{'; bf16 autocast' if all(r.get('bf16') for r in measured['recipes']) else ''}), "
        f"{measured['steps']} steps after a warm-up, on random data of the recipes' shapes "
        f"(`{MEASURED_FILE.as_posix()}`).",
        "",
        "| Recipe | Shapes | Batch | Seconds a step | Examples a second | Peak memory |",
        "|:--|:--|--:|--:|--:|--:|",
    ]
    for r in measured["recipes"]:
        if "error" in r:
            error = r["error"].replace("|", "\\|")
            lines.append(f"| {r['recipe']} | {r.get('outcome', 'failed')}: {error} | | | | |")
            continue
        lines.append(f"| {r['recipe']} | {r['shapes']} | {r['batch']} | "
                     f"{r['seconds_per_step']:.3f} | {r['examples_per_second']:,.0f} | "
                     f"{r['peak_mib'] / 1024:.1f} GiB |")
    lines.append("")
    by_name = {c.name: c for c in costs}
    for r in measured["recipes"]:
        cost = by_name.get(RECIPE_ENTRIES.get(r["recipe"], ""))
        if cost is None or cost.flops_per_example is None or "error" in r:
            continue
        rate = cost.flops_per_example * r["examples_per_second"]
        hours = cost.steps * r["seconds_per_step"] / 3600
        lines += [
            f"`{cost.name}` trains as the recipe \"{r['recipe']}\" is timed: at "
            f"{_number(cost.flops_per_example)}FLOP an example it reached "
            f"{rate / 1e12:,.0f} TFLOP/s, {rate / gpu.peak:.0%} of the peak (the table above "
            f"assumes {gpu.utilisation:.0%}). Its {cost.steps:,} optimiser steps at the paper's "
            f"settings take about {_hours(hours)} GPU hours at that speed, before its "
            "evaluation passes."
            + (f" Its optimiser was the study's: {r['optimiser']}." if "optimiser" in r else ""),
            "",
        ]
    return lines


def render(counts: dict, settings: dict, chapters: dict[str, list[str]], claims: list[dict],
           decisions: dict[str, dict], gpu: Gpu = GPU, measured: dict | None = None) -> str:
    """The page's Markdown. ``settings``: entry -> paper settings; ``chapters``: chapter ->
    the entries it runs; ``claims``: the ledger rows (``results/claims.json``); ``decisions``:
    claim id -> the reference decision record; ``measured``: the recipe check's report from a
    GPU (None: none)."""
    costs = experiment_costs(counts, settings)
    per_token = counts["encoder"]["flops_per_token"]
    lines = [
        "# Running the paper profile on a GPU",
        "",
        "This page is written by `python -m ddcl_theory.runbook.page` from FLOPs that torch's "
        "FLOP counter counted at the paper's shapes (`results/runbook/flops.json`, torch "
        f"{counts['torch']}) and from the paper profile's settings; the test suite checks that "
        "it is current. {doc}`rerun` says what the profiles are and how a run resumes.",
        "",
        "## One chapter at a time",
        "",
        "```bash",
        "make setup TORCH=cuda                   # the CUDA build of the pinned torch",
        "make data PROFILE=paper                 # the paper profile's data sets and models",
        "make gpu-check                          # ten minutes: every experiment on CUDA",
        "make paper NAMES=laplacian_experiments  # one chapter; rerun the same line to resume",
        "```",
        "",
        "A killed run resumes at its last finished unit (one seed of a sweep, one setting) and "
        "inside a long loop at its last checkpoint; `FORCE=1` starts afresh. The executed "
        "notebooks land in `_build/paper/`, the verdicts in `results/paper/`.",
        "",
        "## What each chapter costs",
        "",
        f"Hours at {gpu.utilisation:.0%} of the dense bf16 peak of {gpu.name} "
        f"({gpu.peak / 1e12:,.0f} TFLOP/s): counted FLOPs / ({gpu.rate / 1e12:,.0f} TFLOP/s). "
        "Training FLOPs are, per kind of model an experiment trains, the FLOPs per training "
        "example, counted over the forward and backward passes of the smoke run's optimiser "
        "steps at the paper's model shapes, times the examples that model trains on at the "
        "paper's settings (an example is a row of a batch's indices or labels, a token of a "
        "language model's batch; the planned maximum where a run can stop early). The text "
        "chapters add BERT-base's forward pass "
        f"({_number(per_token)}FLOP a token at 512 tokens) over every token they encode, "
        "at most the documents times their length cap. Matrix products, convolutions and "
        "attention are counted; element-wise work, evaluation passes and data loading are not, "
        "so a real run takes longer: `make gpu-check` prints the seconds per step that a GPU "
        "actually gives.",
        "",
        "| Chapter | Claims | Experiments | Training examples | Counted FLOPs | GPU hours |",
        "|:--|:--|:--|--:|--:|--:|",
    ]
    claims_of: dict[str, list[str]] = {}
    for row in claims:
        claims_of.setdefault(row["chapter"], []).append(row["id"])
    total = 0.0
    for chapter in chapters:
        mine = [c for c in costs if c.name in chapters[chapter]]
        if not mine:
            continue
        flops = sum(c.training_flops + c.encoded_tokens * per_token for c in mine)
        total += flops
        names = ", ".join(f"`{c.name}`" for c in mine)
        examples = sum(c.examples for c in mine)
        lines.append(f"| {{doc}}`{chapter} <../notebooks/{chapter}>` | "
                     f"{', '.join(claims_of.get(chapter, [])) or '–'} | {names} | "
                     f"{examples:,} | {_number(flops)}FLOP | {_hours(gpu.hours(flops))} |")
    lines += [
        "",
        f"All chapters: {_number(total)}FLOP, about {_hours(gpu.hours(total))} GPU hours.",
        "",
        "### Per experiment",
        "",
        "| Experiment | FLOPs per training example | Optimiser steps | Training examples "
        "| Encoded tokens (at most) |",
        "|:--|--:|--:|--:|--:|",
    ]
    for c in costs:
        per = "–" if c.flops_per_example is None else f"{_number(c.flops_per_example)}FLOP"
        lines.append(f"| `{c.name}` | {per} | {c.steps:,} | {c.examples:,} | "
                     f"{c.encoded_tokens:,} |")
    lines += [
        "",
        "An experiment with no counted training step (a timing benchmark, an exact "
        "computation, an annealing schedule outside the training loop) shows a dash: it runs "
        "in minutes.",
        "",
        *measured_lines(measured, costs, gpu),
        "## What the paper profile fetches",
        "",
        "`make data PROFILE=paper` (`python -m ddcl_theory.data ensure --paper`; `status --paper`"
        " lists them) fetches these from their canonical sources, checks the published "
        "checksum of each archive and records a digest of each derived file:",
        "",
    ]
    from ddcl_theory.data import paper_files  # noqa: F401 (adds the LM corpus entry)
    from ddcl_theory.data.paper_sources import HUB_MODELS, PAPER_FILES
    for key, f in PAPER_FILES.items():
        lines.append(f"- `{key}`: {f.description}.")
    for key, m in HUB_MODELS.items():
        lines.append(f"- `{key}`: {m.description} (`{m.repo_id}` at commit `{m.revision[:7]}`).")
    lines += [
        "",
        "The chapters' experiments read the staged data of the cpu profile at larger sizes "
        "(the 10,000-image CIFAR-10 subset, Tiny Shakespeare, the text sets' staged draws); "
        "the text chapters read BERT-base, and stop when it is not there "
        "(`DDCL_ALLOW_SUBSTITUTE=1` runs all-MiniLM-L6-v2 in its place, with other numbers).",
        "",
        "## What each undecided verdict needs",
        "",
    ]
    undecided = [row for row in claims if row["verdict"] == "inconclusive"]
    if not undecided:
        lines.append("No claim of the ledger is `inconclusive`.")
    for row in undecided:
        decision = decisions.get(row["id"]) or {}
        binding = [t for t in decision.get("tests", []) if t.get("binding")]
        seeds = sorted({len(s.seeds) for name, s in settings.items()
                        if hasattr(s, "seeds") and name in chapters.get(row["chapter"], [])})
        lines.append(f"- **{row['id']}** ({{doc}}`{row['chapter']} "
                     f"<../notebooks/{row['chapter']}>`), at {row.get('verdict_from', 'cpu')} "
                     f"scale: {row['our_value']}.")
        for t in binding:
            lines.append(f"  The binding test, {t['statistic']}, had {t['n_seeds']} seeds; "
                         f"80% power against its smallest effect of interest "
                         f"({t['sesoi']:g}) asks for about {t['seeds_needed']}.")
        if seeds:
            lines.append(f"  The paper profile runs {' or '.join(map(str, seeds))} seeds of "
                         "this chapter's experiments at larger shapes, where the spread "
                         "between seeds may differ: its power is computed again from its own "
                         "seeds.")
    return "\n".join(lines) + "\n"


def current_page() -> str:
    """The page as this checkout's counts, settings, ledger and decisions write it."""
    from ddcl_theory.experiments.registry import entries
    from ddcl_theory.experiments.smoke import scoped_env
    from ddcl_theory.runtime import profile
    root = repo_root() or Path.cwd()
    todo = entries()
    with scoped_env(**{profile.PROFILE_ENV: "paper", profile.SMOKE_ENV: None}):
        settings = {e.name: e.make_settings() for e in todo}
    claims = json.loads((root / "results" / "claims.json").read_text(encoding="utf-8"))
    decisions = {}
    for path in sorted((root / "results" / "reference" / "verdicts").glob("*.json")):
        for row in json.loads(path.read_text(encoding="utf-8")):
            decisions[row["id"]] = row.get("decision") or {}
    measured_path = root / MEASURED_FILE
    measured = (json.loads(measured_path.read_text(encoding="utf-8"))
                if measured_path.is_file() else None)
    return render(flop_counts.read(), settings, _chapters(todo), claims, decisions,
                  measured=measured)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when book/runbook.md differs from what it would be")
    args = parser.parse_args(argv)
    path = (repo_root() or Path.cwd()) / PAGE
    text = current_page()
    if args.check:
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            print(f"{PAGE}: out of date; run python -m ddcl_theory.runbook.page")
            return 1
        print(f"{PAGE}: current")
        return 0
    path.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
