# The two commands of the README: `make book` and `make test`. Everything else is for maintainers.
VENV := .venv/bin
NBVAL := -p ddcl_theory.testing.nbval_numeric --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout 1800

.PHONY: setup book book-strict test unit goldens paper check-goldens check-render clean

setup:
	@bash scripts/setup.sh

## Build the book into _build/html, executing every notebook (execution cache in _build).
book: setup
	$(VENV)/jupyter-book build . 

## Clean, warnings-as-errors, nitpicky build (what CI runs).
book-strict: setup
	$(VENV)/jupyter-book clean --all .
	$(VENV)/jupyter-book build . -W -n --keep-going

## Unit, property and notebook regression (nbval on every golden) tests.
test: setup
	$(VENV)/python -m pytest tests notebooks $(NBVAL) -m "not browser"

unit: setup
	$(VENV)/python -m pytest tests -m "not browser"

## Re-execute the sources and rewrite the goldens (maintainers, after changing a chapter).
goldens: setup
	$(VENV)/python -m ddcl_theory.tools.goldens write $(NAMES)

## Rerun chapters at paper scale (GPU if present) into _build/paper; goldens stay untouched.
paper: setup
	DDCL_PROFILE=paper $(VENV)/python -m ddcl_theory.tools.goldens write $(NAMES)

check-goldens: setup
	$(VENV)/python -m ddcl_theory.tools.goldens check

## Open the built pages in headless Chromium and check that formulas typeset.
check-render: setup
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)
	DDCL_REQUIRE_BUILT_BOOK=1 $(VENV)/python -m pytest tests/test_rendered_book.py -m browser

clean:
	rm -rf _build
