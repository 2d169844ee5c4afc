"""Benchmarks of DDCL-Attention (claims D2 and L5).

Run ``python -m ddcl_theory.bench [--quick|--full]``.

What runs, side by side in one process (so that ratios share the host's state):

* **time** of one forward + backward pass, for T in ``seq_lens``, of
  ``ddcl`` (:class:`~ddcl_theory.layers.ddcl.DDCLAttention`, loss = sum of the output + L_q + V),
  ``bare`` (the same layer's matrix products alone, with its own weights: input projection,
  per-head z P^T and s P, output projection, nothing else; loss = sum of the result),
  ``sdpa`` (multi-head self-attention of the same width and heads through
  ``scaled_dot_product_attention``: :class:`~ddcl_theory.layers.laplacian.LaplacianAttention`
  with no Laplacian head), ``mean`` (mean pooling of the tokens) and ``vq``
  (vector-quantize-pytorch's ``VectorQuantize`` with as many heads and codes, training mode).
  Calls are interleaved (the order rotates every repeat) and the medians of wall-clock time and
  of process CPU time are reported; ``ddcl / bare`` is the layer's overhead over its own matrix
  products. A method whose next call is predicted (from the previous length, T^2 for ``sdpa``,
  T otherwise) to take longer than ``max_call_s`` is skipped at that length, and the result says
  so.
* **peak memory** of one forward + backward pass, each (method, T) in a fresh subprocess: the
  rise of the peak resident set size (``VmHWM``, reset through ``/proc/self/clear_refs`` just
  before the pass; ``ru_maxrss`` where that is unavailable) over the resident size just before
  the pass, divided by the input's size. The input, the parameters and a warm-up pass at a small
  length are in place before the baseline is read. On CUDA: ``torch.cuda.max_memory_allocated``.
* **Laplacian heads**: forward + backward of ``LaplacianAttention`` with all heads Laplacian
  against standard attention (identical weights, interleaved); the median per-repeat time ratio.
* **eager against compiled**: ``torch.compile(DDCLAttention(...), fullgraph=True)`` against eager
  (first-call compile time and median call times), when enabled.

Results: a table on stdout and a JSON file (``--out``, default ``_build/bench/bench_<mode>.json``)
with the settings, the machine (CPU model, cores, memory, load average), versions (Python,
torch, numpy, vector-quantize-pytorch, the git commit) and torch's thread settings. Times are
never asserted anywhere: the host is shared and noisy, and so are these numbers.

Modes: ``--quick`` (what CI runs, seconds: small T, few repeats, memory at one length) and
``--full`` (the book's sweep, T = 256 ... 65536, compile comparison on). The default follows the
profile (cpu -> quick, paper -> full). ``--seq-lens``, ``--methods``, ``--repeats``, ``--threads``,
``--no-memory``, ``--compile`` adjust either.

Modules: :mod:`~ddcl_theory.bench.settings` (what runs), :mod:`~ddcl_theory.bench.cases` (one
pass of each method), :mod:`~ddcl_theory.bench.timing`, :mod:`~ddcl_theory.bench.memory`,
:mod:`~ddcl_theory.bench.harness` (everything, with provenance), :mod:`~ddcl_theory.bench.results`
(the report and the reader of stored results), :mod:`~ddcl_theory.bench.cli`.

Stacked seeds: ``python -m ddcl_theory.bench.stacked`` times S seeds of a small ViT and char GPT
trained together (:mod:`ddcl_theory.runtime.stacked`) against one at a time, side by side.
"""
from ddcl_theory.bench.cases import Case, bare_products, make_case, timed
from ddcl_theory.bench.cli import main
from ddcl_theory.bench.harness import provenance, run, run_compile, run_laplacian
from ddcl_theory.bench.memory import measure_memory, measure_memory_here, run_memory
from ddcl_theory.bench.results import STORED_RUN, load, loglog_slope, medians, memory_ratios, report
from ddcl_theory.bench.settings import FULL_SEQ_LENS, METHODS, QUICK_SEQ_LENS, BenchSettings
from ddcl_theory.bench.timing import Timing, paired_ratio, predicted_seconds, ratios, run_timing

__all__ = ["BenchSettings", "METHODS", "QUICK_SEQ_LENS", "FULL_SEQ_LENS", "Case", "bare_products",
           "make_case", "timed", "Timing", "predicted_seconds", "run_timing", "paired_ratio",
           "ratios", "measure_memory", "measure_memory_here", "run_memory", "run_laplacian",
           "run_compile", "provenance", "run", "report", "STORED_RUN", "load", "medians",
           "loglog_slope", "memory_ratios", "main"]
