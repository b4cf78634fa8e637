# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.demo-installed
PIP := $(BIN)/pip install -q --disable-pip-version-check

.PHONY: demo test test-all lint bench peers venv docs clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) torch==2.13.0
	$(PIP) -e '.[dev,torch,bench,docs]'
	touch $(STAMP) $(DEMO_STAMP)

venv: $(STAMP)

# The demo needs ptxforge, the ptxas wheel (`tools`), torch for the expert-parallel section (4 gloo processes;
# the CPU wheel, as for the tests) and matplotlib for the SM map (`plot`); not the test or benchmark tools.
$(DEMO_STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(PIP) torch==2.13.0
	$(PIP) -e '.[tools,torch,plot]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/ptxforge demo

# PYTHONDONTWRITEBYTECODE is cleared for the suite: with it set, each worker and each process a test starts
# compiles every module (and pytest re-rewrites every test file) again, on every run (~5 s of CPU a worker)
# `make test` is the suite CI runs (.ci/run): everything but the tests marked slow (the big shapes, every build of
# the corpus, ten-seed sweeps), which `make test-all` adds.
test: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n 2 --dist loadgroup -m "not slow"

test-all: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n 2 --dist loadgroup

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy

# The documentation site, from the docstrings and docs/*.md (mkdocs.yml), into site/; --strict: no warnings
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

# Peers measured beside ptxforge (numba-cuda's simulator) and the corpus generators (triton, numba-cuda),
# in a venv of their own so they never touch the project's.
peers: .venv-peers/.installed
.venv-peers/.installed:
	$(PY) -m venv .venv-peers
	.venv-peers/bin/pip install -q numpy triton==3.9.0 numba-cuda 'nvidia-cuda-nvrtc==13.0.*'
	touch $@

bench: $(STAMP) peers
	for b in parse_speed emu_speed sanitizer_speed dsl_vs_nvcc pipeline_step; do $(BIN)/python benchmarks/$$b.py || exit 1; done

clean:
	rm -rf $(VENV) .venv-peers build dist site src/*.egg-info .pytest_cache
