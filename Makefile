# The two commands of the README: `make book` and `make test`. Everything else is for maintainers.
VENV := .venv/bin
NBVAL := -p ddcl_theory.ledger.nbval_numeric --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout 1800
## pytest-xdist workers of `make test` and `make unit`: one per logical CPU, at most 8 (JOBS=0:
## one process, no xdist). Whole files per worker, in the order of collection (see `test`).
JOBS ?= logical
PARALLEL := -n $(JOBS) --maxprocesses 8 --dist loadfile --no-loadscope-reorder --durations=25
## Python writes the bytecode of each module at its first import (uv installs without compiling
## it, scripts/setup.sh): a shell that sets PYTHONDONTWRITEBYTECODE would otherwise recompile
## torch's modules in every process the tests and the book start.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup data book book-strict test test-slow test-portable unit goldens paper reference smoke gpu-check runbook check-goldens check-render check-results check-reference clean

setup:
	@bash scripts/setup.sh

## Find the real data sets (data dir, data/, ../shared/data, user cache) or fetch them from their
## canonical sources; stops with one message naming what is missing when that is impossible.
## PROFILE=paper also fetches the paper profile's data (full CIFAR-10 and IMDB, CIFAR-100, the Hub
## models at pinned commits; `python -m ddcl_theory.data status --paper` lists them).
data: setup
	$(VENV)/python -m ddcl_theory.data ensure
	$(if $(filter paper,$(PROFILE)),$(VENV)/python -m ddcl_theory.data ensure --paper)

## Build the book into _build/html. With the data (found or fetched): executing every notebook
## (execution cache in _build), verdicts into results/. Without it (no data, no network): from the
## committed executed notebooks, not executed, with a banner on every page; results/ untouched.
## COMMITTED=1 builds from the committed notebooks even when the data is there.
book: setup
	$(VENV)/python book/build_book.py $(if $(COMMITTED),--committed-outputs)

## Clean, warnings-as-errors, nitpicky build of the committed goldens, not executed (what CI runs
## after `make test` has checked them with nbval: no chapter is executed twice per CI run).
book-strict: setup
	$(VENV)/jupyter-book clean .
	$(VENV)/python book/build_book.py --committed-outputs -W -n --keep-going

## Unit, property and notebook regression (nbval on every golden) tests, on every core: each
## golden runs whole on one xdist worker (its cells in order, one kernel), several goldens at
## once, the unit tests fill the gaps and the ledger, which reads the chapters' verdicts, comes
## last (ddcl_theory/ledger/nbval_numeric.py). The 25 slowest tests are listed at the end.
## The integration tests marked slow (a wheel installed in a fresh venv, offline book builds,
## killed and resumed runs, two DDP ranks, inductor's C++, the paper profile's smoke run) are
## `make test-slow`, and the browser check of a built book is `make check-render`: CI runs both.
## The chapters write their verdicts into _build/test-results (or $DDCL_RESULTS_DIR), not into
## the committed results/: compare them with `make check-results RESULTS=_build/test-results`.
test: data
	@[ -n "$$DDCL_RESULTS_DIR" ] || rm -rf _build/test-results
	DDCL_RESULTS_DIR=$${DDCL_RESULTS_DIR:-$(CURDIR)/_build/test-results} \
	  $(VENV)/python -m pytest tests notebooks $(NBVAL) -m "not browser and not slow" $(PARALLEL)

## The integration tests (marker slow; about eight minutes of CPU, the paper smoke run four of
## them). The plugin starts the two halves of the smoke run first, one on each worker.
test-slow: data
	$(VENV)/python -m pytest tests -p ddcl_theory.ledger.nbval_numeric -m "slow and not browser" $(PARALLEL)

## Every golden replayed under each kernel set this CPU can emulate (its own; AVX2 where it has
## AVX-512; ATen's scalar kernels with MKL's generic path), each with an empty embedding cache
## and scratch results, compared with the goldens under their declared tolerances; prints the
## largest move per chapter as a fraction of its allowance (about 5 minutes a set on 2 cores).
## Run it before a change to a chapter lands (CONTRIBUTING). SETS=avx2,default selects.
test-portable: data
	$(VENV)/python -m ddcl_theory.ledger.portable $(if $(SETS),--sets $(SETS)) $(NAMES)

## The unit and property tests alone; MARKS selects (CI, under emulated kernels, in one process:
## "kernels and not browser and not slow and not symbolic and not graph").
MARKS ?= not browser
unit: setup
	$(VENV)/python -m pytest tests -m "$(MARKS)" $(PARALLEL)

## Re-execute the sources and rewrite the goldens (maintainers, after changing a chapter).
goldens: setup
	$(VENV)/python -m ddcl_theory.ledger.goldens write $(NAMES)

## Rerun chapters at paper scale (GPU if present) into _build/paper, verdicts into results/paper;
## goldens stay untouched. Resumes: chapters already done with the same provenance are skipped,
## experiments resume from their checkpoints (results/paper/runs). FORCE=1 reruns from scratch.
paper: data
	DDCL_PROFILE=paper $(VENV)/python -m ddcl_theory.ledger.goldens write $(if $(FORCE),--force) $(NAMES)

## Rerun chapters under the reference profile (CPU, the seeds and scales the verdict rules demand)
## into _build/reference, verdicts and provenance into results/reference (committed). Resumes like
## `make paper`; FORCE=1 reruns from scratch. The chapters run side by side on CORES cores (each
## on the cores its committed provenance shows it using; the ledger last).
CORES ?= 2
reference: data
	DDCL_PROFILE=reference $(VENV)/python -m ddcl_theory.ledger.goldens write --cores $(CORES) $(if $(FORCE),--force) $(NAMES)

## The committed reference results against the code: fails on a stale one (its experiment's
## source changed since it was computed) or one without provenance.
check-reference: setup
	$(VENV)/python -m ddcl_theory.ledger.reference check

## The paper profile's smoke test: every experiment at paper sizes, a handful of steps, on CPU
## (one thread: the budgets are tiny, and threads only contend on a shared host).
smoke: data
	DDCL_PROFILE=paper DDCL_SMOKE=1 $(VENV)/python -m ddcl_theory.experiments.smoke --threads 1 $(NAMES)

## The prepared check for a GPU host (about ten minutes): the smoke run on CUDA with each
## experiment's seconds, steps and peak memory, and one short paper chapter (scripts/gpu_check.sh).
gpu-check: data
	bash scripts/gpu_check.sh $(NAMES)

## The GPU runbook page (book/runbook.md): count the FLOPs of every experiment's training steps
## at the paper's shapes (the smoke run with --flops, about five minutes), then write the page.
runbook: data
	$(VENV)/python -m ddcl_theory.runbook.flops
	$(VENV)/python -m ddcl_theory.runbook.page

check-goldens: setup
	$(VENV)/python -m ddcl_theory.ledger.goldens check

## Open the built pages in headless Chromium: formulas typeset, code and output blocks fit the
## column at 1400 px, no page scrolls sideways at 390 px.
check-render: setup
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)
	DDCL_REQUIRE_BUILT_BOOK=1 $(VENV)/python -m pytest tests/test_rendered_book.py -m browser

## Compare results/ (or RESULTS=folder, e.g. where `make test` wrote its verdicts) with the
## committed ones: verdicts exactly, numbers within declared tolerances.
check-results: setup
	$(VENV)/python -m ddcl_theory.ledger.results_check $(if $(RESULTS),--dir $(RESULTS))

clean:
	rm -rf _build
