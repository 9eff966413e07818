# droidwire — the commands a newcomer needs. Every target works from a clean clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.droidwire-installed

.PHONY: setup demo test check lint system-deps bench faults corpus clean

## setup: create .venv with the project and its dev tools, then fetch the pinned Kotlin
## compiler and build its class path into ~/.cache/droidwire (idempotent, no root; without
## npm or a JDK it says so and the bridge falls back to the simulated toolchain)
setup: $(STAMP)
	@$(BIN)/python -m device_bridge.kotlinc

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

## demo: controller + bridge + simulated device + three sample runs (no phone, no SDK)
demo: setup
	$(BIN)/droidwire demo

## system-deps: the Debian packages some tests need (Chromium, adb, nginx, systemd-analyze, a JDK,
## JUnit and Hamcrest for the kotlinc check), installed with apt-get where we are root; elsewhere
## it says what is missing and those tests
## skip (never under CI=true, where they fail). Prints every package it installs.
system-deps:
	@sh tests/tools/system_deps.sh

## test: setup and system-deps, then run the whole suite — in TEST_WORKERS pytest processes
## (pytest-xdist, one test file per worker at a time; most tests wait on sockets and
## subprocesses, so 4 workers on 2 cores keep both busy). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 4
test: setup system-deps
	@$(BIN)/python -m device_bridge.kotlinc  # again: system-deps may just have brought the JDK
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=15 \
		$(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile,) $(PYTEST_ARGS)

## check: lint, then the whole suite — what CI runs
check: lint test

## lint: ruff everywhere, mypy --strict on every package
lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy protocol controller device_bridge fixer droidwire bench

## bench: run the benchmarks in bench/ (QUICK=1 for a short run)
bench: setup
	$(BIN)/python -m bench $(if $(QUICK),--quick,)

## faults: fault injection, fuzzing and security suite; prints a table of figures and fails on
## any non-zero "must be 0" (FAULTS_PROFILE=ci for the short profile that `make test` runs)
faults: setup
	$(BIN)/python -m tests.faults.report $(if $(FAULTS_PROFILE),--profile $(FAULTS_PROFILE),)

## corpus: facts the parsers get right on the project's corpus of real output, per category and
## per source, as a table; also kept, dated, in docs/corpus.md (fails on any wrong fact)
corpus: setup
	$(BIN)/python -m tests.corpus.report --write docs/corpus.md

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
