# The README's commands. Everything is installed by the project itself into .venv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: test demo bench lint setup clean prometheus chromium

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# ruff (rules, complexity and formatting in pyproject's [tool.ruff]), mypy ([tool.mypy]: strict on policies/ and sizing/),
# import-linter ([tool.importlinter]: the layers and the pure cores).
lint: $(STAMP)
	$(BIN)/ruff check fleet policies sizing tests benchmarks
	$(BIN)/ruff format --check fleet policies sizing tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

# One pytest worker per core (pytest-xdist), at most 8: the end-to-end tests each hold several PostgreSQL
# connections and subprocesses, and a large machine's core count would exhaust a default server's 100.
# `pytest` without -n runs in one process, as for a single test.
test: lint prometheus chromium
	$(BIN)/pytest -n auto --maxprocesses 8

# Debian's Prometheus for the tests against a real server (tests/fleet/sources); they skip where it is absent.
# Installed only where we are root with apt-get; never fails the build.
prometheus:
	@if command -v prometheus >/dev/null 2>&1 || [ -x /usr/bin/prometheus ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  { apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && \
	      apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1; }; } || \
	  echo "note: could not install prometheus; the real-Prometheus tests will skip"; \
	else echo "note: prometheus not installed (needs root and apt-get); the real-Prometheus tests will skip"; fi

# Debian's headless Chromium and its driver for the console's browser tests (tests/fleet/service/console); they
# skip where it is absent. Installed only where we are root with apt-get; never fails the build.
chromium:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  { apt-get install -y -q --no-install-recommends chromium chromium-driver >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && \
	      apt-get install -y -q --no-install-recommends chromium chromium-driver >/dev/null 2>&1; }; } || \
	  echo "note: could not install chromium; the console's browser tests will skip"; \
	else echo "note: chromium not installed (needs root and apt-get); the console's browser tests will skip"; fi

# The main job: a simulated day of ServeGen-shaped traffic on a GPU fleet in the fake cloud, driven by the real
# service loop (business-hours floor, queue/KV/TTFT scaling, one GPU overheating), with an HTML report.
demo: $(STAMP)
	$(BIN)/fleet simulate --report reports/demo.html

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) build *.egg-info
