# The README's commands. Each target does its own set-up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# The second suite: the newest Django 6.x, which needs Python 3.12 or later.
VENV6  ?= .venv-django6
STAMP6 := $(VENV6)/.installed-stamp
# The first of these that runs and is 3.12+: python3.12, python3.13, a pyenv 3.12+ install
# (pyenv's shims fail unless that version is selected). Set PYTHON_DJANGO6 to choose one.
PYTHON_DJANGO6 ?= $(shell for candidate in python3.12 python3.13 \
	$$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -V); do \
	"$$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null \
	&& { command -v "$$candidate"; break; }; done)
# chromium drives the admin's browser tests and `make screenshots`, nothing else: the test
# targets install it (Debian's package, where we are root with apt-get) and otherwise stop,
# saying how to install it. `make demo` and `make install` never need it.
CHROMIUM := command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	{ echo "make: the tests need chromium (the admin's browser tests). Install it: \
	'sudo apt-get install chromium' on Debian/Ubuntu, 'brew install --cask chromium' on macOS, \
	or put a chromium on PATH; 'make demo' needs none." >&2; exit 1; }
# plpgsql_check (tests/migrations/test_plpgsql_check.py) beside each local PostgreSQL server:
# Debian's postgresql-<major>-plpgsql-check, where we are root with apt-get. Elsewhere make
# goes on and that test fails, saying what to install on the server that runs the tests.
# A test dependency like chromium: only the test targets run it (`test-deps`).
PLPGSQL_CHECK := ls /usr/share/postgresql/*/extension/plpgsql_check.control >/dev/null 2>&1 || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && [ -d /usr/lib/postgresql ] && \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	$$(ls /usr/lib/postgresql | sed 's/.*/postgresql-&-plpgsql-check/') >/dev/null; } || \
	echo "make: plpgsql_check is not installed (root and apt-get needed); tests/migrations/test_plpgsql_check.py will fail" >&2

# The suite can run in parallel (pytest-xdist): XDIST test processes, each with a database of
# its own on the one server. The tests marked alone act on the whole server (they restart it,
# fill its lock table) and run afterwards in a pytest of their own. make test-fast runs in 4
# processes unless XDIST says otherwise; make test, test-django52 and test-django6 in 2 (as many
# as a small CI machine has cores; with 4 on a loaded 2-core machine the worker-process tests
# timed out: CONTRIBUTING.md). XDIST=0 runs one process. $(1) = the venv's python, $(2) = the
# target's marker expression, $(3) = the target's default process count.
xdist_args = $(if $(filter 0,$(or $(XDIST),$(1))),,-n $(or $(XDIST),$(1)) --dist loadgroup)
define PYTEST_PARALLEL
status=0; \
$(1) -m pytest $(call xdist_args,$(3)) -m "($(2)) and not alone" $(PYTEST_ARGS); first=$$?; \
$(1) -m pytest -m "($(2)) and alone" $(PYTEST_ARGS); second=$$?; \
for code in $$first $$second; do [ $$code = 0 ] || [ $$code = 5 ] || status=1; done; \
[ $$first = 5 ] && [ $$second = 5 ] && status=5; \
exit $$status
endef

.PHONY: install test-deps test test-django52 test-django6 test-fast demo bench bench-compare lint dist docs screenshots clean

# The test targets let Python cache compiled modules (in __pycache__, which git and the builds
# leave out) whatever PYTHONDONTWRITEBYTECODE says outside: without the cache every pytest
# process rewrites and compiles the 300 test modules again (about 10 s each) and every worker
# process a test starts compiles the app again.
test test-django52 test-django6 test-fast: export PYTHONDONTWRITEBYTECODE =

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --upgrade -e . --group dev "Django>=5.2,<6"
	touch $(STAMP)

$(STAMP6): pyproject.toml
	@test -n "$(PYTHON_DJANGO6)" || { echo "make: the Django 6 suite needs Python 3.12 or later, and none was found \
	(python3.12, python3.13, a pyenv 3.12+ install). Install one or set PYTHON_DJANGO6=/path/to/python3.12; \
	'make test-django52' runs the Django 5.2 suite alone." >&2; exit 1; }
	$(PYTHON_DJANGO6) -m venv $(VENV6)
	$(VENV6)/bin/python -m pip install --quiet --upgrade pip
	$(VENV6)/bin/python -m pip install --quiet --upgrade -e . --group dev "Django>=6.0,<7"
	touch $(STAMP6)

install: $(STAMP)

## make test-deps: what only the tests need, beside the venv: chromium and plpgsql_check.
test-deps:
	@$(CHROMIUM)
	@$(PLPGSQL_CHECK)

## make test: install everything, then run the whole suite against real PostgreSQL twice: on
## Django 5.2 (.venv) and on the newest Django 6.x (.venv-django6, Python 3.12+). Both run even
## when the first fails; the status is non-zero if either failed. On a machine of 4 cores or
## more (or with SIDE_BY_SIDE=1) the two run side by side, the Django 6 suite on a server of its
## own (DATABASE_URL_DJANGO6, or a throwaway cluster from the local PostgreSQL binaries: each
## suite's tests marked alone act on its whole server), its output shown when both have ended.
## On 2 cores they run one after the other: side by side there, the suite is CPU-bound (load
## 8-15, no idle CPU) and tests that wait on worker processes miss their deadlines (CONTRIBUTING.md).
INITDB := $(shell command -v initdb || ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1)
DJANGO6_LOG := $(VENV6)/last-test-run.log
SIDE_BY_SIDE ?= $(shell [ "$$(nproc 2>/dev/null || echo 1)" -ge 4 ] && echo 1 || echo 0)
test: $(STAMP) $(STAMP6) test-deps
	@status=0; \
	if [ "$(SIDE_BY_SIDE)" = 1 ] && { [ -n "$$DATABASE_URL_DJANGO6" ] || [ -n "$(INITDB)" ]; }; then \
		echo "make: the Django 6 suite runs beside the Django 5.2 suite on \
	$${DATABASE_URL_DJANGO6:+DATABASE_URL_DJANGO6}$${DATABASE_URL_DJANGO6:-a throwaway cluster of its own}; \
	its output follows when both have ended"; \
		( if [ -n "$$DATABASE_URL_DJANGO6" ]; then DATABASE_URL="$$DATABASE_URL_DJANGO6"; export DATABASE_URL; \
		  else unset DATABASE_URL; fi; \
		  $(MAKE) --no-print-directory test-django6 > $(DJANGO6_LOG) 2>&1 ) & six=$$!; \
		$(MAKE) --no-print-directory test-django52 || status=1; \
		wait $$six || status=1; \
		echo "==== the Django 6 suite ($(DJANGO6_LOG)) ===="; cat $(DJANGO6_LOG); \
	else \
		$(MAKE) --no-print-directory test-django52 || status=1; \
		$(MAKE) --no-print-directory test-django6 || status=1; \
	fi; \
	exit $$status

test-django52: $(STAMP) test-deps
	$(PY) -c 'import django; print("Django", django.get_version())'
	@$(call PYTEST_PARALLEL,$(PY),not alone or alone,2)

## make test-django6 leaves out the tests marked django_independent (their outcome cannot depend
## on the Django version: CONTRIBUTING.md says which and why); make test-django52 runs them, so
## make test runs every test at least once.
test-django6: $(STAMP6) test-deps
	$(VENV6)/bin/python -c 'import django; print("Django", django.get_version())'
	@$(call PYTEST_PARALLEL,$(VENV6)/bin/python,not django_independent,2)

## make test-fast: the loop while editing, within 2 minutes: the Django 5.2 suite without the
## tests marked slow (those that start worker processes, Spark, a browser or a package build, the
## soak, stress and chaos runs, the migration walk, the tests marked alone, and any other test over
## 3 s; pyproject.toml says which), in one parallel pytest. make test runs them all.
test-fast: $(STAMP)
	$(PY) -c 'import django; print("Django", django.get_version())'
	$(PY) -m pytest $(call xdist_args,3) -m "not slow" $(PYTEST_ARGS)

## make demo: install, migrate, enqueue a skewed workload, run workers, show fairness.
demo: $(STAMP)
	$(PY) example_project/demo.py $(DEMO_ARGS)

## make bench: the benchmark table (docs/performance.md lists every bench module).
bench: $(STAMP)
	$(PY) -m bench $(BENCH_ARGS)

## make bench-compare: lonnymq next to pgqueuer, procrastinate and raw SKIP LOCKED (bench/compare).
bench-compare: $(STAMP)
	$(PY) -m bench.compare $(BENCH_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check django_lonnymq tests example_project bench
	$(VENV)/bin/ruff format --check django_lonnymq
	$(VENV)/bin/mypy django_lonnymq

## make dist: the sdist and the wheel, into dist/.
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --outdir dist .

## make docs: the documentation site, into site/ (strict: a broken link or reference fails).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

## make screenshots: the admin and dashboard images of docs/images/ (headless chromium).
screenshots: $(STAMP) test-deps
	$(PY) docs/screenshots.py

clean:
	rm -rf $(VENV) $(VENV6) .pytest_cache dist site
