# The two commands of the README: `make demo` and `make test` (the rest: docs/development.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast bytecode lint typecheck pytest bench clean browser prometheus rules node docs docs-check

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/memory-watchdog demo
	@echo '(memory-watchdog is in .venv/bin: run "source .venv/bin/activate" first; README.md, "After make demo")'

LINT_PATHS := $(wildcard watchdog checks alerts tests benchmarks)

# The static lints (tests/lints/: the docs' links and citations, module docstrings, module size,
# import cycles...) read files only, so they run here, once, and not in pytest.
lint: $(STAMP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/lint-imports
	$(BIN)/python -m tests.lints

typecheck: $(STAMP)
	$(BIN)/mypy

# Our modules compiled before the suite and the benchmarks start their processes: where
# PYTHONDONTWRITEBYTECODE is set (as on some CI machines) no process writes them, and each the
# tests start would compile them again (about 0.25 CPU-seconds a `memory-watchdog` start here).
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q watchdog checks alerts tests benchmarks

# Four worker processes (pytest-xdist) on two cores: much of the suite waits on the processes
# it starts, their schedules and their timeouts, and four keep both cores busy meanwhile; each
# worker has its own store (tests/conftest.py). The modules whose fixtures build much
# (xdist_group) run on one worker each.
pytest: $(STAMP) bytecode
	$(BIN)/python -m pytest -n 4 --dist loadgroup

# The inner loop, under a minute: the tests that neither are slow (a second or more, or a process,
# a daemon, a cluster, a server waited on) nor query the store (marked `store` by tests/conftest.py),
# and the spec's rules (`inner_loop`), on two workers that steal work from each other (about a
# third faster than --dist load here); the slowest five are named at the end. `make test` runs
# everything.
test-fast: $(STAMP) bytecode
	$(BIN)/python -m pytest -n 2 --dist worksteal -m "not slow and (inner_loop or not store)" --durations=5

# Headless Chromium for tests/test_browser.py: Debian packages, installed system-wide, so
# never as part of `make test` (which needs only Python and PyPI). `make test` runs the
# browser test when Chromium is there and skips it, saying how to get it, when it is not.
browser:
	@(command -v chromium && command -v chromedriver) >/dev/null 2>&1 || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null)

# Prometheus and Alertmanager, for the rules below and tests/alerts/test_alertmanager.py and
# tests/alerts/test_prometheus.py: Debian packages, installed system-wide like the browser
# (never by `make test`, whose tests skip and say how to get them when they are missing).
prometheus:
	@(command -v promtool && command -v amtool && \
	  (command -v prometheus-alertmanager || command -v alertmanager)) >/dev/null 2>&1 || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	     prometheus prometheus-alertmanager >/dev/null)

# The shipped Prometheus rules, checked and unit-tested when promtool is installed.
RULES := config/prometheus/memory-watchdog.rules.yml
rules:
	@if command -v promtool >/dev/null 2>&1; then \
	  promtool check rules $(RULES) && promtool test rules $(RULES:.yml=.test.yml); \
	else \
	  echo "rules: skipped, promtool is not installed (apt-get install prometheus, or make prometheus)"; \
	fi

# The OpenTelemetry JS SDK's OTLP/HTTP exporters for tests/ingest/test_js_sdk.py: npm packages
# (tests/ingest/node/package.json and its lock), installed into .cache/otel-js (ignored by git),
# never by the tests themselves. `make test` skips those tests, saying how to get them, without it.
OTEL_JS := .cache/otel-js
node:
	@command -v npm >/dev/null 2>&1 || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null)
	mkdir -p $(OTEL_JS)
	cp tests/ingest/node/package.json tests/ingest/node/package-lock.json $(OTEL_JS)/
	cd $(OTEL_JS) && npm ci --no-audit --no-fund --loglevel=error

test: lint typecheck rules pytest

# The example outputs in README.md and docs/ are produced by the program (tests/docs_examples.py):
# `docs` rewrites those that changed, `docs-check` fails naming them (tests/test_docs.py does too).
docs: $(STAMP)
	$(BIN)/python -m tests.docs_examples --write

docs-check: $(STAMP)
	$(BIN)/python -m tests.docs_examples

bench: $(STAMP) bytecode
	$(BIN)/python -m benchmarks
	$(BIN)/python -m benchmarks.backtest
	$(BIN)/python -m benchmarks.slo
	$(BIN)/python -m benchmarks.ingest
	$(BIN)/python -m benchmarks.cluster --output benchmarks/cluster.json

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
