# Dragonfly Ingest — `make help` lists the targets. Every target installs what it needs.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
# The stamp is named after pyproject.toml's content, not its date: a checkout or copy that
# touches the file without changing it does not reinstall; any change to it does.
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.DEFAULT_GOAL := help
.PHONY: help install run test test-fast check lint types bench soak clean browser ocr

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP):
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch is pinned (pyproject) to the CPU build on this machine's disk; see README.
	# --no-compile: pip would byte-compile every file of every wheel (torch alone is thousands),
	# ~75 s of the install's ~145 s here; Python compiles what is imported on first import.
	$(PY) -m pip install --quiet --no-compile -e '.[dev]'
	@rm -f $(VENV)/.installed-*
	@touch $@

install: $(STAMP) ## create .venv and install the project with its dev tools

# `python -m` from this folder runs this checkout's code, whichever checkout installed the venv.
run: $(STAMP) ## start the whole embedded stack (Postgres, SQS/S3, gateway, workers); Ctrl-C stops it
	$(PY) -m cli.main dev

# Test processes: one per core, at most two (docs/decisions/0164); TEST_WORKERS=0 runs in one.
TEST_WORKERS ?= auto --maxprocesses=2

test: $(STAMP) browser ocr ## run every test against real Postgres, SQS/S3 and processes
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=25 $(PYTEST_ARGS)

browser: ## install Debian's chromium for the web UI tests (where apt-get exists; required under CI=true)
	@command -v chromium >/dev/null || ! command -v apt-get >/dev/null || \
		(apt-get update && apt-get install -y chromium) || \
		{ if [ "$$CI" = true ]; then echo "chromium could not be installed (CI=true needs it)"; exit 1; fi; \
		  echo "chromium could not be installed: the browser tests will skip"; }
	@[ "$$CI" != true ] || command -v chromium >/dev/null || \
		{ echo "CI=true: no chromium and no apt-get to install it"; exit 1; }

# Tesseract's English data for OCR (docs/decisions/0211); tesserocr (pyproject) brings the engine.
ocr: ## install Debian's tesseract-ocr-eng and -osd (page orientation) for OCR of scans and images (where apt-get exists; required under CI=true)
	@(ls /usr/share/tesseract-ocr/*/tessdata/eng.traineddata && ls /usr/share/tesseract-ocr/*/tessdata/osd.traineddata) >/dev/null 2>&1 || \
		! command -v apt-get >/dev/null || \
		(apt-get update && apt-get install -y tesseract-ocr-eng tesseract-ocr-osd) || \
		{ if [ "$$CI" = true ]; then echo "tesseract-ocr-eng/-osd could not be installed (CI=true needs them)"; exit 1; fi; \
		  echo "tesseract-ocr-eng/-osd could not be installed: OCR tests will skip, scans fail with a reason"; }
	@[ "$$CI" != true ] || ls /usr/share/tesseract-ocr/*/tessdata/eng.traineddata >/dev/null 2>&1 || \
		{ echo "CI=true: no Tesseract English data and no apt-get to install it"; exit 1; }

test-fast: $(STAMP) ## run the tests that need no embedding model
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

lint: $(STAMP) ## ruff
	$(VENV)/bin/ruff check .

types: $(STAMP) ## mypy
	$(VENV)/bin/mypy

check: lint types test ## what CI should run: lint, types, tests

bench: $(STAMP) ## run the benchmarks and print their figures
	$(PY) bench/upload.py
	$(PY) bench/pipeline.py
	$(PY) bench/ocr.py --quick

# MINUTES and SEED: `make soak MINUTES=5 SEED=7`; the report lands in test-output/soak/.
MINUTES ?= 30
SEED    ?=
soak: $(STAMP) ## chaos soak: every kind of work for MINUTES (30) while processes die, then every invariant
	$(PY) -m bench.soak --minutes $(MINUTES) $(if $(SEED),--seed $(SEED))

clean: ## remove the venv, local stack data and test output
	rm -rf $(VENV) .ingest test-output .pytest_cache .mypy_cache .ruff_cache
