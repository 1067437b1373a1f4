# kernelbay: `make demo` and `make test` each create .venv, install the workspace and run.
# Needs only python3 (>= 3.11), pip, make and a C++ compiler.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TEST_DEPS := pytest>=8
BENCH_DEPS := matplotlib
MEMBERS := -e ./core -e ./plugins/cpu -e ./plugins/cuda -e ./plugins/tpu -e ./examples/plugins/kernelbay-pyref
PYPROJECTS := pyproject.toml $(wildcard core/pyproject.toml plugins/*/pyproject.toml examples/plugins/*/pyproject.toml)

.PHONY: all demo test bench bench-gpu wheels clean env

all: test

env: $(STAMP)

# uv is bootstrapped into the venv by pip; plain pip is the fallback where uv cannot be had.
$(STAMP): $(PYPROJECTS)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check uv || echo "kernelbay: uv unavailable, using pip"
	@if [ -x $(BIN)/uv ]; then \
	  $(BIN)/uv pip install -q --python $(BIN)/python $(MEMBERS) "$(TEST_DEPS)"; \
	else \
	  $(BIN)/python -m pip install -q $(MEMBERS) "$(TEST_DEPS)"; \
	fi
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/kernelbay demo

test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	@$(BIN)/python -c "import matplotlib" 2>/dev/null || { [ -x $(BIN)/uv ] && $(BIN)/uv pip install -q --python $(BIN)/python $(BENCH_DEPS) || $(BIN)/python -m pip install -q $(BENCH_DEPS); }
	$(BIN)/python -m benchmarks.run --suite cpu

# Pure-Python wheels of every package, for machines without network (see benchmarks/README.md).
wheels: $(STAMP)
	rm -rf .whl && $(BIN)/python -m pip wheel -q --no-deps ./core ./plugins/cpu ./plugins/cuda ./plugins/tpu -w .whl
	$(BIN)/python -m pip download -q --no-deps --only-binary=:all: -d .whl pluggy attrs platformdirs

clean:
	rm -rf $(VENV) .whl .pytest_cache
