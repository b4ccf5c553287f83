# The README's commands. Everything is installed by the project itself into .venv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: test demo bench lint setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check fleet policies sizing tests
	$(BIN)/lint-imports

test: lint
	$(BIN)/pytest

demo: $(STAMP)
	$(BIN)/fleet size --model Qwen2.5-7B --qps 5 --prompt-tokens 1000 --output-tokens 200 --slo-ttft-p99-ms 2000 --slo-tpot-p99-ms 100

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) build *.egg-info
