"""The reference profile's committed results: provenance, reading, and the stale check.

``make reference`` executes the chapters under ``DDCL_PROFILE=reference`` (CPU, the seeds and
scales the verdict rules demand); each chapter writes its verdicts to
``results/reference/verdicts/<chapter>.json`` and :func:`write_provenance` writes
``results/reference/provenance/<chapter>.json``: the commit, a sha256 digest of the chapter's
source and of every module of the science and experiments it runs (:func:`chapter_modules`),
the library versions, the machine and the time the chapter took.

A reference result is **stale** when the code it was computed with has changed since: a digest
in its provenance no longer matches the checkout (:func:`stale`). ``make check-reference``
(``python -m ddcl_theory.ledger.reference check``) lists them and fails; ``results_check`` prints
them as notes. When the modules counted as deciding grow, ``python -m
ddcl_theory.ledger.reference extend`` adds the new modules' digests to the results whose runs
they did not change (git shows each unchanged since the run's commit, :func:`extend_digests`).

The runtime (:data:`RUNTIME`: the training loop, stacked seeds, data parallel, random streams,
precision) is left out of the stale check but recorded beside it: each provenance holds the
digests of the runtime modules its chapter runs (:func:`runtime_digests`), and
:func:`runtime_drift` names those changed since. A change there can move a run's per-seed values
without making it stale (so can another machine: the provenance names the CPU's vector
extensions, :func:`cpu_isa`); rerunning the chapter tells whether they repeat. ``python -m
ddcl_theory.ledger.reference record-runtime`` fills in the digests of runs made before they were
recorded, from git at each run's commit (:func:`record_runtime`).
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ddcl_theory.ledger import side_by_side
from ddcl_theory.runtime.io import write_json
from ddcl_theory.runtime.paths import repo_root, results_dir

REFERENCE = "reference"
#: The cores of the machine the reference budget is stated for (about 5 hours on two).
SIDE_BY_SIDE_CORES = 2
#: The subpackages whose code decides a reference result (the science and the experiments);
#: ``runtime`` and ``ledger`` (how results are stored and shown) are left out.
SCIENCE = ("experiments", "layers", "models", "theory", "metrics", "data", "functional", "bench")
#: the ledger modules that turn a chapter's results into its verdicts (the decision of each
#: chapter, the intervals, the three-way decision of a registered rule and the word helpers): a
#: change there changes a committed verdict as much as the science
DECIDING = ("ledger.decisions", "ledger.stats", "ledger.resampling", "ledger.design",
            "ledger.verdict")
PACKAGE = "ddcl_theory"
#: The subpackage of how runs are carried out, recorded beside the stale check (not in it).
RUNTIME = "runtime"
#: Its modules that cannot move a number: how results are stored, found and shown, argument
#: checks, the kernel report, and the package's docstring.
RUNTIME_INERT = ("ddcl_theory.runtime", "ddcl_theory.runtime.io", "ddcl_theory.runtime.paths",
                 "ddcl_theory.runtime.progress", "ddcl_theory.runtime.provenance",
                 "ddcl_theory.runtime.validate", "ddcl_theory.runtime.kernels")


#: Where the ledger reads reference results, when not the checkout's ``results/reference``.
REFERENCE_ENV = "DDCL_REFERENCE_DIR"


def reference_dir(results: Path | None = None) -> Path:
    """``<results>/reference``; without ``results``: ``$DDCL_REFERENCE_DIR``, else the checkout's
    committed ``results/reference`` (whatever the profile; not created).

    It does not follow ``$DDCL_RESULTS_DIR``: reference results are committed data that the
    cpu-profile chapters read, and CI points ``$DDCL_RESULTS_DIR`` at a scratch folder for the
    verdicts the chapters write, not for what they read.
    """
    if results is None and os.environ.get(REFERENCE_ENV):
        return Path(os.environ[REFERENCE_ENV])
    if results is None:
        root = repo_root()
        results = (root if root is not None else Path.cwd()) / "results"
    return Path(results) / REFERENCE


def _package_dir(root: Path) -> Path:
    return root / PACKAGE


def _module_file(name: str, root: Path) -> Path | None:
    """The file of ``ddcl_theory.x.y`` under ``root`` (module or package ``__init__``)."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    base = root.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _is_science(name: str) -> bool:
    parts = name.split(".")
    return len(parts) >= 2 and parts[0] == PACKAGE and (
        parts[1] in SCIENCE or ".".join(parts[1:3]) in DECIDING)


def _is_runtime(name: str) -> bool:
    parts = name.split(".")
    return len(parts) >= 2 and parts[0] == PACKAGE and parts[1] == RUNTIME


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Absolute names of the ``ddcl_theory`` modules ``tree`` imports (``from a import b``
    yields ``a`` and ``a.b``: ``b`` may be a module)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {n for n in found if n.split(".")[0] == PACKAGE}


def _chapter_imports(source: Path) -> set[str]:
    """The ``ddcl_theory`` modules the code cells of a MyST chapter import."""
    text = source.read_text(encoding="utf-8")
    found: set[str] = set()
    for cell in re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```", text, re.S | re.M):
        code = "\n".join("" if line.lstrip().startswith(("%", "!", ":")) else line
                         for line in cell.splitlines())
        try:
            found |= _imports(ast.parse(code), "__chapter__", False)
        except SyntaxError:
            lines = [ln.strip() for ln in code.splitlines()
                     if ln.startswith(("import ", "from ")) and "(" not in ln]
            for line in lines:
                try:
                    found |= _imports(ast.parse(line), "__chapter__", False)
                except SyntaxError:
                    continue
    return found


def chapter_modules(source: Path, root: Path | None = None) -> list[str]:
    """The science and experiment modules (:data:`SCIENCE`) a chapter runs and the decision
    modules (:data:`DECIDING`) that settle its claims: those its source imports and,
    transitively, those they import. Sorted module names."""
    root = root or repo_root()
    if root is None:
        raise RuntimeError("reference: run from a checkout")
    return sorted(_import_closure(_chapter_imports(Path(source)), root, _is_science))


def _module_imports(name: str, root: Path) -> set[str]:
    path = _module_file(name, root)
    if path is None:
        return set()
    return _imports(ast.parse(path.read_text(encoding="utf-8")), name,
                    path.name == "__init__.py")


def _import_closure(names, root: Path, keep) -> set[str]:
    """The modules of ``names`` that ``keep`` accepts and exist under ``root``, and,
    transitively, those of their imports that ``keep`` accepts."""
    todo = [n for n in names if keep(n)]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or _module_file(name, root) is None:
            continue
        seen.add(name)
        todo += [n for n in _module_imports(name, root) if keep(n)]
    return seen


def runtime_modules(source: Path, root: Path | None = None) -> list[str]:
    """The runtime modules (:data:`RUNTIME`) a chapter runs: those its source and its
    :func:`chapter_modules` import and, transitively, those they import, less
    :data:`RUNTIME_INERT`. Sorted names."""
    root = root or repo_root()
    if root is None:
        raise RuntimeError("reference: run from a checkout")
    names = set(_chapter_imports(Path(source)))
    for module in chapter_modules(source, root):
        names |= _module_imports(module, root)
    return sorted(_import_closure(names, root, _is_runtime) - set(RUNTIME_INERT))


def runtime_digests(source: Path, root: Path | None = None) -> dict[str, str]:
    """``{<runtime module>: digest of its file}`` (16 hex digits of sha256) for every module of
    :func:`runtime_modules`."""
    root = root or repo_root()
    return {name: _sha256(_module_file(name, root)) for name in runtime_modules(source, root)}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


#: a golden's tolerance declaration and the comment lines that continue its reason
_TOLERANCE_BLOCK = re.compile(r"^[ \t]*#[ \t]*nbval-tolerance:.*\n(?:[ \t]*#.*\n)*", re.M)


def chapter_digest(source: Path) -> str:
    """16 hex digits of the sha256 of a chapter source without its ``# nbval-tolerance:``
    declarations (each with the comment lines right after it): how closely a golden is
    compared decides nothing that the chapter computes, so declaring a tolerance leaves its
    reference result current."""
    text = Path(source).read_text(encoding="utf-8")
    text = _TOLERANCE_BLOCK.sub("", text if text.endswith("\n") else text + "\n")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def source_digests(source: Path, root: Path | None = None) -> dict[str, str]:
    """``{"chapter": digest of the chapter source (:func:`chapter_digest`), <module>: digest of
    its file, ...}`` (16 hex digits of sha256) for the chapter and every module of
    :func:`chapter_modules`."""
    root = root or repo_root()
    digests = {"chapter": chapter_digest(Path(source))}
    for name in chapter_modules(source, root):
        digests[name] = _sha256(_module_file(name, root))
    return digests


def rules_digests(claim_ids) -> dict[str, str]:
    """``{claim id: digest of its registered rule}`` (:func:`ddcl_theory.ledger.rules.digest`)
    for those of ``claim_ids`` that have a second-edition rule."""
    from ddcl_theory.ledger import rules
    return {c: rules.digest(c) for c in sorted(claim_ids) if rules.digest(c) is not None}


def _written(results: Path, folder: str, chapter: str):
    path = results / folder / f"{chapter}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


#: The fields of an earlier reference run that a rerun over its units carries
#: (:func:`units_from`).
UNITS_FIELDS = ("git_commit", "created_utc", "completed_utc", "seconds", "cpu_seconds")


def units_from(previous: dict | None, record: dict, settings: dict | None,
               runs: Path) -> dict | None:
    """The earlier run whose training units this chapter run resumed, or None.

    ``previous``: the committed provenance before this run; ``record``: this run's;
    ``settings``: what this run wrote; ``runs``: the reference run directories. A rerun whose
    prose alone changed resumes every unit of the earlier run (same code, same settings), so
    its own seconds are a few; the evidence cost the earlier run's. It is that run when it ran
    the same package code (``code_sha256``) and settings at another commit, and a run directory
    under ``runs`` was made at that commit by that code (:data:`UNITS_FIELDS`; a chain of
    reruns keeps the first)."""
    if not previous or previous.get("git_commit") == record.get("git_commit"):
        return None
    if previous.get("code_sha256") != record.get("code_sha256") \
            or previous.get("settings") != settings:
        return None
    first = previous.get("units_from") or {k: previous.get(k) for k in UNITS_FIELDS}
    for prov in sorted(Path(runs).glob("*/provenance.json")):
        try:
            made = json.loads(prov.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if made.get("git_commit") == first["git_commit"] \
                and made.get("code_sha256") == record.get("code_sha256"):
            return first
    return None


def chapter_provenance(source: Path, record: dict, seconds: float,
                       root: Path | None = None, results: Path | None = None) -> dict:
    """The committed provenance of one chapter's reference run: ``record`` (the chapter's
    :func:`ddcl_theory.ledger.goldens.chapter_provenance`: commit, clean tree, versions,
    profile), the settings the chapter ran (``<results>/settings/<chapter>.json``), the digests
    of the rules of the claims it settled (:func:`rules_digests`), the machine, the time it
    took and :func:`source_digests`. ``results``: the reference results folder it wrote
    (default the profile's ``results_dir()``)."""
    chapter = Path(source).stem
    results = Path(results) if results is not None else results_dir()
    verdicts = _written(results, "verdicts", chapter) or []
    settings = _written(results, "settings", chapter) or record.get("settings")
    out = {
        "chapter": chapter,
        **record,
        "settings": settings,
        "rules": rules_digests(row["id"] for row in verdicts),
        "machine": {"system": platform.system(), "machine": platform.machine(),
                    "processor": platform.processor() or None, "cpus": os.cpu_count(),
                    # the kernel set torch dispatched to: runs on AVX2 and AVX-512 hosts round
                    # differently, so per-seed values may move in the last digits between them
                    "kernels": _cpu_capability(),
                    # two hosts with the same kernel set can still differ here (AMX, AVX-512
                    # extensions), and the libraries pick other code paths on them
                    "isa": cpu_isa()},
        "seconds": round(float(seconds), 1),
        "digests": source_digests(source, root),
        "runtime_digests": runtime_digests(source, root),
    }
    earlier = units_from(_written(results, "provenance", chapter), out, settings,
                         results / "runs")
    if earlier is not None:
        out["units_from"] = earlier
    return out


def write_provenance(source: Path, record: dict, seconds: float, folder: Path | None = None,
                     root: Path | None = None) -> Path:
    """Write ``<results>/reference/provenance/<chapter>.json`` (:func:`chapter_provenance`;
    ``folder`` defaults to the reference profile's ``results_dir()/provenance``)."""
    folder = Path(folder or results_dir() / "provenance")
    path = folder / f"{Path(source).stem}.json"
    write_json(path, chapter_provenance(source, record, seconds, root, folder.parent))
    return path


def read_reference(folder: Path | None = None) -> dict[str, dict]:
    """``{chapter: {"verdicts": [rows], "provenance": dict or None}}`` for every verdict file
    in ``<folder>/verdicts`` (default :func:`reference_dir`); empty when there is none."""
    folder = Path(folder) if folder is not None else reference_dir()
    out: dict[str, dict] = {}
    for path in sorted((folder / "verdicts").glob("*.json")):
        prov = folder / "provenance" / path.name
        out[path.stem] = {
            "verdicts": json.loads(path.read_text(encoding="utf-8")),
            "provenance": json.loads(prov.read_text(encoding="utf-8")) if prov.is_file()
            else None,
        }
    return out


def committed(chapter: str, folder: Path | None = None) -> dict | None:
    """The committed reference result of ``chapter`` (``{"verdicts": [...], "provenance": ...}``,
    from :func:`read_reference` of ``folder``, default the checkout's ``results/reference``), or
    None when none is committed."""
    return read_reference(folder).get(chapter)


def describe_committed(chapter: str, folder: Path | None = None, width: int = 88) -> str:
    """The committed reference verdicts of ``chapter`` as text for its page, beside the live
    cpu run: per claim the word, its evidence, n, the 95% interval, the scale it was decided at
    and the trend, and each test whose interval clears the margin but not the SESOI (its word
    ``reproduced``: the effect is shown, that it is as large as the SESOI is not); no machine
    facts (its time and host stay in the provenance file). A sentence when none is committed."""
    import textwrap
    seeds_folder = (Path(folder) if folder is not None else reference_dir()) / "seeds"
    entry = committed(chapter, folder)
    if entry is None:
        return textwrap.fill(f"No reference run of this chapter is committed yet (make "
                             f"reference NAMES={chapter}).", 88, break_on_hyphens=False)
    prov = entry["provenance"] or {}
    lines = [f"reference profile, commit {(prov.get('git_commit') or '?')[:12]}:"]
    for row in entry["verdicts"]:
        decision = row.get("decision") or {}
        lines.append(f"{row['id']}: {row['verdict']}")
        lines.append(textwrap.fill(row.get("evidence") or "", width, initial_indent="  ",
                                   subsequent_indent="  "))
        facts = []
        if decision.get("n_seeds") is not None:
            facts.append(f"n = {decision['n_seeds']}")
        if decision.get("interval") is not None:
            low, high = decision["interval"]
            facts.append(f"95% interval [{low:+.4g}, {high:+.4g}]")
        if decision.get("scale"):
            facts.append(f"at {decision['scale']}")
        if facts:
            lines.append(textwrap.fill(", ".join(facts), width, initial_indent="  ",
                                       subsequent_indent="    "))
        if decision.get("trend"):
            lines.append(textwrap.fill(f"trend: {decision['trend']}", width,
                                       initial_indent="  ", subsequent_indent="    "))
        for test in decision.get("tests") or []:
            if _short_of_sesoi(test):
                low, high = test["interval"]
                text = (f"short of the SESOI: {test['statistic']}: [{low:+.3g}, {high:+.3g}] "
                        f"clears the margin {test['margin']:g} but not the SESOI "
                        f"{test['sesoi']:+.3g}; the effect is shown, that it is as large as "
                        "the SESOI is not")
                values = _seed_values(seeds_folder / f"{row['id']}.json", test["statistic"])
                if values is not None:
                    text += "; " + seed_spread(values, test["side"], test["margin"])
                lines.append(textwrap.fill(text, width, initial_indent="  ",
                                           subsequent_indent="    ", break_on_hyphens=False))
    return "\n".join(lines)


def _seed_values(path: Path, statistic: str) -> list[float] | None:
    """The committed per-seed values of ``statistic`` in the seeds file ``path`` (None when
    the file or the statistic is not there)."""
    if not path.is_file():
        return None
    values = json.loads(path.read_text(encoding="utf-8")).get(statistic)
    if not isinstance(values, list) or not values or not all(
            isinstance(v, (int, float)) for v in values):
        return None
    return [float(v) for v in values]


def seed_spread(values: Sequence[float], side: str, margin: float) -> str:
    """How a mean that clears ``margin`` on ``side`` ('>' or '<') rests on its seeds: how many
    lie on the other side of the margin, the median, and the mean without the seed that helps
    it most."""
    if side not in (">", "<") or len(values) < 2:
        raise ValueError(f"side, values: expected '>' or '<' and two or more values, got "
                         f"{side!r} and {len(values)}")
    x = np.asarray(values, dtype=float)
    against = int((x <= margin).sum() if side == ">" else (x >= margin).sum())
    best = int(np.argmax(x) if side == ">" else np.argmin(x))
    rest = float(np.delete(x, best).mean())
    return (f"per seed: {against} of {len(x)} on the margin or on its other side, median "
            f"{float(np.median(x)):+.3g}, mean {float(x.mean()):+.3g}, {rest:+.3g} without its "
            "most favourable seed")


def _short_of_sesoi(test: dict) -> bool:
    """Whether a committed test is ``reproduced`` with an interval not wholly beyond its SESOI."""
    if test.get("word") != "reproduced":
        return False
    low, high = test["interval"]
    return low < test["sesoi"] if test["side"] == ">" else high > test["sesoi"]


def stale(folder: Path | None = None, root: Path | None = None) -> list[str]:
    """One line per reference result whose code changed since it was computed (a digest in
    its provenance differs from the checkout, or a module is gone), or that has no provenance.
    Empty when every reference result is current (or there is none)."""
    root = root or repo_root()
    if root is None:
        raise RuntimeError("reference: run from a checkout")
    problems = []
    for chapter, entry in read_reference(folder).items():
        prov = entry["provenance"]
        if prov is None or not isinstance(prov.get("digests"), dict):
            problems.append(f"reference/{chapter}: no provenance: cannot tell whether it is "
                            f"current (rerun: make reference NAMES={chapter})")
            continue
        source = root / "notebooks" / f"{chapter}.md"
        if not source.is_file():
            problems.append(f"reference/{chapter}: its chapter notebooks/{chapter}.md is gone")
            continue
        now = source_digests(source, root)
        then = prov["digests"]
        changed = sorted(k for k in set(now) | set(then) if now.get(k) != then.get(k))
        rules_then = prov.get("rules") or {}
        rules_now = rules_digests(row["id"] for row in entry["verdicts"])
        changed += [f"rule of {c}" for c in sorted(set(rules_now) | set(rules_then))
                    if rules_now.get(c) != rules_then.get(c)]
        if changed:
            problems.append(f"reference/{chapter}: stale, changed since "
                            f"{prov.get('git_commit') or 'its run'}: {', '.join(changed)} "
                            f"(rerun: make reference NAMES={chapter})")
    return problems


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)


def _clean_commit(prov: dict) -> str:
    """The commit a run was made from, ``""`` unless its tree was clean."""
    return (prov.get("git_commit") or "") if prov.get("git_dirty") is False else ""


def extend_digests(folder: Path | None = None, root: Path | None = None) -> list[str]:
    """Add to each reference provenance the digests of modules its chapter's coverage
    (:func:`chapter_modules`) names but the provenance lacks, once the coverage has grown (a
    module newly counted as deciding). A digest is added only when the run was made from a
    clean commit and the module's file in the checkout is, byte for byte, the one in that
    commit (git's blob hashes; an untracked or edited file fails); the names added and the
    ``HEAD`` they were checked at go to ``digests_added``. A provenance with a
    recorded digest that no longer matches is left alone (stale: rerun it). One line per
    chapter touched or refused."""
    root = root or repo_root()
    if root is None:
        raise RuntimeError("reference: run from a checkout")
    folder = Path(folder) if folder is not None else reference_dir()
    head = _git(root, "rev-parse", "HEAD").stdout.strip()
    lines = []
    for chapter, entry in read_reference(folder).items():
        prov = entry["provenance"]
        source = root / "notebooks" / f"{chapter}.md"
        if prov is None or not isinstance(prov.get("digests"), dict) or not source.is_file():
            continue
        now, then = source_digests(source, root), prov["digests"]
        moved = sorted(k for k in then if now.get(k) != then[k])
        new = sorted(set(now) - set(then))
        if not new:
            continue
        if moved:
            lines.append(f"reference/{chapter}: not extended, stale in {', '.join(moved)}")
            continue
        commit = _clean_commit(prov)
        if not commit:
            lines.append(f"reference/{chapter}: not extended, its run is not tied to a clean "
                         f"commit (rerun it)")
            continue
        changed = []
        for name in new:
            path = _module_file(name, root)
            rel = path.relative_to(root).as_posix()
            then_blob = _git(root, "rev-parse", "--verify", "-q", f"{commit}:{rel}")
            now_blob = _git(root, "hash-object", str(path))
            if then_blob.returncode != 0 or then_blob.stdout.strip() != now_blob.stdout.strip():
                changed.append(name)
        if changed:
            lines.append(f"reference/{chapter}: not extended, {', '.join(changed)} changed "
                         f"since {commit[:12] or 'its run'} (rerun it)")
            continue
        prov["digests"] = dict(sorted({**then, **{k: now[k] for k in new}}.items()))
        prov["digests_added"] = {**prov.get("digests_added", {}), **{k: head for k in new}}
        write_json(folder / "provenance" / f"{chapter}.json", prov)
        lines.append(f"reference/{chapter}: added {', '.join(new)} (unchanged since "
                     f"{commit[:12]})")
    return lines


#: What :func:`record_runtime` writes for a module whose file did not exist at a run's commit.
ABSENT = "absent"


def record_runtime(folder: Path | None = None, root: Path | None = None) -> list[str]:
    """Add ``runtime_digests`` to each reference provenance that lacks them: the digests of the
    runtime modules its chapter runs today (:func:`runtime_modules`), each read from git as the
    file was at the run's commit (:data:`ABSENT` where it did not exist), with
    ``runtime_digests_from`` naming that commit. Runs not tied to a clean commit are refused.
    One line per chapter touched or refused."""
    root = root or repo_root()
    if root is None:
        raise RuntimeError("reference: run from a checkout")
    folder = Path(folder) if folder is not None else reference_dir()
    lines = []
    for chapter, entry in read_reference(folder).items():
        prov = entry["provenance"]
        source = root / "notebooks" / f"{chapter}.md"
        if prov is None or "runtime_digests" in prov or not source.is_file():
            continue
        commit = _clean_commit(prov)
        if not commit:
            lines.append(f"reference/{chapter}: runtime not recorded, its run is not tied to a "
                         f"clean commit (rerun it)")
            continue
        digests = {}
        for name in runtime_modules(source, root):
            rel = _module_file(name, root).relative_to(root).as_posix()
            shown = subprocess.run(["git", "-C", str(root), "show", f"{commit}:{rel}"],
                                   capture_output=True)
            digests[name] = (hashlib.sha256(shown.stdout).hexdigest()[:16]
                             if shown.returncode == 0 else ABSENT)
        prov["runtime_digests"] = digests
        prov["runtime_digests_from"] = commit
        write_json(folder / "provenance" / f"{chapter}.json", prov)
        lines.append(f"reference/{chapter}: runtime digests recorded from {commit[:12]}")
    return lines


def runtime_drift(folder: Path | None = None, root: Path | None = None
                  ) -> dict[str, list[str] | None]:
    """``{chapter: [runtime modules changed since its run]}`` (a module counts when its digest
    differs from the recorded one, or when only one side has it); None where the provenance
    records no runtime digests."""
    root = root or repo_root()
    if root is None:
        raise RuntimeError("reference: run from a checkout")
    out: dict[str, list[str] | None] = {}
    for chapter, entry in read_reference(folder).items():
        prov = entry["provenance"] or {}
        source = root / "notebooks" / f"{chapter}.md"
        then = prov.get("runtime_digests")
        if not isinstance(then, dict) or not source.is_file():
            out[chapter] = None
            continue
        now = runtime_digests(source, root)
        out[chapter] = sorted(k for k in set(now) | set(then) if now.get(k) != then.get(k))
    return out


#: The CPU flags that name vector extensions the numerical libraries dispatch on.
_ISA = re.compile(r"^(avx\w*|amx\w*|fma\w*|f16c|sse4_2)$")


def cpu_isa(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str] | None:
    """The sorted vector-extension flags of this CPU (AVX, AVX-512, AMX, FMA, ...) from the first
    ``flags`` line of ``cpuinfo``; None where it cannot be read (not Linux)."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), None)
    if line is None:
        return None
    return sorted(f for f in line.split(":", 1)[1].split() if _ISA.match(f))


def _cpu_capability() -> str | None:
    """torch's CPU kernel set (``AVX512``, ``AVX2``, ``DEFAULT``), None where it cannot say."""
    import torch
    try:
        return torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):
        return None


def summary(folder: Path | None = None, root: Path | None = None) -> list[dict]:
    """One row per reference chapter for the ledger page: chapter, claims settled, commit
    (12 digits), seconds, torch and numpy versions, machine, and whether it is stale."""
    stale_chapters = {line.split(":")[0].removeprefix("reference/")
                      for line in stale(folder, root)}
    drift = runtime_drift(folder, root)
    rows = []
    for chapter, entry in read_reference(folder).items():
        prov = entry["provenance"] or {}
        machine = prov.get("machine") or {}
        earlier = prov.get("units_from") or {}
        rows.append({
            "chapter": chapter,
            "claims": ", ".join(r["id"] for r in entry["verdicts"]),
            "commit": (prov.get("git_commit") or "")[:12] or None,
            "units_commit": (earlier.get("git_commit") or "")[:12] or None,
            "seconds": _total(prov.get("seconds"), earlier.get("seconds")),
            "cpu_seconds": _total(prov.get("cpu_seconds"), earlier.get("cpu_seconds")),
            "torch": prov.get("torch"),
            "numpy": prov.get("numpy"),
            "machine": ", ".join(str(v) for v in (
                machine.get("machine"), machine.get("cpus") and f"{machine['cpus']} CPUs",
                machine.get("kernels")) if v),
            "stale": chapter in stale_chapters,
            "runtime_changed": drift.get(chapter),
            "settings": prov.get("settings"),
        })
    return rows


def _total(own: float | None, earlier: float | None) -> float | None:
    """A rerun's own seconds plus those of the run whose units it resumed."""
    return None if own is None else own + (earlier or 0)


def _minutes(seconds: float | None) -> str:
    return f"{seconds / 60:.1f}" if seconds is not None else "–"


def _runtime_cell(changed: list[str] | None) -> str:
    if changed is None:
        return "–"
    return "same" if not changed else ", ".join(
        name.split(".")[-1] for name in changed)


def summary_markdown(rows: list[dict]) -> str:
    """:func:`summary` as a Markdown table, with the total time (CPU minutes: what a chapter
    cost whatever else the host ran; wall minutes beside); a sentence when it is empty."""
    if not rows:
        return ("No reference run is committed yet (`make reference` writes one to\n"
                "`results/reference/`); the verdicts below are the cpu profile's.")
    lines = ["| chapter | claims | commit | CPU min | wall min | torch | machine | current "
             "| runtime since |",
             "|---|---|---|---:|---:|---|---|---|---|"]
    for r in rows:
        cells = [r["chapter"], r["claims"] or "–", f"`{r['commit']}`" if r["commit"] else "–",
                 _minutes(r.get("cpu_seconds")), _minutes(r["seconds"]),
                 r["torch"] or "–", r["machine"] or "–",
                 "**stale**" if r["stale"] else "yes", _runtime_cell(r.get("runtime_changed"))]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    wall = sum(r["seconds"] or 0 for r in rows)
    cpu = sum(r.get("cpu_seconds") or 0 for r in rows)
    lines.append(f"\nTotal of the reference run: {cpu / 60:.0f} CPU minutes "
                 f"({cpu / 3600:.1f} h), {wall / 60:.0f} wall minutes.")
    jobs = side_by_side.jobs_of([r["chapter"] for r in rows], {r["chapter"]: r for r in rows},
                                SIDE_BY_SIDE_CORES)
    side = side_by_side.projected_seconds(side_by_side.plan(jobs, SIDE_BY_SIDE_CORES))
    lines.append(f"Side by side on {SIDE_BY_SIDE_CORES} cores (`make reference`), each chapter on "
                 f"the cores it keeps busy: about {side / 60:.0f} wall minutes "
                 f"({side / 3600:.1f} h), projected from these rows (the chapters without a "
                 "reference run, which settle no empirical claim, not counted)"
                 + (", some of them stale" if any(r["stale"] for r in rows) else "") + ".")
    moved = [r["chapter"] for r in rows if r.get("runtime_changed")]
    lines.append(f"Runtime since: the runtime modules (training loop, stacked seeds, random "
                 f"streams, ...) changed since the run, in {len(moved)} of {len(rows)} chapters "
                 "(\"same\": none changed; \"–\": not recorded). They are outside the stale "
                 "check, which covers a chapter, its science and its decisions, but a change "
                 "there can move per-seed values, and so can another machine: \"same\" does not "
                 "promise that a rerun repeats them.")
    resumed = [f"{r['chapter']} (units at `{r['units_commit']}`)" for r in rows
               if r.get("units_commit")]
    if resumed:
        lines.append("Rerun at its commit over the training units of an earlier run of the same "
                     "code and settings (its prose changed), its minutes counting that run's: "
                     + ", ".join(resumed) + ".")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="check the committed reference results")
    parser.add_argument("command", choices=["check", "extend", "record-runtime"],
                        help="check: list stale results (exit 1 if any) and, as notes, the "
                             "runtime changed since each run; extend: add the digests of newly "
                             "covered modules that git shows unchanged since each run; "
                             "record-runtime: add runtime digests from git at each run's "
                             "commit where they are missing")
    parser.add_argument("--dir", type=Path, default=None,
                        help="the reference folder (default results/reference)")
    args = parser.parse_args(argv)
    if args.command == "extend":
        for line in extend_digests(args.dir):
            print(line)
    if args.command == "record-runtime":
        for line in record_runtime(args.dir):
            print(line)
    problems = stale(args.dir)
    for p in problems:
        print(p)
    for chapter, changed in runtime_drift(args.dir).items():
        if changed:
            print(f"note: reference/{chapter}: runtime changed since its run: "
                  f"{', '.join(changed)} (not stale; rerun to know whether its values repeat)")
    found = read_reference(args.dir)
    if not problems:
        print(f"reference: {len(found)} chapter(s), all current" if found
              else "reference: no reference results yet")
    else:
        print(f"reference: {len(problems)} stale of {len(found)} chapter(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
