"""The claims ledger: every claim id as data, verdicts recorded by the chapters that settle them.

A chapter notebook settles claims through :class:`Chapter`; each settlement is computed by code
in that notebook and written to ``results/verdicts/<chapter>.json``. :func:`build_ledger` merges
those files with the registry below (anything not settled stays ``untested``) and
:func:`write_claims_json` writes ``results/claims.json``. The committed reference-profile verdicts
(``results/reference/verdicts``, ``make reference``) and a local paper-profile rerun's
(``results/paper/verdicts``) are shown beside the cpu ones, and a claim's verdict is taken from
the largest scale that settled it. Each empirical claim's verdict rule, frozen before its
confirmatory run, is data in :mod:`ddcl_theory.ledger.rules` (:func:`rule_of`).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ddcl_theory.ledger import rules as registered
from ddcl_theory.ledger.reference import reference_dir
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import VERDICTS, Verdict
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.io import atomic_write_text, jsonable, write_json
from ddcl_theory.runtime.provenance import settings_dict
from ddcl_theory.runtime.paths import results_dir

DDCL = "Cirrincione & Kumar 2026 (arXiv:2604.03850)"
LAPLACIAN = "Zhang & Papyan 2026 (arXiv:2602.09297)"
OURS = "this book"


@dataclass(frozen=True)
class Claim:
    """One claim as the sources make it, with what would settle it."""

    id: str
    statement: str
    source: str
    method: str
    paper_value: str | None = None
    #: A few words for the ledger table (MyST inline markup, math in ``$...$``); the full
    #: ``statement`` is shown in the claim's evidence entry below the table.
    short: str = ""


CLAIMS: tuple[Claim, ...] = (
    Claim("D1", "Each token is softly assigned to K global prototypes by a softmax on squared "
          "Euclidean distance; the output is the soft centroid (a convex combination of "
          "prototypes); no iterative updates at inference.", DDCL,
          "layer definition, property tests",
          short="Soft assignment to $K$ prototypes, soft-centroid output"),
    Claim("D2", "Cost is linear in sequence length, O(TK), against O(T^2) for self-attention.",
          DDCL, "benchmark, log-log plot",
          short="Cost linear in sequence length, $O(TK)$"),
    Claim("D3", "Exact identity L_q = L_OLS + V, valid for any differentiable encoder.", DDCL,
          "SymPy proof + float64 checks",
          short=r"Exact identity $L_q = L_\mathrm{OLS} + V$"),
    Claim("D4", "V >= 0 always.", DDCL, "proof",
          short=r"$V \ge 0$ always"),
    Claim("D5", "grad_P V = 2 P Sigma_q.", DDCL, "SymPy + autograd; convention on q",
          short=r"Gradient $\nabla_P V = 2 P \Sigma_q$"),
    Claim("D6", "V becomes infinite when prototypes coincide, so collapse is impossible "
          "(seed 000).", DDCL, "V at collapse",
          short=r"$V \to \infty$ when prototypes coincide: no collapse"),
    Claim("D7", "V is a repulsive, anti-collapse force; collapse is an unstable saddle.", DDCL,
          "Hessian analysis, critical temperature",
          short="$V$ repels; collapse is an unstable saddle"),
    Claim("D8", "Joint encoder+prototype training is stable when eps = eta_theta/eta_P << 1 "
          "(Tikhonov singular perturbation); practical range [0.01, 0.1].", DDCL,
          "linearised eigenvalues, reduced system",
          short=r"Joint training stable for $\varepsilon \ll 1$"),
    Claim("D9", "Ablation: separation grows for eps <= 0.1; prototypes collapse at eps >= 0.5 "
          "(seed 000) or at eps = 1.0 (seeds 002, 003).", DDCL, "joint training sweep",
          "collapse at eps >= 0.5 (seed 000) / eps = 1.0 (seeds 002, 003)",
          short=r"Ablation: prototypes collapse at large $\varepsilon$"),
    Claim("D10", "A global Lyapunov function (free energy) guarantees convergence to "
          "configurations with S(P) > 0, also under monotone decreasing temperature schedules.",
          DDCL, "trajectories, counterexamples",
          short="Free energy is a global Lyapunov function"),
    Claim("D11", "As a soft VQ bottleneck it needs no straight-through estimator and uses 100% "
          "of the codebook from the first epoch; hard VQ-VAE (64 codes, CIFAR-10) starts at "
          "18.8% usage and needs 44 epochs to reach 100%.", DDCL, "VQ-VAE usage per epoch",
          "soft 100% from epoch 1; hard 18.8% (or 39%) at start, 100% after 44 epochs",
          short="Soft VQ uses the whole codebook from epoch 1"),
    Claim("D12", "Stacked layers: the decomposition holds and V^(l) >= 0 at every level at once "
          "(two levels, 20 Newsgroups).", DDCL, "hierarchical experiment",
          short=r"Stacked layers: $V^{(l)} \ge 0$ at every level"),
    Claim("D13", "Orbital debris (synthetic LEO/MEO/GEO/HEO): ACC 0.772 vs k-means 0.756; no "
          "V >= 0 violation in 500 epochs; separation grows monotonically; fills all classes "
          "instead of piling onto LEO.", DDCL,
          "debris experiment", "ACC 0.772 vs k-means 0.756",
          short="Orbital debris: beats k-means"),
    Claim("D14", "Frozen-BERT readout on SST-2, IMDB, 20 Newsgroups beats [CLS]/mean pooling "
          "and k-means on [CLS].", DDCL, "text experiment",
          "ACC SST-2 (K=2) 86.7, IMDB (K=4) 91.3, 20NG 17.5",
          short="Frozen-encoder readout beats CLS and mean pooling"),
    Claim("D15", "The multi-head variant with residual connection and LayerNorm drops into "
          "standard Transformer pipelines.", DDCL, "layer + a Transformer using it",
          short="Multi-head variant drops into Transformers"),
    Claim("D16", "Interpretable: every output is a mixture of global prototypes.", DDCL,
          "a figure explaining real inputs",
          short="Interpretable: outputs are prototype mixtures"),
    Claim("D17", "Slot Attention and Perceiver readouts have no guarantee against collapse and "
          "Slot Attention needs iterative inference updates; DDCL-Attention needs neither.",
          DDCL, "Slot Attention and Perceiver baselines",
          short="No collapse and no iterations, unlike Slot Attention"),
    Claim("L1", "With P row-stochastic, I - P is the random-walk Laplacian of the token graph: "
          "(I-P)1 = 0 and its spectrum lies in the disc |lambda - 1| <= 1.", LAPLACIAN,
          "proof + checks",
          short="$I - P$ is the random-walk Laplacian"),
    Claim("L2", "A Laplacian head is one step of heat diffusion on the token graph.", LAPLACIAN,
          "explicit Euler step, heat kernel",
          short="A Laplacian head is one heat-diffusion step"),
    Claim("L3", "Attention heads update the mean; Laplacian heads directly control "
          "within-sequence variance.", LAPLACIAN, "mean/deviation split",
          short="Laplacian heads control within-sequence variance"),
    Claim("L4", "Laplacian heads smooth: they do not increase within-sequence variance or "
          "Dirichlet energy.", LAPLACIAN, "conditions + counterexample",
          short="Laplacian heads smooth (variance, Dirichlet energy)"),
    Claim("L5", "Parameter-free, no extra cost.", LAPLACIAN,
          "fused kernel, parameter count, timing ratio",
          short="Parameter-free, no extra cost"),
    Claim("L6", "Accuracy improves almost monotonically with the number of Laplacian heads.",
          LAPLACIAN, "small ViT sweep", "ImageNet 82.32 vs 81.45; CIFAR-100 77.04 vs 75.12",
          short="Accuracy grows with the number of Laplacian heads"),
    Claim("L7", "Lower within-sequence variance, higher between-class variance (ANOVA); "
          "stronger Neural Collapse.", LAPLACIAN, "geometry metrics on the sweep",
          short="Lower within-, higher between-class variance"),
    Claim("L8", "Faster spectral decay: components for 99% variance drop by 21% with all heads "
          "Laplacian.", LAPLACIAN, "k99 on token representations", "k99 547.7 -> 430.4 (-21%)",
          short="Faster spectral decay: $k_{99}$ down 21%"),
    Claim("L9", "Language modelling: better downstream average with 5 Laplacian heads; "
          "same-next-token representations more separable.", LAPLACIAN,
          "character-level GPT",
          short="Language modelling improves with Laplacian heads"),
    Claim("L10", "Self-supervised (DINO): better linear probe and ADE20K segmentation.",
          LAPLACIAN, "proxy: DINO-style self-distilled small ViT, 1x1 probe on a dense proxy",
          "ADE20K 32.27 vs 29.81 mIoU",
          short="DINO: better linear probe and segmentation"),
    Claim("L11", "Causal attention: I - P is still a Laplacian (of a directed graph).",
          LAPLACIAN, "proof + checks",
          short="Causal attention: $I - P$ is still a Laplacian"),
    Claim("X1", "As temperature goes to 0 the layer becomes hard VQ (nearest prototype); as it "
          "grows, assignments go uniform.", OURS, "limits, checks",
          short="Temperature limits: hard VQ and uniform"),
    Claim("X2", "A DDCL readout on top of an encoder with Laplacian heads: does smoothing help "
          "the prototypes?", OURS, "experiment",
          short="Does Laplacian smoothing help the prototypes?"),
)

_BY_ID = {c.id: c for c in CLAIMS}


def rule_of(claim_id: str):
    """The registered rule of an empirical claim (:data:`ddcl_theory.ledger.rules.RULES`); None
    for the others."""
    return registered.RULES.get(get(claim_id).id)


#: The fields every empirical claim carries in ``results/claims.json``.
EMPIRICAL_FIELDS = ("rule", "n_seeds", "interval", "scale", "trend", "phase", "tests")
#: The claims decided by experiment (each has a rule).
EMPIRICAL = ("D9", "D10", "D11", "D12", "D13", "D14", "D15", "D17", "L6", "L7", "L8", "L9", "L10",
             "X2")


def get(claim_id: str) -> Claim:
    """The registered claim with this id; ``KeyError`` naming the id otherwise."""
    try:
        return _BY_ID[claim_id]
    except KeyError:
        raise KeyError(f"claim_id: unknown claim {claim_id!r}; known: {sorted(_BY_ID)}") from None


@dataclass
class Settlement:
    """A verdict on one claim, with its evidence, as recorded by a chapter."""

    id: str
    verdict: str
    evidence: str
    our_value: str | None
    paper_value: str | None
    chapter: str
    page: str
    tolerance: dict | None = None
    decision: dict | None = None        # rule, n_seeds, interval, scale, trend (empirical)


#: The folder beside ``verdicts/`` that holds the per-seed values behind each empirical verdict,
#: ``<results>[/reference]/seeds/<claim id>.json``.
SEEDS_DIRNAME = "seeds"
#: The folder beside ``verdicts/`` that holds the settings each chapter ran (:meth:`Chapter.uses`).
SETTINGS_DIRNAME = "settings"
#: The phase of a run by profile: the cpu profile's small runs are pilots (exploratory); the
#: reference and paper profiles run the registered rules on fresh seeds (confirmatory).
PHASES = {"cpu": "exploratory", "reference": "confirmatory", "paper": "confirmatory"}


def phase_of(profile_name: str) -> str:
    """``"exploratory"`` or ``"confirmatory"``: the phase of a run under ``profile_name``."""
    try:
        return PHASES[profile_name]
    except KeyError:
        raise ValueError(f"profile_name: expected one of {sorted(PHASES)}, got "
                         f"{profile_name!r}") from None


#: The glue key of a chapter's opening box of verdicts (:meth:`Chapter.glue_summary`).
SUMMARY_KEY = "chapter_verdicts"


@dataclass
class Chapter:
    """Collects the verdicts one chapter settles and writes them to ``results/verdicts``.

    Args:
        name: the chapter's name: the stem of its page ``notebooks/<name>`` and of its verdict
            file ``results/verdicts/<name>.json``, e.g. ``"decomposition"``.
    """

    name: str
    settled: list[Settlement] = field(default_factory=list)
    #: claim id -> ``{statistic: per-seed values}`` of the verdicts recorded (see ``save``)
    per_seed: dict[str, dict] = field(default_factory=dict)
    #: settings class name -> its fields, of the experiments the chapter ran (:meth:`uses`)
    settings: dict[str, dict] = field(default_factory=dict)

    @property
    def page(self) -> str:
        """The book page (docname without suffix) holding the evidence."""
        return f"notebooks/{self.name}"

    def settle(self, claim_id: str, verdict: str, evidence: str, *, our_value: str | None = None,
               paper_value: str | None = None, tolerance: Tolerance | None = None) -> Settlement:
        """Record a verdict; raises ``ValueError`` on an unknown verdict word or a repeat id.

        ``tolerance`` declares how far the numbers in ``our_value`` and ``evidence`` may move
        between machines (outcomes of training); the results check uses it, tight otherwise.
        """
        claim = get(claim_id)
        if verdict not in VERDICTS:
            raise ValueError(f"verdict: expected one of {VERDICTS}, got {verdict!r}")
        if not evidence.strip():
            raise ValueError("evidence: a verdict needs evidence")
        if any(s.id == claim_id for s in self.settled):
            raise ValueError(f"claim_id: {claim_id} already settled in chapter {self.name!r}")
        s = Settlement(claim_id, verdict, evidence.strip(), our_value,
                       paper_value if paper_value is not None else claim.paper_value,
                       self.name, self.page,
                       tolerance.to_dict() if tolerance is not None and tolerance.declared
                       else None)
        self.settled.append(s)
        return s

    def record(self, verdict: Verdict) -> Settlement:
        """Record a decided :class:`~ddcl_theory.ledger.verdict.Verdict` (the one way chapters
        settle claims: the word comes from a ``decide_*`` function, never from the notebook)."""
        if not isinstance(verdict, Verdict):
            raise TypeError(f"verdict: expected a Verdict, got {type(verdict).__name__}")
        s = self.settle(verdict.claim, verdict.word, verdict.evidence,
                        our_value=verdict.our_value, paper_value=verdict.paper_value,
                        tolerance=verdict.tolerance)
        extra = {k: v for k, v in (("rule", verdict.rule), ("n_seeds", verdict.n_seeds),
                                   ("interval",
                                    list(verdict.interval) if verdict.interval else None),
                                   ("scale", verdict.scale), ("trend", verdict.trend),
                                   ("tests", [t.to_dict() for t in verdict.tests] or None),
                                   ("gates", [g.to_dict() for g in verdict.gates] or None))
                 if v is not None}
        if verdict.tests:
            extra["phase"] = phase_of(profile.current().name)
        s.decision = extra or None
        if verdict.per_seed:
            self.per_seed[verdict.claim] = verdict.per_seed
        return s

    def save(self, directory: Path | None = None) -> Path:
        """Write ``<results>/verdicts/<name>.json`` (sorted, stable) and return its path."""
        directory = directory or results_dir() / "verdicts"
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.name}.json"
        rows = [{k: v for k, v in asdict(s).items()
                 if k not in ("tolerance", "decision") or v is not None}
                for s in sorted(self.settled, key=lambda s: _sort_key(s.id))]
        atomic_write_text(path, json.dumps(rows, indent=1, ensure_ascii=False) + "\n")
        for claim_id, values in self.per_seed.items():
            write_json(directory.parent / SEEDS_DIRNAME / f"{claim_id}.json", jsonable(values))
        if self.settings:
            write_json(directory.parent / SETTINGS_DIRNAME / f"{self.name}.json", self.settings)
        return path

    def table(self) -> str:
        """A plain-text table of this chapter's verdicts (for the notebook's output)."""
        lines = [f"{s.id:<4} {s.verdict:<15} {s.our_value or ''}" for s in self.settled]
        return "\n".join(lines)

    def uses(self, *settings) -> None:
        """Record the settings objects the chapter runs (written by :meth:`save` to
        ``<results>/settings/<name>.json``; a reference run's provenance carries them)."""
        for obj in settings:
            self.settings[type(obj).__name__] = settings_dict(obj)

    def label(self, claim_id: str) -> str:
        """The label of the section that decides ``claim_id`` on this chapter's page, e.g.
        ``"decomposition-d3"`` (the page puts ``(decomposition-d3)=`` above that section)."""
        return f"{self.name}-{get(claim_id).id.lower()}"

    def summary_markdown(self) -> str:
        """The verdicts of this chapter at a glance (MyST): per settled claim its id (a link to
        the section that decides it), its short form, its word and our deciding number."""
        if not self.settled:
            raise ValueError(f"chapter {self.name!r}: no verdict recorded yet")
        lines = [":::{admonition} What this chapter finds", ":class: ddcl-findings", ""]
        for s in sorted(self.settled, key=lambda s: _sort_key(s.id)):
            value = f": {_value(s.our_value)}" if s.our_value else ""
            lines.append(f"- {{ref}}`{s.id} <{self.label(s.id)}>` {_verdict_badge(s.verdict)} "
                         f"{get(s.id).short or markdown_text(get(s.id).statement)}{value}")
        lines.append(":::")
        return "\n".join(lines)

    def glue_summary(self, key: str = SUMMARY_KEY) -> None:
        """Glue :meth:`summary_markdown` under ``key`` for the page's opening box (a
        ``{glue:md}`` directive under the title shows it; myst-nb reads the glued output from
        the executed notebook, wherever the cell stands)."""
        from IPython.display import Markdown
        from myst_nb import glue
        glue(key, Markdown(self.summary_markdown()), display=False)


def _sort_key(claim_id: str) -> tuple[int, int]:
    order = {"D": 0, "L": 1, "X": 2}
    return order[claim_id[0]], int(claim_id[1:])


#: ``DDCL_LEDGER_PAPER=0`` hides the paper-profile verdicts from the cpu-profile ledger (e.g. to
#: check the ledger golden in a checkout that also holds a paper-profile rerun).
PAPER_LEDGER_ENV = "DDCL_LEDGER_PAPER"


def _settlements(directory: Path) -> dict[str, dict]:
    """Settlement rows by claim id from ``directory/*.json``; ``ValueError`` on an unknown id
    or verdict, or a claim settled twice."""
    settled: dict[str, dict] = {}
    for path in sorted(directory.glob("*.json")):
        for row in json.loads(path.read_text(encoding="utf-8")):
            get(row["id"])
            if row["verdict"] not in VERDICTS:
                raise ValueError(f"{path.name}: unknown verdict {row['verdict']!r}")
            if row["id"] in settled:
                raise ValueError(f"claim {row['id']} settled twice: {settled[row['id']]['chapter']}"
                                 f" and {row['chapter']}")
            settled[row["id"]] = row
    return settled


#: ``DDCL_LEDGER_REFERENCE=0`` hides the reference-profile verdicts (``results/reference``).
REFERENCE_LEDGER_ENV = "DDCL_LEDGER_REFERENCE"
#: The profiles in order of scale: a claim's verdict comes from the largest that settled it.
SCALES = ("cpu", "reference", "paper")
#: The row key holding the verdict of each larger-scale profile.
PROFILE_KEYS = {"reference": "reference_profile", "paper": "paper_profile"}
_AT_SCALE_FIELDS = ("verdict", "evidence", "our_value", "chapter", "page", "tolerance",
                    "decision")


def _switched_off(env: str) -> bool:
    return os.environ.get(env, "").strip().lower() in ("0", "false", "no")


def paper_verdicts_dir() -> Path | None:
    """``<results>/paper/verdicts`` when the cpu profile is active, it holds verdict files and
    ``DDCL_LEDGER_PAPER`` is not ``0``; None otherwise."""
    if profile.current().name != "cpu" or _switched_off(PAPER_LEDGER_ENV):
        return None
    folder = results_dir() / "paper" / "verdicts"
    return folder if folder.is_dir() and any(folder.glob("*.json")) else None


def reference_verdicts_dir(directory: Path | None = None) -> Path | None:
    """The reference profile's verdicts beside the cpu ones: ``<directory>/../reference/
    verdicts``, by default the committed ones (:func:`ddcl_theory.ledger.reference.reference_dir`,
    which does not follow ``DDCL_RESULTS_DIR``) when the cpu profile is active, it holds verdict
    files and ``DDCL_LEDGER_REFERENCE`` is not ``0``; None otherwise."""
    if profile.current().name != "cpu" or _switched_off(REFERENCE_LEDGER_ENV):
        return None
    if directory is not None:
        folder = Path(directory).parent / "reference" / "verdicts"
    else:
        folder = reference_dir() / "verdicts"
    return folder if folder.is_dir() and any(folder.glob("*.json")) else None


#: The first edition's reference runs (rules written after their pilots, margin-0 tests, no
#: smallest effect of interest), kept as exploratory history beside the second edition's.
FIRST_EDITION = "first_edition"


def first_edition_dir() -> Path | None:
    """``results/first_edition`` of the checkout (committed), or None when it has none."""
    folder = reference_dir().parent / FIRST_EDITION
    return folder if (folder / "verdicts").is_dir() else None


def _empirical_fields(claim_id: str, decision: dict | None) -> dict:
    """The :data:`EMPIRICAL_FIELDS` of an empirical claim: the registered rule's text, and the
    n_seeds, interval, scale and trend the deciding run recorded (None where it recorded none);
    ``recorded_rule``: the rule that run was decided by, when it is not the registered one."""
    decision = decision or {}
    rule = rule_of(claim_id)
    fields = {"rule": rule.text, **{k: decision.get(k) for k in EMPIRICAL_FIELDS[1:]}}
    if decision.get("rule") and decision["rule"] != rule.text:
        fields["recorded_rule"] = decision["rule"]
    return fields


def build_ledger(directory: Path | None = None, paper_directory: Path | None = None,
                 reference_directory: Path | None = None) -> list[dict]:
    """Every registered claim, merged with the settlements in ``<results>/verdicts/*.json``.

    Larger-scale verdicts: ``reference_directory`` (default :func:`reference_verdicts_dir`
    beside ``directory``) and ``paper_directory`` (default :func:`paper_verdicts_dir` when
    ``directory`` is not given). With either, every row carries ``"reference_profile"`` /
    ``"paper_profile"`` (verdict, evidence, our value, chapter, page, tolerance and decision of
    that run, or None for a claim it did not settle), its ``"verdict"`` is taken from the
    largest scale (:data:`SCALES`) that settled it, named in ``"verdict_from"``, with that run's
    ``"evidence"`` and ``"our_value"``; the cpu run's word, evidence and value are kept in
    ``"cpu_verdict"``, ``"cpu_evidence"`` and ``"cpu_our_value"``. Without them the rows are
    exactly the cpu ones.
    Empirical claims (:data:`EMPIRICAL`) also carry :data:`EMPIRICAL_FIELDS` from the run the
    verdict came from.

    Raises ``ValueError`` when two chapters settle the same claim or a file names an unknown id.
    """
    if directory is None and paper_directory is None:
        paper_directory = paper_verdicts_dir()
    if reference_directory is None:
        reference_directory = reference_verdicts_dir(directory)
    directory = directory or results_dir() / "verdicts"
    settled = _settlements(directory)
    archive = first_edition_dir()
    first = _settlements(archive / "verdicts") if archive is not None else {}
    larger = {name: _settlements(folder) for name, folder in
              (("reference", reference_directory), ("paper", paper_directory))
              if folder is not None}
    ledger = []
    for c in CLAIMS:
        row = settled.get(c.id)
        entry = {
            "id": c.id,
            "statement": c.statement,
            "source": c.source,
            "method": c.method,
            "verdict": row["verdict"] if row else "untested",
            "evidence": row["evidence"] if row else "not settled by any chapter yet",
            "paper_value": row["paper_value"] if row else c.paper_value,
            "our_value": row["our_value"] if row else None,
            "chapter": row["chapter"] if row else None,
            "page": row["page"] if row else None,
            "tolerance": row.get("tolerance") if row else None,
        }
        decision = row.get("decision") if row else None
        cpu_decision = decision
        if larger:
            entry["cpu_verdict"], entry["verdict_from"] = entry["verdict"], "cpu"
            entry["cpu_evidence"], entry["cpu_our_value"] = entry["evidence"], entry["our_value"]
            for name, rows in larger.items():
                big = rows.get(c.id)
                entry[PROFILE_KEYS[name]] = None if big is None else {
                    k: big.get(k) for k in _AT_SCALE_FIELDS}
                if big is not None:   # the word, its evidence and value from one run
                    entry["verdict"], entry["verdict_from"] = big["verdict"], name
                    entry["evidence"], entry["our_value"] = big["evidence"], big.get("our_value")
                    decision = big.get("decision")
        if rule_of(c.id) is not None:
            entry.update(_empirical_fields(c.id, decision))
            if entry.get("verdict_from", "cpu") != "cpu" and cpu_decision:
                entry["exploratory_tests"] = cpu_decision.get("tests")
            old = first.get(c.id)
            if old is not None:
                entry["first_edition"] = {k: old.get(k) for k in
                                          ("verdict", "our_value", "evidence")}
        ledger.append(entry)
    return ledger


def has_paper_profile(ledger: list[dict]) -> bool:
    """The ledger carries paper-profile verdicts (see :func:`build_ledger`)."""
    return any("paper_profile" in row for row in ledger)


def has_reference_profile(ledger: list[dict]) -> bool:
    """The ledger carries reference-profile verdicts (see :func:`build_ledger`)."""
    return any("reference_profile" in row for row in ledger)


def write_claims_json(ledger: list[dict], path: Path | None = None) -> Path:
    """Write the ledger to ``results/claims.json`` (stable order and formatting)."""
    path = path or results_dir() / "claims.json"
    atomic_write_text(path, json.dumps(ledger, indent=1, ensure_ascii=False) + "\n")
    return path


_MD_INLINE = frozenset("\\`*_[]{}<>$|&~")


def markdown_text(text: str | None) -> str:
    """``text`` as MyST Markdown that renders as exactly that text, on one line.

    Backslash-escapes every character with inline meaning (emphasis, links, roles, math,
    substitutions, HTML, entities, table pipes) and whatever at the start could open a block
    (a heading, list, quote, comment, target, fence or numbered item); runs of white space,
    newlines included, become one space.
    """
    text = " ".join((text or "").split())
    out = "".join("\\" + ch if ch in _MD_INLINE else ch for ch in text)
    if out and out[0].isascii() and not out[0].isalnum() and not out.startswith("\\"):
        out = "\\" + out
    return re.sub(r"^(\d+)([.)])", r"\1\\\2", out)


def ledger_anchor(claim_id: str) -> str:
    """The label of a claim's evidence entry on the ledger page, e.g. ``"ledger-d3"``."""
    return f"ledger-{get(claim_id).id.lower()}"


#: The label of the ledger table itself (the entries link back to it).
LEDGER_TABLE_LABEL = "ledger-table"


def _verdict_badge(verdict: str) -> str:
    if verdict not in VERDICTS:
        raise ValueError(f"verdict: expected one of {VERDICTS}, got {verdict!r}")
    return f"{{verdict}}`{verdict}`"


def _short(row: dict) -> str:
    return get(row["id"]).short or markdown_text(row["statement"])


def _value(text: str | None, empty: str = "–") -> str:
    """A value for display: arrows typeset as arrows (an ASCII ``->`` breaks across lines)."""
    return markdown_text(text.replace("->", "→")) if text else empty


def ledger_markdown(ledger: list[dict]) -> str:
    """The ledger at a glance: a MyST list-table of id, short claim, verdict, paper, ours.

    Each id links (a ``{ref}`` to :func:`ledger_anchor`) to the claim's evidence entry made by
    :func:`ledger_entries_markdown`; each verdict is a ``{verdict}`` badge (the role lives in
    ``book/_ext/verdict_badges.py``, the colours in ``_static/ledger.css``). The table carries
    the class ``ddcl-ledger`` and the label :data:`LEDGER_TABLE_LABEL`; a missing value is an
    empty cell (the stylesheet marks it). The nitpicky book build checks every link.

    With larger-scale verdicts in the ledger (:func:`has_reference_profile`,
    :func:`has_paper_profile`) the verdict column shows the largest scale's word and names that
    scale, "ours (cpu)" shows the cpu word beside the cpu value, and a column per larger scale
    ("reference", "ours at paper scale") shows its word and value; without them the table is
    exactly the five columns above.
    """
    scales = [name for name in SCALES[1:] if any(PROFILE_KEYS[name] in row for row in ledger)]
    titles = {"reference": "reference", "paper": "ours at paper scale"}
    lines = ["::::{list-table}", ":header-rows: 1", ":class: ddcl-ledger",
             f":name: {LEDGER_TABLE_LABEL}", "",
             "* - id", "  - claim", "  - verdict", "  - paper",
             "  - ours (cpu)" if scales else "  - ours"]
    lines += [f"  - {titles[name]}" for name in scales]
    for row in ledger:
        verdict = _verdict_badge(row["verdict"])
        ours = _value(row.get("cpu_our_value", row["our_value"]), empty="")
        if scales and row.get("verdict_from", "cpu") != "cpu":
            verdict += f" ({row['verdict_from']})"
            ours = f"{_verdict_badge(row['cpu_verdict'])} {ours}"
        lines += [f"* - {{ref}}`{row['id']} <{ledger_anchor(row['id'])}>`",
                  f"  - {_short(row)}",
                  f"  - {verdict}",
                  f"  - {_value(row['paper_value'], empty='')}".rstrip(),
                  f"  - {ours}".rstrip()]
        lines += [f"  - {_at_scale_cell(row.get(PROFILE_KEYS[name]))}".rstrip()
                  for name in scales]
    lines.append("::::")
    return "\n".join(lines)


def _at_scale_cell(big: dict | None) -> str:
    """A larger-scale verdict badge and its value for the table (empty when not settled)."""
    if not big:
        return ""
    value = _value(big.get("our_value"), empty="")
    return f"{_verdict_badge(big['verdict'])} {value}".rstrip()


def _number(x) -> str:
    return f"{x:.3g}" if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def _rule_seeds(row: dict) -> int:
    """The seeds the rule a row was decided under asks for: the count its rule text opens with
    (a committed row keeps the rule it was decided under, which may have changed since), else
    the current rule's."""
    found = re.match(r"(\d+) seeds\b", row.get("rule") or "")
    return int(found.group(1)) if found else rule_of(row["id"]).n_seeds


def _decided_on(row: dict) -> str:
    """``seeds · interval · scale · trend`` the verdict was decided on ("–" where the run
    recorded none), the seeds beside those its rule asks for (:func:`_rule_seeds`)."""
    interval = row.get("interval")
    trend = row.get("trend")
    asked = _rule_seeds(row)
    parts = [
        f"**Decided on:** {row['n_seeds'] if row.get('n_seeds') is not None else '–'} "
        f"seed(s) (the rule asks {asked})",
        "**Interval:** " + (f"[{_number(interval[0])}, {_number(interval[1])}]"
                            if interval else "–"),
        f"**Scale:** {_value(row.get('scale'))}",
        "**Trend:** " + (markdown_text(", ".join(f"{k}: {_number(v)}" for k, v in trend.items()))
                         if isinstance(trend, dict) and trend else "–"),
    ]
    return " · ".join(parts)


_SCALE_TITLES = {"reference": "Reference run", "paper": "Paper-scale run"}


def _tests_table(tests: list[dict]) -> list[str]:
    """The decided tests of an empirical claim as a Markdown table."""
    lines = ["| test | claimed | SESOI | 95% interval | seeds run / needed | word |",
             "|---|---|---|---|---|---|"]
    for t in tests:
        low, high = t["interval"]
        needed = "out of reach" if t.get("seeds_needed") is None else t["seeds_needed"]
        cells = [markdown_text(t["statistic"]), markdown_text(f"{t['side']} {t['margin']:.4g}"),
                 f"{t['sesoi']:.4g}", f"{_number(t['estimate'])} [{_number(low)}, "
                 f"{_number(high)}]", f"{t['n_seeds']} / {needed}",
                 _verdict_badge(t["word"])]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _one_line(title: str, run: dict | None) -> str:
    """A smaller run of a claim in one line: its word and its value."""
    if not run:
        return f"**{title}:** not settled by that run."
    return (f"**{title}:** {_verdict_badge(run['verdict'])} "
            f"{_value(run.get('our_value'), empty='')}").rstrip()


def ledger_entries_markdown(ledger: list[dict]) -> str:
    """One evidence entry per claim, each under its own label (:func:`ledger_anchor`), saying
    each thing once: the full statement and its source; the evidence of record (the largest
    scale that ran) in full with the paper's value beside ours; for an empirical claim its
    registered rule, phase and decided tests; then every smaller run (the cpu pilot, the first
    edition's reference run) in one line each with its word and value; and a ``{doc}`` link to
    the chapter page that settled the claim (or the method still to be used, for an
    ``untested`` claim that no chapter settled).
    """
    blocks = []
    for row in ledger:
        method = f"**Method:** {markdown_text(row['method'])}."
        if row["page"]:
            settled = f"{method} **Settled in** {{doc}}`/{row['page']}`."
        else:
            settled = f"{method} Not settled by any chapter yet."
        source = row.get("verdict_from", "cpu")
        record = [f"**Evidence of record ({source} run).** {_value(row['evidence'])}", "",
                  f"**Paper:** {_value(row['paper_value'])} · **Ours:** "
                  f"{_value(row['our_value'])}", ""]
        rule = []
        if "rule" in row:
            phase = row.get("phase")
            rule = [f"**Rule{' (registered)' if phase else ''}.** {markdown_text(row['rule'])}",
                    ""]
            if row.get("recorded_rule"):
                rule += [f"**Rule the verdict was decided by.** "
                         f"{markdown_text(row['recorded_rule'])}", ""]
            if row.get("tests"):
                rule += [f"**Phase:** {phase or 'exploratory'}.", "", *_tests_table(row["tests"]),
                         ""]
            else:
                rule += [_decided_on(row), ""]
        smaller = []
        for name in SCALES[1:]:
            if PROFILE_KEYS[name] in row and name != source:
                smaller.append(_one_line(_SCALE_TITLES[name], row[PROFILE_KEYS[name]]))
        if source != "cpu":
            smaller.append(_one_line("cpu run (exploratory)",
                                     {"verdict": row["cpu_verdict"],
                                      "our_value": row.get("cpu_our_value")}))
        if row.get("first_edition"):
            smaller.append(_one_line("First edition's reference run (exploratory)",
                                     row["first_edition"]))
        blocks.append("\n".join([
            f"({ledger_anchor(row['id'])})=",
            ":::{container} ddcl-ledger-entry",
            f"**{row['id']}** {_verdict_badge(row['verdict'])} {markdown_text(row['source'])}",
            "",
            f"**Claim.** {markdown_text(row['statement'])}",
            "",
            *record,
            *rule,
            *[line for one in smaller for line in (one, "")],
            f"{settled} {{ref}}`Back to the table <{LEDGER_TABLE_LABEL}>`",
            ":::",
        ]))
    return "\n\n".join(blocks)


def verdict_counts(ledger: list[dict]) -> dict[str, int]:
    """How many claims carry each verdict (all verdict words present, zeros included)."""
    counts = {v: 0 for v in VERDICTS}
    for row in ledger:
        counts[row["verdict"]] += 1
    return counts
