# Two commands for a newcomer: `make run` trains on the embedded dataset, `make test` runs the suite.
# Both create .venv when missing and (re)install only when pyproject.toml or constraints.txt changed.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install run test test-gpu bench clean gpu-check gpu-wheels

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt "setuptools<70" wheel
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[dev]"
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/dgl-zerocopy train --config configs/synthetic-sage.yaml

test: $(STAMP)
	$(PY) -m pytest

test-gpu: $(STAMP)
	$(PY) -m pytest -m gpu

# `make gpu-check` on a lent GPU machine checks the whole GPU path in under 10 minutes (docs/gpu.md).
# It uses that machine's own python3, torch and CuPy, never the venv above (which pins torch 2.2.1):
# bench/gpu_check.py installs the wheels of .whl/, offline, into GPU_SITE and puts it on PYTHONPATH.
GPU_SITE       ?= /tmp/dgl-zerocopy-site
GPU_CHECK_ARGS ?=

gpu-check:
	PYTHONPATH="$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH}" $(PYTHON) bench/gpu_check.py --wheels $(CURDIR)/.whl --site $(GPU_SITE) $(GPU_CHECK_ARGS)

# Run here (it needs PyPI): the wheels the GPU image lacks (Python 3.12, manylinux x86_64) into .whl/,
# at the versions of constraints.txt, replacing older ones of the same names (two versions stop the install).
# typing_extensions: pydantic needs >= 4.16; gpu_check.py installs it only where the image's is older.
GPU_WHEELS    := dgl pydantic pydantic_core annotated-types typing-inspection typing_extensions
GPU_PLATFORMS := manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64

gpu-wheels:
	mkdir -p .whl
	for name in $(GPU_WHEELS); do \
	  pin=$$(grep -i "^$$name==" constraints.txt) || { echo "gpu-wheels: $$name is not pinned in constraints.txt"; exit 1; }; \
	  rm -f .whl/$$(echo $$name | tr - _)-*.whl; \
	  $(PYTHON) -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
	    --implementation cp $(foreach p,$(GPU_PLATFORMS),--platform $(p)) -d .whl "$$pin" || exit 1; \
	done
	ls -l .whl

clean:
	rm -rf $(VENV) build *.egg-info
