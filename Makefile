# Two commands are the contract: `make serve` and `make test` (see README.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: serve test test-fast lint typecheck pytest bench bench-peers clean postgresql docs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The service and the core: no torch.
$(VENV)/.installed-base: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# Tests also need the ground-truth extra (torch CPU wheel pinned, transformers) and the linters,
# and, as calibration data, aiconfigurator-core's measured operator tables (Apache-2.0; without
# its dependencies, with pyarrow to read them): tests/test_measured_kernels.py checks the shipped
# estimator/catalog/kernels/ equal a fresh validation/derive_kernels.py. Never a serve dependency.
CALIBRATION_DATA := aiconfigurator-core==0.12.0 pyarrow==26.0.1
$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test,groundtruth]"
	$(BIN)/python -m pip install --quiet --no-deps $(CALIBRATION_DATA)
	touch $@ $(VENV)/.installed-base

# The browser tests drive Debian's chromium through Playwright (never Playwright's own download).
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
/usr/bin/chromium:
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

# The plan store is tested against a real PostgreSQL server the tests start on loopback.
postgresql:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || ( \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql )

# The service as the image runs it (llm-planner serve: header and keep-alive timeouts, the
# connection limit, no forwarded headers unless proxies are named), on loopback by default,
# where writes need no token.
serve: $(VENV)/.installed-base
	$(BIN)/llm-planner serve --host $(HOST) --port $(PORT)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check estimator app tests benchmarks validation
	$(BIN)/ruff format --check estimator app tests benchmarks validation

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy

pytest: $(VENV)/.installed-test /usr/bin/chromium postgresql
	$(BIN)/python -m pytest

# The user documentation (docs/, mkdocs.yml) as a static site in build/site, built offline;
# --strict turns every broken link, missing anchor or page left out of the nav into a failure.
$(VENV)/.installed-docs: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[docs]"
	touch $@

docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d build/site

test: lint typecheck pytest docs

# The inner loop: the suite without the tests that need a browser, PostgreSQL, torch, a server
# process, or seconds each (pyproject.toml's markers), on two workers. `make test` before sending.
FAST := not (browser or postgres or groundtruth or server or slow)
test-fast: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -n 2 -m "$(FAST)"

# llm-analysis 0.2.2 pins transformers<5, which would downgrade the ground-truth extra: install it
# without its dependencies (the benchmark never lets it import transformers).
bench: $(VENV)/.installed-test
	$(BIN)/python -m pip install --quiet --no-deps llm-analysis==0.2.2 "fire>=0.5,<0.6" six termcolor
	$(BIN)/python -m benchmarks.bench_estimate
	$(BIN)/python -m benchmarks.bench_sweep
	$(BIN)/python -m benchmarks.bench_load
	$(BIN)/python -m benchmarks.bench_api
	$(BIN)/python -m benchmarks.bench_cli
	$(BIN)/python -m benchmarks.bench_pages
	$(BIN)/python -m benchmarks.bench_hostile
	$(MAKE) bench-peers

# The peers side by side on the serving validation records (benchmarks/bench_peers.py): they run
# in their own virtual environment, never the test one (aiconfigurator pulls pandas, pyarrow,
# scipy and plotting libraries; llm-analysis pins transformers<5), pinned, brought to the pins on
# every run (pip does nothing when they are there).
PEERS := .venv-peers
PEER_PINS := aiconfigurator==0.12.0 llm-analysis==0.2.2
$(PEERS)/bin/python:
	$(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install --quiet --upgrade pip

bench-peers: $(VENV)/.installed-test | $(PEERS)/bin/python
	$(PEERS)/bin/python -m pip install --quiet $(PEER_PINS)
	$(BIN)/python -m benchmarks.bench_peers --peers-python $(PEERS)/bin/python

clean:
	rm -rf $(VENV) .venv-peers build *.egg-info .mypy_cache .ruff_cache .pytest_cache
