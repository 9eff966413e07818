# droidwire — the commands a newcomer needs. Every target works from a clean clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.droidwire-installed

.PHONY: setup demo test lint bench faults clean

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

## test: setup, then run the whole suite
test: setup
	@sh tests/tools/system_deps.sh
	@$(BIN)/python -m device_bridge.kotlinc  # again: system_deps may just have brought the JDK
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=15 $(PYTEST_ARGS)

## lint: ruff everywhere, mypy on every package (strict on protocol/)
lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy protocol controller device_bridge fixer bench

## bench: run the benchmarks in bench/ (QUICK=1 for a short run)
bench: setup
	$(BIN)/python -m bench $(if $(QUICK),--quick,)

## faults: fault injection, fuzzing and security suite; prints a table of figures and fails on
## any non-zero "must be 0" (FAULTS_PROFILE=ci for the short profile that `make test` runs)
faults: setup
	$(BIN)/python -m tests.faults.report $(if $(FAULTS_PROFILE),--profile $(FAULTS_PROFILE),)

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
