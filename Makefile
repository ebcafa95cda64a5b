# Two commands for a newcomer: `make run` trains on the embedded dataset, `make test` runs the fast tier of the
# suite (every test that takes seconds, on the CPU: about 2.5 minutes on 2 cores with two pytest-xdist workers, README). `make test-all` runs that tier,
# then the slow one (pytest's `slow` marker: accuracy runs, DDP and dist process clusters, benchmark smoke runs),
# each with its 25 slowest tests listed; CI (.ci/run) runs it on both stacks. `make test-slow` runs the slow tier alone.
# All create the venv when missing and (re)install only when pyproject.toml, setup.py or the stack's
# constraints change. Two stacks are supported and tested (docs/usage.md#supported-stack):
#   STACK=newest (default): the newest torch (CUDA 13 build), NumPy 2, CuPy 14, DGL 2.1 with the graphbolt placeholder;
#   STACK=oldest:           torch 2.2.1, NumPy 1.26, CuPy 13, DGL 2.1 with its own graphbolt.
PYTHON ?= python3
STACK  ?= newest
CONSTRAINTS := constraints/$(STACK).txt
ifeq ($(wildcard $(CONSTRAINTS)),)
$(error STACK=$(STACK) has no $(CONSTRAINTS); use STACK=newest or STACK=oldest)
endif
VENV   ?= $(if $(filter newest,$(STACK)),.venv,.venv-$(STACK))
EXTRAS := $(if $(filter oldest,$(STACK)),cuda12,cuda13)
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# PIP_CONSTRAINT rather than -c: it replaces a `constraint` set in a machine's pip configuration
# (which may cap torch below the newest stack's), so the stack's file alone decides every version.
# PIP_NO_CACHE_DIR: a stack is about 3 GB of wheels (torch's CUDA libraries); a cached copy of them would
# double what an install leaves on disk.
PIP_INSTALL := PIP_NO_CACHE_DIR=1 PIP_CONSTRAINT=$(CURDIR)/$(CONSTRAINTS) $(PY) -m pip install --quiet --disable-pip-version-check

.PHONY: install run test test-slow test-all test-gpu lint format docs clean gpu-check gpu-wheels

install: $(STAMP)

$(STAMP): pyproject.toml setup.py $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) setuptools wheel
	$(PIP_INSTALL) -e ".[dev,docs,dgl,pyg,$(EXTRAS)]"
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/dgl-zerocopy train --config configs/synthetic-sage.yaml

# PYTEST_ARGS: more pytest options, e.g. `make test PYTEST_ARGS="-x -k cli"`.
# TEST_WORKERS: pytest-xdist worker processes for both tiers (two by default, as CI's machine has two cores; 0 runs in
# this process, as a debugger wants). Each worker imports torch (about 0.5 GB), so more than the cores buys nothing.
PYTEST_ARGS  ?=
TEST_WORKERS ?= 2
XDIST        := -n $(TEST_WORKERS) --dist loadfile

test: $(STAMP)
	$(PY) -m pytest -m "not slow" $(XDIST) $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(PY) -m pytest -m slow $(XDIST) $(PYTEST_ARGS)

# Two runs, the fast tier first (it fails sooner); --durations in both, so that CI's log shows where the time goes.
test-all: $(STAMP)
	$(PY) -m pytest -m "not slow" $(XDIST) --durations=25 $(PYTEST_ARGS)
	$(PY) -m pytest -m slow $(XDIST) --durations=25 $(PYTEST_ARGS)

test-gpu: $(STAMP)
	$(PY) -m pytest -m gpu

# The linter and the formatter (ruff, pinned in the dev extra; its settings in pyproject.toml). CI runs `make lint`;
# `make format` rewrites the files the way `lint` wants them.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# The API reference: Sphinx (the docs extra) renders the docstrings into build/docs/index.html (docs/conf.py,
# the pages in docs/index.rst and docs/reference/). A warning fails the build, after all of them are listed. CI runs it.
docs: $(STAMP)
	$(VENV)/bin/sphinx-build -b html -W --keep-going -q docs build/docs

# `make gpu-check` on a GPU machine checks the whole GPU path: the default pass in at most 300 s,
# `GPU_CHECK_ARGS=--full` the whole benchmark set in 540 s (docs/gpu.md).
# It is `python3 bench/gpu_check.py` with the image's own python3, torch and CuPy, never the venv
# above (its torch would replace the image's); the script installs the wheels of .whl/ offline
# into /tmp/dgl-zerocopy-site and finds the checkout itself. Without CUDA, make stops with the
# script's one line (its --probe) as its only output, and exits 2.
GPU_CHECK_ARGS  ?=
GPU_CHECK_PROBE ?= { $(PYTHON) bench/gpu_check.py --probe || echo "gpu-check: $(PYTHON) could not run (exit $$?)"; } 2>&1

gpu-check:
	$(eval GPU_CHECK_NO_CUDA := $(shell $(GPU_CHECK_PROBE)))
	$(if $(GPU_CHECK_NO_CUDA),$(error $(GPU_CHECK_NO_CUDA)))
	@$(PYTHON) bench/gpu_check.py $(GPU_CHECK_ARGS)

# Run here (it needs PyPI): the wheels the GPU image lacks (Python 3.12, manylinux x86_64) into .whl/,
# at the versions of constraints/newest.txt, replacing older ones of the same names (two versions stop the install).
# typing_extensions: pydantic needs >= 4.16; gpu_check.py installs it only where the image's is older.
GPU_WHEELS    := dgl pydantic pydantic_core annotated-types typing-inspection typing_extensions torch-geometric xxhash numba llvmlite
GPU_PLATFORMS := manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64

gpu-wheels:
	mkdir -p .whl
	for name in $(GPU_WHEELS); do \
	  pin=$$(grep -i "^$$name==" constraints/newest.txt) || { echo "gpu-wheels: $$name is not pinned in constraints/newest.txt"; exit 1; }; \
	  rm -f .whl/$$(echo $$name | tr - _)-*.whl; \
	  $(PYTHON) -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
	    --implementation cp $(foreach p,$(GPU_PLATFORMS),--platform $(p)) -d .whl "$$pin" || exit 1; \
	done
	ls -l .whl

clean:
	rm -rf .venv .venv-oldest build *.egg-info
