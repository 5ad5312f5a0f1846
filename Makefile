# The README's commands. Each target does its own set-up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: install test demo bench bench-compare lint clean

$(STAMP): pyproject.toml
	command -v chromium >/dev/null || command -v /usr/bin/chromium >/dev/null || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e . --group dev
	touch $(STAMP)

install: $(STAMP)

## make test: install everything, then run the whole suite against real PostgreSQL.
test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

## make demo: install, migrate, enqueue a skewed workload, run workers, show fairness.
demo: $(STAMP)
	$(PY) example_project/demo.py $(DEMO_ARGS)

## make bench: the benchmark table (bench/README.md).
bench: $(STAMP)
	$(PY) -m bench $(BENCH_ARGS)

## make bench-compare: lonnymq next to pgqueuer, procrastinate and raw SKIP LOCKED (bench/compare).
bench-compare: $(STAMP)
	$(PY) -m bench.compare $(BENCH_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check django_lonnymq tests example_project bench
	$(VENV)/bin/ruff format --check django_lonnymq

clean:
	rm -rf $(VENV) .pytest_cache
