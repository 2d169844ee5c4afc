"""Write and check the executed ``.ipynb`` goldens of the jupytext sources in ``notebooks/``.

The MyST-markdown sources are the truth. ``write`` executes a source with nbclient and stores
the golden beside it with stable cell ids and no timing metadata; ``check`` fails when a
golden is missing or its cells differ from its source (a stale golden).

    python -m ddcl_theory.ledger.goldens write [NAME ...]   # all sources when no name is given
    python -m ddcl_theory.ledger.goldens check
    python -m ddcl_theory.ledger.goldens compare DIR [NAME ...]  # executed copies in DIR vs goldens
    DDCL_PROFILE=paper python -m ddcl_theory.ledger.goldens write [--out DIR] [--force] [NAME ...]
    DDCL_PROFILE=reference python -m ddcl_theory.ledger.goldens write [--force] [--cores N] [NAME]

Under the paper (reference) profile the executed notebooks go to ``--out`` (default
``_build/paper``, ``_build/reference``), never over the committed cpu-profile goldens. In those
profiles, beside each executed notebook lies
``<name>.provenance.json`` (:func:`runtime.provenance.provenance` plus the chapter source's
sha256); a chapter whose notebook and provenance are already there with the same provenance
(code, chapter source, profile, device, versions) is skipped unless ``--force``, so an
interrupted ``make paper`` resumes at the next unfinished chapter (and inside a chapter, at the
next unfinished unit of its experiments: ``runtime.rundir.RunDir``). ``--force`` reruns the
chapters and ignores the experiments' checkpoints too (``DDCL_RESUME=0``). Under the reference
profile the chapter's provenance, with a digest of the code it ran, is also written to
``results/reference/provenance/<chapter>.json`` (:mod:`ddcl_theory.ledger.reference`), to be
committed with the reference verdicts. ``--cores N`` runs the chapters side by side, each in
its own process (:mod:`ddcl_theory.ledger.side_by_side`).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import signal
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

from ddcl_theory.ledger import reference
from ddcl_theory.ledger.tolerance import compare_text, parse_declaration
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.io import atomic_write_text, read_json, write_json
from ddcl_theory.runtime.provenance import provenance, same_provenance
from ddcl_theory.runtime.rundir import RESUME_ENV
from ddcl_theory.runtime.paths import chapter_order, repo_root, results_dir

#: Seconds one notebook cell may take under the cpu profile; the reference and paper profiles'
#: training cells take up to an hour on a CPU or hours on a GPU (and resume from their run
#: directories), so they have none. ``DDCL_CELL_TIMEOUT`` (seconds, or ``none``) overrides.
CELL_TIMEOUT_S = 1800
CELL_TIMEOUT_ENV = "DDCL_CELL_TIMEOUT"


def cell_timeout() -> int | None:
    """The cell timeout of the active profile (None: no limit); ``ValueError`` on a bad
    ``DDCL_CELL_TIMEOUT``."""
    value = os.environ.get(CELL_TIMEOUT_ENV, "").strip().lower()
    if value in ("none", "off", "0"):
        return None
    if value:
        if not value.isdigit():
            raise ValueError(f"{CELL_TIMEOUT_ENV}: expected seconds (an int > 0) or 'none', "
                             f"got {value!r}")
        return int(value)
    return None if profile.current().keeps_runs else CELL_TIMEOUT_S

#: Provenance fields that must match for a chapter already executed into ``--out`` to be skipped.
CHAPTER_FIELDS = ("profile", "smoke", "device", "device_name", "autocast", "compile", "python",
                  "torch", "cuda", "numpy", "code_sha256", "source_sha256", "inputs_sha256")


def notebooks_dir() -> Path:
    root = repo_root()
    if root is None:
        raise RuntimeError("goldens: run from a checkout (no _toc.yml found above the package)")
    return root / "notebooks"


def sources(names: list[str] | None = None) -> list[Path]:
    """The jupytext sources (``notebooks/*.md``) in reading order (``_toc.yml``; the ledger reads
    the verdicts of the chapters before it), optionally only those whose stem starts with a name."""
    order = {name: i for i, name in enumerate(chapter_order())}
    found = sorted(notebooks_dir().glob("*.md"), key=lambda p: (order.get(p.stem, len(order)), p.stem))
    if names:
        found = [p for p in found if any(p.stem.startswith(n) for n in names)]
        if not found:
            raise SystemExit(f"no source matches {names}")
    return found


def golden_path(source: Path) -> Path:
    return source.with_suffix(".ipynb")


def _comparable(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


def normalise(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Stable cell ids, no timing or jupytext-private metadata."""
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:03d}"
        cell.metadata.pop("execution", None)
        cell.metadata.pop("ExecuteTime", None)
    nb.metadata.pop("jupytext", None)
    nb.metadata.pop("widgets", None)
    nb.nbformat, nb.nbformat_minor = 4, 5
    return nb


def write(source: Path, out_dir: Path | None = None) -> float:
    """Execute ``source`` in its own folder and write its golden (or ``out_dir/<name>.ipynb``);
    return seconds taken."""
    nb = jupytext.read(source)
    start = time.perf_counter()
    NotebookClient(nb, timeout=cell_timeout(), kernel_name="python3",
                   resources={"metadata": {"path": str(source.parent)}}).execute()
    elapsed = time.perf_counter() - start
    target = golden_path(source) if out_dir is None else out_dir / golden_path(source).name
    text = nbformat.writes(normalise(nb))
    atomic_write_text(target, text if text.endswith("\n") else text + "\n")
    return elapsed


def _children_cpu_seconds() -> float:
    """User + system CPU seconds of the finished child processes (a chapter's kernel): what a
    chapter cost, whatever else the host was running beside it (wall seconds are not)."""
    import resource
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def provenance_path(source: Path, out_dir: Path) -> Path:
    """``<out_dir>/<stem>.provenance.json``: the provenance of an executed chapter."""
    return out_dir / f"{source.stem}.provenance.json"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def reads_verdicts(source: Path) -> bool:
    """Whether a chapter reads the other chapters' verdicts (its source calls
    ``build_ledger``): the ledger, which runs after them."""
    return "build_ledger" in source.read_text(encoding="utf-8")


def _inputs_hash(source: Path) -> str | None:
    """sha256 of what a chapter reads besides code: the verdict files (and the reference ones
    beside them), for the ledger chapter
    (a chapter whose source calls ``build_ledger``); None for the others."""
    if not reads_verdicts(source):
        return None
    h = hashlib.sha256()
    for folder in (results_dir() / "verdicts", results_dir() / "reference" / "verdicts"):
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            h.update(path.name.encode("utf-8") + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def chapter_provenance(source: Path) -> dict:
    """:func:`runtime.provenance.provenance` of executing ``source`` now, with the sha256 of the
    source and of the inputs it reads (:func:`_inputs_hash`)."""
    record = provenance(f"chapter:{source.stem}")
    record["source_sha256"] = _sha256(source.read_bytes())
    record["inputs_sha256"] = _inputs_hash(source)
    return record


def completed(source: Path, out_dir: Path, record: dict | None = None) -> bool:
    """``source`` was executed into ``out_dir`` with the provenance it would have now
    (:data:`CHAPTER_FIELDS`)."""
    stored = provenance_path(source, out_dir)
    if not (stored.is_file() and (out_dir / golden_path(source).name).is_file()):
        return False
    try:
        previous = read_json(stored)
    except (OSError, ValueError):
        return False
    return same_provenance(previous, record or chapter_provenance(source), CHAPTER_FIELDS)


def check(paths: list[Path] | None = None) -> list[str]:
    """Problems found: missing goldens, goldens whose cells differ from their source."""
    problems = []
    for source in paths or sources():
        golden = golden_path(source)
        if not golden.is_file():
            problems.append(f"{golden.name}: missing (run: python -m ddcl_theory.ledger.goldens write {source.stem})")
            continue
        want, have = _comparable(jupytext.read(source)), _comparable(nbformat.read(golden, 4))
        if want != have:
            diff = next((i for i, (a, b) in enumerate(zip(want, have)) if a != b), min(len(want), len(have)))
            problems.append(f"{golden.name}: stale, first differing cell {diff} "
                            f"(run: python -m ddcl_theory.ledger.goldens write {source.stem})")
        elif any(o.get("output_type") == "error" for c in nbformat.read(golden, 4).cells
                 for o in c.get("outputs", [])):
            problems.append(f"{golden.name}: stores an error output")
    return problems


def _texts(cell: nbformat.NotebookNode) -> list[str]:
    """The text outputs of a code cell, as nbval compares them: consecutive pieces of one stream
    joined (how a stream is cut into outputs depends on flush timing), then text MIME types."""
    texts: list[str] = []
    last_stream = None
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            if last_stream == out.get("name"):
                texts[-1] += out.get("text", "")
            else:
                texts.append(out.get("text", ""))
            last_stream = out.get("name")
            continue
        last_stream = None
        for mime in ("text/plain", "text/markdown"):
            if mime in out.get("data", {}):
                texts.append(out["data"][mime])
    return texts


def text_pairs(executed: Path, golden: Path):
    """For each compared code cell of a golden and its executed copy (cells tagged
    ``nbval-ignore-output`` skipped, as nbval skips them): (code-cell index, the golden cell's
    declared tolerance, its text outputs, the executed cell's text outputs). Raises ValueError
    when the two hold different numbers of code cells."""
    got_cells = [c for c in nbformat.read(executed, 4).cells if c.cell_type == "code"]
    want_cells = [c for c in nbformat.read(golden, 4).cells if c.cell_type == "code"]
    if len(got_cells) != len(want_cells):
        raise ValueError(f"{golden.name}: {len(want_cells)} code cells in the golden, "
                         f"{len(got_cells)} executed")
    for i, (want, got) in enumerate(zip(want_cells, got_cells)):
        if "nbval-ignore-output" in want.metadata.get("tags", []):
            continue                                   # timings: nbval skips them too
        yield i, parse_declaration(want.source), _texts(want), _texts(got)


def compare(executed: Path, golden: Path) -> list[str]:
    """How the text outputs of an executed notebook differ from its golden under each cell's
    declared tolerance (the rules of the nbval plugin), one line per difference."""
    problems = []
    try:
        for i, tol, want_texts, got_texts in text_pairs(executed, golden):
            if len(want_texts) != len(got_texts):
                problems.append(f"{golden.name} cell {i}: {len(want_texts)} text outputs, "
                                f"got {len(got_texts)}")
                continue
            for w, g in zip(want_texts, got_texts):
                problems += [f"{golden.name} cell {i}: {p}" for p in compare_text(w, g, tol)]
    except ValueError as e:
        return [str(e)]
    return problems


#: ``DDCL_ALLOW_DIRTY=1`` lets a reference run start from uncommitted code (for tests only: its
#: provenance then says ``git_dirty: true`` and the ledger calls it exploratory).
ALLOW_DIRTY_ENV = "DDCL_ALLOW_DIRTY"


def require_clean_tree() -> None:
    """``SystemExit`` unless the code and chapters are committed (changes under ``results/``
    aside): a reference result is evidence of record only for code anyone can check out."""
    from ddcl_theory.runtime.profile import env_flag
    from ddcl_theory.runtime.provenance import git_commit
    commit, dirty = git_commit()
    if (commit is None or dirty) and not env_flag(ALLOW_DIRTY_ENV, False):
        raise SystemExit("reference: commit the code first: a reference run is made from a "
                         "clean, committed tree (uncommitted changes outside results/ found; "
                         f"{ALLOW_DIRTY_ENV}=1 overrides, for tests)")


def _write_side_by_side(chosen: list[Path], cores: int, out: Path | None, force: bool) -> int:
    """``write`` of each chapter in its own process, side by side on ``cores`` cores (longest
    first by the committed reference provenance; the ledger chapters last); logs under
    ``<out or _build>/logs``."""
    from ddcl_theory.ledger import side_by_side
    committed = ({row["chapter"]: row for row in reference.summary()}
                 if profile.current().is_reference else {})
    last = [p.stem for p in chosen if reads_verdicts(p)]
    jobs = side_by_side.jobs_of([p.stem for p in chosen], committed, cores, last)
    print(side_by_side.describe_plan(side_by_side.plan(jobs, cores), cores), flush=True)
    flags = [*(["--out", str(out)] if out is not None else []), *(["--force"] if force else [])]
    log_dir = (out or notebooks_dir().parent / "_build") / "logs"
    status = side_by_side.run(jobs, cores, side_by_side.goldens_command(flags), log_dir,
                              say=lambda line: print(line, flush=True))
    failed = sorted(name for name, rc in status.items() if rc)
    print("side by side: every chapter ran" if not failed else
          f"side by side: {len(failed)} chapter(s) failed or skipped: {', '.join(failed)}",
          flush=True)
    return 1 if failed else 0


def _stop_on_sigterm(signum, frame) -> None:
    """SIGTERM as an exception, so that nbclient shuts the chapter's kernel down on the way
    out (the kernel runs in a session of its own and would outlive this process)."""
    raise SystemExit(f"goldens: stopped by signal {signum}")


def _write(args: argparse.Namespace) -> int:
    """The ``write`` command."""
    if args.cores > 1 and profile.current().name not in ("cpu", "reference"):
        raise SystemExit(f"--cores: chapters side by side share the CPU cores; under the "
                         f"{profile.current().name} profile they would share one device (run "
                         f"them one at a time)")
    out = args.out
    if out is None and profile.current().keeps_runs:
        out = notebooks_dir().parent / "_build" / profile.current().results_subdir
    if out is not None:
        out = out.resolve()
        if out == notebooks_dir().resolve():
            raise SystemExit("--out: the goldens folder holds cpu-profile outputs only")
        out.mkdir(parents=True, exist_ok=True)
    resumable = out is not None and profile.current().keeps_runs
    if profile.current().is_reference:
        require_clean_tree()
    try:
        profile.check_device()
    except RuntimeError as err:
        raise SystemExit(str(err)) from None
    if args.force:
        os.environ[RESUME_ENV] = "0"       # the kernels inherit it
    if args.cores > 1:
        return _write_side_by_side(sources(args.names), args.cores, out, args.force)
    for source in sources(args.names):
        record = chapter_provenance(source) if resumable else None
        if resumable and not args.force and completed(source, out, record):
            print(f"skipping {source.name}: already executed with the same provenance "
                  f"(--force to rerun)", flush=True)
            continue
        print(f"executing {source.name} ({profile.describe()}) ...", flush=True)
        cpu_before = _children_cpu_seconds()
        seconds = write(source, out)
        if resumable:
            record["completed_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
            record["seconds"] = round(seconds, 1)
            record["cpu_seconds"] = round(_children_cpu_seconds() - cpu_before, 1)
            write_json(provenance_path(source, out), record)
            if profile.current().is_reference:     # committed beside its verdicts
                reference.write_provenance(source, record, seconds)
        print(f"  wrote {(out / golden_path(source).name) if out else golden_path(source).name}"
              f" in {seconds:.0f} s", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["write", "check", "compare"])
    parser.add_argument("names", nargs="*", help="source stems or prefixes, e.g. 02 or decomposition")
    parser.add_argument("--out", type=Path, default=None,
                        help="write executed notebooks here instead of over the goldens "
                             "(default under the paper/reference profile: "
                             "_build/paper, _build/reference)")
    parser.add_argument("--force", action="store_true",
                        help="with --out: rerun chapters already executed with the same "
                             "provenance, and ignore the experiments' checkpoints")
    parser.add_argument("--cores", type=int, default=1,
                        help="write: run the chapters side by side, each in its own process, "
                             "on this many cores (ddcl_theory.ledger.side_by_side)")
    args = parser.parse_intermixed_args(argv)
    if args.cores < 1:
        raise SystemExit(f"--cores: expected >= 1, got {args.cores}")
    if args.command == "compare":
        if not args.names:
            raise SystemExit("compare: name the folder of executed notebooks first")
        folder, names = Path(args.names[0]), args.names[1:]
        problems = []
        for source in sources(names or None):
            executed = folder / golden_path(source).name
            if executed.is_file():
                problems += compare(executed, golden_path(source))
        for p in problems:
            print(p)
        print("goldens: executed copies agree" if not problems else f"goldens: {len(problems)} difference(s)")
        return 1 if problems else 0
    if args.command == "write":
        previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
        try:
            return _write(args)
        finally:
            signal.signal(signal.SIGTERM, previous)
    problems = check(sources(args.names) if args.names else None)
    for p in problems:
        print(p)
    print("goldens: ok" if not problems else f"goldens: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
