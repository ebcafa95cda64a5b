# Two commands for a newcomer: `make run` trains on the embedded dataset, `make test` runs the suite.
# Both create .venv when missing and (re)install only when pyproject.toml or constraints.txt changed.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install run test test-gpu bench clean

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

clean:
	rm -rf $(VENV) build *.egg-info
