# The two README commands: `make serve` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# `make serve` keeps its state here between runs (`make serve SERVE_ARGS=--fresh` starts empty)
DATA_DIR ?= .sketchql-data

.PHONY: setup serve test test-fast test-spark bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $@ $(VENV)/.installed-service

# the server needs neither Java nor chromium: `make serve` installs only the service extra
$(VENV)/.installed-service: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh --service
	touch $@

serve: $(VENV)/.installed-service
	$(BIN)/sketchql serve --data-dir $(DATA_DIR) $(SERVE_ARGS)

test: setup
	bash scripts/run_tests.sh

test-fast: setup
	$(BIN)/pytest -q -m "not spark and not browser and not slow"

test-spark: setup
	$(BIN)/pytest -q -m spark -n 0

bench: setup
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b --quick || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
